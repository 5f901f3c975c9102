//! The sessions' sink when they belong to a server (`cairn serve`) instead of to the one editor
//! that started the process: each session's updates go to every connection viewing it, and a
//! connection that goes away only stops viewing.
//!
//! A connection is a [`Viewer`]: its own sink (the wire of that connection) behind its own
//! [`Loading`], so that a `session/load` on one connection holds back the replayed updates on
//! that connection alone while the others go on streaming. A connection views a session once it
//! creates, loads, resumes or forks it, prompts it or changes its settings ([`Hub::attach`]),
//! unless no such session exists ([`Hub::unview`]); it stops when it closes ([`Hub::detach`]). Nothing here cancels a turn: a session with no viewer goes on and
//! records, and whoever attaches next loads what it missed.
//!
//! Every update the hub sends is numbered in its session's stream (`_meta.cairn.seq` on the
//! wire), and the latest [`KEPT`] are kept: a client that lost its connection resumes after the
//! last number it saw ([`Hub::resume`]) and gets exactly what it missed, or is told to load the
//! session when that is no longer kept. The streams of sessions nobody views are kept for the
//! [`UNVIEWED_KEPT`] left most recently.
//!
//! On a store shared by replicas ([`Hub::share`]) the numbers are those of the session's event
//! log instead (`seq`, the same on every replica: the turn's own replica shows its updates with
//! the `seq` its writer gave them, the others read them back with it), so a client whose
//! replica died resumes on any other, and [`Hub::resume_from_log`] answers from the log itself:
//! what a replica holds in memory is not all of it (the prompt a turn's client sent is logged
//! but not shown back on that replica; a replica that did not follow the session has nothing),
//! and a read of the rows after a number is one range of the log's primary key, made only when
//! a client comes back. Numbers then increase without being consecutive (rows that are no
//! update, like a question's, take numbers too), and an update the log does not keep (usage,
//! settings, commands, a compaction's progress, a sub-agent's) goes unnumbered: no other replica
//! could give it the same number, and a resume gives none of them back.
//!
//! Questions a turn asks (permissions, the `question` tool) go to every viewer that can answer
//! them, and the first answer wins; the others' copies are withdrawn (dropping a request sends
//! its cancellation). A question asked while nobody views the session waits for the next
//! viewer, and one a viewer left unanswered by going away goes to those who remain or come; a
//! client that answers with an error has answered. A turn's files and terminals are those of
//! the client whose prompt it answers ([`Hub::drive`]) when that client offers them and still
//! views the session, as an editor's are on stdio; else the tools act where the server runs.

mod viewers;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::asked::{Across, Elsewhere, Signal};
use super::loading::{Loading, Resuming};
use super::{Update, UpdateSink};
use crate::ids::SessionId;
use crate::store::Store;
use crate::store::pg::events::Missed;
use crate::tools::Host;
use viewers::Viewers;

/// One connection's view of the server's sessions.
#[derive(Clone)]
pub struct Viewer {
    id: u64,
    /// The connection's wire, behind the loads it has under way.
    pub sink: Arc<Loading>,
}

/// Updates of a session kept for a client resuming after a drop.
const KEPT: usize = 256;
/// Sessions nobody views whose latest updates are still kept; past it, those left longest ago
/// are forgotten (a resume of one then answers that the client should load the session).
const UNVIEWED_KEPT: usize = 256;

/// One session as the hub knows it: who views it, and its numbered stream.
#[derive(Default)]
struct Stream {
    viewers: Vec<Viewer>,
    /// The number of the last update sent (none yet: 0).
    seq: u64,
    /// The latest updates with their numbers, oldest first.
    kept: VecDeque<(u64, Update)>,
    /// When its last viewer left; `None` while viewed.
    unviewed_since: Option<Instant>,
    /// The viewer whose prompt the next turn answers.
    driver: Option<u64>,
}

/// Why a resume cannot give a client exactly what it missed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    #[error(
        "update {after} of session {session} is older than what is kept (from {oldest} on); call session/load to see the session again"
    )]
    TooOld { session: SessionId, after: u64, oldest: u64 },
    #[error("session {session} has sent {last} updates so far, not {after}; resume from a number it gave")]
    Ahead { session: SessionId, after: u64, last: u64 },
}

/// The server's sessions' sink: which connection views which session, and each session's
/// numbered stream.
pub struct Hub {
    streams: Mutex<HashMap<SessionId, Stream>>,
    next: AtomicU64,
    /// Bumped at every attach, so a question waiting for someone to answer it asks newcomers.
    attached: watch::Sender<u64>,
    /// Itself, for the hosts it hands out.
    me: Weak<Hub>,
    /// Questions across replicas, when the store is shared by them ([`Self::share`]).
    across: OnceLock<Arc<Across>>,
    /// The store keeps an event log shared by replicas: updates are numbered by their `seq`
    /// there, and those it does not keep go unnumbered.
    logged: std::sync::atomic::AtomicBool,
}

impl Hub {
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            attached: watch::channel(0).0,
            me: me.clone(),
            across: OnceLock::new(),
            logged: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The sessions are kept in `store`: when other replicas share it, the questions of turns
    /// run here are put to their clients too, and theirs to this hub's (`session::asked`).
    pub fn share(&self, store: &Store) {
        if store.logs_events() {
            let _ = self.across.set(Across::new(store.clone()));
            self.logged.store(true, Ordering::Relaxed);
        }
    }

    /// Whether updates are numbered by the shared event log's `seq` ([`Self::share`]).
    pub fn numbers_by_log(&self) -> bool {
        self.logged.load(Ordering::Relaxed)
    }

    /// A new connection's view: `sink` is its wire.
    pub fn viewer(&self, sink: Arc<dyn UpdateSink>) -> Viewer {
        Viewer { id: self.next.fetch_add(1, Ordering::Relaxed), sink: Loading::new(sink) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Stream>> {
        self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `viewer` sees `session`'s updates from now on (once, however often it attaches).
    pub fn attach(&self, session: &SessionId, viewer: &Viewer) {
        let mut streams = self.lock();
        let stream = streams.entry(session.clone()).or_default();
        if !view(stream, viewer) {
            return;
        }
        drop(streams);
        self.attached.send_modify(|count| *count += 1);
    }

    /// `viewer` prompts `session`: it views it, and the turn that answers uses its files and
    /// terminals when it offers them.
    pub fn drive(&self, session: &SessionId, viewer: &Viewer) {
        self.attach(session, viewer);
        if let Some(stream) = self.lock().get_mut(session) {
            stream.driver = Some(viewer.id);
        }
    }

    /// The host of the viewer driving `session`, while it views it.
    fn driver(&self, session: &SessionId) -> Option<(u64, Arc<dyn Host>)> {
        let streams = self.lock();
        let stream = streams.get(session)?;
        let driver = stream.driver?;
        let viewer = stream.viewers.iter().find(|viewer| viewer.id == driver)?;
        Some((driver, viewer.sink.host(session)))
    }

    /// Whether `viewer` still views `session`.
    fn is_viewing(&self, session: &SessionId, viewer: u64) -> bool {
        self.lock().get(session).is_some_and(|stream| stream.viewers.iter().any(|known| known.id == viewer))
    }

    /// Sends `viewer` the updates of `session` numbered after `after`, then attaches it, so that
    /// it sees every update from there on once. The number of the last update sent.
    pub fn resume(&self, session: &SessionId, viewer: &Viewer, after: u64) -> Result<u64, ResumeError> {
        let mut streams = self.lock();
        // Nothing is made for a session refused: a client naming made-up sessions leaves no trace.
        if after > 0 && !streams.contains_key(session) {
            return Err(ResumeError::Ahead { session: session.clone(), after, last: 0 });
        }
        let stream = streams.entry(session.clone()).or_default();
        if after > stream.seq {
            return Err(ResumeError::Ahead { session: session.clone(), after, last: stream.seq });
        }
        let oldest = stream.kept.front().map_or(stream.seq + 1, |(seq, _)| *seq);
        if after + 1 < oldest {
            return Err(ResumeError::TooOld { session: session.clone(), after, oldest });
        }
        for (seq, update) in stream.kept.iter().filter(|(seq, _)| *seq > after) {
            viewer.sink.send_numbered(session, *seq, update.clone());
        }
        let last = stream.seq;
        let attached = view(stream, viewer);
        drop(streams);
        if attached {
            self.attached.send_modify(|count| *count += 1);
        }
        Ok(last)
    }

    /// On a store shared by replicas: `viewer` views `session` from now on (the request's place
    /// in wire order), its logged updates held back until [`LogResume::send`] has sent what the
    /// client missed from the session's event log, read after this.
    pub fn resume_from_log(&self, session: &SessionId, viewer: &Viewer) -> LogResume {
        let held = viewer.sink.hold_resume(session);
        let attached = {
            let mut streams = self.lock();
            view(streams.entry(session.clone()).or_default(), viewer)
        };
        if attached {
            self.attached.send_modify(|count| *count += 1);
        }
        LogResume { hub: self.me.clone(), session: session.clone(), viewer: viewer.clone(), held, attached }
    }

    /// Whether `viewer` views `session`.
    #[cfg(test)]
    fn views(&self, session: &SessionId, viewer: &Viewer) -> bool {
        self.lock().get(session).is_some_and(|stream| stream.viewers.iter().any(|known| known.id == viewer.id))
    }

    /// `viewer`'s connection is gone: it views nothing any more. Its sessions go on, their
    /// latest updates kept for a while for a resume.
    pub fn detach(&self, viewer: &Viewer) {
        let mut streams = self.lock();
        let now = Instant::now();
        for stream in streams.values_mut() {
            let before = stream.viewers.len();
            stream.viewers.retain(|known| known.id != viewer.id);
            if before > 0 && stream.viewers.is_empty() {
                stream.unviewed_since = Some(now);
            }
        }
        forget_unviewed(&mut streams);
    }

    /// `viewer` stops viewing `session` (a request naming a session that does not exist); a
    /// stream left with nothing in it is forgotten.
    pub fn unview(&self, session: &SessionId, viewer: &Viewer) {
        let mut streams = self.lock();
        if let Some(stream) = streams.get_mut(session) {
            stream.viewers.retain(|known| known.id != viewer.id);
            if stream.viewers.is_empty() && stream.seq == 0 {
                streams.remove(session);
            }
        }
    }

    /// The session is closed or deleted: nobody views it any more.
    pub fn forget(&self, session: &SessionId) {
        self.lock().remove(session);
    }

    /// `update` to every viewer of `session` but `except` (the one whose request it answers,
    /// which is told in its own way). Not numbered: nothing of the stream, only a view of it.
    pub fn send_to_others(&self, session: &SessionId, update: Update, except: &Viewer) {
        let streams = self.lock();
        let viewers = streams.get(session).map(|stream| stream.viewers.as_slice()).unwrap_or_default();
        for viewer in viewers.iter().filter(|viewer| viewer.id != except.id) {
            viewer.sink.send(session, update.clone());
        }
    }

    /// The hosts of the connections viewing `session`, by viewer.
    fn hosts(&self, session: &SessionId) -> Vec<(u64, Arc<dyn Host>)> {
        let viewers: Vec<Viewer> = self.lock().get(session).map(|stream| stream.viewers.clone()).unwrap_or_default();
        viewers.into_iter().map(|viewer| (viewer.id, viewer.sink.host(session))).collect()
    }
}

/// Adds `viewer` to `stream`'s viewers; false if it was there.
fn view(stream: &mut Stream, viewer: &Viewer) -> bool {
    if stream.viewers.iter().any(|known| known.id == viewer.id) {
        return false;
    }
    stream.viewers.push(viewer.clone());
    stream.unviewed_since = None;
    true
}

/// Forgets the streams nobody has viewed for longest, past [`UNVIEWED_KEPT`] of them.
fn forget_unviewed(streams: &mut HashMap<SessionId, Stream>) {
    let mut unviewed: Vec<(Instant, SessionId)> =
        streams.iter().filter_map(|(id, stream)| stream.unviewed_since.map(|since| (since, id.clone()))).collect();
    if unviewed.len() <= UNVIEWED_KEPT {
        return;
    }
    unviewed.sort();
    let excess = unviewed.len() - UNVIEWED_KEPT;
    for (_, id) in unviewed.into_iter().take(excess) {
        streams.remove(&id);
    }
}

/// A resume from the event log between the request and the rows read ([`Hub::resume_from_log`]).
pub struct LogResume {
    hub: Weak<Hub>,
    session: SessionId,
    viewer: Viewer,
    held: Resuming,
    /// It made the connection view the session, which it did not before.
    attached: bool,
}

impl LogResume {
    /// Sends the client what it `missed` after number `after` (the rows of the session's log
    /// read since the hold; those that are no update skipped), then lets the session's later
    /// updates through: each once, in order. The number of the last row read.
    pub fn send(self, after: u64, missed: Missed) -> Result<u64, ResumeError> {
        let session = self.session.clone();
        let rows = match missed {
            Missed::Rows(rows) => rows,
            Missed::Pruned { oldest } => {
                self.fail();
                return Err(ResumeError::TooOld { session, after, oldest: u64::try_from(oldest).unwrap_or(0) });
            }
            Missed::Ahead { last } => {
                self.fail();
                return Err(ResumeError::Ahead { session, after, last: u64::try_from(last).unwrap_or(0) });
            }
        };
        let reached = rows.last().map_or(after, |row| u64::try_from(row.seq).unwrap_or(0));
        for row in rows {
            let Ok(seq) = u64::try_from(row.seq) else { continue };
            // A setting shows as the options the session's actor has, which a resume does not
            // know: left out, like a question's signal (its number is skipped).
            if Signal::read(&row.body).is_some() || super::handoff::setting_of_event(&row.body).is_some() {
                continue;
            }
            if let Some(update) = Update::from_event(&row.body) {
                self.held.sink.send_numbered(&session, seq, update);
            }
        }
        self.held.reached(i64::try_from(reached).unwrap_or(i64::MAX));
        Ok(reached)
    }

    /// Whether `missed` holds a setting's row, which [`Self::send`] leaves out: the client is
    /// to be shown the session's options as they are now instead.
    pub fn misses_settings(missed: &Missed) -> bool {
        match missed {
            Missed::Rows(rows) => rows.iter().any(|row| super::handoff::setting_of_event(&row.body).is_some()),
            Missed::Pruned { .. } | Missed::Ahead { .. } => false,
        }
    }

    /// The resume failed: the connection views the session no more unless it did before.
    pub fn fail(self) {
        if self.attached
            && let Some(hub) = self.hub.upgrade()
        {
            hub.unview(&self.session, &self.viewer);
        }
        self.held.failed(!self.attached);
    }
}

impl Hub {
    /// An update the shared event log keeps at `logged` (see [`Self::share`]): numbered by it,
    /// not kept (a resume reads the log), and handed to every viewer, whose load or resume under
    /// way cuts it by that number. One that comes after a later one was numbered (a follower
    /// that fell behind a turn started here) goes unnumbered rather than out of order.
    fn number_logged(&self, session: &SessionId, logged: i64, update: Update) {
        let mut streams = self.lock();
        if !streams.contains_key(session) {
            streams.insert(session.clone(), Stream { unviewed_since: Some(Instant::now()), ..Stream::default() });
            forget_unviewed(&mut streams);
        }
        let Some(stream) = streams.get_mut(session) else { return };
        let seq = u64::try_from(logged).ok().filter(|seq| *seq > stream.seq);
        match seq {
            Some(seq) => stream.seq = seq,
            None => tracing::debug!(%session, logged, "an update logged before one already shown goes unnumbered"),
        }
        if let Some((last, others)) = stream.viewers.split_last() {
            for viewer in others {
                viewer.sink.pass_logged(session, logged, seq, update.clone());
            }
            last.sink.pass_logged(session, logged, seq, update);
        }
    }

    /// An update sent to every viewer unnumbered and not kept.
    fn unnumbered(&self, session: &SessionId, update: Update) {
        let streams = self.lock();
        let viewers = streams.get(session).map(|stream| stream.viewers.as_slice()).unwrap_or_default();
        for viewer in viewers {
            viewer.sink.send(session, update.clone());
        }
    }

    /// Numbers the update in its session's stream, keeps it, and hands it to every viewer
    /// through `deliver` (see [`UpdateSink::send`] below).
    fn number(&self, session: &SessionId, update: Update, deliver: impl Fn(&Viewer, u64, Update)) {
        if let Update::Elsewhere { .. } = update {
            return self.unnumbered(session, update);
        }
        let mut streams = self.lock();
        if !streams.contains_key(session) {
            streams.insert(session.clone(), Stream { unviewed_since: Some(Instant::now()), ..Stream::default() });
            forget_unviewed(&mut streams);
        }
        let Some(stream) = streams.get_mut(session) else { return };
        stream.seq += 1;
        let seq = stream.seq;
        if stream.kept.len() == KEPT {
            stream.kept.pop_front();
        }
        stream.kept.push_back((seq, update.clone()));
        // Sending only queues, so the lock is held for no longer than the copies take.
        if let Some((last, others)) = stream.viewers.split_last() {
            for viewer in others {
                deliver(viewer, seq, update.clone());
            }
            deliver(last, seq, update);
        }
    }
}

impl UpdateSink for Hub {
    /// Numbers the update in its session's stream, keeps it for a resume, and sends it to every
    /// viewer. A session nobody views still numbers and keeps its updates: a client that lost
    /// its connection resumes from them. A sub-agent's update ([`Update::Elsewhere`]) goes to
    /// the viewers unnumbered and is not kept: the wire shows it under the sub-agent's own id,
    /// where the session's numbers mean nothing, and a busy sub-agent must not push the
    /// session's own updates out of what a resume can give back (a load replays the sub-agent).
    /// On a store shared by replicas, an update sent this way is one the event log does not
    /// keep: it goes unnumbered (see the module's paragraph).
    fn send(&self, session: &SessionId, update: Update) {
        if self.numbers_by_log() {
            return self.unnumbered(session, update);
        }
        self.number(session, update, |viewer, seq, update| viewer.sink.send_numbered(session, seq, update));
    }

    /// As [`Self::send`], and each viewer's load under way cuts it by its `logged` number. On a
    /// store shared by replicas, that number is also the one the client sees.
    fn send_logged(&self, session: &SessionId, logged: i64, update: Update) {
        if self.numbers_by_log() {
            return self.number_logged(session, logged, update);
        }
        self.number(session, update, |viewer, seq, update| viewer.sink.pass_logged(session, logged, Some(seq), update));
    }

    fn elsewhere(&self, session: &SessionId, what: Elsewhere) {
        let Some(across) = self.across.get() else { return };
        match what {
            Elsewhere::Answered { id, answer } => across.answered(&id, answer),
            Elsewhere::Closed { id } => across.closed(&id),
            Elsewhere::TurnClosed | Elsewhere::Unfollowed => across.turn_closed(session),
            Elsewhere::Asked { id, asked } => {
                let Some(withdrawn) = across.asking(session, &id) else { return };
                let viewers = Viewers { hub: self.me.clone(), session: session.clone(), driver: None };
                let (across, session) = (Arc::clone(across), session.clone());
                tokio::spawn(async move {
                    let answer = tokio::select! {
                        () = withdrawn.cancelled() => return,
                        answer = viewers.ask_here(asked) => answer,
                    };
                    across.closed(&id);
                    // A client's error is its answer (its copies here are withdrawn now): the
                    // turn's replica takes it as it would its own client's. Only a hub going
                    // away answers nothing.
                    let answer = match answer {
                        Ok(answer) => answer,
                        Err(err) if err == crate::tools::host::HostError::unavailable() => {
                            tracing::debug!(%session, %err, "another replica's question went unanswered here");
                            return;
                        }
                        Err(err) => crate::session::asked::Answer::Failed { message: err.0 },
                    };
                    across.send_answer(&session, id, answer).await;
                });
            }
        }
    }

    /// A turn never waits for a viewer: one that falls behind is its connection's problem
    /// (bounded there), not every other viewer's.
    fn writable(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }

    fn host(&self, session: &SessionId) -> Arc<dyn Host> {
        Arc::new(Viewers { hub: self.me.clone(), session: session.clone(), driver: self.driver(session) })
    }
}

#[cfg(test)]
mod tests;

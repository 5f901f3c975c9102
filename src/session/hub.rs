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

use super::asked::{Across, Elsewhere};
use super::loading::Loading;
use super::{Update, UpdateSink};
use crate::ids::SessionId;
use crate::store::Store;
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
}

impl Hub {
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            streams: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            attached: watch::channel(0).0,
            me: me.clone(),
            across: OnceLock::new(),
        })
    }

    /// The sessions are kept in `store`: when other replicas share it, the questions of turns
    /// run here are put to their clients too, and theirs to this hub's (`session::asked`).
    pub fn share(&self, store: &Store) {
        if store.logs_events() {
            let _ = self.across.set(Across::new(store.clone()));
        }
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

impl Hub {
    /// Numbers the update in its session's stream, keeps it, and hands it to every viewer
    /// through `deliver` (see [`UpdateSink::send`] below).
    fn number(&self, session: &SessionId, update: Update, deliver: impl Fn(&Viewer, u64, Update)) {
        let mut streams = self.lock();
        if let Update::Elsewhere { .. } = update {
            let viewers = streams.get(session).map(|stream| stream.viewers.as_slice()).unwrap_or_default();
            for viewer in viewers {
                viewer.sink.send(session, update.clone());
            }
            return;
        }
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
    fn send(&self, session: &SessionId, update: Update) {
        self.number(session, update, |viewer, seq, update| viewer.sink.send_numbered(session, seq, update));
    }

    /// As [`Self::send`], and each viewer's load under way cuts it by its `logged` number.
    fn send_logged(&self, session: &SessionId, logged: i64, update: Update) {
        self.number(session, update, |viewer, seq, update| viewer.sink.pass_logged(session, logged, Some(seq), update));
    }

    fn elsewhere(&self, session: &SessionId, what: Elsewhere) {
        let Some(across) = self.across.get() else { return };
        match what {
            Elsewhere::Answered { id, answer } => across.answered(&id, answer),
            Elsewhere::Closed { id } => across.closed(&id),
            Elsewhere::TurnClosed => across.turn_closed(session),
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
mod tests {
    use super::*;
    use crate::ids::MessageId;

    /// A connection's wire: what it was sent, with numbers.
    #[derive(Default)]
    struct Wire(Mutex<Vec<(Option<u64>, String)>>);

    impl UpdateSink for Wire {
        fn send(&self, _session: &SessionId, update: Update) {
            self.0.lock().unwrap().push((None, text(&update)));
        }
        fn send_numbered(&self, _session: &SessionId, seq: u64, update: Update) {
            self.0.lock().unwrap().push((Some(seq), text(&update)));
        }
        fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
            Arc::new(crate::tools::NoEditor)
        }
    }

    fn text(update: &Update) -> String {
        match update {
            Update::AgentText { text, .. } => text.clone(),
            other => format!("{other:?}"),
        }
    }

    fn chunk(text: &str) -> Update {
        Update::AgentText { message: MessageId::generate(), text: text.into() }
    }

    #[test]
    fn a_resume_refused_for_a_session_the_hub_never_saw_leaves_nothing_behind() {
        let hub = Hub::new();
        let viewer = hub.viewer(Arc::new(Wire::default()));
        let made_up = SessionId::from_string("ses_made_up".repeat(1000));
        assert!(matches!(hub.resume(&made_up, &viewer, 5), Err(ResumeError::Ahead { last: 0, .. })));
        assert!(hub.lock().is_empty());
    }

    #[test]
    fn a_resume_sends_what_was_missed_once_then_the_live_stream() {
        let hub = Hub::new();
        let session = SessionId::generate();
        let (wire, other) = (Arc::new(Wire::default()), Arc::new(Wire::default()));
        let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
        hub.attach(&session, &viewer);
        hub.send(&session, chunk("a"));
        hub.send(&session, chunk("b"));
        hub.detach(&viewer);
        hub.send(&session, chunk("c"));
        let again = hub.viewer(Arc::clone(&other) as Arc<dyn UpdateSink>);
        assert_eq!(hub.resume(&session, &again, 1), Ok(3));
        hub.send(&session, chunk("d"));
        let seen = |wire: &Wire| wire.0.lock().unwrap().clone();
        assert_eq!(seen(&wire), [(Some(1), "a".to_owned()), (Some(2), "b".to_owned())]);
        assert_eq!(seen(&other), [(Some(2), "b".into()), (Some(3), "c".into()), (Some(4), "d".into())]);
        assert_eq!(
            hub.resume(&session, &again, 9),
            Err(ResumeError::Ahead { session: session.clone(), after: 9, last: 4 })
        );
    }

    #[test]
    fn a_sub_agents_updates_reach_the_viewers_unnumbered_and_take_no_room_in_the_stream() {
        let hub = Hub::new();
        let session = SessionId::generate();
        let wire = Arc::new(Wire::default());
        let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
        hub.attach(&session, &viewer);
        hub.send(&session, chunk("a"));
        let child = SessionId::generate();
        for _ in 0..KEPT + 10 {
            hub.send(&session, Update::Elsewhere { session: child.clone(), update: Box::new(chunk("child")) });
        }
        hub.send(&session, chunk("b"));
        let seen = wire.0.lock().unwrap().clone();
        assert_eq!(seen.len(), KEPT + 12);
        assert_eq!((seen[0].0, seen[KEPT + 11].0), (Some(1), Some(2)), "the session's numbers run on");
        assert!(seen[1..=KEPT + 10].iter().all(|(seq, _)| seq.is_none()));
        let again = hub.viewer(Arc::new(Wire::default()) as Arc<dyn UpdateSink>);
        assert_eq!(hub.resume(&session, &again, 0), Ok(2), "the session's own updates are all still kept");
    }

    #[test]
    fn only_the_latest_updates_are_kept_and_only_so_many_unviewed_streams() {
        let hub = Hub::new();
        let session = SessionId::generate();
        for i in 0..KEPT + 10 {
            hub.send(&session, chunk(&i.to_string()));
        }
        let viewer = hub.viewer(Arc::new(Wire::default()) as Arc<dyn UpdateSink>);
        let too_old = hub.resume(&session, &viewer, 5);
        assert_eq!(too_old, Err(ResumeError::TooOld { session: session.clone(), after: 5, oldest: 11 }));
        assert_eq!(hub.resume(&session, &viewer, 10), Ok((KEPT + 10) as u64));

        for _ in 0..UNVIEWED_KEPT + 5 {
            hub.send(&SessionId::generate(), chunk("x"));
        }
        assert!(hub.lock().len() <= UNVIEWED_KEPT + 1, "the viewed session and the latest unviewed ones");
        assert!(hub.views(&session, &viewer), "a viewed stream is never forgotten");
    }
}

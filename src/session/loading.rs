//! Where a `session/load` cuts a live stream: the sink the sessions send through, which keeps
//! a session's stored updates out of the stream from the moment its load is read until the
//! load's replay is sent.
//!
//! A client that loads a session it is being streamed opens its new view when it sends the
//! request; whatever of the session reaches it after that is in the view. The replay is read
//! later, on the store's writer thread ([`crate::store::Store::snapshot`]), so every update
//! committed and emitted meanwhile would reach the client twice: once live, ahead of the replay,
//! and once in it. So from the moment the request is read (the handler's synchronous part,
//! [`Loading::hold`]) the updates `session/load` shows again ([`Update::is_stored`]) are dropped
//! here until the replay is sent: each was emitted by an after-commit callback that ran before
//! the snapshot was read, so the replay holds it. Updates that are never replayed (a title, a
//! usage figure, a queue notice) go on as they come.
//!
//! Updates another replica showed come here read back from the session's event log, each with
//! its `seq` ([`UpdateSink::send_logged`]), and a replay says which `seq` it reaches. Those are
//! cut by number instead: while a load is under way they wait, and once its replay is sent,
//! those it holds (`seq` up to the replay's) are dropped, then and whenever they come later, and
//! the others follow the replay in order. A cut is forgotten once a logged update past it
//! comes, since the log comes in order (on the replica running the turn too: its writer's
//! callbacks run in commit order, which is `seq` order).
//!
//! A resume from the event log (a client that lost its connection to one replica, resuming on
//! any: [`Loading::hold_resume`]) cuts them the same way: from the moment the request is read,
//! the logged updates wait; the log is read, what the client missed is sent from it, and of
//! what waited only what comes after the rows it sent follows. Updates the log does not keep go
//! on meanwhile: a resume gives none of them back, so holding them would only delay them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Update, UpdateSink};
use crate::history::Message;
use crate::ids::SessionId;
use crate::tools::Host;

/// The sessions' sink, holding back what replays will show.
pub struct Loading {
    sink: Arc<dyn UpdateSink>,
    /// Per session: the loads read and not replayed yet, and where replays cut its event log.
    /// A stored update is looked up and sent under this lock, so it is either out before a load
    /// holds its session or held back.
    held: Mutex<HashMap<SessionId, Cut>>,
}

/// One session's loads under way and replays sent.
#[derive(Default)]
struct Cut {
    /// Loads read and not replayed yet.
    loads: usize,
    /// Resumes read whose missed updates are not sent yet.
    resumes: usize,
    /// The greatest event log `seq` a replay or a resume reached: logged updates up to it were
    /// sent by one.
    replayed: i64,
    /// Logged updates that came while a load was under way, in order, with their numbers in
    /// the stream when a hub numbered them.
    waiting: Vec<(i64, Option<u64>, Update)>,
}

impl Loading {
    pub fn new(sink: Arc<dyn UpdateSink>) -> Arc<Self> {
        Arc::new(Self { sink, held: Mutex::new(HashMap::new()) })
    }

    /// Holds back `session`'s stored updates until the returned replay is sent (or dropped,
    /// when the load failed before it).
    pub fn hold(self: &Arc<Self>, session: &SessionId) -> Replay {
        self.lock().entry(session.clone()).or_default().loads += 1;
        let held = Held { loading: Arc::clone(self), session: session.clone(), resume: false };
        Replay { held, sink: Arc::clone(&self.sink) }
    }

    /// Holds back `session`'s logged updates until the returned resume has sent what the
    /// client missed from the event log (or failed).
    pub fn hold_resume(self: &Arc<Self>, session: &SessionId) -> Resuming {
        self.lock().entry(session.clone()).or_default().resumes += 1;
        let held = Held { loading: Arc::clone(self), session: session.clone(), resume: true };
        Resuming { held, sink: Arc::clone(&self.sink) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Cut>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends an update read back from the session's event log at `logged` (numbered `seq` in
    /// the stream, if a hub numbered it), unless a replay holds it; waits while a load is under
    /// way.
    pub fn pass_logged(&self, session: &SessionId, logged: i64, seq: Option<u64>, update: Update) {
        let mut held = self.lock();
        if let Some(cut) = held.get_mut(session) {
            if cut.loads > 0 || cut.resumes > 0 {
                cut.waiting.push((logged, seq, update));
                return;
            }
            if logged <= cut.replayed {
                tracing::trace!(%session, logged, "a logged update the load's replay showed");
                return;
            }
            // The log is followed in order: past the replay, nothing it holds can come again,
            // so the cut is done with (a connection that loads many sessions keeps none).
            held.remove(session);
        }
        self.send_logged_on(session, logged, seq, update);
        drop(held);
    }

    fn send_logged_on(&self, session: &SessionId, logged: i64, seq: Option<u64>, update: Update) {
        match seq {
            Some(seq) => self.sink.send_numbered(session, seq, update),
            None => self.sink.send_logged(session, logged, update),
        }
    }
}

impl Loading {
    /// Sends `update` (numbered `seq`, if it is) unless a load's replay will show it.
    fn pass(&self, session: &SessionId, seq: Option<u64>, update: Update) {
        let send = |update| match seq {
            Some(seq) => self.sink.send_numbered(session, seq, update),
            None => self.sink.send(session, update),
        };
        if !update.is_stored() {
            return send(update);
        }
        let held = self.lock();
        if held.get(session).is_some_and(|cut| cut.loads > 0) {
            tracing::trace!(%session, "an update the load's replay will show");
            return;
        }
        // Sending never waits, so holding the lock meanwhile costs a load no more than that.
        send(update);
        drop(held);
    }
}

impl UpdateSink for Loading {
    fn send(&self, session: &SessionId, update: Update) {
        self.pass(session, None, update);
    }

    fn send_numbered(&self, session: &SessionId, seq: u64, update: Update) {
        self.pass(session, Some(seq), update);
    }

    fn send_logged(&self, session: &SessionId, logged: i64, update: Update) {
        self.pass_logged(session, logged, None, update);
    }

    fn elsewhere(&self, session: &SessionId, what: super::asked::Elsewhere) {
        self.sink.elsewhere(session, what);
    }

    fn writable(&self) -> futures::future::BoxFuture<'static, ()> {
        self.sink.writable()
    }

    fn host(&self, session: &SessionId) -> Arc<dyn Host> {
        self.sink.host(session)
    }
}

/// A load's replay still to be sent: its hold on the session's stored updates and the sink the
/// replay goes through (the one behind the hold).
pub struct Replay {
    pub held: Held,
    pub sink: Arc<dyn UpdateSink>,
}

impl Replay {
    /// Sends `messages`, which reach the session's event log at `logged` (0 for a store that
    /// keeps none), as the load's replay, then lets the session's updates through again: the
    /// logged ones that waited meanwhile and are not in the replay first. Gives back the sink it
    /// went through, for the replay of the session's sub-agents (`subagent::replay_children`),
    /// which follows.
    pub fn send(self, session: &SessionId, messages: &[Message], logged: i64) -> Arc<dyn UpdateSink> {
        for update in super::replay(messages) {
            self.sink.send(session, update);
        }
        {
            let mut held = self.held.loading.lock();
            let cut = held.entry(session.clone()).or_default();
            cut.replayed = cut.replayed.max(logged);
        }
        drop(self.held);
        self.sink
    }
}

/// A resume from the event log still to send what the client missed: its hold on the
/// session's logged updates and the sink the missed ones go through (the one behind the hold).
pub struct Resuming {
    held: Held,
    pub sink: Arc<dyn UpdateSink>,
}

impl Resuming {
    /// The client was sent the session's logged updates up to `reached`: of those held back,
    /// the later ones follow, in order; the others are dropped, then and whenever they come.
    pub fn reached(self, reached: i64) {
        {
            let mut held = self.held.loading.lock();
            let cut = held.entry(self.held.session.clone()).or_default();
            cut.replayed = cut.replayed.max(reached);
        }
        drop(self.held);
    }

    /// The resume failed: what was held back is dropped, unless the connection views the
    /// session anyway (`viewed`) or a load of it is under way, which then let it through.
    pub fn failed(self, viewed: bool) {
        let mut held = self.held.loading.lock();
        if !viewed
            && let Some(cut) = held.get_mut(&self.held.session)
            && cut.loads == 0
            && cut.resumes == 1
        {
            cut.waiting.clear();
        }
        drop(held);
        drop(self.held);
    }
}

/// A load between the moment it was read and its replay (see [`Loading::hold`]), or a resume
/// until it sent what was missed ([`Loading::hold_resume`]).
pub struct Held {
    loading: Arc<Loading>,
    session: SessionId,
    resume: bool,
}

impl Drop for Held {
    /// The last load or resume of the session is over: the logged updates that waited go out,
    /// but those a replay or resume sent.
    fn drop(&mut self) {
        let mut held = self.loading.lock();
        let Some(cut) = held.get_mut(&self.session) else { return };
        if self.resume {
            cut.resumes = cut.resumes.saturating_sub(1);
        } else {
            cut.loads = cut.loads.saturating_sub(1);
        }
        if cut.loads > 0 || cut.resumes > 0 {
            return;
        }
        let replayed = cut.replayed;
        let waiting = std::mem::take(&mut cut.waiting);
        if replayed == 0 {
            held.remove(&self.session);
        }
        // Sending never waits: the lock keeps them ahead of any logged update that follows.
        for (logged, seq, update) in waiting.into_iter().filter(|(logged, ..)| *logged > replayed) {
            self.loading.send_logged_on(&self.session, logged, seq, update);
        }
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MessageId;

    #[derive(Default)]
    struct Shown(Mutex<Vec<Update>>);

    impl UpdateSink for Shown {
        fn send(&self, _session: &SessionId, update: Update) {
            self.0.lock().unwrap().push(update);
        }

        fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
            unreachable!("no tools here")
        }
    }

    #[test]
    fn a_load_holds_back_what_its_replay_shows_of_its_session_until_it_is_sent() {
        let shown = Arc::new(Shown::default());
        let loading = Loading::new(Arc::clone(&shown) as Arc<dyn UpdateSink>);
        let (loaded, other) = (SessionId::generate(), SessionId::generate());
        let text = |text: &str| Update::AgentText { message: MessageId::generate(), text: text.into() };
        let held = loading.hold(&loaded);
        let again = loading.hold(&loaded);
        loading.send(&loaded, text("in the replay"));
        loading.send(&loaded, Update::EphemeralText { text: "never replayed".into() });
        loading.send(&other, text("another session"));
        drop(held);
        loading.send(&loaded, text("still in the second load's replay"));
        drop(again);
        loading.send(&loaded, text("after the replays"));
        let texts: Vec<String> = shown
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|update| match update {
                Update::AgentText { text, .. } | Update::EphemeralText { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["never replayed", "another session", "after the replays"]);
    }

    #[test]
    fn a_replays_cut_drops_what_it_showed_and_is_forgotten_once_the_log_passes_it() {
        let shown = Arc::new(Shown::default());
        let loading = Loading::new(Arc::clone(&shown) as Arc<dyn UpdateSink>);
        let session = SessionId::generate();
        let text = |text: &str| Update::AgentText { message: MessageId::generate(), text: text.into() };
        let held = loading.hold(&session);
        loading.send_logged(&session, 1, text("in the replay"));
        drop(held.send(&session, &[], 2));
        loading.send_logged(&session, 2, text("also in the replay"));
        assert_eq!(loading.lock().len(), 1, "the cut is kept until the log passes it");
        loading.send_logged(&session, 3, text("after it"));
        assert!(loading.lock().is_empty(), "a cut the log passed is forgotten");
        loading.send_logged(&session, 4, text("and on"));
        let texts: Vec<String> = shown
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|update| match update {
                Update::AgentText { text, .. } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, ["after it", "and on"]);
    }
}

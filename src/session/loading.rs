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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Update, UpdateSink};
use crate::history::Message;
use crate::ids::SessionId;
use crate::tools::Host;

/// The sessions' sink, holding back what replays will show.
pub struct Loading {
    sink: Arc<dyn UpdateSink>,
    /// Loads read and not replayed yet, by session. A stored update is looked up and sent
    /// under this lock, so it is either out before a load holds its session or held back.
    held: Mutex<HashMap<SessionId, usize>>,
}

impl Loading {
    pub fn new(sink: Arc<dyn UpdateSink>) -> Arc<Self> {
        Arc::new(Self { sink, held: Mutex::new(HashMap::new()) })
    }

    /// Holds back `session`'s stored updates until the returned replay is sent (or dropped,
    /// when the load failed before it).
    pub fn hold(self: &Arc<Self>, session: &SessionId) -> Replay {
        *self.lock().entry(session.clone()).or_default() += 1;
        Replay { held: Held { loading: Arc::clone(self), session: session.clone() }, sink: Arc::clone(&self.sink) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, usize>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        if held.contains_key(session) {
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
    /// Sends `messages` as the load's replay, then lets the session's updates through again.
    /// Gives back the sink it went through, for the replay of the session's sub-agents
    /// (`subagent::replay_children`), which follows.
    pub fn send(self, session: &SessionId, messages: &[Message]) -> Arc<dyn UpdateSink> {
        for update in super::replay(messages) {
            self.sink.send(session, update);
        }
        drop(self.held);
        self.sink
    }
}

/// A load between the moment it was read and its replay (see [`Loading::hold`]).
pub struct Held {
    loading: Arc<Loading>,
    session: SessionId,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self.loading.lock();
        if let Some(count) = held.get_mut(&self.session) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.session);
            }
        }
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
}

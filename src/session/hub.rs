//! The sessions' sink when they belong to a server (`cairn serve`) instead of to the one editor
//! that started the process: each session's updates go to every connection viewing it, and a
//! connection that goes away only stops viewing.
//!
//! A connection is a [`Viewer`]: its own sink (the wire of that connection) behind its own
//! [`Loading`], so that a `session/load` on one connection holds back the replayed updates on
//! that connection alone while the others go on streaming. A connection views a session once it
//! creates, loads, resumes or forks it, or sends it anything ([`Hub::attach`]); it stops when it
//! closes ([`Hub::detach`]). Nothing here cancels a turn: a session with no viewer goes on and
//! records, and whoever attaches next loads what it missed.
//!
//! Questions a turn asks (permissions, the `question` tool) go to every viewer that can answer
//! them, and the first answer wins; the others' copies are withdrawn (dropping a request sends
//! its cancellation). A question asked while nobody views the session waits for the next
//! viewer, and one a viewer left unanswered by going away goes to those who remain or come. The
//! editor's files and terminals are not used: a served turn's tools act where the server runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::watch;

use super::loading::Loading;
use super::{Update, UpdateSink};
use crate::ids::SessionId;
use crate::tools::Host;
use crate::tools::host::{HostError, PermissionAnswer, PermissionOption, Permissions, Question, Questions, Reply};

/// One connection's view of the server's sessions.
#[derive(Clone)]
pub struct Viewer {
    id: u64,
    /// The connection's wire, behind the loads it has under way.
    pub sink: Arc<Loading>,
}

impl Viewer {
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// The server's sessions' sink: which connection views which session.
pub struct Hub {
    viewers: Mutex<HashMap<SessionId, Vec<Viewer>>>,
    next: AtomicU64,
    /// Bumped at every attach, so a question waiting for someone to answer it asks newcomers.
    attached: watch::Sender<u64>,
    /// Itself, for the hosts it hands out.
    me: Weak<Hub>,
}

impl Hub {
    pub fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            viewers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            attached: watch::channel(0).0,
            me: me.clone(),
        })
    }

    /// A new connection's view: `sink` is its wire.
    pub fn viewer(&self, sink: Arc<dyn UpdateSink>) -> Viewer {
        Viewer { id: self.next.fetch_add(1, Ordering::Relaxed), sink: Loading::new(sink) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Vec<Viewer>>> {
        self.viewers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `viewer` sees `session`'s updates from now on (once, however often it attaches).
    pub fn attach(&self, session: &SessionId, viewer: &Viewer) {
        let mut viewers = self.lock();
        let list = viewers.entry(session.clone()).or_default();
        if list.iter().any(|known| known.id == viewer.id) {
            return;
        }
        list.push(viewer.clone());
        drop(viewers);
        self.attached.send_modify(|count| *count += 1);
    }

    /// Whether `viewer` views `session`.
    pub fn views(&self, session: &SessionId, viewer: &Viewer) -> bool {
        self.lock().get(session).is_some_and(|list| list.iter().any(|known| known.id == viewer.id))
    }

    /// `viewer`'s connection is gone: it views nothing any more. Its sessions go on.
    pub fn detach(&self, viewer: &Viewer) {
        self.lock().retain(|_, list| {
            list.retain(|known| known.id != viewer.id);
            !list.is_empty()
        });
    }

    /// The session is closed or deleted: nobody views it any more.
    pub fn forget(&self, session: &SessionId) {
        self.lock().remove(session);
    }

    /// `update` to every viewer of `session` but `except` (the one whose request it answers,
    /// which is told in its own way).
    pub fn send_to_others(&self, session: &SessionId, update: Update, except: &Viewer) {
        let viewers = self.lock();
        for viewer in viewers.get(session).into_iter().flatten().filter(|viewer| viewer.id != except.id) {
            viewer.sink.send(session, update.clone());
        }
    }

    /// The hosts of the connections viewing `session`, by viewer.
    fn hosts(&self, session: &SessionId) -> Vec<(u64, Arc<dyn Host>)> {
        let viewers: Vec<Viewer> = self.lock().get(session).cloned().unwrap_or_default();
        viewers.into_iter().map(|viewer| (viewer.id, viewer.sink.host(session))).collect()
    }
}

impl UpdateSink for Hub {
    fn send(&self, session: &SessionId, update: Update) {
        let viewers = self.lock();
        let Some(list) = viewers.get(session) else { return };
        // Sending only queues, so the lock is held for no longer than the copies take.
        if let Some((last, others)) = list.split_last() {
            for viewer in others {
                viewer.sink.send(session, update.clone());
            }
            last.sink.send(session, update);
        }
    }

    /// A turn never waits for a viewer: one that falls behind is its connection's problem
    /// (bounded there), not every other viewer's.
    fn writable(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }

    fn host(&self, session: &SessionId) -> Arc<dyn Host> {
        Arc::new(Viewers { hub: self.me.clone(), session: session.clone() })
    }
}

/// Whoever views a session, as the host of its turns.
struct Viewers {
    hub: Weak<Hub>,
    session: SessionId,
}

impl Viewers {
    /// Asks every viewer that can answer (with `ask`), newcomers included, until one answers
    /// (an error from a client that is still there is its answer); the other copies are dropped
    /// (withdrawn). A viewer that went away is not asked again.
    async fn first_answer<T: Send + 'static>(
        &self,
        ask: impl Fn(Arc<dyn Host>) -> Option<BoxFuture<'static, Result<T, HostError>>>,
    ) -> Result<T, HostError> {
        let Some(hub) = self.hub.upgrade() else { return Err(HostError::unavailable()) };
        let mut attached = hub.attached.subscribe();
        let mut asked: Vec<u64> = Vec::new();
        let mut pending = FuturesUnordered::new();
        loop {
            attached.mark_unchanged();
            for (viewer, host) in hub.hosts(&self.session) {
                if asked.contains(&viewer) {
                    continue;
                }
                asked.push(viewer);
                tracing::debug!(session = %self.session, viewer, "asking a viewer");
                if let Some(question) = ask(host) {
                    pending.push(question);
                }
            }
            tokio::select! {
                Some(answer) = pending.next() => match answer {
                    Ok(answer) => return Ok(answer),
                    // Its connection closed: those who remain or come may answer.
                    Err(err) if err.is_gone() => tracing::debug!(session = %self.session, "a viewer left unanswered"),
                    // A client that answers with an error has answered (as on stdio).
                    Err(err) => return Err(err),
                },
                changed = attached.changed() => {
                    tracing::debug!(session = %self.session, "a viewer attached");
                    if changed.is_err() {
                        return Err(HostError::unavailable());
                    }
                }
            }
        }
    }
}

impl Host for Viewers {
    fn permissions(&self) -> Option<&dyn Permissions> {
        Some(self)
    }

    fn questions(&self) -> Option<&dyn Questions> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl Permissions for Viewers {
    async fn request_permission(
        &self,
        call: &crate::history::ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        let (call, options) = (Arc::new(call.clone()), Arc::new(options.to_vec()));
        self.first_answer(move |host| {
            host.permissions()?;
            let (call, options) = (Arc::clone(&call), Arc::clone(&options));
            Some(Box::pin(async move {
                match host.permissions() {
                    Some(permissions) => permissions.request_permission(&call, &options).await,
                    None => Err(HostError::unavailable()),
                }
            }))
        })
        .await
    }
}

#[async_trait::async_trait]
impl Questions for Viewers {
    async fn ask(&self, call_id: &str, question: &Question) -> Result<Reply, HostError> {
        let (call_id, question) = (Arc::new(call_id.to_owned()), Arc::new(question.clone()));
        self.first_answer(move |host| {
            host.questions()?;
            let (call_id, question) = (Arc::clone(&call_id), Arc::clone(&question));
            Some(Box::pin(async move {
                match host.questions() {
                    Some(questions) => questions.ask(&call_id, &question).await,
                    None => Err(HostError::unavailable()),
                }
            }))
        })
        .await
    }
}

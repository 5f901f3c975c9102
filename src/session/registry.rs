//! The in-process registry of live sessions, keyed by id.
//!
//! Methods that must keep wire order (prompt, cancel, set_model, resume) do their part
//! synchronously: they find or spawn the session's actor and enqueue the command before they
//! return a future, so a `session/cancel` read right after a `session/prompt` always reaches the
//! actor after that prompt. A session that is stored but not live is restored on first use.
//! A load of a session that is not live starts its actor, which reads the history once and
//! replays it before anything else; a load of a live one attaches like a resume, then replays
//! a snapshot taken and sent in the store writer's order (`Store::snapshot`). Either way the
//! session's live updates are held back meanwhile (`loading`). At shutdown the sessions it
//! created that were never prompted are removed.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::actor::{self, Command, Init, Services, Steering};
use super::hub::Viewer;
use super::loading::{Loading, Replay};
use super::{Attach, SessionError, SessionView, Status, TurnEnd, UpdateSink};
use crate::config::Config;
use crate::history::Part;
use crate::ids::{SessionId, now_ms};
use crate::llm::catalog;
use crate::settings::Setting;
use crate::store::{ListPage, Listing, SessionRow, Store, Write};

/// How long shutdown waits for running turns to wind down before it lets go.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(400);
/// How long shutdown then waits for background work: a title being written, the answers to
/// the commands other replicas handed.
const BACKGROUND_GRACE: Duration = Duration::from_millis(200);

/// A cloneable handle to the live sessions.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// Background work that outlives turns (title writing); shutdown gives it a moment.
    background: tokio_util::task::TaskTracker,
    discovered: Arc<catalog::Discovered>,
    config: Arc<Config>,
    /// What the sessions send through: the client's sink, behind the loads under way.
    sink: Arc<Loading>,
    live: Mutex<HashMap<SessionId, Live>>,
    /// The sub-agents running under the live sessions.
    children: Arc<super::subagent::Running>,
    /// The sessions this registry created (new ones and forks): those still without a message
    /// at shutdown are removed then.
    created: Mutex<HashSet<SessionId>>,
    counter: AtomicU64,
}

struct Live {
    tx: mpsc::UnboundedSender<Command>,
    generation: u64,
    status: watch::Receiver<Status>,
}

impl Inner {
    /// Drops a finished actor's entry, unless a newer actor replaced it.
    fn forget(&self, id: &SessionId, generation: u64) {
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if live.get(id).is_some_and(|entry| entry.generation == generation) {
            live.remove(id);
        }
    }
}

/// The answer to a prompt. Dropping it before it resolves cancels that prompt.
pub struct PromptFuture {
    reply: oneshot::Receiver<Result<TurnEnd, SessionError>>,
    guard: Option<(mpsc::UnboundedSender<Command>, u64)>,
    id: SessionId,
}

impl Future for PromptFuture {
    type Output = Result<TurnEnd, SessionError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.reply).poll(cx).map(|result| {
            this.guard = None;
            result.unwrap_or_else(|_| Err(SessionError::Closed(this.id.clone())))
        })
    }
}

impl Drop for PromptFuture {
    fn drop(&mut self) {
        if let Some((tx, ticket)) = self.guard.take() {
            let _ = tx.send(Command::CancelPrompt { ticket });
        }
    }
}

impl Registry {
    pub fn new(store: Store, config: Arc<Config>, sink: Arc<dyn UpdateSink>) -> Self {
        let discovered = Arc::new(catalog::Discovered::default());
        if config.providers.values().any(|provider| provider.discover_models) {
            let (filling, config) = (Arc::clone(&discovered), Arc::clone(&config));
            tokio::spawn(async move { filling.fill(&config).await });
        }
        let inbound = store.inbound();
        let inner = Inner {
            store,
            background: tokio_util::task::TaskTracker::new(),
            discovered,
            config,
            sink: Loading::new(sink),
            live: Mutex::new(HashMap::new()),
            children: Arc::default(),
            created: Mutex::new(HashSet::new()),
            counter: AtomicU64::new(0),
        };
        let registry = Self { inner: Arc::new(inner) };
        // A store shared by replicas: carry out what others hand this one.
        if let Some(inbound) = inbound {
            tokio::spawn(super::handoff::serve(WeakRegistry(Arc::downgrade(&registry.inner)), inbound));
        }
        registry
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Where work that must finish before the store shuts down runs (the answers to commands
    /// other replicas handed): [`Self::shutdown`] waits for it, briefly, before the store stops.
    pub fn background(&self) -> &tokio_util::task::TaskTracker {
        &self.inner.background
    }

    /// Opens a connection to the default model's provider ahead of any session: a client's
    /// first prompt, often sent right behind `session/new`, then finds it open instead of
    /// waiting for it. A session's own warm-up, at `session/new`, finds that URL warmed already.
    pub fn warm_default_model(&self) {
        tokio::spawn(crate::llm::warm(Arc::clone(&self.inner.config), self.inner.config.model.clone()));
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Stores a new session in `cwd` (refused if it cannot be a workspace), owned by `owner`
    /// (a principal of `cairn serve --auth`, `None` for the local user), and makes it live.
    /// Answers once the row is committed. If it is never prompted, [`Self::shutdown`] removes it.
    pub async fn create(&self, cwd: &Path, owner: Option<String>, attach: Attach) -> Result<SessionView, SessionError> {
        self.inner.config.workspace_guard().check(cwd).map_err(SessionError::Workspace)?;
        let now = now_ms();
        let mut row = SessionRow::new(
            SessionId::generate(),
            cwd.to_string_lossy().into_owned(),
            self.inner.config.model.clone(),
            now,
        );
        row.owner = owner;
        // Stored with the row, so the system prompt the actor starts assembling is already the
        // editor's.
        row.system_prompt = attach.system_prompt.clone();
        self.inner.store.commit(Write::InsertSession(Box::new(row.clone()))).await?;
        let id = row.id.clone();
        self.created(&id);
        self.ask(&id, Init::Ready { row: Box::new(row), history: Vec::new() }, |reply| Command::Attach {
            attach,
            reply,
        })
        .await
    }

    /// Makes a stored session live (keeping a live actor if there is one) and replays it to the
    /// sink. Call it when the request is read (in wire order): from then on the session's
    /// stored updates are held back until the replay is sent ([`Loading`]). A session that was
    /// not live is read once, by the actor this starts, which sends the replay before it serves
    /// anything ([`Init::Load`]). A live one's replay is a snapshot taken in the store writer's
    /// order and sent from there ([`Store::snapshot`]): it shows everything the session has
    /// shown so far, those held back included (a part still streaming with its text so far), and
    /// the turn's later updates follow it. Tool calls a crash left open are finished when the
    /// session is restored, so the replay shows them failed. Answers once the replay is queued
    /// to the sink. On a server, the replay goes to the loading connection's `viewer` alone,
    /// and only its stream holds back what the replay shows.
    pub fn load(
        &self,
        id: &SessionId,
        attach: Attach,
        viewer: Option<&Viewer>,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + use<> {
        let replay = viewer.map_or(&self.inner.sink, |viewer| &viewer.sink).hold(id);
        let (reply, attached) = oneshot::channel();
        let (sent, unused) = self.spawn_or_send(Init::Load(id.clone(), replay), Command::Attach { attach, reply });
        let (store, session) = (self.inner.store.clone(), id.clone());
        async move {
            if sent.is_none() {
                return Err(SessionError::Closed(session));
            }
            let view = attached.await.unwrap_or_else(|_| Err(SessionError::Closed(session.clone())))?;
            // A live actor was found: the replay is read in the writer's order.
            if let Some(Init::Load(_, replay)) = unused {
                replay_snapshot(&store, session, replay).await?;
            }
            Ok(view)
        }
    }

    /// Attaches to a live session, or restores it from the store without replay.
    pub fn resume(
        &self,
        id: &SessionId,
        attach: Attach,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + use<> {
        self.ask(id, Init::Restore(id.clone()), |reply| Command::Attach { attach, reply })
    }

    /// Makes the session live here, restored from the store without replay if it is not, and
    /// attaches nothing: on a store shared by replicas its actor follows the session's event
    /// log from the moment it read the history, which it has when this resolves
    /// (`_cairn/stream/resume`, which reads the log after that).
    /// Also the `seq` of the last row of the log shown here, as it moves on.
    #[allow(clippy::type_complexity)]
    pub fn follow(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(SessionView, Option<tokio::sync::watch::Receiver<i64>>), SessionError>> + use<>
    {
        self.ask(id, Init::Restore(id.clone()), |reply| Command::Follow { reply })
    }

    /// Queues a prompt now; the future resolves when its turn ends, with the tokens it used. The
    /// turn runs on the trace context of the client request being handled ([`crate::trace::current`]).
    pub fn prompt(&self, id: &SessionId, parts: Vec<Part>) -> PromptFuture {
        self.prompt_handed(id, parts, None)
    }

    /// [`Self::prompt`] for a prompt another replica handed as command `handed`: its turn runs
    /// only while the command is still this replica's, unanswered (`Write::TakeLease`).
    pub fn prompt_handed(&self, id: &SessionId, parts: Vec<Part>, handed: Option<i64>) -> PromptFuture {
        let ticket = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        let trace = crate::trace::current();
        let tx = self.ensure(Init::Restore(id.clone()), Command::Prompt { ticket, trace, parts, reply, handed });
        PromptFuture { reply: rx, guard: tx.map(|tx| (tx, ticket)), id: id.clone() }
    }

    /// `session/set_title`: stored before the future resolves; no model writes one afterwards.
    pub fn set_title(
        &self,
        id: &SessionId,
        title: String,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + use<> {
        self.ask(id, Init::Restore(id.clone()), move |reply| Command::SetTitle { title, reply })
    }

    /// `_session/steering`: hands `parts` to the running turn (see [`Steering`]); a turn of its
    /// own runs on the request's trace context, as [`Self::prompt`]'s does.
    pub fn steer(
        &self,
        id: &SessionId,
        parts: Vec<Part>,
        start_if_idle: bool,
    ) -> impl Future<Output = Result<Steering, SessionError>> + use<> {
        let (ticket, trace) = (self.inner.counter.fetch_add(1, Ordering::Relaxed), crate::trace::current());
        self.ask(id, Init::Restore(id.clone()), move |reply| Command::Steer {
            ticket,
            trace,
            parts,
            start_if_idle,
            reply,
        })
    }

    /// Whether this process holds the session in memory (`session/status`).
    pub fn is_live(&self, id: &SessionId) -> bool {
        self.live(id).is_some()
    }

    /// Cancels the running turn and queued prompts of a live session, or a running sub-agent's
    /// turn alone (its parent's call then fails as cancelled); idle or unknown ones ignore it.
    /// With a store shared by replicas, a turn another replica runs in the session is cancelled
    /// there: the cancel is handed to it.
    pub fn cancel(&self, id: &SessionId) {
        self.cancel_here(id);
        if self.inner.store.logs_events() {
            let (store, session) = (self.inner.store.clone(), id.clone());
            tokio::spawn(async move {
                if let Ok(Some(_)) = store.held_elsewhere(&session).await {
                    let body = serde_json::to_string(&super::handoff::Handed::Cancel {}).unwrap_or_default();
                    if let Some(Err(err)) = store.send_command(&session, body).await {
                        tracing::warn!(%session, %err, "a cancel could not be handed to the replica running the turn");
                    }
                }
            });
        }
    }

    /// What another replica answered to a command this one handed it, for the session's actor
    /// to give its client once the events up to `seq` are forwarded.
    pub(super) fn answered(&self, id: &SessionId, command: i64, seq: i64, body: String) {
        if let Some(tx) = self.live(id) {
            let _ = tx.send(Command::Answered { command, seq, body });
        }
    }

    /// A question of another replica, or an answer to one of this one's, for the sink's clients.
    pub(super) fn elsewhere(&self, id: &SessionId, what: super::asked::Elsewhere) {
        self.inner.sink.elsewhere(id, what);
    }

    /// [`Self::cancel`] in this process alone.
    pub(super) fn cancel_here(&self, id: &SessionId) {
        if let Some(tx) = self.live(id) {
            let _ = tx.send(Command::Cancel);
        } else if self.inner.children.cancel(id) {
            tracing::info!(session = %id, "cancelling a sub-agent at the client's request");
        }
    }

    /// Changes one of the session's settings: the model from the next turn on, the mode for
    /// the running turn's next decision and every later one, the reasoning level from the next
    /// request, steering from the next prompt. With a store shared by replicas, while another
    /// replica runs a turn in the session the change is handed to it and answered once it took
    /// it (`actor/handing.rs`); so are [`Self::set_title`] and [`Self::steer`].
    pub fn set(
        &self,
        id: &SessionId,
        setting: Setting,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + use<> {
        self.ask(id, Init::Restore(id.clone()), move |reply| Command::Set { setting, reply })
    }

    /// A headless run's settings (model, mode): in effect at once, and stored with the prompt
    /// that follows, so a prompt another process's lease refuses leaves them as stored.
    pub fn set_for_turn(
        &self,
        id: &SessionId,
        settings: Vec<Setting>,
    ) -> impl Future<Output = Result<SessionView, SessionError>> + use<> {
        self.ask(id, Init::Restore(id.clone()), move |reply| Command::SetForTurn { settings, reply })
    }

    /// Cancels any running turn, waits for it to end, and frees the session. Rows stay.
    pub async fn close(&self, id: &SessionId) -> Result<(), SessionError> {
        let live = self.take(id);
        match live {
            Some(tx) => {
                close(&tx).await;
                Ok(())
            }
            None => match self.inner.store.session(id).await? {
                Some(_) => Ok(()),
                None => Err(SessionError::NotFound(id.clone())),
            },
        }
    }

    /// `session/archive` (`archived`): closes the session as [`Self::close`] does (a running turn
    /// is cancelled; ACP asks for that), then marks it archived, which only hides it from
    /// listings: it stays loadable by id. A turn another process runs in it goes on. With
    /// `archived` false (`session/unarchive`) it is listed again, and nothing is loaded.
    /// Either is done again without error; an unknown session is [`SessionError::NotFound`].
    pub async fn archive(&self, id: &SessionId, archived: bool) -> Result<(), SessionError> {
        if archived {
            self.close(id).await?;
        } else if self.inner.store.session(id).await?.is_none() {
            return Err(SessionError::NotFound(id.clone()));
        }
        self.inner.store.commit(Write::SetArchived { id: id.clone(), archived }).await?;
        Ok(())
    }

    /// Closes the session if live, then removes its rows. Unknown ids succeed. Refused, closing
    /// nothing, while another process runs a turn in it.
    pub async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        if let Some(holder) = self.inner.store.held_elsewhere(id).await? {
            return Err(SessionError::Store(crate::store::StoreError::Leased(Box::new(holder))));
        }
        if let Some(tx) = self.take(id) {
            close(&tx).await;
        }
        self.inner.store.commit(Write::DeleteSession { id: id.clone() }).await?;
        Ok(())
    }

    /// One page of the sessions `listing` shows, after `cursor`.
    pub async fn list(&self, listing: Listing, cursor: Option<String>, limit: usize) -> Result<ListPage, SessionError> {
        Ok(self.inner.store.list_sessions(listing, cursor, limit).await?)
    }

    /// What a session is doing; sessions that are not live are idle.
    pub fn status(&self, id: &SessionId) -> Status {
        let live = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.get(id).map(|entry| entry.status.borrow().clone()).unwrap_or_default()
    }

    /// Copies a session (refused while it is busy) into a new live session in `cwd`. A copy of
    /// a session with no message is removed by [`Self::shutdown`] if it gets none either.
    pub async fn fork(&self, parent: &SessionId, cwd: &Path, attach: Attach) -> Result<SessionView, SessionError> {
        self.inner.config.workspace_guard().check(cwd).map_err(SessionError::Workspace)?;
        let cwd = cwd.to_string_lossy().into_owned();
        let id = self.ask(parent, Init::Restore(parent.clone()), |reply| Command::Fork { cwd, reply }).await?;
        self.created(&id);
        let (row, history, _) = actor::restore(&self.inner.store, &id).await?;
        self.ask(&id, Init::Ready { row: Box::new(row), history }, |reply| Command::Attach { attach, reply }).await
    }

    /// Cancels every running turn, gives them a moment to finish, removes the sessions this
    /// registry created that hold no message (never prompted; see [`Self::forget_unprompted`]),
    /// and flushes the store.
    pub async fn shutdown(&self) {
        let all: Vec<_> = {
            let mut live = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            live.drain().map(|(_, entry)| entry.tx).collect()
        };
        let closing = futures::future::join_all(all.iter().map(close));
        if tokio::time::timeout(SHUTDOWN_GRACE, closing).await.is_err() {
            tracing::warn!("some turns did not stop within {SHUTDOWN_GRACE:?}");
        }
        self.inner.background.close();
        if tokio::time::timeout(BACKGROUND_GRACE, self.inner.background.wait()).await.is_err() {
            tracing::info!(
                "left background work (a session title, the answer to a command another replica handed) unfinished at exit"
            );
        }
        self.forget_unprompted().await;
        self.inner.store.shutdown().await;
    }

    /// Removes the sessions this registry created that hold no message at all, so that a
    /// client's untitled sessions do not pile up in the store (`session/list` leaves them out
    /// anyway, which is what keeps the list clean after a `kill -9`). Only those: a stored
    /// session that was loaded may be another process's, just created and about to be
    /// prompted. The check is the store's, in the transaction that deletes (a message that
    /// came meanwhile, from another process too, keeps the session), and the deletion is
    /// `session/delete`'s, with everything that hangs off the session.
    async fn forget_unprompted(&self) {
        let created: Vec<SessionId> = {
            let mut created = self.inner.created.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            created.drain().collect()
        };
        let store = &self.inner.store;
        let removing = created.iter().map(|id| async move {
            if let Err(err) = store.commit(Write::DeleteUnprompted { id: id.clone() }).await {
                tracing::warn!(session = %id, %err, "a session never prompted could not be removed at exit");
            }
        });
        futures::future::join_all(removing).await;
    }

    /// Notes a session this registry created (see [`Self::forget_unprompted`]).
    fn created(&self, id: &SessionId) {
        let mut created = self.inner.created.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        created.insert(id.clone());
    }

    fn live(&self, id: &SessionId) -> Option<mpsc::UnboundedSender<Command>> {
        let live = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.get(id).filter(|entry| !entry.tx.is_closed()).map(|entry| entry.tx.clone())
    }

    fn take(&self, id: &SessionId) -> Option<mpsc::UnboundedSender<Command>> {
        let mut live = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.remove(id).map(|entry| entry.tx)
    }

    /// Sends `make(reply)` to the session's actor (see [`Self::ensure`]) and awaits the reply.
    fn ask<T, F>(
        &self,
        id: &SessionId,
        init: Init,
        make: F,
    ) -> impl Future<Output = Result<T, SessionError>> + use<T, F>
    where
        T: Send + 'static,
        F: FnOnce(actor::Reply<T>) -> Command,
    {
        let (reply, rx) = oneshot::channel();
        let sent = self.ensure(init, make(reply)).is_some();
        let id = id.clone();
        async move {
            if !sent {
                return Err(SessionError::Closed(id));
            }
            rx.await.unwrap_or(Err(SessionError::Closed(id)))
        }
    }

    /// Queues `command` for the live actor of the session `init` names, spawning one from `init`
    /// if none is live. A new actor gets the command before it starts, so even one that finds no
    /// such session answers it. Returns the actor's sender, or `None` if it was already gone.
    fn ensure(&self, init: Init, command: Command) -> Option<mpsc::UnboundedSender<Command>> {
        self.spawn_or_send(init, command).0
    }

    /// [`Self::ensure`], also giving `init` back when a live actor made it unneeded.
    fn spawn_or_send(&self, init: Init, command: Command) -> (Option<mpsc::UnboundedSender<Command>>, Option<Init>) {
        let id = match &init {
            Init::Ready { row, .. } => row.id.clone(),
            Init::Restore(id) | Init::Load(id, _) => id.clone(),
        };
        let mut live = self.inner.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = live.get(&id).filter(|entry| !entry.tx.is_closed()) {
            return (entry.tx.send(command).is_ok().then(|| entry.tx.clone()), Some(init));
        }
        let generation = self.inner.counter.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let (status, status_rx) = watch::channel(Status::Idle);
        let _ = tx.send(command);
        let services = Services {
            store: self.inner.store.clone(),
            discovered: Arc::clone(&self.inner.discovered),
            background: self.inner.background.clone(),
            config: Arc::clone(&self.inner.config),
            sink: Arc::clone(&self.inner.sink) as Arc<dyn UpdateSink>,
            children: Arc::clone(&self.inner.children),
            gone: {
                let (registry, id) = (Arc::downgrade(&self.inner), id.clone());
                Box::new(move || {
                    if let Some(registry) = registry.upgrade() {
                        registry.forget(&id, generation);
                    }
                })
            },
            status: Arc::new(status),
        };
        tokio::spawn(actor::run(init, services, rx));
        live.insert(id, Live { tx: tx.clone(), generation, status: status_rx });
        (Some(tx), None)
    }
}

/// A registry that does not keep its sessions alive: the inbox's task holds one.
pub(super) struct WeakRegistry(std::sync::Weak<Inner>);

impl WeakRegistry {
    pub(super) fn upgrade(&self) -> Option<Registry> {
        self.0.upgrade().map(|inner| Registry { inner })
    }
}

/// Sends a live session's replay: a snapshot read on the store's writer thread between the
/// batches committed before it and those after, and sent from there, so that it shows what the
/// updates sent so far showed and what follows it comes after it.
async fn replay_snapshot(store: &Store, session: SessionId, replay: Replay) -> Result<(), SessionError> {
    let (done, replayed) = oneshot::channel();
    let snapshot = session.clone();
    store.snapshot(
        &snapshot,
        Box::new(move |messages| {
            let sent = messages.map(|(messages, logged)| (replay.send(&session, &messages, logged), messages));
            let _ = done.send(sent);
        }),
    );
    let (sink, messages) = replayed.await.unwrap_or(Err(crate::store::StoreError::Closed))?;
    super::subagent::replay_children(store, &sink, &snapshot, &messages).await;
    Ok(())
}

async fn close(tx: &mpsc::UnboundedSender<Command>) {
    let (reply, rx) = oneshot::channel();
    if tx.send(Command::Close { reply }).is_ok() {
        let _ = rx.await;
    }
}

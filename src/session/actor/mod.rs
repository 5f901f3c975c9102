//! One session's actor: the only owner of its history, running one turn at a time.
//!
//! The actor serves [`Command`]s in the order they were sent. A prompt starts a turn on a spawned
//! task that borrows the history (by moving it in and back out), so the actor stays free to hear
//! `Cancel` while the turn streams. Prompts that arrive while a turn runs wait in a queue and run
//! in arrival order; a cancel ends the running turn and answers every queued prompt `cancelled`.
//! A session that steers hands such prompts to the running model turn instead (`steer`).
//! Slash commands (`slash`; those from files and skills in `custom`) either answer at once or
//! wait in the same queue; model turns are started and taken back in `turn`. The actor holds
//! the session's background jobs (a [`crate::tools::Jobs`], lent to every turn): they outlive
//! turns, and a close kills every one and waits until each is gone before it is answered. So
//! with its language servers (a [`crate::tools::Lsp`]): a close shuts them down first.

mod custom;
mod given;
mod handing;
mod mcp;
mod remote;
mod rewind;
mod slash;
mod steer;
mod stored;
mod turn;

pub(crate) use remote::CATCH_UP;
use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::commands::{self, Slash};
use super::loading::Replay;
use super::setup;
use super::{ContextUsage, SessionError, SessionView, Status, TurnEnd, UpdateSink};
use crate::agent::{StopReason, TurnError};
use crate::config::BusyPrompt;
use crate::config::Config;
use crate::history::view::context_used;
use crate::history::{Message, Part};
use crate::ids::SessionId;
use crate::llm::catalog::{self, ThoughtLevel};
use crate::permissions::{Mode, Rule};
use crate::settings::{Setting, SettingError};
use crate::store::{SessionRow, Store, Write};
use crate::trace::TraceContext;
use stored::refuse_all;
pub use stored::restore;

pub type Reply<T> = oneshot::Sender<Result<T, SessionError>>;

/// What became of a prompt sent with `_session/steering`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Steering {
    /// Handed to the running model turn, which takes it before its next model request.
    Injected,
    /// Nothing was running, and the client asked to be told: the prompt was not used.
    PromptRequired,
    /// It runs as a turn of its own: nothing was running, or what runs cannot take it.
    StartedNewTurn,
}

/// What the rest of cairn may ask of a session.
pub enum Command {
    Prompt {
        ticket: u64,
        trace: Option<TraceContext>,
        parts: Vec<Part>,
        reply: Reply<TurnEnd>,
        /// The command it came in, handed by another replica: its turn runs only while that
        /// command is still this replica's, unanswered.
        handed: Option<i64>,
    },
    /// `session/cancel`: stop the running turn and drop the queued prompts.
    Cancel,
    /// The client gave up on one prompt (`$/cancel_request`).
    CancelPrompt { ticket: u64 },
    /// Changes one setting, stored at once.
    Set { setting: Setting, reply: Reply<SessionView> },
    /// A headless run's settings (its model and mode): in effect at once, stored with the next
    /// turn's prompt (so a turn another process's lease refuses stores none).
    SetForTurn { settings: Vec<Setting>, reply: Reply<SessionView> },
    /// A client opened the session (new, load, resume, fork): use its MCP servers.
    Attach { attach: super::Attach, reply: Reply<SessionView> },
    /// `session/fork`: copy the session (refused while it is busy); answers the new session's id
    /// once its rows are committed.
    Fork { cwd: String, reply: Reply<SessionId> },
    /// `session/set_title`: the client's title, stored before the answer; no title is written
    /// for the session by a model afterwards.
    SetTitle { title: String, reply: Reply<SessionView> },
    /// `_session/steering`: a prompt for the running turn, not the queue.
    Steer {
        ticket: u64,
        trace: Option<TraceContext>,
        parts: Vec<Part>,
        /// With no turn running, start one (else answer [`Steering::PromptRequired`]).
        start_if_idle: bool,
        reply: Reply<Steering>,
    },
    /// A client resumes the session's stream here: answered once the actor is live, following
    /// the session's event log on a store shared by replicas, with the session's view; it
    /// changes nothing; with the `seq` of the last row shown here, to wait on for a view that
    /// has every row the log holds (`None` on a store that logs nothing).
    Follow { reply: Reply<(SessionView, Option<tokio::sync::watch::Receiver<i64>>)> },
    /// Another replica's answer to a prompt this one handed it, written when the session's
    /// event log was at `seq`.
    Answered { command: i64, seq: i64, body: String },
    /// Cancel everything, wait for the turn to end, then stop.
    Close { reply: oneshot::Sender<()> },
}

/// How an actor gets its state.
pub enum Init {
    /// The caller has the row and history already (new and loaded sessions).
    Ready { row: Box<SessionRow>, history: Vec<Message> },
    /// Read them from the store first (resume, or a prompt for a session not loaded yet).
    Restore(SessionId),
    /// Read them from the store, then send them as the replay of the load that made the
    /// session live, before anything else: nothing of a session that was not live can have been
    /// shown since the load was read, so the history read is exactly what the replay must show,
    /// and it is read once.
    Load(SessionId, Replay),
}

pub struct Services {
    pub store: Store,
    /// Models found through the providers' `GET /models`.
    pub discovered: Arc<catalog::Discovered>,
    /// Where background work (title writing) runs, so shutdown can wait for it briefly.
    pub background: tokio_util::task::TaskTracker,
    pub config: Arc<Config>,
    pub sink: Arc<dyn UpdateSink>,
    /// Called when the actor is gone, so that whoever started it (the registry) forgets it.
    pub gone: Box<dyn Fn() + Send + Sync>,
    /// What the session is doing, read by `session/list` through the registry.
    pub status: Arc<watch::Sender<Status>>,
    /// The sub-agents running in this process (`session/cancel` on one of them).
    pub children: Arc<super::subagent::Running>,
}

struct Queued {
    ticket: u64,
    /// The trace context of the request that sent it: the one its turn runs on.
    trace: Option<TraceContext>,
    work: Work,
    reply: Reply<TurnEnd>,
}

/// What a queued prompt asks for.
enum Work {
    Prompt(Vec<Part>),
    Slash(Slash),
    /// A command from a file whose turn is held to its tools and model.
    Command(Vec<Part>, Box<custom::Only>),
}

struct Running {
    ticket: u64,
    /// The trace context it runs on (the title written after it carries it too).
    trace: Option<TraceContext>,
    /// How many messages the history had when the turn began.
    history_len: usize,
    cancel: CancellationToken,
    reply: Reply<TurnEnd>,
    /// The prompt as sent, kept while the store is shared by replicas: handed to the replica
    /// holding the lease if the turn's claim is refused.
    handing: Option<Vec<crate::history::Part>>,
    /// Whether its prompt is the session's first, for which a title is asked once it is stored.
    titling: bool,
    /// Where prompts are steered into the turn; `None` for `/compact` and `/rewind`.
    steer: Option<mpsc::UnboundedSender<crate::agent::Steered>>,
    /// The prompts handed to the turn, joined or not yet.
    steered: Vec<steer::Joining>,
    /// The model turn's permission rules as they are now; `None` for `/compact` and `/rewind`.
    rules: Option<watch::Receiver<Vec<Rule>>>,
}

/// What a turn task gives back to the actor.
struct TurnOutcome {
    history: Vec<Message>,
    rules: Vec<Rule>,
    /// The session's checkpoints, if the work took them.
    checkpoints: Option<crate::tools::checkpoint::Tracker>,
    result: Result<TurnEnd, TurnError>,
    /// Whether the work's claim took the lease, so its prompt is stored: a turn whose claim was
    /// refused ran nothing, even where its answer is `cancelled`.
    claimed: bool,
}

struct Actor {
    services: Services,
    row: SessionRow,
    /// `None` while a turn has it.
    history: Option<Vec<Message>>,
    /// Session and project permission rules; lent to a turn with the history.
    rules: Vec<Rule>,
    /// Project rules revoked here whose removal may not be written yet: a turn reading the
    /// project's rules again must not take one back from the store meanwhile.
    revoked: Vec<slash::Revoked>,
    /// The session's directory (`row.cwd`) as resolved and checked when it went live.
    root: std::path::PathBuf,
    /// The client's additional workspace roots, beside `cwd` (in memory: the client sends them
    /// with every opening).
    directories: Vec<std::path::PathBuf>,
    mode: watch::Sender<Mode>,
    /// The mode as the actor last saw it: a turn that switches it (a plan approved) is seen here.
    mode_seen: watch::Receiver<Mode>,
    /// Context in use after the last step (input + cache + output tokens).
    context_used: u64,
    /// The system prompt, assembled in the background from the moment the session goes live, so
    /// the first prompt rarely waits for the disk and git; every turn gets the same one.
    system: setup::SystemFuture,
    /// Its warnings (instructions cut to fit) were shown, with the first turn.
    system_warned: bool,
    /// The session's hooks as last read (before each turn), kept while their files are unchanged.
    hooks: Option<Arc<crate::hooks::Hooks>>,
    /// The first prompt's text while the session waits for a model-written title.
    title_pending: Option<String>,
    queue: VecDeque<Queued>,
    running: Option<Running>,
    turn: Option<JoinHandle<TurnOutcome>>,
    /// The session's models, once resolved; cleared when its model changes.
    models: Option<setup::Models>,
    /// The session's MCP servers, once a client opened it (or `cairn exec` ran it).
    mcp: Option<mcp::Mcp>,
    /// Settings changed for the next turn, stored with its prompt (`Command::SetForTurn`), or at
    /// once by the next work that is not a turn.
    unsaved: Vec<Write>,
    /// The session is closing (closed, deleted, or the client left): nothing more starts.
    closing: bool,
    /// The session's background jobs: they outlive turns, and are killed when it closes.
    jobs: crate::tools::Jobs,
    /// The programs its rules reject, as its jobs and servers follow them while they run;
    /// published whenever its rules change ([`Actor::publish_rules`]).
    rulebook: Option<std::sync::Arc<crate::process::Rulebook>>,
    /// The session's language servers: started by the first edit of a file one covers, stopped
    /// when it closes.
    lsp: crate::tools::Lsp,
    /// The session's file checkpoints; lent to a turn or a rewind, and made at first use.
    checkpoints: Option<crate::tools::checkpoint::Tracker>,
    /// The commands from files and skills the session offers.
    custom: crate::session::custom::Catalog,
    /// The session's event log, followed when the store is shared by replicas.
    remote: Option<remote::Followed>,
}

pub async fn run(init: Init, services: Services, mut rx: mpsc::UnboundedReceiver<Command>) {
    let stored_before = !matches!(init, Init::Ready { .. });
    let (stored, replay) = match init {
        Init::Ready { row, history } => (Ok((*row, history, 0)), None),
        Init::Restore(id) => (restore(&services.store, &id).await, None),
        Init::Load(id, replay) => (restore(&services.store, &id).await, Some(replay)),
    };
    let (row, history, logged) = match stored {
        Ok(state) => state,
        Err(err) => {
            (services.gone)();
            refuse_all(&mut rx, &err);
            return;
        }
    };
    // A stored session's directory is checked again whenever it goes live: it may have been
    // stored before the check existed, or imported from a file that says anything.
    // Resolved once: every turn works there, wherever a link in the stored spelling leads later.
    let root = match services.config.workspace_guard().settle(std::path::Path::new(&row.cwd)) {
        Ok(root) => root,
        Err(refused) => {
            (services.gone)();
            refuse_all(&mut rx, &SessionError::StoredWorkspace { session: row.id.clone(), refused });
            return;
        }
    };
    let id = row.id.clone();
    if let Some(replay) = replay {
        let sink = replay.send(&id, &history, logged);
        super::subagent::replay_children(&services.store, &sink, &id, &history).await;
    }
    let system = setup::prepare_system(&services.config, &root, row.system_prompt.clone());
    let mut rules = row.rules.clone();
    match services.store.project_rules(&row.cwd).await {
        Ok(project) => rules.extend(project),
        Err(err) => tracing::warn!(session = %id, %err, "project permission rules could not be read"),
    }
    let mode = watch::Sender::new(row.mode.as_deref().and_then(Mode::parse).unwrap_or(Mode::Ask));
    let context_used = context_used(&history);
    let mode_seen = mode.subscribe();
    let jobs = crate::tools::Jobs::start(services.config.jobs);
    let rulebook = crate::process::Rulebook::open(&crate::permissions::rejected_programs(&rules));
    if let Some(book) = &rulebook {
        book.join(&row.cwd);
    }
    let lsp = crate::tools::Lsp::start(services.config.lsp.clone());
    let custom = crate::session::custom::Catalog::load(&custom::places(&services.config, &root));
    let mut actor = Actor {
        services,
        row,
        history: Some(history),
        rules,
        revoked: Vec::new(),
        root,
        directories: Vec::new(),
        mode,
        mode_seen,
        context_used,
        system,
        system_warned: false,
        hooks: None,
        title_pending: None,
        queue: VecDeque::new(),
        running: None,
        turn: None,
        models: None,
        mcp: None,
        unsaved: Vec::new(),
        closing: false,
        jobs,
        rulebook,
        lsp,
        checkpoints: None,
        custom,
        remote: None,
    };
    actor.remote = remote::Followed::start(&actor.services.store, &id, logged);
    if stored_before {
        actor.resume_restore().await;
    }
    actor.serve(&mut rx).await;
    actor.unfollow();
    actor.stop_mcp().await;
    (actor.services.gone)();
    refuse_all(&mut rx, &SessionError::Closed(id));
}

async fn wait_turn(turn: &mut Option<JoinHandle<TurnOutcome>>) -> Result<TurnOutcome, tokio::task::JoinError> {
    match turn {
        Some(handle) => handle.await,
        None => std::future::pending().await,
    }
}

impl Actor {
    async fn serve(&mut self, rx: &mut mpsc::UnboundedReceiver<Command>) {
        loop {
            tokio::select! {
                biased;
                command = rx.recv() => match command {
                    None => {
                        self.closing = true;
                        self.cancel_all();
                        self.drop_handed();
                        self.finish_turn().await;
                        tokio::join!(self.jobs.close(), self.lsp.close());
                        return;
                    }
                    Some(command) => {
                        let Some(command) = self.before(command).await else { continue };
                        let closed = self.handle(command);
                        // Read for a turn this command starts, and for no later one.
                        if let Some(followed) = self.remote.as_mut() {
                            followed.known_last = None;
                        }
                        if let Some(closed) = closed {
                            self.closing = true;
                            self.cancel_all();
                            self.drop_handed();
                            self.finish_turn().await;
                            // Every job of the session is gone before the close is answered.
                            // … and every language server.
                            tokio::join!(self.jobs.close(), self.lsp.close());
                            let _ = closed.send(());
                            return;
                        }
                    }
                },
                // Before the turn's end, which it happened before: the client hears of the new
                // mode before the prompt's answer.
                Ok(()) = self.mode_seen.changed() => self.mode_switched(),
                event = remote::next(&mut self.remote) => self.followed(event),
                outcome = wait_turn(&mut self.turn), if self.turn.is_some() => {
                    self.turn = None;
                    self.turn_ended(outcome).await;
                }
            }
        }
    }

    /// Serves one command; returns the reply channel of a `Close`, which `serve` completes once
    /// the turn has ended.
    fn handle(&mut self, command: Command) -> Option<oneshot::Sender<()>> {
        match command {
            Command::Prompt { ticket, trace, parts, reply, handed } => {
                self.handed_here(ticket, handed);
                match commands::parse(&parts) {
                    Some(Err(usage)) => {
                        self.say(usage);
                        self.save_unsaved();
                        let _ = reply.send(Ok(StopReason::EndTurn.into()));
                    }
                    Some(Ok(slash)) if slash.is_immediate() => {
                        let text = self.run_immediate(slash);
                        self.say(text);
                        self.save_unsaved();
                        let _ = reply.send(Ok(StopReason::EndTurn.into()));
                    }
                    Some(Ok(slash)) => self.enqueue(Queued { ticket, trace, work: Work::Slash(slash), reply }),
                    None => self.custom_or_prompt(ticket, trace, parts, reply),
                }
            }
            Command::Cancel => self.cancel_all(),
            Command::CancelPrompt { ticket } => {
                if let Some(running) = self.running.as_ref().filter(|r| r.ticket == ticket) {
                    running.cancel.cancel();
                } else if !self.withdraw_steered(ticket)
                    && !self.withdraw_handed(ticket)
                    && let Some(at) = self.queue.iter().position(|q| q.ticket == ticket)
                    && let Some(queued) = self.queue.remove(at)
                {
                    let _ = queued.reply.send(Ok(StopReason::Cancelled.into()));
                }
            }
            Command::Set { setting, reply } => {
                let result = self.set_logged(setting.clone());
                self.answer_once_stored(reply, result, setting);
            }
            Command::SetForTurn { settings, reply } => {
                let _ = reply.send(self.set_for_turn(settings));
            }
            Command::Attach { mut attach, reply } => {
                if let Some(prompt) = attach.system_prompt.take() {
                    self.use_client_prompt(prompt);
                }
                let announced = self.attach(attach);
                let _ = reply.send(Ok(self.view()));
                // A client opened the session: its user is about to type.
                self.warm_provider(announced);
            }
            Command::Fork { cwd, reply } => {
                if self.running.is_some() || !self.queue.is_empty() {
                    let _ = reply.send(Err(SessionError::Busy(self.row.id.clone())));
                } else {
                    self.fork(cwd, reply);
                }
            }
            Command::SetTitle { title, reply } => self.set_title(title, reply),
            Command::Steer { ticket, trace, parts, start_if_idle, reply } => {
                let _ = reply.send(Ok(self.steer_now(ticket, trace, parts, start_if_idle)));
            }
            Command::Answered { command, seq, body } => self.answered(command, seq, body),
            Command::Follow { reply } => {
                let _ = reply.send(Ok((self.view(), self.forwarded())));
            }
            Command::Close { reply } => return Some(reply),
        }
        None
    }

    fn view(&self) -> SessionView {
        let mut models = self.services.config.models();
        for model in self.services.discovered.list() {
            if !models.contains(&model) {
                models.push(model);
            }
        }
        if !models.contains(&self.row.model) {
            models.insert(0, self.row.model.clone());
        }
        SessionView {
            id: self.row.id.clone(),
            cwd: self.row.cwd.clone(),
            title: self.row.title.clone(),
            model: self.row.model.clone(),
            models,
            mode: *self.mode.borrow(),
            thought: self.thought(),
            steer: self.steers(),
            usage: self.usage(),
            commands: self.custom.advertised(),
        }
    }

    /// The reasoning level shown for the session's model; `None` if the model does not reason.
    fn thought(&self) -> Option<ThoughtLevel> {
        if !catalog::info(&self.services.config, &self.row.model).reasoning {
            return None;
        }
        let chosen = self.row.thought_level.as_deref().and_then(ThoughtLevel::parse);
        Some(chosen.unwrap_or_else(|| crate::llm::policy::default_thought(&self.services.config, &self.row.model)))
    }

    fn usage(&self) -> ContextUsage {
        let info = catalog::info(&self.services.config, &self.row.model);
        ContextUsage {
            used: self.context_used,
            size: info.context_window,
            cost: info.prices.map(|_| self.row.cost_usd),
        }
    }

    /// `Command::SetForTurn`: the changes are kept in `unsaved` for the next turn's recorder.
    fn set_for_turn(&mut self, settings: Vec<Setting>) -> Result<SessionView, SessionError> {
        for setting in settings {
            let write = self.apply(setting)?;
            self.unsaved.push(write);
        }
        Ok(self.view())
    }

    /// Checks `setting` and puts it in effect; answers the write that stores it.
    fn apply(&mut self, setting: Setting) -> Result<Write, SessionError> {
        match &setting {
            Setting::Model(model) => self.switch_model(model)?,
            Setting::Mode(mode) => {
                self.mode.send_replace(*mode);
                self.row.mode = Some(mode.id().to_owned());
            }
            Setting::Thought(level) => {
                if !catalog::info(&self.services.config, &self.row.model).reasoning {
                    return Err(SettingError::UnknownOption(setting.option().to_owned()).into());
                }
                self.row.thought_level = Some(level.id().to_owned());
            }
            Setting::Steer(steer) => self.row.busy_prompt = Some(BusyPrompt::from_steer(*steer).id().to_owned()),
        }
        let (kept, value) = setting.kept();
        Ok(Write::SetSessionSetting { id: self.row.id.clone(), kept, value })
    }

    /// Stores the settings no turn took with its prompt.
    fn save_unsaved(&mut self) {
        for write in std::mem::take(&mut self.unsaved) {
            let after =
                self.unstored().map(|unstored| -> crate::store::AfterCommit { Box::new(move |_| drop(unstored)) });
            self.services.store.submit(write, after);
        }
    }

    /// Checks and switches the session's model.
    fn switch_model(&mut self, model: &str) -> Result<(), SessionError> {
        if let Some(env) = self.services.config.missing_key(model) {
            let (provider, _) = crate::config::split_model(model);
            return Err(SessionError::Model(crate::llm::LlmError::MissingKey {
                provider: provider.to_owned(),
                env: env.to_owned(),
            }));
        }
        let choices = self.view().models;
        if !choices.iter().any(|choice| choice == model) {
            return Err(SessionError::UnknownModel { value: model.to_owned(), choices });
        }
        let window = catalog::info(&self.services.config, model).context_window;
        if window < self.context_used {
            return Err(SessionError::ModelTooSmall { model: model.to_owned(), window, used: self.context_used });
        }
        model.clone_into(&mut self.row.model);
        self.models = None;
        self.warm_provider(std::future::ready(()));
        Ok(())
    }

    /// Builds the session's provider (its HTTP client and TLS setup, the first time in a
    /// process) and opens a connection to it in the background, once `after` resolves, so that
    /// the first prompt finds them ready instead of paying for them.
    fn warm_provider(&self, after: impl Future<Output = ()> + Send + 'static) {
        let config = Arc::clone(&self.services.config);
        let model = self.row.model.clone();
        tokio::spawn(async move {
            after.await;
            crate::llm::warm(config, model).await;
        });
    }

    /// Queues work behind the running turn, telling the user where it stands.
    fn enqueue(&mut self, queued: Queued) {
        if self.running.is_some() {
            let ahead = self.queue.len() + 1;
            let what = if matches!(queued.work, Work::Prompt(_)) { "This prompt" } else { "This command" };
            let turns = if ahead == 1 { "turn" } else { "turns" };
            self.tell(format!("{what} is queued behind {ahead} {turns}; it runs when the session is free."));
        }
        self.queue.push_back(queued);
        self.start_next();
    }

    fn cancel_all(&mut self) {
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
        self.cancel_steered();
        for queued in self.queue.drain(..) {
            let _ = queued.reply.send(Ok(StopReason::Cancelled.into()));
        }
    }
}

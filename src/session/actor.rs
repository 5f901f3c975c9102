//! One session's actor: the only owner of its history, running one turn at a time.
//!
//! The actor serves [`Command`]s in the order they were sent. A prompt starts a turn on a spawned
//! task that borrows the history (by moving it in and back out), so the actor stays free to hear
//! `Cancel` while the turn streams. Prompts that arrive while a turn runs wait in a queue and run
//! in arrival order; a cancel ends the running turn and answers every queued prompt `cancelled`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Weak};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::recorder::StoreRecorder;
use super::registry::Inner;
use super::{SessionError, SessionView, Update, UpdateSink};
use crate::agent::{self, StopReason, Turn, TurnError};
use crate::config::Config;
use crate::history::{Message, Part};
use crate::ids::SessionId;
use crate::llm;
use crate::store::{SessionRow, Store, Write};

pub type Reply<T> = oneshot::Sender<Result<T, SessionError>>;

/// What the rest of cairn may ask of a session.
pub enum Command {
    Prompt {
        ticket: u64,
        parts: Vec<Part>,
        reply: Reply<StopReason>,
    },
    /// `session/cancel`: stop the running turn and drop the queued prompts.
    Cancel,
    /// The client gave up on one prompt (`$/cancel_request`).
    CancelPrompt {
        ticket: u64,
    },
    SetModel {
        model: String,
        reply: Reply<SessionView>,
    },
    Describe {
        reply: Reply<SessionView>,
    },
    /// Cancel everything, wait for the turn to end, then stop.
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// How an actor gets its state.
pub enum Init {
    /// The caller has the row and history already (new and loaded sessions).
    Ready { row: SessionRow, history: Vec<Message> },
    /// Read them from the store first (resume, or a prompt for a session not loaded yet).
    Restore(SessionId),
}

pub struct Services {
    pub store: Store,
    pub config: Arc<Config>,
    pub sink: Arc<dyn UpdateSink>,
    pub registry: Weak<Inner>,
    pub generation: u64,
}

struct Queued {
    ticket: u64,
    parts: Vec<Part>,
    reply: Reply<StopReason>,
}

struct Running {
    ticket: u64,
    cancel: CancellationToken,
    reply: Reply<StopReason>,
}

type TurnOutcome = (Vec<Message>, Result<StopReason, TurnError>);

struct Actor {
    services: Services,
    row: SessionRow,
    /// `None` while a turn has it.
    history: Option<Vec<Message>>,
    queue: VecDeque<Queued>,
    running: Option<Running>,
    turn: Option<JoinHandle<TurnOutcome>>,
}

pub async fn run(init: Init, services: Services, mut rx: mpsc::UnboundedReceiver<Command>) {
    let (row, history) = match init {
        Init::Ready { row, history } => (row, history),
        Init::Restore(id) => match restore(&services.store, &id).await {
            Ok(state) => state,
            Err(err) => {
                forget(&services, &id);
                refuse_all(&mut rx, &err);
                return;
            }
        },
    };
    let id = row.id.clone();
    let mut actor = Actor { services, row, history: Some(history), queue: VecDeque::new(), running: None, turn: None };
    actor.serve(&mut rx).await;
    forget(&actor.services, &id);
    refuse_all(&mut rx, &SessionError::Closed(id));
}

async fn restore(store: &Store, id: &SessionId) -> Result<(SessionRow, Vec<Message>), SessionError> {
    let row = store.session(id).await?.ok_or_else(|| SessionError::NotFound(id.clone()))?;
    let history = store.messages(id).await?;
    Ok((row, history))
}

/// Removes this actor from the registry unless a newer one took its place.
fn forget(services: &Services, id: &SessionId) {
    if let Some(registry) = services.registry.upgrade() {
        registry.forget(id, services.generation);
    }
}

/// Answers whatever was sent to an actor that is gone.
fn refuse_all(rx: &mut mpsc::UnboundedReceiver<Command>, err: &SessionError) {
    rx.close();
    while let Ok(command) = rx.try_recv() {
        match command {
            Command::Prompt { reply, .. } => {
                let _ = reply.send(match err {
                    SessionError::Closed(_) => Ok(StopReason::Cancelled),
                    other => Err(other.clone()),
                });
            }
            Command::SetModel { reply, .. } | Command::Describe { reply } => {
                let _ = reply.send(Err(err.clone()));
            }
            Command::Close { reply } => {
                let _ = reply.send(());
            }
            Command::Cancel | Command::CancelPrompt { .. } => {}
        }
    }
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
                        self.cancel_all();
                        self.finish_turn().await;
                        return;
                    }
                    Some(command) => {
                        if let Some(closed) = self.handle(command) {
                            self.cancel_all();
                            self.finish_turn().await;
                            let _ = closed.send(());
                            return;
                        }
                    }
                },
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
            Command::Prompt { ticket, parts, reply } => {
                self.queue.push_back(Queued { ticket, parts, reply });
                self.start_next();
            }
            Command::Cancel => self.cancel_all(),
            Command::CancelPrompt { ticket } => {
                if let Some(running) = self.running.as_ref().filter(|r| r.ticket == ticket) {
                    running.cancel.cancel();
                } else if let Some(at) = self.queue.iter().position(|q| q.ticket == ticket)
                    && let Some(queued) = self.queue.remove(at)
                {
                    let _ = queued.reply.send(Ok(StopReason::Cancelled));
                }
            }
            Command::SetModel { model, reply } => {
                let _ = reply.send(self.set_model(model));
            }
            Command::Describe { reply } => {
                let _ = reply.send(Ok(self.view()));
            }
            Command::Close { reply } => return Some(reply),
        }
        None
    }

    fn view(&self) -> SessionView {
        let mut models = self.services.config.models();
        if !models.contains(&self.row.model) {
            models.insert(0, self.row.model.clone());
        }
        SessionView {
            id: self.row.id.clone(),
            cwd: self.row.cwd.clone(),
            title: self.row.title.clone(),
            model: self.row.model.clone(),
            models,
        }
    }

    fn set_model(&mut self, model: String) -> Result<SessionView, SessionError> {
        let choices = self.view().models;
        if !choices.contains(&model) {
            return Err(SessionError::UnknownModel { value: model, choices });
        }
        self.row.model.clone_from(&model);
        self.services.store.submit(Write::SetSessionModel { id: self.row.id.clone(), model }, None);
        Ok(self.view())
    }

    fn cancel_all(&mut self) {
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
        for queued in self.queue.drain(..) {
            let _ = queued.reply.send(Ok(StopReason::Cancelled));
        }
    }

    /// Waits for a running turn to end and answers its prompt.
    async fn finish_turn(&mut self) {
        if let Some(handle) = self.turn.take() {
            let outcome = handle.await;
            self.turn_ended(outcome).await;
        }
    }

    async fn turn_ended(&mut self, outcome: Result<TurnOutcome, tokio::task::JoinError>) {
        let result = match outcome {
            Ok((history, result)) => {
                self.history = Some(history);
                result
            }
            Err(err) => {
                // The turn task panicked; what it committed is the truth, so reread it.
                tracing::error!(session = %self.row.id, %err, "turn task failed");
                self.history = Some(self.services.store.messages(&self.row.id).await.unwrap_or_default());
                Err(TurnError::Internal(format!("the turn stopped unexpectedly: {err}")))
            }
        };
        if let Some(running) = self.running.take() {
            let _ = running.reply.send(result.map_err(SessionError::from));
        }
        self.start_next();
    }

    fn start_next(&mut self) {
        if self.running.is_some() {
            return;
        }
        let Some(queued) = self.queue.pop_front() else { return };
        let Some(mut history) = self.history.take() else {
            self.queue.push_front(queued);
            return;
        };
        let config = Arc::clone(&self.services.config);
        let resolved = match llm::resolve(&config, &self.row.model) {
            Ok(resolved) => resolved,
            Err(err) => {
                self.history = Some(history);
                let _ = queued.reply.send(Err(err.into()));
                return self.start_next();
            }
        };
        if self.row.title.is_none()
            && let Some(title) = title_from(&queued.parts)
        {
            self.row.title = Some(title.clone());
            let show = Arc::clone(&self.services.sink);
            let id = self.row.id.clone();
            let update = Update::Title(title.clone());
            self.services.store.submit(
                Write::SetSessionTitle { id: self.row.id.clone(), title },
                Some(Box::new(move |result| {
                    if result.is_ok() {
                        show.send(&id, update);
                    }
                })),
            );
        }
        let cancel = CancellationToken::new();
        let mut recorder =
            StoreRecorder::new(self.row.id.clone(), self.services.store.clone(), Arc::clone(&self.services.sink));
        let system = agent::prompt::system_prompt(&PathBuf::from(&self.row.cwd));
        let model_ref = self.row.model.clone();
        let token = cancel.clone();
        let parts = queued.parts;
        self.turn = Some(tokio::spawn(async move {
            let turn = Turn::new(
                resolved.provider.as_ref(),
                resolved.model,
                model_ref,
                system,
                &mut history,
                &mut recorder,
                token,
                config.limits.clone(),
            );
            let result = agent::run_turn(turn, parts).await;
            (history, result)
        }));
        self.running = Some(Running { ticket: queued.ticket, cancel, reply: queued.reply });
    }
}

/// A session title from the first line of a prompt's text, at most 80 characters.
fn title_from(parts: &[Part]) -> Option<String> {
    let text = parts.iter().find_map(|part| match part {
        Part::Text { text } => text.lines().map(str::trim).find(|line| !line.is_empty()),
        _ => None,
    })?;
    let mut title: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        title.pop();
        title.push('…');
    }
    Some(title)
}

//! The bridge from a turn's events to the store and then the editor.
//!
//! Each event becomes one queued store write whose after-commit callback emits the matching
//! [`Update`]; a failed write emits nothing and is kept as the turn's failure. This is how "no
//! update before its row is committed" holds without a round trip per chunk: the writer thread
//! commits in batches and runs the callbacks in order.
//!
//! A streaming turn stays a bounded distance ahead of what is shown: [`Recorder::writable`] holds
//! it while [`UNCOMMITTED`] bytes of chunks or more wait for their commit, then while the sink
//! cannot keep up (a client that is not reading). Recording and the callbacks never wait.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;

use super::{CompactionState, Status, Update, UpdateSink, compaction_failed_note, compaction_note};
use crate::agent::{AgentEvent, RecordError, Recorder, StreamKind};
use crate::backlog::Backlog;
use crate::history::{CallState, Message, MessageMeta, Part, Role, ToolPart};
use crate::ids::{MessageId, SessionId};
use crate::permissions::Scope;
use crate::store::{AfterCommit, Store, StoreError, Write};

/// Bytes of streamed chunks recorded but not yet committed from which the turn waits, until the
/// writer thread has committed them down to half.
pub const UNCOMMITTED: usize = 2 * 1024 * 1024;

pub struct StoreRecorder {
    session: SessionId,
    /// The project a project-scope rule belongs to: the session's working directory.
    project: String,
    store: Store,
    sink: Arc<dyn UpdateSink>,
    failure: Arc<OnceLock<RecordError>>,
    /// Tool calls already shown with `tool_call`, by message and call id (a provider may reuse
    /// an id in a later answer), as last shown; later changes are `tool_call_update`s, sent
    /// only when they change what the editor shows.
    shown_calls: HashMap<(MessageId, String), ToolPart>,
    /// The session's status: retrying while a request is tried again, busy once it streams.
    status: Arc<watch::Sender<Status>>,
    /// Bytes of chunks recorded and not yet committed (or failed).
    uncommitted: Arc<Backlog>,
}

impl StoreRecorder {
    pub fn new(
        session: SessionId,
        project: String,
        store: Store,
        sink: Arc<dyn UpdateSink>,
        status: Arc<watch::Sender<Status>>,
    ) -> Self {
        Self {
            session,
            project,
            store,
            sink,
            failure: Arc::new(OnceLock::new()),
            shown_calls: HashMap::new(),
            status,
            uncommitted: Arc::new(Backlog::new(UNCOMMITTED, UNCOMMITTED / 2)),
        }
    }

    /// A callback that shows `updates` once committed, or remembers the failure.
    fn then_show(&self, updates: Vec<Update>) -> AfterCommit {
        let failure = Arc::clone(&self.failure);
        let sink = Arc::clone(&self.sink);
        let session = self.session.clone();
        Box::new(move |result: Result<(), StoreError>| match result {
            Ok(()) => {
                for update in updates {
                    sink.send(&session, update);
                }
            }
            Err(err) => {
                tracing::error!(%session, %err, "a write failed; its update is withheld");
                let _ = failure.set(RecordError(err.to_string()));
            }
        })
    }

    fn write(&self, write: Write, updates: Vec<Update>) {
        self.store.submit(write, Some(self.then_show(updates)));
    }
}

#[async_trait::async_trait]
impl Recorder for StoreRecorder {
    fn record(&mut self, event: AgentEvent) {
        let session_id = self.session.clone();
        match event {
            AgentEvent::UserMessage(message) => self.write(Write::InsertMessage { session_id, message }, Vec::new()),
            AgentEvent::AssistantStarted { message, model } => {
                self.status.send_if_modified(|status| {
                    let retrying = matches!(status, Status::Retrying { .. });
                    if retrying {
                        *status = Status::Busy;
                    }
                    retrying
                });
                let meta = MessageMeta { model: Some(model), ..MessageMeta::default() };
                let message = Message { id: message, role: Role::Assistant, parts: Vec::new(), meta };
                self.write(Write::InsertMessage { session_id, message }, Vec::new());
            }
            AgentEvent::PartStarted { message, index, kind } => {
                let part = kind.empty_part();
                self.write(Write::OpenPart { session_id, message_id: message, index, part }, Vec::new());
            }
            AgentEvent::Delta { message, index, kind, text } => {
                let update = match kind {
                    StreamKind::Text => Update::AgentText { message: message.clone(), text: text.clone() },
                    StreamKind::Reasoning => Update::AgentThought { message: message.clone(), text: text.clone() },
                };
                // Counted until its callback has run, or is dropped unrun by a writer that stopped.
                let pending = Uncommitted::new(&self.uncommitted, text.len());
                let show = self.then_show(vec![update]);
                let after: AfterCommit = Box::new(move |result| {
                    show(result);
                    drop(pending);
                });
                self.store.submit(Write::AppendPart { message_id: message, index, delta: text }, Some(after));
            }
            AgentEvent::PartFinished { message, index } => {
                self.write(Write::ClosePart { message_id: message, index }, Vec::new());
            }
            AgentEvent::PartUpdated { message, index, part } => {
                let mut updates = Vec::new();
                if let Part::Tool(tool) = &part {
                    let seen = as_shown(tool);
                    match self.shown_calls.insert((message.clone(), tool.call_id.clone()), seen.clone()) {
                        None => updates.push(Update::ToolCall(tool.clone())),
                        // Waiting for and getting permission change nothing the editor shows.
                        Some(before) if before == seen => {}
                        Some(_) => updates.push(Update::ToolCallUpdate(tool.clone())),
                    }
                    if let (Some(plan), CallState::Succeeded) = (&tool.plan, tool.state) {
                        updates.push(Update::Plan(plan.clone()));
                    }
                }
                self.write(Write::PutPart { session_id, message_id: message, index, part }, updates);
            }
            AgentEvent::ToolNamed { message, index, part } => {
                self.write(Write::PutPart { session_id, message_id: message, index, part }, Vec::new());
            }
            AgentEvent::AssistantFinished { message, meta } => {
                self.write(Write::FinishMessage { session_id, message_id: message, meta }, Vec::new());
            }
            AgentEvent::Notice { message, text } => {
                let notice = Message {
                    id: message.clone(),
                    role: Role::Assistant,
                    parts: vec![Part::Notice { text: text.clone() }],
                    meta: MessageMeta::default(),
                };
                self.write(
                    Write::InsertMessage { session_id, message: notice },
                    vec![Update::Notice { message, text }],
                );
            }
            AgentEvent::ContextUsage { used, size, cost } => {
                self.write(Write::Barrier, vec![Update::Usage { used, size, cost }]);
            }
            AgentEvent::RuleAdded(rule) => {
                let write = match rule.source {
                    Scope::Session => Write::AddSessionRule { id: session_id, rule },
                    Scope::Project => Write::AddProjectRule { project: self.project.clone(), rule },
                };
                self.write(write, Vec::new());
            }
            AgentEvent::Phase(phase) => tracing::trace!(session = %session_id, ?phase, "turn phase"),
            AgentEvent::CompactionStarted { id } => {
                let update =
                    Update::Compaction { id, state: CompactionState::InProgress, note: String::new(), error: None };
                self.write(Write::Barrier, vec![update]);
            }
            AgentEvent::CompactionFinished(message) => {
                let mut updates = Vec::new();
                if let Some(Part::Compaction(compaction)) = message.parts.first() {
                    if !compaction.summary.is_empty() {
                        updates.push(Update::CompactionSummary {
                            id: message.id.clone(),
                            text: compaction.summary.clone(),
                        });
                    }
                    updates.push(Update::Compaction {
                        id: message.id.clone(),
                        state: CompactionState::Completed,
                        note: compaction_note(compaction),
                        error: None,
                    });
                }
                let (message_id, meta) = (message.id.clone(), message.meta.clone());
                self.write(Write::InsertMessage { session_id: session_id.clone(), message }, Vec::new());
                // The summarizer's tokens and cost count toward the session's totals.
                self.write(Write::FinishMessage { session_id, message_id, meta }, updates);
            }
            AgentEvent::CompactionFailed { id, error } => {
                let update = Update::Compaction {
                    id,
                    state: CompactionState::Failed,
                    note: compaction_failed_note(&error),
                    error: Some(error),
                };
                self.write(Write::Barrier, vec![update]);
            }
            AgentEvent::Retrying { attempt } => {
                self.status.send_replace(Status::Retrying { attempt });
            }
        }
    }

    async fn flush(&mut self) -> Result<(), RecordError> {
        self.store.flush().await.map_err(|err| RecordError(err.to_string()))?;
        self.failure.get().cloned().map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<RecordError> {
        self.failure.get().cloned()
    }

    async fn writable(&mut self) {
        self.uncommitted.room().await;
        self.sink.writable().await;
    }
}

/// A chunk's bytes in the backlog of uncommitted chunks, taken out when this is dropped.
struct Uncommitted {
    backlog: Arc<Backlog>,
    bytes: usize,
}

impl Uncommitted {
    fn new(backlog: &Arc<Backlog>, bytes: usize) -> Self {
        backlog.add(bytes);
        Self { backlog: Arc::clone(backlog), bytes }
    }
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        self.backlog.take(self.bytes);
    }
}

/// A tool call as the editor sees it: the states before running all show as pending.
fn as_shown(tool: &ToolPart) -> ToolPart {
    let mut shown = tool.clone();
    if matches!(shown.state, CallState::Suspended | CallState::Resuming) {
        shown.state = CallState::New;
    }
    shown
}

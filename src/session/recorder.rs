//! The bridge from a turn's events to the store and then the editor.
//!
//! Each event becomes one queued store write whose after-commit callback emits the matching
//! [`Update`]; a failed write emits nothing and is kept as the turn's failure. This is how "no
//! update before its row is committed" holds without a round trip per chunk: the writer thread
//! commits in batches and runs the callbacks in order.
//!
//! The turn's first write, its prompt (with a first prompt's title), takes the session's lease
//! ([`StoreRecorder::claim`]): another process running a turn in the session refuses it, and a
//! history another process wrote to since this one read it is read again first. A recorder made [`StoreRecorder::for_turn`] holds what it is
//! given before that first write and sends it only once the lease is taken (held notices get
//! fresh ids if the history was read again, so they sort after the turn that came meanwhile).
//! Once a claim is refused, the recorder drops everything it is given: a refused turn records
//! nothing, not even the notice of a limit that stopped it while it waited. A tool call whose
//! arguments are still being written is stored marked `streaming`, so a replay leaves it out as
//! the live stream does.
//!
//! On a store shared by replicas, what a write shows goes into the session's event log with it,
//! and each update the log keeps is shown with the `seq` it got there
//! ([`UpdateSink::send_logged`], told by the writer: [`Store::submit_logged`]): the number the
//! clients of every replica know it by, so a client may resume on any of them. An update the
//! log does not keep (usage, a compaction's progress: written with no session's lease) is
//! shown as it is, and a server sends it unnumbered.
//!
//! A streaming turn stays a bounded distance ahead of what is shown: [`Recorder::writable`] holds
//! it while [`UNCOMMITTED`] bytes of chunks or more wait for their commit, then while the sink
//! cannot keep up (a client that is not reading). Recording and the callbacks never wait.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{CompactionState, Status, Update, UpdateSink, compaction_failed_note, compaction_note};
use crate::agent::{AgentEvent, RecordError, Recorder, StreamKind};
use crate::backlog::Backlog;
use crate::history::{CallState, Message, MessageMeta, Part, Role, ToolPart, Usage};
use crate::ids::{MessageId, SessionId};
use crate::permissions::{Rule, Scope};
use crate::store::{Store, StoreError, Write};

/// Where a recorder's writes go.
enum Gate {
    /// To the store.
    Open,
    /// Held until the claim takes the lease (a turn's recorder, before its first write).
    Holding(Vec<(Write, Vec<Update>)>),
    /// Nowhere: the claim was refused.
    Shut,
}

/// Bytes of streamed chunks recorded but not yet committed from which the turn waits, until the
/// writer thread has committed them down to half. Each chunk in flight is held several times over
/// (its text, the update it shows, the store's pending text), so this bounds memory more than
/// speed: 2 MiB gave a 40 MB answer a 73 MiB peak where 1 MiB gives 68, in the same time.
pub const UNCOMMITTED: usize = 1024 * 1024;

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
    /// Where writes go: to the store, held until the claim, or nowhere after a refusal.
    gate: Gate,
    /// The title a first prompt gives the session, written with it.
    title: Option<String>,
    /// The command another replica handed, which this turn runs: its claim checks it is still
    /// this replica's to run (`Write::TakeLease`).
    command: Option<i64>,
    /// Bytes of chunks recorded and not yet committed (or failed).
    uncommitted: Arc<Backlog>,
    /// The tokens of the model requests recorded: the steps' answers and compactions' summaries.
    used: Usage,
    /// The turn's claim, sent before the turn asked for it ([`StoreRecorder::claim_early`]).
    early: Option<claim::Early>,
    /// The turn's cancel by its user: once it fires, no claim is sent any more (the prompt,
    /// withdrawn before the session took it, is not stored).
    withdrawn: Option<CancellationToken>,
    /// The turn's permission rules as they are now, for the session's `/permissions` while it
    /// runs: a rule an answer adds is added here too.
    rules: Option<watch::Sender<Vec<Rule>>>,
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
            gate: Gate::Open,
            title: None,
            command: None,
            used: Usage::default(),
            early: None,
            withdrawn: None,
            rules: None,
        }
    }

    /// A recorder that keeps `rules` (the turn's, as it starts) as the turn's answers add to them.
    pub fn showing_rules(mut self, rules: watch::Sender<Vec<Rule>>) -> Self {
        self.rules = Some(rules);
        self
    }

    /// The turn's rules are `rules` now (the project's, read again as it started, added).
    pub fn rules_now(&self, rules: &[Rule]) {
        if let Some(shown) = &self.rules {
            shown.send_replace(rules.to_vec());
        }
    }

    /// The tokens of the model requests this recorder recorded (a turn's own: a sub-agent
    /// records its own elsewhere).
    pub fn used(&self) -> Usage {
        self.used
    }

    /// Whether what this recorder records reaches the store: a turn's claim took the lease
    /// (its prompt is stored), or the recorder needs none. `false` before the claim's answer and
    /// after a refusal.
    pub fn claimed(&self) -> bool {
        matches!(self.gate, Gate::Open)
    }

    /// A recorder for a turn: what it is given before the claim waits for it, and `title` is
    /// written with the prompt.
    pub fn for_turn(mut self, title: Option<String>) -> Self {
        self.gate = Gate::Holding(Vec::new());
        self.title = title;
        self
    }

    /// A recorder whose claims are not sent once `cancel` (the user's cancel of its turn)
    /// fires: a claim already sent stands, one not sent yet (the early claim waiting to be
    /// sent, or a claim tried again after another process's turn) is not, and the claim
    /// answers [`RecordError::Withdrawn`].
    pub fn withdrawn_by(mut self, cancel: CancellationToken) -> Self {
        self.withdrawn = Some(cancel);
        self
    }

    /// A recorder for the turn of `command`, a prompt another replica handed: its claim is
    /// refused if the command was answered meanwhile (see [`Write::TakeLease`]).
    pub fn for_command(mut self, command: Option<i64>) -> Self {
        self.command = command;
        self
    }

    /// Also holds `writes` until the claim (a headless run's settings: stored with its prompt,
    /// or not at all if the session is refused).
    pub fn with_held(mut self, writes: Vec<Write>) -> Self {
        for write in writes {
            self.write(write, Vec::new());
        }
        self
    }

    /// `updates` as the store's event log keeps them, when it keeps one (a store shared by
    /// replicas), and which of them it keeps (all but one that cannot be written as JSON):
    /// nothing is serialized for a store that does not.
    fn logged(&self, updates: &[Update]) -> (Vec<String>, Vec<bool>) {
        if !self.store.logs_events() {
            return (Vec::new(), Vec::new());
        }
        let events: Vec<Option<String>> = updates.iter().map(Update::to_event).collect();
        let logged = events.iter().map(Option::is_some).collect();
        (events.into_iter().flatten().collect(), logged)
    }

    /// A callback that shows `updates` once committed (with their numbers in the event log,
    /// from `first` on for those `logged`), or remembers the failure.
    fn then_show(
        &self,
        updates: Vec<Update>,
        logged: Vec<bool>,
    ) -> impl FnOnce(Result<Option<i64>, StoreError>) + Send + 'static {
        let failure = Arc::clone(&self.failure);
        let sink = Arc::clone(&self.sink);
        let session = self.session.clone();
        move |result: Result<Option<i64>, StoreError>| match result {
            Ok(first) => show(&*sink, &session, updates, first, &logged),
            Err(err) => {
                let failed = failed(&err);
                // The turn stops on the first failure: the writes queued behind it fail alike.
                if failure.set(failed).is_ok() {
                    tracing::error!(%session, %err, "a write failed; its update is withheld");
                } else {
                    tracing::debug!(%session, %err, "a write failed after the turn's first failure; its update is withheld");
                }
            }
        }
    }

    /// Queues `write`, which shows `updates` once committed; `pending` is released then.
    fn submit(&self, write: Write, updates: Vec<Update>, pending: Option<Uncommitted>) {
        let (shown, logged) = self.logged(&updates);
        let show = self.then_show(updates, logged);
        let after = move |result| {
            show(result);
            drop(pending);
        };
        if self.store.logs_events() {
            self.store.submit_logged(write, shown, Box::new(after));
        } else {
            self.store.submit(write, Some(Box::new(move |result| after(result.map(|()| None)))));
        }
    }

    fn write(&mut self, write: Write, updates: Vec<Update>) {
        match &mut self.gate {
            Gate::Open => self.submit(write, updates, None),
            Gate::Holding(held) => held.push((write, updates)),
            Gate::Shut => tracing::debug!(session = %self.session, "dropped a write of a turn the session refused"),
        }
    }
}

#[async_trait::async_trait]
impl Recorder for StoreRecorder {
    fn record(&mut self, event: AgentEvent) {
        let session_id = self.session.clone();
        match event {
            AgentEvent::UserMessage(message) => self.write(Write::InsertMessage { session_id, message }, Vec::new()),
            AgentEvent::Steered(message) => {
                let shown = message
                    .parts
                    .iter()
                    .map(|part| Update::UserChunk { message: message.id.clone(), part: part.clone() });
                let shown = shown.collect();
                self.write(Write::InsertMessage { session_id, message }, shown);
            }
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
                if !matches!(self.gate, Gate::Open) {
                    // Held until the claim, or dropped after a refusal, like every other write.
                    return self.write(Write::AppendPart { message_id: message, index, delta: text }, vec![update]);
                }
                tracing::trace!(target: "cairn::timing", session = %session_id, "text chunk recorded");
                // Counted until its callback has run, or is dropped unrun by a writer that stopped.
                let pending = Uncommitted::new(&self.uncommitted, text.len());
                let write = Write::AppendPart { message_id: message, index, delta: text };
                self.submit(write, vec![update], Some(pending));
            }
            AgentEvent::PartFinished { message, index } => {
                self.write(Write::ClosePart { message_id: message, index }, Vec::new());
            }
            AgentEvent::Blobs(blobs) => self.write(Write::PutBlobs(blobs), Vec::new()),
            AgentEvent::Checkpoint { prompt, capture } => {
                let write = Write::PutCheckpoints { session_id, prompt, captures: vec![capture], restore: None };
                self.write(write, Vec::new());
            }
            AgentEvent::PartUpdated { message, index, part } => {
                let mut updates = Vec::new();
                if let Part::Tool(tool) = &part {
                    let seen = as_shown(tool);
                    let before = self.shown_calls.insert((message.clone(), tool.call_id.clone()), seen.clone());
                    let document = before.as_ref().and_then(|before| before.document.as_ref());
                    match &before {
                        None => updates.push(Update::ToolCall(tool.clone())),
                        // Waiting for and getting permission change nothing the editor shows.
                        Some(before) if *before == seen => {}
                        Some(_) => updates.push(Update::ToolCallUpdate(tool.clone())),
                    }
                    // A plan presented for review is shown as the plan document once, with its card.
                    if let Some(text) = tool.document.as_ref().filter(|text| document != Some(*text)) {
                        updates.push(Update::PlanDocument(text.clone()));
                    }
                    if let (Some(plan), CallState::Succeeded) = (&tool.plan, tool.state) {
                        updates.push(Update::Plan(plan.clone()));
                    }
                }
                self.write(Write::PutPart { session_id, message_id: message, index, part }, updates);
            }
            AgentEvent::ToolNamed { message, index, mut part } => {
                // Marked so a replay leaves it out too: it is shown once its arguments are
                // complete, by the `PartUpdated` that stores it whole.
                if let Part::Tool(tool) = &mut part {
                    tool.streaming = true;
                }
                self.write(Write::PutPart { session_id, message_id: message, index, part }, Vec::new());
            }
            AgentEvent::AssistantFinished { message, meta } => {
                self.used += meta.usage.unwrap_or_default();
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
                if let Some(shown) = &self.rules {
                    shown.send_modify(|rules| rules.push(rule.clone()));
                }
                let write = match rule.source {
                    Scope::Session => Write::AddSessionRule { id: session_id, rule },
                    Scope::Project => Write::AddProjectRule { project: self.project.clone(), rule },
                    // Given for one run; an answer never makes one.
                    Scope::Run => return,
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
                self.used += meta.usage.unwrap_or_default();
                self.write(Write::InsertMessage { session_id: session_id.clone(), message }, Vec::new());
                // The summarizer's tokens and cost count toward the session's totals.
                self.write(Write::FinishMessage { session_id, message_id, meta }, updates);
            }
            AgentEvent::CompactionFailed { id, error } => {
                // The conversation keeps the failure as a notice, with an id of its own made now
                // (it sorts where it was shown); clients with compaction updates also see the
                // compaction they were told of end.
                let text = compaction_failed_note(&error);
                let status =
                    Update::Compaction { id, state: CompactionState::Failed, note: text.clone(), error: Some(error) };
                self.write(Write::Barrier, vec![status]);
                self.record(AgentEvent::Notice { message: MessageId::generate(), text });
            }
            AgentEvent::Retrying { attempt, message } => {
                self.status.send_replace(Status::Retrying { attempt, message });
            }
        }
    }

    async fn begin(&mut self, history: &mut Vec<Message>, prompt: Message) -> Result<bool, RecordError> {
        self.claim(history, Some(prompt)).await
    }

    async fn flush(&mut self) -> Result<(), RecordError> {
        self.store.flush().await.map_err(|err| failed(&err))?;
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

/// Sends `updates` to `sink` once committed: each one the event log keeps (`logged`, numbered
/// one by one from `first`) with its `seq` there, the others as they are.
fn show(sink: &dyn UpdateSink, session: &SessionId, updates: Vec<Update>, first: Option<i64>, logged: &[bool]) {
    let mut next = first;
    for (at, update) in updates.into_iter().enumerate() {
        match next.filter(|_| logged.get(at).copied().unwrap_or(false)) {
            Some(seq) => {
                sink.send_logged(session, seq, update);
                next = Some(seq + 1);
            }
            None => sink.send(session, update),
        }
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

/// What a failed write makes of the turn: fenced when another replica took the lease over.
fn failed(err: &StoreError) -> RecordError {
    if matches!(err, StoreError::Postgres(crate::store::pg::PgError::Fenced { .. })) {
        RecordError::Fenced(err.to_string())
    } else {
        RecordError::Failed(err.to_string())
    }
}

mod claim;

#[cfg(test)]
#[path = "recorder_tests.rs"]
mod tests;

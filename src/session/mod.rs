//! Live sessions: one actor per session, found through the in-process registry.
//!
//! The [`Registry`] creates, restores, closes and deletes sessions; each live session is an
//! actor (`actor`) that owns its history and runs at most one turn at a time, queueing prompts
//! that arrive while it is busy. A turn's events are persisted by the `recorder`, which hands
//! each [`Update`] to the [`UpdateSink`] only after its row is committed. The sink is the ACP
//! connection in editor mode and a printer in `cairn exec`. A `task` call's sub-agent is a
//! session of its own, run inside that call by `subagent`. On a server the sink is a [`Hub`]:
//! every connection viewing a session gets its updates. A session's [`Status`] (idle, busy,
//! retrying, error) lives in memory only, read by `session/list` through the registry; [`replay`]
//! turns stored messages into the updates `session/load` shows.

mod actor;
mod asked;
pub mod commands;
pub mod custom;
mod handoff;
mod hub;
mod loading;
mod principal;
mod recorder;
mod registry;
mod restore;
mod setup;
mod subagent;
mod title;

use std::sync::Arc;

use crate::agent::{StopReason, TurnError};
use crate::history::view::{Compaction, Method};
use crate::history::{Part, PlanEntry, ToolPart, Usage};
use crate::ids::{MessageId, SessionId};
use crate::llm::LlmError;
use crate::llm::catalog::ThoughtLevel;
use crate::permissions::Mode;
use crate::store::StoreError;
use crate::tools::Host;

pub(crate) use actor::CATCH_UP;
pub use actor::Steering;
pub use commands::COMMANDS;
pub use custom::Advertised;
pub use hub::{Hub, LogResume, ResumeError, Viewer};
pub use principal::Principal;
pub use registry::{PromptFuture, Registry};

/// What the client gives a session it opens (new, load, resume, fork): its MCP servers, and
/// when the session may start telling it things.
pub struct Attach {
    /// The client's MCP servers, used with those of `config.toml`.
    pub mcp: Vec<crate::mcp::ServerConfig>,
    /// What the client gave that cannot be used (an SSE server), told to the user.
    pub notes: Vec<String>,
    /// Resolves once the response that announces the session is on its way; until then the
    /// session sends nothing of its own (a client may drop updates of a session it does not
    /// know yet).
    pub announced: tokio::sync::oneshot::Receiver<()>,
    /// Rules for as long as this process keeps the session (`cairn exec --allow/--deny`),
    /// never stored.
    pub rules: Vec<crate::permissions::Rule>,
    /// The client's additional workspace roots (`additionalDirectories`), replacing those of an
    /// earlier opening; `None` keeps them (headless runs, a turn opening its own servers).
    pub directories: Option<Vec<std::path::PathBuf>>,
    /// The editor's instructions (`systemPrompt`), replacing those the session keeps; `None`
    /// keeps them.
    pub system_prompt: Option<crate::agent::prompt::ClientPrompt>,
}

impl Attach {
    /// No client servers, and nothing to wait for (headless runs, tests).
    pub fn alone() -> Self {
        let (ready, announced) = tokio::sync::oneshot::channel();
        let _ = ready.send(());
        Self {
            mcp: Vec::new(),
            notes: Vec::new(),
            announced,
            rules: Vec::new(),
            directories: None,
            system_prompt: None,
        }
    }
}

/// How a prompt ended: its turn's stop reason and the tokens that turn's own model requests
/// used (its steps, and the summaries of a compaction it ran; not its sub-agents': each is a
/// session of its own, whose tokens reach this session's totals). A prompt that joined a turn
/// shares that turn's; one that ran no model (a slash command answered at once, a prompt
/// cancelled before it ran) used none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TurnEnd {
    pub stop: StopReason,
    pub usage: Usage,
}

impl From<StopReason> for TurnEnd {
    /// The end of a prompt that made no model request.
    fn from(stop: StopReason) -> Self {
        Self { stop, usage: Usage::default() }
    }
}

/// Something the editor should be shown about a session, in domain terms.
///
/// What a turn's recorder shows with a stored write also travels as JSON, through a shared
/// store's event log, to the replicas whose clients follow the turn ([`Update::to_event`]), and
/// so does a note for the user alone ([`Update::EphemeralNotice`], a prompt queued or joining
/// the turn) that the actor shows through the log; the other variants are never logged
/// (`serde(skip)`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "update", content = "data", rename_all = "snake_case")]
pub enum Update {
    /// A piece of a user message (replayed by `session/load`).
    UserChunk { message: MessageId, part: Part },
    /// Answer text, live or replayed.
    AgentText { message: MessageId, text: String },
    /// Reasoning text, live or replayed.
    AgentThought { message: MessageId, text: String },
    /// A tool call appears, in whatever state it is.
    ToolCall(ToolPart),
    /// A known tool call changed state.
    ToolCallUpdate(ToolPart),
    /// The agent's plan, whole (set by the `todo` tool).
    Plan(Vec<PlanEntry>),
    /// A plan presented for review (`exit_plan`), as Markdown: the session's plan document.
    PlanDocument(String),
    /// The session got a title.
    Title(String),
    /// A note for the user outside the model's answer (a retry under way, a failed compaction),
    /// stored with the conversation and replayed as it was shown.
    Notice { message: MessageId, text: String },
    /// An answer for the user alone that is not part of the conversation (a slash command's):
    /// never stored, never replayed, so it carries no message id.
    #[serde(skip)]
    EphemeralText { text: String },
    /// A note for the user alone (a prompt queued; a warning: an MCP server that failed): never
    /// stored, never replayed, no message id. The actor's notes go through a shared store's
    /// event log, so every replica's clients of the session see them (`Actor::tell`).
    EphemeralNotice { text: String, warning: bool },
    /// How full the context window is, and what the session has cost (USD) when prices are known.
    Usage { used: u64, size: u64, cost: Option<f64> },
    /// The commands offered changed (a command file added, changed or removed): all of them.
    #[serde(skip)]
    Commands(Vec<Advertised>),
    /// The session's options changed from inside (a `/model` command, an approved plan).
    #[serde(skip)]
    Options(Box<SessionView>),
    /// The session's mode changed from inside (an approved plan): `current_mode_update`.
    #[serde(skip)]
    Mode(crate::permissions::Mode),
    /// A compaction's progress; `note` is the short message for clients without compaction
    /// updates, `error` why it failed.
    Compaction { id: MessageId, state: CompactionState, note: String, error: Option<String> },
    /// A compaction's summary, sent before it completes.
    CompactionSummary { id: MessageId, text: String },
    /// A sub-agent of this session started or ended (the `task` call that runs it).
    #[serde(skip)]
    Subagent(Box<SubagentInfo>),
    /// Text sent to or received from a sub-agent: the task it was given, the report it gave.
    #[serde(skip)]
    SessionMessage(Box<SessionMessage>),
    /// An update of another session this one owns (a sub-agent's, at any depth), sent through
    /// this session's stream: clients that take sub-agents see it on `session`, others not at all.
    #[serde(skip)]
    Elsewhere { session: SessionId, update: Box<Update> },
}

/// A sub-agent as its parent announces it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentInfo {
    pub child: SessionId,
    /// The task's one-line description.
    pub title: String,
    /// The named agent, or `task`.
    pub agent: String,
    /// Where it works; `None` leaves it to be its parent's.
    pub cwd: Option<String>,
    /// `None` while it runs; how it ended once it has: its stop reason, or why it failed.
    pub ended: Option<Result<crate::agent::StopReason, String>>,
}

/// A message between a session and one of its sub-agents, as the session's transcript has it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionMessage {
    pub id: String,
    /// Who sent it: `None` for this session.
    pub from: Option<SessionId>,
    /// Who it went to: `None` for this session.
    pub to: Option<SessionId>,
    pub text: String,
}

impl Update {
    /// The update as a shared store's event log keeps it, for replicas whose clients follow
    /// the turn; `None` for the kinds never logged (ephemeral texts, a session's options and
    /// commands, sub-agents' traffic).
    pub fn to_event(&self) -> Option<String> {
        serde_json::to_string(self).ok()
    }

    /// An update read back from the event log; `None` (with a warning) for one this build
    /// cannot read, which a replica of another version may have written.
    pub fn from_event(body: &str) -> Option<Update> {
        serde_json::from_str(body)
            .inspect_err(|err| tracing::warn!(%err, "an event of the shared log this cairn cannot read; skipped"))
            .ok()
    }

    /// Whether the update shows something stored, which `session/load` shows again ([`replay`]):
    /// the conversation's messages and parts, tool calls and plans, stored notices, finished
    /// compactions. Every other update is plainly ephemeral: shown once, without a message id.
    pub fn is_stored(&self) -> bool {
        match self {
            Update::UserChunk { .. }
            | Update::AgentText { .. }
            | Update::AgentThought { .. }
            | Update::ToolCall(_)
            | Update::ToolCallUpdate(_)
            | Update::Plan(_)
            | Update::PlanDocument(_)
            | Update::Notice { .. }
            | Update::CompactionSummary { .. }
            | Update::Compaction { state: CompactionState::Completed, .. } => true,
            Update::Title(_)
            | Update::EphemeralText { .. }
            | Update::EphemeralNotice { .. }
            | Update::Usage { .. }
            | Update::Options(_)
            | Update::Commands(_)
            | Update::Mode(_)
            | Update::Compaction { state: CompactionState::InProgress | CompactionState::Failed, .. } => false,
            // Shown again by a load from the stored `task` call and the sub-agent's own rows, but
            // not held back while one runs: a sub-agent's update may then show twice, never not at all.
            Update::Subagent(_) | Update::SessionMessage(_) | Update::Elsewhere { .. } => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionState {
    InProgress,
    Completed,
    Failed,
}

/// What a user without compaction updates is told about a finished compaction.
pub fn compaction_note(compaction: &Compaction) -> String {
    let what = match compaction.method {
        Method::Pruned => "pruned old tool outputs".to_owned(),
        Method::Summary => format!("summarized {} earlier messages", compaction.summarized),
        Method::Chunked => format!("summarized {} earlier messages in parts", compaction.summarized),
        Method::DropMiddle => {
            format!(
                "summarized the start and end of {} earlier messages (the middle was too long)",
                compaction.summarized
            )
        }
    };
    format!(
        "Compacted the conversation: {what} (about {} → {} tokens). Nothing was deleted; /rewind brings it back.",
        compaction.tokens_before, compaction.tokens_after
    )
}

/// What a user is told about a failed compaction.
pub fn compaction_failed_note(error: &str) -> String {
    format!(
        "Compaction failed ({error}); the conversation is unchanged and the session stays usable. Try /compact again, or /fork and continue with a larger-window model."
    )
}

/// What a session is doing, for `/status` and `session/list`. Kept in memory only: after a
/// restart every session is idle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Status {
    #[default]
    Idle,
    Busy,
    /// A model request failed and is being tried again.
    Retrying {
        attempt: u32,
        /// Why the request failed.
        message: String,
    },
    /// The last turn failed; cleared by the next prompt.
    Error(String),
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Idle => "idle",
            Status::Busy => "busy",
            Status::Retrying { .. } => "retrying",
            Status::Error(_) => "error",
        }
    }
}

/// The other side: where updates go once their rows are committed, and the editor services the
/// tools may use. `send` is called from the store's writer thread, in commit order, so it must
/// not block.
pub trait UpdateSink: Send + Sync + 'static {
    fn send(&self, session: &SessionId, update: Update);
    /// [`Self::send`] of the update numbered `seq` in its session's stream (on a server, where
    /// a client may resume after the last number it saw).
    fn send_numbered(&self, session: &SessionId, seq: u64, update: Update) {
        let _ = seq;
        self.send(session, update);
    }
    /// [`Self::send`] of an update another replica showed, read back from the session's event
    /// log at `logged`: a load's replay cuts these by that number (`loading`).
    fn send_logged(&self, session: &SessionId, logged: i64, update: Update) {
        let _ = logged;
        self.send(session, update);
    }
    /// A question another replica asked of its clients (asked, then closed), or an answer to
    /// one asked here that another replica's client gave: for a hub, whose clients may answer
    /// (`asked`). Others have no clients to ask.
    fn elsewhere(&self, session: &SessionId, what: asked::Elsewhere) {
        let _ = (session, what);
    }
    /// Resolves once the other side takes updates as fast as they come: a streaming turn
    /// awaits it between chunks, so a client that stops reading holds the turn (and through it
    /// the model's stream) instead of updates piling up in memory. `send` itself never waits.
    fn writable(&self) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
    /// The editor's services for one session's tools.
    fn host(&self, session: &SessionId) -> Arc<dyn Host>;
}

/// What a session looks like from outside: enough to describe it to an editor.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionView {
    pub id: SessionId,
    pub cwd: String,
    pub title: Option<String>,
    /// The `provider/model` the next turn uses.
    pub model: String,
    /// Every model the session may switch to.
    pub models: Vec<String>,
    /// The permission mode.
    pub mode: Mode,
    /// The reasoning level, when the model reasons.
    pub thought: Option<ThoughtLevel>,
    /// Prompts sent while a turn runs join it (the `steer` option).
    pub steer: bool,
    pub usage: ContextUsage,
    /// The slash commands offered: the built-in ones, then those from files and skills.
    pub commands: Vec<Advertised>,
}

/// How full the context window is, and what the session has cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContextUsage {
    /// Tokens in the context after the last step.
    pub used: u64,
    /// The model's window.
    pub size: u64,
    /// USD so far, when the model's prices are known.
    pub cost: Option<f64>,
}

impl From<ContextUsage> for Update {
    fn from(usage: ContextUsage) -> Self {
        Update::Usage { used: usage.used, size: usage.size, cost: usage.cost }
    }
}

/// Why a session operation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("session {0} not found; call session/list to see the stored sessions")]
    NotFound(SessionId),
    #[error("unknown model `{value}`; choose one of: {}", .choices.join(", "))]
    UnknownModel { value: String, choices: Vec<String> },
    #[error(transparent)]
    Setting(#[from] crate::settings::SettingError),
    #[error(
        "{model} has a {window}-token context window, smaller than the {used} tokens this session already uses; run /compact first, or /fork and switch the copy"
    )]
    ModelTooSmall { model: String, window: u64, used: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Turn(TurnError),
    #[error(transparent)]
    Model(#[from] LlmError),
    #[error("session {0} was closed")]
    Closed(SessionId),
    #[error("session {0} is busy (a turn is running or queued); wait for it to end or cancel it, then try again")]
    Busy(SessionId),
    /// A new session's or a fork's directory cannot be a workspace.
    #[error(transparent)]
    Workspace(crate::workspace::RootRefused),
    /// The replica of a shared store that ran a prompt handed to it failed it; its words.
    #[error("the cairn serve replica running session {session}'s turn answered: {message}")]
    Elsewhere { session: SessionId, message: String },
    /// That replica refused the request as the client's mistake (a value not offered, a busy
    /// session): its words, as a client of that replica is told them.
    #[error("{message}")]
    RefusedElsewhere { session: SessionId, message: String },
    /// A stored (or imported) session's directory cannot be a workspace: it is not opened.
    #[error("session {session} cannot be opened: {refused}")]
    StoredWorkspace { session: SessionId, refused: crate::workspace::RootRefused },
}

impl SessionError {
    /// Whether the request was the client's mistake (a value not offered, a busy session, a
    /// directory refused), not a failure of the agent: `invalid params` on the wire.
    pub fn is_clients_mistake(&self) -> bool {
        match self {
            Self::UnknownModel { .. }
            | Self::Setting(_)
            | Self::ModelTooSmall { .. }
            | Self::Busy(_)
            | Self::Workspace(_)
            | Self::StoredWorkspace { .. }
            | Self::RefusedElsewhere { .. }
            | Self::Store(StoreError::InvalidCursor(_)) => true,
            Self::NotFound(_)
            | Self::Store(_)
            | Self::Turn(_)
            | Self::Model(_)
            | Self::Closed(_)
            | Self::Elsewhere { .. } => false,
        }
    }
}

impl From<TurnError> for SessionError {
    /// A turn refused because another process holds the session is the store's refusal,
    /// naming that process, whatever layer it passed through.
    fn from(err: TurnError) -> Self {
        match err {
            TurnError::Record(crate::agent::RecordError::Refused(holder)) => {
                SessionError::Store(StoreError::Leased(holder))
            }
            other => SessionError::Turn(other),
        }
    }
}

/// The updates that show a stored conversation again, in order (`session/load`): what the live
/// updates of its rows have shown, a part still streaming with its text so far, a tool call in
/// its latest state, and nothing of a call whose arguments are still being written.
pub fn replay(messages: &[crate::history::Message]) -> impl Iterator<Item = Update> + '_ {
    use crate::history::Role;
    messages.iter().flat_map(|message| {
        message.parts.iter().flat_map(move |part| {
            let id = message.id.clone();
            let one = match (message.role, part) {
                (_, Part::Tool(tool)) if tool.streaming => None,
                (_, Part::Tool(tool)) => {
                    // As live: a plan is shown once its call succeeded.
                    let done = tool.state == crate::history::CallState::Succeeded;
                    let plan = tool.plan.clone().filter(|_| done).map(Update::Plan);
                    // A plan presented for review, whatever the answer was.
                    let document = tool.document.clone().map(Update::PlanDocument);
                    // A `task` call's sub-agent is announced before the card links it.
                    let (before, after) = subagent::shown_again(tool);
                    let call = std::iter::once(Update::ToolCall(tool.clone()));
                    return before.into_iter().chain(call).chain(after).chain(plan).chain(document).collect::<Vec<_>>();
                }
                (Role::Assistant, Part::Text { text }) if !text.is_empty() => {
                    Some(Update::AgentText { message: id, text: text.clone() })
                }
                (Role::Assistant, Part::Reasoning { text, .. }) if !text.is_empty() => {
                    Some(Update::AgentThought { message: id, text: text.clone() })
                }
                (_, Part::Notice { text }) => Some(Update::Notice { message: id, text: text.clone() }),
                (_, Part::Compaction(compaction)) => {
                    let summary = (!compaction.summary.is_empty())
                        .then(|| Update::CompactionSummary { id: id.clone(), text: compaction.summary.clone() });
                    let done = Update::Compaction {
                        id,
                        state: CompactionState::Completed,
                        note: compaction_note(compaction),
                        error: None,
                    };
                    return summary.into_iter().chain(std::iter::once(done)).collect::<Vec<_>>();
                }
                (Role::User, part) => Some(Update::UserChunk { message: id, part: part.clone() }),
                (Role::Assistant, _) => None,
            };
            one.into_iter().collect()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Message, MessageMeta, Role};

    #[test]
    fn what_a_recorder_shows_travels_as_an_event_and_nothing_else_does() {
        let message = MessageId::generate();
        let mut call = ToolPart::new("c1".into(), "bash".into());
        call.title = "ls".into();
        let logged = [
            Update::UserChunk { message: message.clone(), part: Part::Text { text: "hi".into() } },
            Update::AgentText { message: message.clone(), text: "an answer".into() },
            Update::AgentThought { message: message.clone(), text: "hmm".into() },
            Update::ToolCall(call.clone()),
            Update::ToolCallUpdate(call),
            Update::PlanDocument("# Plan".into()),
            Update::Plan(Vec::new()),
            Update::Title("A title".into()),
            Update::Notice { message: message.clone(), text: "retrying".into() },
            Update::Usage { used: 10, size: 100, cost: Some(0.5) },
            Update::Compaction {
                id: message.clone(),
                state: CompactionState::Failed,
                note: "n".into(),
                error: Some("e".into()),
            },
            Update::CompactionSummary { id: message, text: "summary".into() },
        ];
        for update in logged {
            let event = update.to_event().unwrap_or_else(|| panic!("{update:?} is logged"));
            assert_eq!(Update::from_event(&event), Some(update));
        }
        assert_eq!(Update::EphemeralText { text: "only here".into() }.to_event(), None);
        let queued = Update::EphemeralNotice { text: "queued".into(), warning: false };
        assert_eq!(queued.to_event().as_deref().and_then(Update::from_event), Some(queued), "a note the actor logs");
        assert_eq!(Update::from_event("{\"update\": \"from_a_newer_cairn\"}"), None);
    }

    #[test]
    fn a_replay_shows_the_text_so_far_and_no_call_whose_arguments_are_still_coming() {
        let mut shown = ToolPart::new("c1".into(), "read".into());
        shown.title = "Read a.txt".into();
        let mut named = ToolPart::new("c2".into(), "write".into());
        named.streaming = true;
        let parts = vec![Part::Text { text: "So far".into() }, Part::Tool(shown.clone()), Part::Tool(named)];
        let message = Message::new(Role::Assistant, parts, MessageMeta::default());
        let replayed: Vec<Update> = replay(std::slice::from_ref(&message)).collect();
        assert_eq!(
            replayed,
            [Update::AgentText { message: message.id, text: "So far".into() }, Update::ToolCall(shown)]
        );
    }

    #[test]
    fn a_plan_is_replayed_as_it_was_shown_once_its_call_succeeded() {
        use crate::history::{CallState, PlanPriority, PlanStatus};
        let entry = PlanEntry { content: "Read".into(), status: PlanStatus::Pending, priority: PlanPriority::High };
        let todo = |id: &str, state: CallState| {
            let mut call = ToolPart::new(id.into(), "todo".into());
            call.state = state;
            call.plan = Some(vec![entry.clone()]);
            Part::Tool(call)
        };
        let parts = vec![todo("c1", CallState::Succeeded), todo("c2", CallState::Failed)];
        let message = Message::new(Role::Assistant, parts, MessageMeta::default());
        let plans = replay(std::slice::from_ref(&message)).filter(|u| matches!(u, Update::Plan(_))).count();
        assert_eq!(plans, 1, "only the call that succeeded set the plan");
    }

    #[test]
    fn a_call_cut_off_by_a_restart_while_written_is_replayed_failed() {
        let mut named = ToolPart::new("c1".into(), "write".into());
        named.streaming = true;
        let mut messages = vec![Message::new(Role::Assistant, vec![Part::Tool(named)], MessageMeta::default())];
        crate::history::finalize_orphans(&mut messages);
        let replayed: Vec<Update> = replay(&messages).collect();
        let [Update::ToolCall(call)] = replayed.as_slice() else { panic!("{replayed:?}") };
        assert_eq!(call.state, crate::history::CallState::Failed);
    }
}

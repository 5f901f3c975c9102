//! What a turn reports as it runs, and the recorder it reports to.
//!
//! The turn never writes to the wire or the database itself: it hands every [`AgentEvent`] to a
//! [`Recorder`], which the session layer implements by committing rows and then emitting
//! `session/update`s. Events carry deltas, not whole texts, so relaying a chunk costs its size.
//! A tool call is recorded as soon as it is named (`AgentEvent::ToolNamed`) and shown only once
//! its arguments are complete. [`Phase`] names the run-level points the turn passes.

use crate::history::{Message, MessageMeta, Part};
use crate::ids::MessageId;
use crate::permissions::Rule;
use crate::tools::checkpoint::{Blob, Capture};

/// Which kind of streamed part a delta belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Text,
    Reasoning,
}

impl StreamKind {
    /// The empty part a stream of this kind starts from.
    pub fn empty_part(self) -> Part {
        match self {
            StreamKind::Text => Part::Text { text: String::new() },
            StreamKind::Reasoning => Part::Reasoning { text: String::new(), signature: None },
        }
    }
}

/// The run-level points of a turn, in the order they come (design: hooks/phases). `RunEnd`
/// always comes, whatever ended the turn; a step is one model request and the tools it asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    RunStart,
    StepStart,
    BeforeInference,
    AfterInference,
    BeforeTool,
    AfterTool,
    /// The step's rows are committed (the checkpoint), then the stop conditions are checked.
    StepEnd,
    RunEnd,
}

/// One thing that happened in a turn, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// The user's prompt; it is committed before the model is called.
    UserMessage(Message),
    /// A prompt the user sent while the turn ran, joining it here (before a request); committed
    /// before the model is called, and shown, since it was not shown where it joined.
    Steered(Message),
    /// An assistant message begins: one per model request.
    AssistantStarted { message: MessageId, model: String },
    /// A text or reasoning part opens at `index` of the message.
    PartStarted { message: MessageId, index: u32, kind: StreamKind },
    /// More text for the open part.
    Delta { message: MessageId, index: u32, kind: StreamKind, text: String },
    /// The open part is complete.
    PartFinished { message: MessageId, index: u32 },
    /// A whole part was written or replaced (tool calls move through their states this way).
    PartUpdated { message: MessageId, index: u32, part: Part },
    /// A tool call was named and its arguments are still streaming: the part is kept (so the
    /// message's parts stay numbered without gaps) but not shown until it is complete.
    ToolNamed { message: MessageId, index: u32, part: Part },
    /// The assistant message is complete; `meta.finish` says how it ended.
    AssistantFinished { message: MessageId, meta: MessageMeta },
    /// Something the user should know that is not part of the conversation (a retry under way);
    /// kept as its own message so a reload shows it too.
    Notice { message: MessageId, text: String },
    /// How full the context is after a step, and what the session has cost so far.
    ContextUsage { used: u64, size: u64, cost: Option<f64> },
    /// The user answered "always"; the rule is to be remembered in its scope.
    RuleAdded(Rule),
    /// The turn reached one of its run-level points; nothing to store.
    Phase(Phase),
    /// A model request failed and will be sent again (attempt 1 is the first retry).
    Retrying { attempt: u32, message: String },
    /// A compaction began; `id` will be its marker message's id.
    CompactionStarted { id: MessageId },
    /// The compaction's marker message (one `Compaction` part; the summarizer's usage on it).
    CompactionFinished(Message),
    /// The compaction failed; nothing changed.
    CompactionFailed { id: MessageId, error: String },
    /// File contents a checkpoint names, stored before it; nothing to show.
    Blobs(Vec<Blob>),
    /// A capture of the workspace's files around a tool call, in the turn of `prompt`; nothing
    /// to show.
    Checkpoint { prompt: Option<MessageId>, capture: Capture },
}

/// A failure to make the turn durable; the turn stops on the first one.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// Another live process holds the session: the turn's prompt was refused and nothing of
    /// the turn was recorded.
    #[error("{0}")]
    Refused(Box<crate::ids::LeaseHolder>),
    /// A write failed (the disk is full, the database broke); what was committed stays.
    #[error("{0}")]
    Failed(String),
    /// Another replica took the session's lease over (this one stalled past it) and closed
    /// the turn: nothing more of it was recorded, and what was queued behind it was answered
    /// there, so it must not run here.
    #[error("{0}")]
    Fenced(String),
    /// The turn's user cancelled it before its claim took the session (the claim was not sent,
    /// or was to be sent again after another process's turn): nothing of it was recorded.
    #[error("the prompt was cancelled before the session took it; nothing of it was stored")]
    Withdrawn,
}

/// Where a turn's events go: persisted, then shown.
#[async_trait::async_trait]
pub trait Recorder: Send {
    /// Takes one event; never blocks.
    fn record(&mut self, event: AgentEvent);
    /// Records the turn's prompt, its first write, and waits until it is committed; then appends
    /// it to `history`. A recorder whose history may be written by others (another process) may
    /// refuse the prompt, recording nothing, or first replace `history` with the stored one and
    /// answer `true`: the turn continues from that.
    async fn begin(&mut self, history: &mut Vec<Message>, prompt: Message) -> Result<bool, RecordError> {
        self.record(AgentEvent::UserMessage(prompt.clone()));
        self.flush().await?;
        history.push(prompt);
        Ok(false)
    }
    /// Resolves once everything recorded so far is committed and shown.
    async fn flush(&mut self) -> Result<(), RecordError>;
    /// The first write that failed since the turn began, if any.
    fn failure(&self) -> Option<RecordError>;
    /// Resolves once what was recorded is being stored and shown about as fast as it comes; a
    /// streaming answer awaits it between chunks, so a store or a reader that falls behind holds
    /// the model's stream instead of a backlog growing in memory. Only the caller waits.
    async fn writable(&mut self) {}
}

//! The states of a turn and the reasons it ends.
//!
//! A turn is always in exactly one [`TurnState`] (StepStart, Preparing, Sampling, Streaming,
//! Executing, Confirming, Dispatching, Compacting, StepEnd, Done); each state's handler (in
//! `steps`, `calls`, `dispatch` and the driver) consumes it and returns the next. Steps are
//! states too: a step starts in `StepStart` and ends in `StepEnd`, which every ending inside it
//! goes through. A state carries what its handler needs: Sampling and Streaming carry the step's
//! [`Request`] (what is sent besides the history: the reminders, the tools on cooldown left out,
//! the failed attempts so far), so no step can be sent without one. `Done` is terminal.
//! [`DoneReason`] keeps the full story of why a turn ended; `stop::StopReason` is what the editor
//! is told, and [`TurnError`] a turn that could not finish.

use std::collections::VecDeque;
use std::fmt;

use crate::history::Message;
use crate::ids::MessageId;
use crate::llm::{EventStream, FinishReason, LlmError};
use crate::permissions::PermissionRequest;
use crate::tools::{Fatal, Invocation, ToolError};

use super::events::{RecordError, StreamKind};
use super::stop::{Stop, StopReason};

/// Where a turn is. A step is the states from `StepStart` to `StepEnd`: one request and
/// what follows from its answer (tool calls, a retry, a compaction), so every state between
/// them is inside a step, and the handlers of those states end the step (with `StepEnd`)
/// instead of ending the turn.
pub enum TurnState {
    /// A step begins: counted, its messages start here; then as Preparing.
    StepStart(Opening),
    /// About to prepare the step's request: prompts steered into the turn join, then
    /// compaction if the context is full, then the request (reminders, tools on cooldown).
    Preparing,
    /// Sending the step's request to the model (with retries).
    Sampling(Box<Request>),
    /// Relaying the model's answer as it arrives; its request is kept for a retry.
    Streaming(Box<Streaming>),
    /// Running the tool calls the model asked for, in order.
    Executing(CallQueue),
    /// Waiting for the user to allow the first queued call (a pending `session/request_permission`).
    Confirming(CallQueue, Box<Question>),
    /// Waiting for sub-agents: the allowed `task` calls at the head of the queue run side by
    /// side (at most `tasks_at_once` at a time), each showing its child's progress.
    Dispatching(CallQueue, Vec<(u32, Invocation)>),
    /// Making the history fit the context window again, then back to Sampling.
    Compacting(Why),
    /// The step is over: the checkpoint, then the stop conditions and the loop guard decide
    /// whether what it leads to happens.
    StepEnd(After),
    /// The turn is over.
    Done(DoneReason),
}

/// Why a step begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opening {
    /// The turn's first step, or the previous step's tools ran.
    Fresh,
    /// The model ended the turn while a prompt steered into it waited: the step exists for that
    /// prompt, and if it was withdrawn meanwhile the turn ends as the model ended it.
    ForSteered,
}

/// Where a step leads.
#[derive(Debug)]
pub enum After {
    /// Its tools ran: another step follows.
    NextStep,
    /// The turn ends (the model ended it, it failed, or it was cancelled).
    End(DoneReason),
}

impl fmt::Debug for TurnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnState::StepStart(opening) => write!(f, "StepStart({opening:?})"),
            TurnState::Preparing => f.write_str("Preparing"),
            TurnState::Sampling(request) => write!(f, "Sampling(attempt {})", request.attempts + 1),
            TurnState::Streaming(streaming) => write!(f, "Streaming({})", streaming.message.id),
            TurnState::Executing(queue) => write!(f, "Executing({} calls)", queue.calls.len()),
            TurnState::Confirming(queue, _) => write!(f, "Confirming({} calls)", queue.calls.len()),
            TurnState::Dispatching(queue, batch) => {
                write!(f, "Dispatching({} sub-agents, {} calls after)", batch.len(), queue.calls.len())
            }
            TurnState::Compacting(why) => write!(f, "Compacting({why:?})"),
            TurnState::StepEnd(after) => write!(f, "StepEnd({after:?})"),
            TurnState::Done(reason) => write!(f, "Done({reason:?})"),
        }
    }
}

/// What sent the turn to Compacting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    /// The context in use reached the threshold before a request.
    Threshold,
    /// The provider refused a request as too long for the window (its words).
    Overflow(String),
}

/// A step's request as prepared before inference: what it sends besides the model's view of the
/// history. The view is borrowed from the history when the request is sent (nothing changes the
/// history between preparing and sending), so no part of the history is copied for it.
#[derive(Debug, Default)]
pub struct Request {
    /// Notes for the model, sent with this request (and its retries) only.
    pub reminder: Option<Message>,
    /// Tools on cooldown, left out of this request.
    pub cooling: Vec<String>,
    /// Failed attempts at sending it so far.
    pub attempts: u32,
}

/// An answer being streamed: the provider's events and the assistant message they build.
pub struct Streaming {
    /// The request being answered; sent again if the answer fails before it starts.
    pub request: Box<Request>,
    pub events: EventStream,
    pub message: Message,
    /// When this request's step time is up.
    pub deadline: tokio::time::Instant,
    /// The stream produced something; the message exists in the store from then on.
    pub started: bool,
    /// The text or reasoning part receiving deltas, by index in `message.parts`.
    pub open: Option<(u32, StreamKind)>,
    /// The tool calls named so far: call id and part index.
    pub calls: Vec<(String, u32)>,
    pub finish: Option<FinishReason>,
}

/// The tool calls of one answer still to run, in the order the model made them.
pub struct CallQueue {
    /// The assistant message holding the calls' parts.
    pub message: MessageId,
    pub calls: VecDeque<QueuedCall>,
}

/// The question about the first queued call: what it is about, as judged when it was decided,
/// and why cairn asks.
pub struct Question {
    pub request: PermissionRequest,
    pub why: String,
}

/// One call waiting to run.
pub struct QueuedCall {
    /// Its part's index in the message.
    pub index: u32,
    /// The validated call, or what is wrong with it.
    pub invocation: Result<Invocation, ToolError>,
    /// The user allowed this call when asked, for this target (a path's final target or the
    /// command line); if the target is no longer the same when it runs, it is decided again.
    pub approved: Option<String>,
    /// What the `PreToolUse` hooks said, once they ran for it.
    pub hooked: Option<super::hooked::Before>,
}

/// Why a turn ended.
#[derive(Debug)]
pub enum DoneReason {
    /// The model stopped on its own.
    ModelStop(ModelStop),
    /// The user cancelled.
    UserAbort,
    /// The turn failed.
    Error(TurnError),
    /// A configured limit ended the turn (rounds, time, tokens, errors, a tool, a match, a loop).
    Stopped(Stop),
}

/// How the model ended its last answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelStop {
    EndTurn,
    MaxTokens,
    Refusal,
}

/// A turn that could not finish.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Model(#[from] LlmError),
    #[error("could not save the session: {0}")]
    Record(#[from] RecordError),
    /// A tool call failed in a way that ends the turn.
    #[error("{0}")]
    Tool(String),
    #[error("{0}")]
    Internal(String),
}

/// A tool's failure that ends the turn, as the turn's error: one of the turn's own (a sub-agent
/// whose session could not be saved) stays what it was.
impl From<Fatal> for TurnError {
    fn from(fatal: Fatal) -> Self {
        if let Some(err) = fatal.0.downcast_ref::<TurnError>() {
            return err.clone();
        }
        if let Some(err) = fatal.0.downcast_ref::<RecordError>() {
            return TurnError::Record(err.clone());
        }
        TurnError::Tool(fatal.to_string())
    }
}

impl DoneReason {
    /// The editor's view of this ending; errors stay errors unless the turn was cancelled, in
    /// which case whatever broke was broken by the cancellation.
    pub fn into_result(self, cancelled: bool) -> Result<StopReason, TurnError> {
        match self {
            DoneReason::ModelStop(ModelStop::EndTurn) => Ok(StopReason::EndTurn),
            DoneReason::ModelStop(ModelStop::MaxTokens) => Ok(StopReason::MaxTokens),
            DoneReason::ModelStop(ModelStop::Refusal) => Ok(StopReason::Refusal),
            DoneReason::Stopped(stop) => Ok(stop.stop_reason()),
            DoneReason::UserAbort => Ok(StopReason::Cancelled),
            DoneReason::Error(_) if cancelled => Ok(StopReason::Cancelled),
            DoneReason::Error(err) => Err(err),
        }
    }
}

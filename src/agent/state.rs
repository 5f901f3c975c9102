//! The states of a turn and the reasons it ends.
//!
//! A turn is always in exactly one [`TurnState`]; each state's handler (in `steps`) consumes it and
//! returns the next. `Done` is terminal. [`DoneReason`] keeps the full story of why a turn ended;
//! [`StopReason`] is what the editor is told.

use std::fmt;

use crate::history::Message;
use crate::llm::{EventStream, FinishReason, LlmError, ToolCallRequest};

use super::events::{RecordError, StreamKind};

/// Where a turn is.
pub enum TurnState {
    /// About to send the conversation to the model (with retries).
    Sampling,
    /// Relaying the model's answer as it arrives.
    Streaming(Streaming),
    /// Running the tool calls the model asked for.
    Executing(Vec<ToolCallRequest>),
    /// Waiting for the user to allow a tool call (a pending `session/request_permission`).
    Confirming,
    /// Running a sub-agent for a `task` call.
    Dispatching,
    /// Summarizing older history to fit the context window.
    Compacting,
    /// The turn is over.
    Done(DoneReason),
}

impl fmt::Debug for TurnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnState::Sampling => f.write_str("Sampling"),
            TurnState::Streaming(streaming) => write!(f, "Streaming({})", streaming.message.id),
            TurnState::Executing(calls) => write!(f, "Executing({} calls)", calls.len()),
            TurnState::Confirming => f.write_str("Confirming"),
            TurnState::Dispatching => f.write_str("Dispatching"),
            TurnState::Compacting => f.write_str("Compacting"),
            TurnState::Done(reason) => write!(f, "Done({reason:?})"),
        }
    }
}

/// An answer being streamed: the provider's events and the assistant message they build.
pub struct Streaming {
    pub events: EventStream,
    pub message: Message,
    /// The text or reasoning part receiving deltas, by index in `message.parts`.
    pub open: Option<(u32, StreamKind)>,
    pub calls: Vec<ToolCallRequest>,
    pub finish: Option<FinishReason>,
}

/// Why a turn ended.
#[derive(Debug)]
pub enum DoneReason {
    /// The model stopped on its own.
    ModelStop(ModelStop),
    /// The turn made as many model requests as it may.
    MaxTurns,
    /// The user cancelled.
    UserAbort,
    /// The turn failed.
    Error(TurnError),
    /// The session's token budget is spent.
    BudgetExceeded,
    /// The model kept repeating the same tool call.
    LoopDetected,
    /// A configured stop condition fired.
    Stopped(String),
}

/// How the model ended its last answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelStop {
    EndTurn,
    MaxTokens,
    Refusal,
}

/// What the editor is told about a finished turn (ACP `stopReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

/// A turn that could not finish.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Model(#[from] LlmError),
    #[error("could not save the session: {0}")]
    Record(#[from] RecordError),
    #[error("{0}")]
    Internal(String),
}

impl DoneReason {
    /// The editor's view of this ending; errors stay errors unless the turn was cancelled, in
    /// which case whatever broke was broken by the cancellation.
    pub fn into_result(self, cancelled: bool) -> Result<StopReason, TurnError> {
        match self {
            DoneReason::ModelStop(ModelStop::EndTurn) => Ok(StopReason::EndTurn),
            DoneReason::ModelStop(ModelStop::MaxTokens) => Ok(StopReason::MaxTokens),
            DoneReason::ModelStop(ModelStop::Refusal) => Ok(StopReason::Refusal),
            DoneReason::MaxTurns | DoneReason::BudgetExceeded | DoneReason::LoopDetected | DoneReason::Stopped(_) => {
                Ok(StopReason::MaxTurnRequests)
            }
            DoneReason::UserAbort => Ok(StopReason::Cancelled),
            DoneReason::Error(_) if cancelled => Ok(StopReason::Cancelled),
            DoneReason::Error(err) => Err(err),
        }
    }
}

//! The turn state machine: from a user prompt to a [`StopReason`].
//!
//! [`run_turn`] records the prompt, then drives a [`TurnState`] through one handler per state
//! (`steps`) until it reaches `Done`. Between transitions it checks the cancellation token and
//! the round limit. Everything the turn produces leaves through the [`Recorder`]; this module
//! imports neither the wire protocol nor the database.

mod calls;
pub mod events;
pub mod prompt;
pub mod state;
mod steps;

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::llm::Provider;
use crate::llm::catalog::{ModelInfo, ThoughtLevel};
use crate::permissions::{Mode, Rule};
use crate::tools::{Host, Workspace};

pub use events::{AgentEvent, RecordError, Recorder, StreamKind};
pub use state::{DoneReason, ModelStop, StopReason, TurnError, TurnState};

/// Everything one turn works with. The session actor lends it its history and rules for the turn.
pub struct Turn<'a> {
    pub provider: &'a dyn Provider,
    /// The model name the provider knows.
    pub model: String,
    /// `provider/model`, stored on each message.
    pub model_ref: String,
    pub system: String,
    pub history: &'a mut Vec<Message>,
    pub recorder: &'a mut dyn Recorder,
    /// Cancelled by `session/cancel`, `session/close` or shutdown; every await races it.
    pub cancel: CancellationToken,
    pub limits: Limits,
    pub tools: Toolbox<'a>,
    /// The model's window, output limit and prices.
    pub info: ModelInfo,
    /// The session's reasoning level, for models that reason.
    pub thought: Option<ThoughtLevel>,
    /// What the session has cost so far (USD), for `usage_update`.
    pub spent: f64,
    /// Model requests made so far in this turn.
    pub rounds: u32,
    /// Failed attempts at the current request.
    pub attempts: u32,
}

/// What tool calls run with: where, through which editor, and under which permissions.
pub struct Toolbox<'a> {
    pub workspace: Workspace,
    pub host: Arc<dyn Host>,
    /// The session's mode; it may change while the turn runs.
    pub mode: watch::Receiver<Mode>,
    /// Session and project rules; "always" answers add to them.
    pub rules: &'a mut Vec<Rule>,
}

/// Runs one turn for `prompt` to its end. The prompt is committed before the model is called,
/// and every update of the turn is flushed before this returns.
pub async fn run_turn(mut turn: Turn<'_>, prompt: Vec<Part>) -> Result<StopReason, TurnError> {
    let user =
        Message::new(Role::User, prompt, MessageMeta { model: Some(turn.model_ref.clone()), ..MessageMeta::default() });
    turn.recorder.record(AgentEvent::UserMessage(user.clone()));
    turn.history.push(user);
    let mut state = match turn.recorder.flush().await {
        Ok(()) => TurnState::Sampling,
        Err(err) => TurnState::Done(DoneReason::Error(err.into())),
    };
    loop {
        if turn.cancel.is_cancelled() && !matches!(state, TurnState::Streaming(_) | TurnState::Done(_)) {
            state = TurnState::Done(DoneReason::UserAbort);
        }
        tracing::debug!(?state, "turn state");
        state = match state {
            TurnState::Sampling => steps::sampling(&mut turn).await,
            TurnState::Streaming(streaming) => steps::streaming(&mut turn, streaming).await,
            TurnState::Executing(queue) => calls::executing(&mut turn, queue).await,
            TurnState::Confirming(queue) => calls::confirming(&mut turn, queue).await,
            TurnState::Dispatching | TurnState::Compacting => TurnState::Done(DoneReason::Error(TurnError::Internal(
                format!("{state:?} is not available in this build"),
            ))),
            TurnState::Done(reason) => {
                let flushed = turn.recorder.flush().await;
                let cancelled = turn.cancel.is_cancelled();
                return match (reason.into_result(cancelled), flushed) {
                    (Ok(_), Err(err)) => Err(err.into()),
                    (result, _) => result,
                };
            }
        };
    }
}

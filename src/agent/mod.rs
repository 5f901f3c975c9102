//! The turn state machine: from a user prompt to a [`StopReason`].
//!
//! [`run_turn`] records the prompt, then drives a [`TurnState`] through one handler per state
//! (`steps`) until it reaches `Done`. Between transitions it checks the cancellation token and
//! the round limit. Everything the turn produces leaves through the [`Recorder`]; this module
//! imports neither the wire protocol nor the database.

pub mod events;
pub mod prompt;
pub mod state;
mod steps;

use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::llm::Provider;

pub use events::{AgentEvent, RecordError, Recorder, StreamKind};
pub use state::{DoneReason, ModelStop, StopReason, TurnError, TurnState};

/// Everything one turn works with. The session actor lends it its history for the turn.
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
    /// Model requests made so far in this turn.
    rounds: u32,
}

impl<'a> Turn<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        provider: &'a dyn Provider,
        model: String,
        model_ref: String,
        system: String,
        history: &'a mut Vec<Message>,
        recorder: &'a mut dyn Recorder,
        cancel: CancellationToken,
        limits: Limits,
    ) -> Self {
        Self { provider, model, model_ref, system, history, recorder, cancel, limits, rounds: 0 }
    }
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
            TurnState::Executing(calls) => steps::executing(&mut turn, calls),
            TurnState::Confirming | TurnState::Dispatching | TurnState::Compacting => TurnState::Done(
                DoneReason::Error(TurnError::Internal(format!("{state:?} is not available in this build"))),
            ),
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

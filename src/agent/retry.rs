//! Waiting before a failed model request is sent again: the one retry loop behind the turn's
//! steps and compaction's summaries.
//!
//! [`Retry::wait`] counts the attempt, asks the [`RetryPolicy`] for the delay (only retryable
//! errors, exponential backoff, `Retry-After` honoured), tells the user when there is someone to
//! tell (a stored notice and the session's `retrying` status) and sleeps, racing the
//! cancellation token. The caller keeps the attempt count with what it sends, and sends again
//! when `wait` returns `Ok`.

use tokio_util::sync::CancellationToken;

use super::events::{AgentEvent, Recorder};
use crate::ids::MessageId;
use crate::llm::LlmError;
use crate::llm::retry::RetryPolicy;

/// Why a request will not be sent again.
#[derive(Debug)]
pub enum GaveUp {
    /// The error is final, or the retries are spent.
    Failed(LlmError),
    Cancelled,
}

/// How to wait before the next attempt of one request.
pub struct Retry<'a> {
    pub policy: RetryPolicy,
    pub cancel: &'a CancellationToken,
    /// Where each retry is shown to the user; `None` (a summary) leaves it to the log.
    pub notices: Option<&'a mut dyn Recorder>,
}

impl Retry<'_> {
    /// After a failed attempt (`attempts` counts the failures so far and is increased here):
    /// waits out the delay, or says why there is no next attempt.
    pub async fn wait(&mut self, attempts: &mut u32, err: LlmError) -> Result<(), GaveUp> {
        *attempts += 1;
        let attempt = *attempts;
        let Some(delay) = self.policy.delay(attempt, &err) else { return Err(GaveUp::Failed(err)) };
        match self.notices.as_deref_mut() {
            Some(recorder) => {
                // The user is told by the notice (on stderr in headless runs): the log keeps it quiet.
                tracing::info!(attempt, ?delay, %err, "model request failed; retrying");
                let text = format!(
                    "The model request failed ({err}); retry {attempt} of {} in {:.1} s.",
                    self.policy.retries,
                    delay.as_secs_f64()
                );
                recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
                recorder.record(AgentEvent::Retrying { attempt, message: err.to_string() });
            }
            None => tracing::warn!(attempt, ?delay, %err, "model request failed; retrying"),
        }
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(GaveUp::Cancelled),
            () = tokio::time::sleep(delay) => Ok(()),
        }
    }
}

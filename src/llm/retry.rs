//! When to send a failed model request again: exponential backoff, `Retry-After` honoured.
//!
//! Only failures before any output count (429, 408, 5xx, a connection that broke before the
//! headers); the turn calls [`RetryPolicy::delay`] with the attempt number and the error and
//! sleeps, racing its cancellation token, for as long as it says.

use std::time::Duration;

use super::LlmError;

/// The longest we wait before one retry, whatever the server asks.
const MAX_DELAY: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryPolicy {
    pub retries: u32,
    pub base: Duration,
}

impl RetryPolicy {
    /// How long to wait before retry number `attempt` (1-based) after `error`, or `None` to give up.
    pub fn delay(&self, attempt: u32, error: &LlmError) -> Option<Duration> {
        if attempt > self.retries || !error.is_retryable() {
            return None;
        }
        let backoff = self.base.saturating_mul(1u32 << (attempt - 1).min(16));
        Some(error.retry_after().unwrap_or(backoff).min(MAX_DELAY))
    }
}

/// Parses a `Retry-After` header: delta-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, retry_after: Option<Duration>) -> LlmError {
        LlmError::Status { url: "u".into(), status, detail: String::new(), retry_after }
    }

    #[test]
    fn backs_off_exponentially_then_gives_up() {
        let policy = RetryPolicy { retries: 2, base: Duration::from_millis(500) };
        assert_eq!(policy.delay(1, &status(500, None)), Some(Duration::from_millis(500)));
        assert_eq!(policy.delay(2, &status(429, None)), Some(Duration::from_millis(1000)));
        assert_eq!(policy.delay(3, &status(503, None)), None);
        assert_eq!(policy.delay(1, &status(400, None)), None);
    }

    #[test]
    fn honours_retry_after_within_a_cap() {
        let policy = RetryPolicy { retries: 2, base: Duration::from_millis(500) };
        assert_eq!(policy.delay(1, &status(429, Some(Duration::from_secs(3)))), Some(Duration::from_secs(3)));
        assert_eq!(policy.delay(1, &status(429, Some(Duration::from_secs(3600)))), Some(MAX_DELAY));
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
    }
}

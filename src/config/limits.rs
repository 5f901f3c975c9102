//! What bounds a turn and how compaction behaves: the `[limits]`, `[limits.loop_detection]` and
//! `[compaction]` tables of `config.toml`, their defaults, and the checks on their values.
//!
//! Every limit has one unit in the file (seconds, tokens, counts) and a typed value here
//! (`Duration`, `Option`). A limit of 0 means "off", as in the stop-condition specs we follow.

use std::time::Duration;

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use serde::Deserialize;

/// The limits of one turn.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Longest silence between two chunks of a model stream.
    pub stream_idle_timeout: Duration,
    /// Longest one model request may take, from sending it to the end of its answer.
    pub step_timeout: Duration,
    /// Longest a whole turn may take (`None`: no limit).
    pub timeout: Option<Duration>,
    /// Model requests per turn (`0`: no limit).
    pub max_rounds: u32,
    /// Input + output tokens one turn may spend; checked after each step (`None`: no limit).
    pub token_budget: Option<u64>,
    /// Tool calls failing in a row before the turn stops (`0`: never).
    pub consecutive_errors: u32,
    /// The turn ends once a call of this tool has completed.
    pub stop_on_tool: Option<String>,
    /// The turn ends once the model's text matches this pattern.
    pub stop_on_content: Option<ContentPattern>,
    pub loop_detection: LoopLimits,
    /// Retries of a failed model request (429, 5xx, dropped connection).
    pub retries: u32,
    /// First retry delay; each retry doubles it unless the server sends `Retry-After`.
    pub retry_base: Duration,
    /// The longest a tool other than `bash` may run (`bash` has its own `timeout_ms`).
    pub tool_timeout: Duration,
    /// How often an answer cut off inside a tool call's arguments is asked to continue.
    pub max_continuations: u32,
    /// How many `task` calls of one step run at once (`[subagents] max_concurrent`).
    pub tasks_at_once: usize,
    /// The largest image file `read` sends to the model, in bytes (`[tools] image_max_bytes`).
    pub image_max_bytes: u64,
    /// What the `fetch` tool may reach and for how long (`[fetch]`).
    pub fetch: super::Fetch,
    /// The checkers run after `write` and `edit` (`[checks]`).
    pub checks: std::sync::Arc<super::Checks>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            stream_idle_timeout: Duration::from_secs(120),
            step_timeout: Duration::from_secs(300),
            timeout: Some(Duration::from_secs(600)),
            max_rounds: 50,
            token_budget: None,
            consecutive_errors: 5,
            stop_on_tool: None,
            stop_on_content: None,
            loop_detection: LoopLimits::default(),
            retries: 2,
            retry_base: Duration::from_millis(500),
            tool_timeout: Duration::from_secs(30),
            max_continuations: 2,
            tasks_at_once: 4,
            image_max_bytes: crate::images::DEFAULT_IMAGE_MAX_BYTES,
            fetch: super::Fetch::default(),
            checks: std::sync::Arc::default(),
        }
    }
}

/// When repeated, similar tool calls count as a loop (0 turns a tier off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopLimits {
    /// Similar calls that make the model get a warning.
    pub warn: u32,
    /// Similar calls that take the tool away for `cooldown_rounds` model requests.
    pub cooldown: u32,
    /// Similar calls that end the turn.
    pub stop: u32,
    pub cooldown_rounds: u32,
    /// How many recent calls of the turn are compared.
    pub window: usize,
}

impl Default for LoopLimits {
    fn default() -> Self {
        Self { warn: 3, cooldown: 5, stop: 8, cooldown_rounds: 3, window: 16 }
    }
}

impl LoopLimits {
    pub const OFF: Self = Self { warn: 0, cooldown: 0, stop: 0, cooldown_rounds: 0, window: 0 };
}

/// A `stop_on_content` regular expression, compiled once.
#[derive(Clone, Debug)]
pub struct ContentPattern {
    pub source: String,
    matcher: RegexMatcher,
}

impl ContentPattern {
    pub fn new(source: &str) -> Result<Self, String> {
        let matcher = RegexMatcherBuilder::new().multi_line(true).build(source).map_err(|err| err.to_string())?;
        Ok(Self { source: source.to_owned(), matcher })
    }

    pub fn is_match(&self, text: &str) -> bool {
        self.matcher.is_match(text.as_bytes()).unwrap_or(false)
    }
}

/// How history is compacted when the context fills up (`[compaction]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
    /// Compact automatically before a request once the context reaches the threshold.
    pub auto: bool,
    /// Tokens kept free below the window: the threshold is `window − min(reserve, max_output)`.
    pub reserve_tokens: u64,
    /// User-led turns kept verbatim after the summary.
    pub tail_turns: usize,
    /// The kept turns may use at most this share of the usable window, in percent.
    pub tail_budget_pct: u64,
    /// The model that writes summaries (`provider/model`); `None`: the session's model.
    pub model: Option<String>,
    /// Output cap of one summary.
    pub summary_max_tokens: u64,
    /// How long one summary request may take.
    pub timeout: Duration,
    /// Retries of a summary request that failed transiently.
    pub retries: u32,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            auto: true,
            reserve_tokens: 20_000,
            tail_turns: 2,
            tail_budget_pct: 25,
            model: None,
            summary_max_tokens: 4_000,
            timeout: Duration::from_secs(30),
            retries: 2,
        }
    }
}

/// `[limits]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    stream_idle_timeout_secs: Option<u64>,
    step_timeout_secs: Option<u64>,
    timeout_secs: Option<u64>,
    max_rounds: Option<u32>,
    token_budget: Option<u64>,
    consecutive_errors: Option<u32>,
    stop_on_tool: Option<String>,
    stop_on_content: Option<String>,
    #[serde(default)]
    loop_detection: FileLoop,
    retries: Option<u32>,
    retry_base_ms: Option<u64>,
    tool_timeout_secs: Option<u64>,
    max_continuations: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLoop {
    enabled: Option<bool>,
    warn: Option<u32>,
    cooldown: Option<u32>,
    stop: Option<u32>,
    cooldown_rounds: Option<u32>,
    window: Option<usize>,
}

/// `[compaction]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCompaction {
    auto: Option<bool>,
    reserve_tokens: Option<u64>,
    tail_turns: Option<usize>,
    tail_budget_pct: Option<u64>,
    model: Option<String>,
    summary_max_tokens: Option<u64>,
    timeout_secs: Option<u64>,
    retries: Option<u32>,
}

fn secs(value: Option<u64>, default: Duration) -> Duration {
    value.map_or(default, Duration::from_secs)
}

/// `0` in the file turns a limit off.
fn nonzero(value: Option<u64>, default: Option<u64>) -> Option<u64> {
    match value {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    }
}

impl FileLimits {
    /// The limits this table asks for; an invalid `stop_on_content` pattern is an error that
    /// names it.
    pub(super) fn resolve(self) -> Result<Limits, String> {
        let d = Limits::default();
        let stop_on_content = match self.stop_on_content.filter(|p| !p.is_empty()) {
            Some(pattern) => Some(
                ContentPattern::new(&pattern)
                    .map_err(|err| format!("[limits] stop_on_content = {pattern:?} is not a valid regex: {err}"))?,
            ),
            None => None,
        };
        let l = self.loop_detection;
        let dl = LoopLimits::default();
        let loop_detection = if l.enabled == Some(false) {
            LoopLimits::OFF
        } else {
            LoopLimits {
                warn: l.warn.unwrap_or(dl.warn),
                cooldown: l.cooldown.unwrap_or(dl.cooldown),
                stop: l.stop.unwrap_or(dl.stop),
                cooldown_rounds: l.cooldown_rounds.unwrap_or(dl.cooldown_rounds),
                window: l.window.unwrap_or(dl.window),
            }
        };
        Ok(Limits {
            stream_idle_timeout: secs(self.stream_idle_timeout_secs, d.stream_idle_timeout),
            step_timeout: secs(self.step_timeout_secs, d.step_timeout),
            timeout: nonzero(self.timeout_secs, d.timeout.map(|t| t.as_secs())).map(Duration::from_secs),
            max_rounds: self.max_rounds.unwrap_or(d.max_rounds),
            token_budget: nonzero(self.token_budget, d.token_budget),
            consecutive_errors: self.consecutive_errors.unwrap_or(d.consecutive_errors),
            stop_on_tool: self.stop_on_tool.filter(|t| !t.is_empty()),
            stop_on_content,
            loop_detection,
            retries: self.retries.unwrap_or(d.retries),
            retry_base: self.retry_base_ms.map_or(d.retry_base, Duration::from_millis),
            tool_timeout: secs(self.tool_timeout_secs, d.tool_timeout),
            max_continuations: self.max_continuations.unwrap_or(d.max_continuations),
            tasks_at_once: d.tasks_at_once,
            image_max_bytes: d.image_max_bytes,
            fetch: d.fetch,
            checks: d.checks,
        })
    }
}

impl FileCompaction {
    pub(super) fn resolve(self, normalize: impl Fn(&str) -> String) -> Compaction {
        let d = Compaction::default();
        Compaction {
            auto: self.auto.unwrap_or(d.auto),
            reserve_tokens: self.reserve_tokens.unwrap_or(d.reserve_tokens),
            tail_turns: self.tail_turns.unwrap_or(d.tail_turns),
            tail_budget_pct: self.tail_budget_pct.unwrap_or(d.tail_budget_pct).min(100),
            model: self.model.as_deref().map(normalize),
            summary_max_tokens: self.summary_max_tokens.unwrap_or(d.summary_max_tokens).max(256),
            timeout: secs(self.timeout_secs, d.timeout),
            retries: self.retries.unwrap_or(d.retries),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_turns_a_limit_off_and_a_bad_pattern_is_named() {
        let file: FileLimits =
            toml::from_str("timeout_secs = 0\ntoken_budget = 5000\n[loop_detection]\nenabled = false\n").unwrap();
        let limits = file.resolve().unwrap();
        assert_eq!(limits.timeout, None);
        assert_eq!(limits.token_budget, Some(5000));
        assert_eq!(limits.loop_detection, LoopLimits::OFF);
        assert_eq!(limits.max_rounds, 50);

        let file: FileLimits = toml::from_str("stop_on_content = \"(unclosed\"\n").unwrap();
        let err = file.resolve().unwrap_err();
        assert!(err.contains("stop_on_content") && err.contains("(unclosed"), "{err}");

        let file: FileLimits = toml::from_str("stop_on_content = \"^DONE$\"\n").unwrap();
        let pattern = file.resolve().unwrap().stop_on_content.unwrap();
        assert!(pattern.is_match("work\nDONE\n") && !pattern.is_match("not done"));
    }
}

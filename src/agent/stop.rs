//! Stop conditions: the seven limits that end a turn the model would otherwise continue.
//!
//! [`Stats`] accumulates small counters as steps end (never per-step result graphs);
//! [`Stats::check`] evaluates the configured conditions in a fixed order after each step's tools
//! have run, and the first that holds wins. Loop detection's verdicts come from `loops`; the
//! total timeout is enforced by the driver's deadline and only reported through [`Stop`].
//! [`StopReason`] is what the editor is told of a finished turn; a limit that stopped it says it
//! was cut short, except a tool or a match named to stop at, which end it as the model would.

use std::time::Duration;

use crate::config::Limits;
use crate::history::{CallState, Message, Part};

/// What the editor is told about a finished turn (ACP `stopReason`); as JSON, its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

impl StopReason {
    /// Its name as ACP spells it (`end_turn`, …), as telemetry reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::MaxTokens => "max_tokens",
            Self::MaxTurnRequests => "max_turn_requests",
            Self::Refusal => "refusal",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A configured limit that ended the turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    MaxRounds(u32),
    Timeout(Duration),
    TokenBudget { spent: u64, budget: u64 },
    ConsecutiveErrors(u32),
    StopOnTool(String),
    ContentMatch(String),
    Loop { tool: String, count: u32 },
}

impl Stop {
    /// What the editor is told: the natural stops end the turn, the limits say it was cut short.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            Stop::StopOnTool(_) | Stop::ContentMatch(_) => StopReason::EndTurn,
            Stop::MaxRounds(_)
            | Stop::Timeout(_)
            | Stop::TokenBudget { .. }
            | Stop::ConsecutiveErrors(_)
            | Stop::Loop { .. } => StopReason::MaxTurnRequests,
        }
    }

    /// The short message the user sees, naming the limit and how to go on.
    pub fn message(&self) -> String {
        let more = "Send another message to continue, or raise the limit in config.toml";
        match self {
            Stop::MaxRounds(n) => {
                format!("Stopped: this turn reached its limit of {n} model requests. {more} ([limits] max_rounds).")
            }
            Stop::Timeout(limit) => {
                format!(
                    "Stopped: this turn ran for its limit of {} s. {more} ([limits] timeout_secs).",
                    limit.as_secs()
                )
            }
            Stop::TokenBudget { spent, budget } => format!(
                "Stopped: this turn used {spent} tokens, over its budget of {budget}. {more} ([limits] token_budget)."
            ),
            Stop::ConsecutiveErrors(n) => format!(
                "Stopped: {n} tool calls failed in a row. Check the errors above, then send another message to continue ([limits] consecutive_errors)."
            ),
            Stop::StopOnTool(tool) => format!("Stopped after `{tool}` completed ([limits] stop_on_tool)."),
            Stop::ContentMatch(pattern) => {
                format!("Stopped: the answer matched `{pattern}` ([limits] stop_on_content).")
            }
            Stop::Loop { tool, count } => format!(
                "Stopped: `{tool}` was called {count} times with similar arguments, which looks like a loop. Say how to proceed, or send \"keep going\" to continue ([limits.loop_detection])."
            ),
        }
    }
}

/// What the conditions look at, updated as each step ends.
#[derive(Debug, Default)]
pub struct Stats {
    pub rounds: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Tool calls that failed since the last one that succeeded.
    pub consecutive_errors: u32,
}

impl Stats {
    /// Takes in a finished step's assistant message.
    pub fn add_step(&mut self, message: &Message) {
        if let Some(usage) = message.meta.usage {
            self.input_tokens += usage.prompt();
            self.output_tokens += usage.output;
        }
        for part in &message.parts {
            // A search the provider ran and failed is not a call of the model's that failed here.
            if let Part::Tool(tool) = part
                && !tool.hosted
            {
                match tool.state {
                    CallState::Succeeded => self.consecutive_errors = 0,
                    CallState::Failed => self.consecutive_errors += 1,
                    CallState::New
                    | CallState::Running
                    | CallState::Suspended
                    | CallState::Resuming
                    | CallState::Cancelled => {}
                }
            }
        }
    }

    /// The first condition that holds after `step`, in the order of the specification.
    pub fn check(&self, limits: &Limits, step: Option<&Message>) -> Option<Stop> {
        if limits.max_rounds > 0 && self.rounds >= limits.max_rounds {
            return Some(Stop::MaxRounds(limits.max_rounds));
        }
        let spent = self.input_tokens + self.output_tokens;
        if let Some(budget) = limits.token_budget
            && spent >= budget
        {
            return Some(Stop::TokenBudget { spent, budget });
        }
        if limits.consecutive_errors > 0 && self.consecutive_errors >= limits.consecutive_errors {
            return Some(Stop::ConsecutiveErrors(limits.consecutive_errors));
        }
        let step = step?;
        if let Some(tool) = &limits.stop_on_tool
            && step
                .parts
                .iter()
                .any(|p| matches!(p, Part::Tool(t) if t.name == *tool && t.state == CallState::Succeeded))
        {
            return Some(Stop::StopOnTool(tool.clone()));
        }
        if let Some(pattern) = &limits.stop_on_content {
            let text: String = crate::history::texts(&step.parts).collect();
            if pattern.is_match(&text) {
                return Some(Stop::ContentMatch(pattern.source.clone()));
            }
        }
        None
    }
}

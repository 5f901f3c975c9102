//! What ends a turn, as a table: the limits and the model's answers → how the turn ended, the
//! notices the user saw, and how many requests the model got. Covers the model's own stops, the
//! stop conditions checked at step end (in their order), loop detection, continuations of a
//! cut-off call, and the retries of a failed request.

use super::*;
use crate::config::{ContentPattern, LoopLimits};
use crate::history::Usage;

const GLOB: &str = r#"{"pattern":"*.rs"}"#;

fn glob(id: &str) -> Answer {
    ok(calls(&[(id, "glob", GLOB)]))
}

/// A glob call whose answer also says `said` and reports `usage`.
fn glob_saying(id: &str, said: &str, usage: Usage) -> Answer {
    let mut events = vec![StreamEvent::TextDelta(said.to_owned()), StreamEvent::Usage(usage)];
    events.extend(calls(&[(id, "glob", GLOB)]));
    ok(events)
}

fn failing(id: &str) -> Answer {
    ok(calls(&[(id, "teleport", "{}")]))
}

fn finished(reason: FinishReason, events: Vec<StreamEvent>) -> Answer {
    let mut events = events;
    events.push(StreamEvent::Finish(reason));
    ok(events)
}

fn server_error() -> Answer {
    Err(LlmError::Status { url: "u".into(), status: 503, detail: "busy".into(), retry_after: None })
}

/// One row: the limits and the model's answers, and how the turn must end.
struct Row {
    name: &'static str,
    limits: Limits,
    script: Vec<Answer>,
    /// The stop reason, or a piece of the error.
    ends: Result<StopReason, &'static str>,
    /// A piece of each notice the user sees, in order (and no others).
    notices: &'static [&'static str],
    requests: usize,
    /// A piece of the last request's last message.
    finally_told: Option<&'static str>,
}

fn rows() -> Vec<Row> {
    let limits = Limits { retry_base: std::time::Duration::ZERO, ..Limits::default() };
    let base = |limits: &Limits| Row {
        name: "",
        limits: limits.clone(),
        script: Vec::new(),
        ends: Ok(StopReason::EndTurn),
        notices: &[],
        requests: 1,
        finally_told: None,
    };
    let usage = Usage { input: 600, output: 500, ..Usage::default() };
    vec![
        Row { name: "the model ends its answer", script: vec![ok(text("done"))], ..base(&limits) },
        Row {
            name: "the output limit without a call is the model's max-tokens stop",
            script: vec![finished(FinishReason::Length, vec![StreamEvent::TextDelta("and then".into())])],
            ends: Ok(StopReason::MaxTokens),
            ..base(&limits)
        },
        Row {
            name: "a filtered answer is a refusal",
            script: vec![finished(FinishReason::ContentFilter, vec![StreamEvent::TextDelta("no".into())])],
            ends: Ok(StopReason::Refusal),
            ..base(&limits)
        },
        Row {
            name: "max_rounds stops after that many requests and says which limit",
            limits: Limits { max_rounds: 2, ..limits.clone() },
            script: vec![glob("a"), ok(calls(&[("b", "glob", r#"{"pattern":"*.md"}"#)])), ok(text("never"))],
            ends: Ok(StopReason::MaxTurnRequests),
            notices: &["limit of 2 model requests"],
            requests: 2,
            ..base(&limits)
        },
        Row {
            name: "the token budget is checked after the step's tools",
            limits: Limits { token_budget: Some(1_000), ..limits.clone() },
            script: vec![glob_saying("a", "looking", usage), ok(text("never"))],
            ends: Ok(StopReason::MaxTurnRequests),
            notices: &["used 1100 tokens, over its budget of 1000"],
            ..base(&limits)
        },
        Row {
            name: "max_rounds is checked before the token budget",
            limits: Limits { max_rounds: 1, token_budget: Some(1_000), ..limits.clone() },
            script: vec![glob_saying("a", "looking", usage)],
            ends: Ok(StopReason::MaxTurnRequests),
            notices: &["limit of 1 model requests"],
            ..base(&limits)
        },
        Row {
            name: "tool calls failing in a row stop the turn",
            limits: Limits { consecutive_errors: 2, ..limits.clone() },
            script: vec![failing("a"), failing("b"), ok(text("never"))],
            ends: Ok(StopReason::MaxTurnRequests),
            notices: &["2 tool calls failed in a row"],
            requests: 2,
            ..base(&limits)
        },
        Row {
            name: "a call that succeeds starts the count of failures again",
            limits: Limits { consecutive_errors: 2, ..limits.clone() },
            script: vec![failing("a"), glob("b"), failing("c"), ok(text("done"))],
            requests: 4,
            ..base(&limits)
        },
        Row {
            name: "stop_on_tool ends the turn naturally once that tool succeeded",
            limits: Limits { stop_on_tool: Some("glob".into()), ..limits.clone() },
            script: vec![glob("a"), ok(text("never"))],
            notices: &["Stopped after `glob` completed"],
            ..base(&limits)
        },
        Row {
            name: "stop_on_tool does not count a failed call of that tool",
            limits: Limits { stop_on_tool: Some("teleport".into()), ..limits.clone() },
            script: vec![failing("a"), ok(text("done"))],
            requests: 2,
            ..base(&limits)
        },
        Row {
            name: "stop_on_content ends the turn when the step's text matches",
            limits: Limits { stop_on_content: ContentPattern::new("ALL (DONE|FINISHED)").ok(), ..limits.clone() },
            script: vec![glob_saying("a", "ALL FINISHED", Usage::default()), ok(text("never"))],
            notices: &["matched `ALL (DONE|FINISHED)`"],
            ..base(&limits)
        },
        Row {
            name: "similar calls over the loop limit stop the turn",
            limits: Limits { loop_detection: LoopLimits { stop: 3, window: 16, ..LoopLimits::OFF }, ..limits.clone() },
            script: vec![glob("a"), glob("b"), glob("c"), ok(text("never"))],
            ends: Ok(StopReason::MaxTurnRequests),
            notices: &["`glob` was called 3 times with similar arguments"],
            requests: 3,
            ..base(&limits)
        },
        Row {
            name: "similar calls at the warning count get one reminder with the next request",
            limits: Limits { loop_detection: LoopLimits { warn: 2, window: 16, ..LoopLimits::OFF }, ..limits.clone() },
            script: vec![glob("a"), glob("b"), ok(text("done"))],
            requests: 3,
            finally_told: Some("[System Notice — Warning] You have called glob 2 times"),
            ..base(&limits)
        },
        Row {
            name: "a call cut off by the output limit is asked to continue, up to max_continuations",
            limits: Limits { max_continuations: 1, ..limits.clone() },
            script: vec![
                finished(FinishReason::Length, calls(&[("a", "glob", "{\"pat")])[..1].to_vec()),
                finished(FinishReason::Length, calls(&[("b", "glob", "{\"pat")])[..1].to_vec()),
            ],
            ends: Ok(StopReason::MaxTokens),
            requests: 2,
            finally_told: Some("cut off at the output-token limit while writing a tool call"),
            ..base(&limits)
        },
        Row {
            name: "a failed request is retried with a notice for each retry",
            script: vec![server_error(), server_error(), ok(text("done"))],
            notices: &["retry 1 of 2", "retry 2 of 2"],
            requests: 3,
            ..base(&limits)
        },
        Row {
            name: "when the retries are spent the error ends the turn",
            script: vec![server_error(), server_error(), server_error()],
            ends: Err("HTTP 503"),
            notices: &["retry 1 of 2", "retry 2 of 2"],
            requests: 3,
            ..base(&limits)
        },
        Row {
            name: "an error a retry cannot fix ends the turn at once",
            script: vec![Err(LlmError::UnknownModel { model: "m".into(), url: "u".into(), detail: "no".into() })],
            ends: Err("is not available"),
            ..base(&limits)
        },
        Row {
            name: "a stream that breaks after an answer began is an error, and what came is kept",
            script: vec![Ok(vec![Ok(StreamEvent::TextDelta("half".into())), Err(LlmError::Reset("closed".into()))])],
            ends: Err("broke"),
            ..base(&limits)
        },
        Row {
            name: "a stream that breaks before its first token is sent again",
            script: vec![Ok(vec![Err(LlmError::Reset("closed".into()))]), ok(text("done"))],
            requests: 2,
            notices: &["retry 1 of 2"],
            ..base(&limits)
        },
    ]
}

#[tokio::test]
async fn turns_end_as_the_table_says() {
    for row in rows() {
        let name = row.name;
        let outcome = drive(Setup { script: row.script, limits: row.limits, ..Setup::default() }).await;
        match (&outcome.result, row.ends) {
            (Ok(got), Ok(want)) => assert_eq!(*got, want, "{name}"),
            (Err(err), Err(piece)) => assert!(err.to_string().contains(piece), "{name}: {err}"),
            (got, want) => panic!("{name}: ended {got:?}, expected {want:?}"),
        }
        let notices = outcome.notices();
        assert_eq!(notices.len(), row.notices.len(), "{name}: {notices:?}");
        for (notice, piece) in notices.iter().zip(row.notices) {
            assert!(notice.contains(piece), "{name}: {notice:?} does not say {piece:?}");
        }
        assert_eq!(outcome.sent.len(), row.requests, "{name}: requests sent");
        let retries = outcome.events.iter().filter(|event| matches!(event, AgentEvent::Retrying { .. })).count();
        let notified = row.notices.iter().filter(|piece| piece.starts_with("retry")).count();
        assert_eq!(retries, notified, "{name}: each retry sets the session's status");
        if let Some(piece) = row.finally_told {
            let last = outcome.sent.last().and_then(|sent| sent.texts.last()).cloned().unwrap_or_default();
            assert!(last.contains(piece), "{name}: the last request ended with {last:?}");
        }
        assert_eq!(outcome.phases().last(), Some(&Phase::RunEnd), "{name}: the run end comes");
    }
}

#[test]
fn the_conditions_are_checked_in_their_order() {
    let limits = Limits {
        max_rounds: 3,
        token_budget: Some(100),
        consecutive_errors: 2,
        stop_on_content: ContentPattern::new("done").ok(),
        ..Limits::default()
    };
    let said = Message::new(Role::Assistant, vec![Part::Text { text: "done".into() }], MessageMeta::default());
    let check = |rounds, tokens, errors| {
        let stats = Stats { rounds, input_tokens: tokens, output_tokens: 0, consecutive_errors: errors };
        stats.check(&limits, Some(&said))
    };
    assert_eq!(check(3, 100, 2), Some(Stop::MaxRounds(3)));
    assert_eq!(check(2, 100, 2), Some(Stop::TokenBudget { spent: 100, budget: 100 }));
    assert_eq!(check(2, 99, 2), Some(Stop::ConsecutiveErrors(2)));
    assert_eq!(check(2, 99, 1), Some(Stop::ContentMatch("done".into())));
    let off = Limits { max_rounds: 0, consecutive_errors: 0, ..Limits::default() };
    let stats = Stats { rounds: 1_000, input_tokens: u64::MAX / 2, output_tokens: 0, consecutive_errors: 1_000 };
    assert_eq!(stats.check(&off, Some(&said)), None, "0 and None turn a condition off");
}

//! Compaction as a table: a history, the window and what the summarizer answers → the method
//! chosen (prune, one summary, a rolling summary in pieces, head and tail), where the kept tail
//! starts, how many messages were summarized and how many requests it took; or why nothing was
//! done, with the history left as it was. Then the Compacting state inside a turn: at the
//! threshold, and after the provider refused a request as too long.

use super::*;
use crate::config::Compaction as Settings;
use crate::history::view::{self, Compaction, Method, SUMMARY_PREFIX};
use crate::history::{CallState, Usage};
use crate::llm::retry::RetryPolicy;
use compact::{CompactError, Job, Summarizer};

const WINDOW: u64 = 32_000;
const MAX_OUTPUT: u64 = 4_000;

fn user(said: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: said.into() }], MessageMeta::default())
}

/// A user turn: the question, then an answer of `chars` characters, after a tool call whose
/// output has `output` characters if `output` is not 0.
fn turn(n: usize, chars: usize, output: usize) -> Vec<Message> {
    let mut parts = Vec::new();
    if output > 0 {
        let mut tool = ToolPart::new(format!("c{n}"), "read".into());
        tool.input = format!(r#"{{"path":"f{n}.rs"}}"#);
        tool.state = CallState::Succeeded;
        tool.output = Some("x".repeat(output));
        parts.push(Part::Tool(tool));
    }
    parts.push(Part::Text { text: format!("answer {n} ").repeat(chars / 9 + 1) });
    vec![user(&format!("question {n}")), Message::new(Role::Assistant, parts, MessageMeta::default())]
}

fn turns(count: usize, chars: usize, output: usize) -> Vec<Message> {
    (0..count).flat_map(|n| turn(n, chars, output)).collect()
}

/// `history` with a marker summarizing what came before `tail` (an index), as an earlier
/// compaction left it.
fn compacted(mut history: Vec<Message>, tail: usize, summary: &str) -> Vec<Message> {
    let marker = Compaction {
        summary: summary.into(),
        tail_start: Some(history[tail].id.clone()),
        pruned_before: None,
        auto: true,
        method: Method::Summary,
        tokens_before: 0,
        tokens_after: 0,
        summarized: tail,
    };
    history.push(Message::new(Role::Assistant, vec![Part::Compaction(marker)], MessageMeta::default()));
    history
}

/// What a row must come to.
enum Want {
    Made {
        method: Method,
        summarized: usize,
        /// Indexes in the history: where the kept tail starts, before which outputs are pruned.
        tail: Option<usize>,
        pruned_before: Option<usize>,
    },
    /// A piece of the error.
    Refused(&'static str),
}

struct Row {
    name: &'static str,
    history: Vec<Message>,
    /// Started by the context filling up (keeps a tail), or by `/compact`.
    auto: bool,
    summarizer_window: u64,
    answers: Vec<Answer>,
    want: Want,
    calls: usize,
    /// A piece of the first summary request.
    told: Option<&'static str>,
}

fn rows() -> Vec<Row> {
    let summary = |said: &str| ok(text(said));
    let base = || Row {
        name: "",
        history: Vec::new(),
        auto: true,
        summarizer_window: 100_000,
        answers: (0..8).map(|n| summary(&format!("summary {n}"))).collect(),
        want: Want::Refused(""),
        calls: 1,
        told: None,
    };
    vec![
        Row {
            name: "old tool outputs are pruned first when that frees enough: no model call",
            history: turns(4, 40, 20_000),
            want: Want::Made { method: Method::Pruned, summarized: 0, tail: Some(0), pruned_before: Some(6) },
            calls: 0,
            ..base()
        },
        Row {
            name: "a summary of what comes before the latest turn when pruning is not enough",
            history: turns(4, 24_000, 0),
            want: Want::Made { method: Method::Summary, summarized: 6, tail: Some(6), pruned_before: None },
            told: Some("Conversation to summarize:\nUser: question 0"),
            ..base()
        },
        Row {
            name: "the kept tail holds the last two turns when they fit a quarter of the window",
            history: turns(6, 12_000, 0),
            want: Want::Made { method: Method::Summary, summarized: 8, tail: Some(8), pruned_before: None },
            ..base()
        },
        Row {
            name: "a transcript too big for the summarizer is summarized piece by piece",
            history: turns(4, 24_000, 0),
            summarizer_window: 12_000,
            want: Want::Made { method: Method::Chunked, summarized: 6, tail: Some(6), pruned_before: None },
            calls: 6,
            ..base()
        },
        Row {
            name: "too many pieces: the head and the tail are summarized, the middle dropped",
            history: turns(7, 24_000, 0),
            summarizer_window: 12_000,
            want: Want::Made { method: Method::DropMiddle, summarized: 12, tail: Some(12), pruned_before: None },
            told: Some("parts of the conversation dropped to fit"),
            ..base()
        },
        Row {
            name: "the previous summary is folded in, and only what came after it is summarized",
            history: compacted(turns(5, 24_000, 0), 2, "they set up the parser"),
            want: Want::Made { method: Method::Summary, summarized: 6, tail: Some(8), pruned_before: None },
            told: Some("Previous summary:\nthey set up the parser"),
            ..base()
        },
        Row {
            name: "only the turn in progress: nothing to compact",
            history: vec![user(&"a long question ".repeat(10_000))],
            want: Want::Refused("nothing old enough"),
            calls: 0,
            ..base()
        },
        Row {
            name: "/compact keeps no tail",
            history: turns(2, 100, 0),
            auto: false,
            want: Want::Made { method: Method::Summary, summarized: 4, tail: None, pruned_before: None },
            ..base()
        },
        Row {
            name: "/compact of an empty session has nothing to do",
            auto: false,
            want: Want::Refused("nothing old enough"),
            calls: 0,
            ..base()
        },
        Row {
            name: "a summarizer error a retry cannot fix fails the compaction",
            history: turns(4, 24_000, 0),
            answers: vec![Err(LlmError::UnknownModel { model: "small".into(), url: "u".into(), detail: "no".into() })],
            want: Want::Refused("the summarizer failed"),
            ..base()
        },
        Row {
            name: "a summarizer error that may pass is retried",
            history: turns(4, 24_000, 0),
            answers: vec![Err(LlmError::Reset("closed".into())), summary("after a retry")],
            want: Want::Made { method: Method::Summary, summarized: 6, tail: Some(6), pruned_before: None },
            calls: 2,
            ..base()
        },
        Row {
            name: "an empty summary is a failure, not an empty marker",
            history: turns(4, 24_000, 0),
            answers: vec![summary("  \n")],
            want: Want::Refused("empty summary"),
            ..base()
        },
    ]
}

#[tokio::test]
async fn compaction_plans_follow_the_table() {
    for row in rows() {
        let name = row.name;
        let provider = Scripted::new(row.answers);
        let summarizer = Summarizer {
            provider: &provider,
            model: "small".into(),
            model_ref: "test/small".into(),
            info: plain_model(row.summarizer_window, 4_000),
            settings: Settings { reserve_tokens: 4_000, ..Settings::default() },
            retry: RetryPolicy { retries: 1, base: std::time::Duration::ZERO },
        };
        let mut history = row.history;
        let before = history.clone();
        let mut log = Log::default();
        let cancel = CancellationToken::new();
        let job = Job {
            history: &mut history,
            recorder: &mut log,
            cancel: &cancel,
            window: WINDOW,
            max_output: MAX_OUTPUT,
            context_used: 0,
            auto: row.auto,
            instructions: None,
            spent: 0.0,
            trace: None,
        };
        let result = compact::run(&summarizer, job).await;
        let sent = provider.sent();
        assert_eq!(sent.len(), row.calls, "{name}: summary requests");
        assert!(sent.iter().all(|s| s.system.starts_with("You compact")), "{name}: the summarizer's instructions");
        if let Some(piece) = row.told {
            let first = sent.first().and_then(|s| s.texts.first()).cloned().unwrap_or_default();
            assert!(first.contains(piece), "{name}: the summarizer was told {first:.300}");
        }
        match (result, row.want) {
            (Ok(made), Want::Made { method, summarized, tail, pruned_before }) => {
                let c = &made.compaction;
                let index = |id: &Option<crate::ids::MessageId>| {
                    id.as_ref().and_then(|id| before.iter().position(|m| m.id == *id))
                };
                assert_eq!(c.method, method, "{name}: method");
                assert_eq!(c.summarized, summarized, "{name}: messages summarized");
                assert_eq!(index(&c.tail_start), tail, "{name}: tail start");
                assert_eq!(index(&c.pruned_before), pruned_before, "{name}: pruned before");
                assert!(c.tokens_after < c.tokens_before, "{name}: {} → {}", c.tokens_before, c.tokens_after);
                assert_eq!(history.len(), before.len() + 1, "{name}: a marker is added, nothing removed");
                assert_eq!(view::marker(&history[before.len()]), Some(c), "{name}: the marker is the result");
                assert!(
                    matches!(log.0.last(), Some(AgentEvent::ContextUsage { used, .. }) if *used == c.tokens_after),
                    "{name}: the new context size is reported"
                );
            }
            (Err(err), Want::Refused(piece)) => {
                assert!(err.to_string().contains(piece), "{name}: {err}");
                assert_eq!(history, before, "{name}: a failed compaction leaves the history as it was");
                assert!(
                    matches!(log.0.last(), Some(AgentEvent::CompactionFailed { .. })),
                    "{name}: the failure is recorded"
                );
            }
            (Ok(made), Want::Refused(piece)) => panic!("{name}: compacted ({:?}), expected {piece:?}", made.compaction),
            (Err(err), Want::Made { .. }) => panic!("{name}: failed with {err}"),
        }
    }
}

#[tokio::test]
async fn a_cancel_stops_a_compaction_and_changes_nothing() {
    let provider = Scripted::new(vec![ok(text("never read"))]);
    let summarizer = Summarizer {
        provider: &provider,
        model: "small".into(),
        model_ref: "test/small".into(),
        info: plain_model(100_000, 4_000),
        settings: Settings::default(),
        retry: RetryPolicy { retries: 1, base: std::time::Duration::ZERO },
    };
    let mut history = turns(4, 24_000, 0);
    let before = history.clone();
    let mut log = Log::default();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let job = Job {
        history: &mut history,
        recorder: &mut log,
        cancel: &cancel,
        window: WINDOW,
        max_output: MAX_OUTPUT,
        context_used: 0,
        auto: true,
        instructions: None,
        spent: 0.0,
        trace: None,
    };
    assert_eq!(compact::run(&summarizer, job).await.err(), Some(CompactError::Cancelled));
    assert_eq!(history, before);
}

fn used(tokens: u64) -> Usage {
    Usage { input: tokens, ..Usage::default() }
}

#[tokio::test]
async fn the_threshold_compacts_before_the_request_and_the_request_carries_the_summary() {
    let mut history = turns(4, 24_000, 0);
    history[7].meta.usage = Some(used(30_000));
    let outcome = drive(Setup {
        script: vec![ok(text("done"))],
        history,
        info: plain_model(WINDOW, MAX_OUTPUT),
        context_used: 30_000,
        summaries: Some(vec![ok(text("they wrote a parser"))]),
        compaction: Settings { reserve_tokens: 4_000, ..Settings::default() },
        ..Setup::default()
    })
    .await;
    use Phase::*;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert_eq!(
        outcome.phases(),
        [RunStart, StepStart, BeforeInference, BeforeInference, AfterInference, StepEnd, RunEnd]
    );
    assert_eq!(outcome.summarized.len(), 1);
    let sent = &outcome.sent[0].texts;
    assert_eq!(sent[0], format!("{SUMMARY_PREFIX}\n\nthey wrote a parser"), "the summary comes first");
    assert_eq!(sent.last().map(String::as_str), Some("go"), "then the tail, the prompt included");
    assert_eq!(sent.len(), 1 + 2 + 1, "summary, the kept turn, the prompt");
}

#[tokio::test]
async fn a_request_refused_as_too_long_is_compacted_once_and_sent_once_more() {
    let too_long = || Err(LlmError::ContextTooLong { detail: "prompt is too long".into() });
    let setup = |script: Vec<Answer>| Setup {
        script,
        history: turns(4, 2_000, 0),
        summaries: Some(vec![ok(text("summary one")), ok(text("summary two"))]),
        ..Setup::default()
    };
    let outcome = drive(setup(vec![too_long(), ok(text("done"))])).await;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert_eq!((outcome.sent.len(), outcome.summarized.len()), (2, 1));
    assert!(outcome.sent[1].texts[0].ends_with("summary one"), "the second try carries the summary");

    let outcome = drive(setup(vec![too_long(), too_long(), ok(text("never"))])).await;
    assert!(matches!(outcome.result, Err(TurnError::Model(LlmError::ContextTooLong { .. }))), "{:?}", outcome.result);
    assert_eq!((outcome.sent.len(), outcome.summarized.len()), (2, 1), "one compaction and one retry, no more");
}

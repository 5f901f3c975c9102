//! The turn loop's own costs, without a network or a disk: `cargo bench --bench turn`.
//!
//! 1. Overhead per step: a scripted model that answers at once, and a tool (`todo`) that takes
//!    no time, so what is measured is the driver — phases, stop conditions, loop guard, building
//!    the request (the model's view of the history), relaying events — per model step, for a
//!    short and a long history.
//! 2. Compaction cost on a scripted 200-turn session: how many extra model calls and tokens the
//!    summaries take, next to the tokens the session's own requests carry.
//!
//! With an `OTEL_EXPORTER_OTLP_*` endpoint set the turns export their spans and metrics as cairn
//! does (`cairn::telemetry`), which is how the telemetry-on figure is taken; without one nothing
//! is built, as in cairn.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use cairn::agent::compact::Summarizer;
use cairn::agent::prompt::{Sources, assemble};
use cairn::agent::{AgentEvent, RecordError, Recorder, Run, Toolbox, Turn, run_turn};
use cairn::config::{Compaction, Limits};
use cairn::history::{Message, MessageMeta, Part, Role, Usage};
use cairn::llm::catalog::ModelInfo;
use cairn::llm::retry::RetryPolicy;
use cairn::llm::{EventStream, FinishReason, LlmError, ModelRequest, Provider, StreamEvent, ToolCallRequest};
use cairn::permissions::Mode;
use cairn::tools::{NoEditor, Workspace};

/// Keeps nothing; counts events.
#[derive(Default)]
struct Null(u64);

#[async_trait::async_trait]
impl Recorder for Null {
    fn record(&mut self, _event: AgentEvent) {
        self.0 += 1;
    }
    async fn flush(&mut self) -> Result<(), RecordError> {
        Ok(())
    }
    fn failure(&self) -> Option<RecordError> {
        None
    }
}

/// Answers `steps − 1` times with a `todo` call (different items each time), then with text.
struct Stepper {
    left: Mutex<u32>,
}

#[async_trait::async_trait]
impl Provider for Stepper {
    async fn stream(&self, _request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let mut left = self.left.lock().unwrap();
        *left = left.saturating_sub(1);
        let events = if *left == 0 {
            vec![StreamEvent::TextDelta("done".into()), StreamEvent::Finish(FinishReason::Stop)]
        } else {
            let items = json!({"items": [{"content": format!("step {left}"), "status": "in_progress"}]});
            let call = ToolCallRequest { id: format!("c{left}"), name: "todo".into(), arguments: items.to_string() };
            vec![StreamEvent::ToolCall(call), StreamEvent::Finish(FinishReason::ToolCalls)]
        };
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

/// A model whose usage is what its requests would cost (4 characters a token): a long answer
/// per turn, and a summary when asked to compact.
#[derive(Default)]
struct Scripted {
    main_calls: AtomicU64,
    main_input: AtomicU64,
    summary_calls: AtomicU64,
    summary_input: AtomicU64,
    summary_output: AtomicU64,
}

#[async_trait::async_trait]
impl Provider for Scripted {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let input = request.messages.iter().map(|seen| seen.estimate()).sum::<u64>()
            + (request.system.len() as u64).div_ceil(4)
            + 1_500;
        let summary = request.system.starts_with("You compact");
        let text = if summary {
            self.summary_calls.fetch_add(1, Ordering::Relaxed);
            self.summary_input.fetch_add(input, Ordering::Relaxed);
            "## Goal\n- keep refactoring the parser\n".repeat(30)
        } else {
            self.main_calls.fetch_add(1, Ordering::Relaxed);
            self.main_input.fetch_add(input, Ordering::Relaxed);
            "Here is the change and why it works. ".repeat(40)
        };
        let output = (text.len() as u64).div_ceil(4);
        if summary {
            self.summary_output.fetch_add(output, Ordering::Relaxed);
        }
        let usage = Usage { input, output, ..Usage::default() };
        let events =
            vec![StreamEvent::TextDelta(text), StreamEvent::Usage(usage), StreamEvent::Finish(FinishReason::Stop)];
        Ok(futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

struct Setup {
    dir: tempfile::TempDir,
    mode: watch::Receiver<Mode>,
    _mode: watch::Sender<Mode>,
}

impl Setup {
    fn new() -> Self {
        let (tx, rx) = watch::channel(Mode::Bypass);
        Self { dir: tempfile::tempdir().unwrap(), mode: rx, _mode: tx }
    }

    /// A turn with default limits, no summarizer and nothing spent yet.
    fn turn<'a>(
        &self,
        provider: &'a dyn Provider,
        history: &'a mut Vec<Message>,
        recorder: &'a mut Null,
        rules: &'a mut Vec<cairn::permissions::Rule>,
        info: ModelInfo,
    ) -> Turn<'a> {
        Turn {
            provider,
            model: "m".into(),
            model_ref: "bench/m".into(),
            system: Arc::new(assemble(&Sources::default())),
            history,
            recorder,
            cancel: CancellationToken::new(),
            limits: Limits::default(),
            tools: Toolbox {
                workspace: Workspace::new(self.dir.path(), &[]),
                host: Arc::new(NoEditor),
                mode: self.mode.clone(),
                switch: None,
                rules,
                rulebook: None,
                remember: cairn::permissions::Scope::Session,
                process: Arc::default(),
                registry: Arc::new(cairn::tools::Registry::builtin()),
                jobs: cairn::tools::Jobs::none(),
                lsp: cairn::tools::Lsp::none(),
                checkpoints: None,
                confined: false,
            },
            info,
            thought: None,
            spent: 0.0,
            context_used: 0,
            summarizer: None,
            run: Run::default(),
        }
    }
}

fn info(window: u64, max_output: u64) -> ModelInfo {
    ModelInfo { context_window: window, max_output, prices: None, reasoning: false, images: false, web_search: false }
}

/// One turn of `steps` model steps over a history of `prior` messages; the time per step.
async fn overhead(setup: &Setup, prior: usize, steps: u32) -> Duration {
    let provider = Stepper { left: Mutex::new(steps + 1) };
    let mut history: Vec<Message> = (0..prior)
        .map(|n| {
            let role = if n % 2 == 0 { Role::User } else { Role::Assistant };
            Message::new(
                role,
                vec![Part::Text { text: "a sentence of earlier conversation ".repeat(8) }],
                MessageMeta::default(),
            )
        })
        .collect();
    let mut recorder = Null::default();
    let mut rules = Vec::new();
    let limits = Limits { max_rounds: steps + 1, ..Limits::default() };
    let turn =
        Turn { limits, ..setup.turn(&provider, &mut history, &mut recorder, &mut rules, info(1_000_000, 16_000)) };
    let started = Instant::now();
    run_turn(turn, vec![Part::Text { text: "go".into() }]).await.unwrap();
    started.elapsed() / steps
}

async fn compaction_cost(setup: &Setup, turns: usize) {
    let model = Scripted::default();
    let summarizer_model = Scripted::default();
    let window = 32_000;
    let mut history = Vec::new();
    let mut context_used = 0;
    let settings = Compaction { reserve_tokens: 4_000, ..Compaction::default() };
    for n in 0..turns {
        let mut recorder = Null::default();
        let mut rules = Vec::new();
        let summarizer = Summarizer {
            provider: &summarizer_model,
            model: "small".into(),
            model_ref: "bench/small".into(),
            info: info(128_000, 4_000),
            settings: settings.clone(),
            retry: RetryPolicy { retries: 0, base: Duration::from_millis(1) },
        };
        let turn = Turn {
            context_used,
            summarizer: Some(summarizer),
            ..setup.turn(&model, &mut history, &mut recorder, &mut rules, info(window, 4_000))
        };
        let prompt = format!("Turn {n}: change the parser so that {}", "it handles one more case, ".repeat(12));
        run_turn(turn, vec![Part::Text { text: prompt }]).await.unwrap();
        context_used = cairn::history::view::context_used(&history);
    }
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let markers = history.iter().filter(|m| m.parts.iter().any(|p| matches!(p, Part::Compaction(_)))).count();
    let (main_calls, main_input) = (load(&model.main_calls), load(&model.main_input));
    let (calls, input, output) = (
        load(&summarizer_model.summary_calls),
        load(&summarizer_model.summary_input),
        load(&summarizer_model.summary_output),
    );
    println!(
        "compaction over {turns} turns (window {window}, threshold {}): {markers} compactions, {calls} extra model calls \
         ({:.1}% of {main_calls}), summarizer tokens {input} in + {output} out = {:.1}% of the {main_input} input tokens \
         the session's own requests carried",
        window - 4_000,
        calls as f64 * 100.0 / main_calls as f64,
        (input + output) as f64 * 100.0 / main_input as f64,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let telemetry = cairn::telemetry::from_env(&|name: &str| std::env::var(name).ok(), runtime.handle());
    println!("telemetry: {}", if cairn::telemetry::active() { "exported" } else { "off" });
    cairn::logging::init(None, telemetry).unwrap();
    runtime.block_on(async {
        let setup = Setup::new();
        overhead(&setup, 0, 50).await; // warm-up
        for prior in [0, 200, 2_000] {
            let mut samples: Vec<Duration> = Vec::new();
            for _ in 0..5 {
                samples.push(overhead(&setup, prior, 50).await);
            }
            samples.sort();
            println!("turn-loop overhead per step (50 steps, {prior} earlier messages): {:?} median", samples[2]);
        }
        compaction_cost(&setup, 200).await;
    });
    cairn::telemetry::shutdown(Duration::from_secs(2));
}

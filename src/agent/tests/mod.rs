//! Turn-level tests: the driver against a scripted provider, a scripted editor and a recorder
//! that keeps everything, without a process or a disk beyond a temporary workspace. This file has
//! the harness and the order of the run-level phases; `calls` pins the Executing and Confirming
//! states, `compaction` the planning of a compaction, `stops` the conditions that end a turn,
//! each as a table of input and expected outcome; `steer` has steering's specs.

mod calls;
mod captured;
mod compaction;
mod steer;
mod stops;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::history::ToolPart;
use crate::llm::catalog::ModelInfo;
use crate::llm::{EventStream, FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest};
use crate::tools::NoEditor;

/// One answer of the model: refused, or a stream of events (which may break).
type Answer = Result<Vec<Result<StreamEvent, LlmError>>, LlmError>;

/// An answer whose stream delivers `events`.
fn ok(events: Vec<StreamEvent>) -> Answer {
    Ok(events.into_iter().map(Ok).collect())
}

/// Answers each request with the next script entry, and keeps what each request carried.
#[derive(Default)]
struct Scripted {
    script: Mutex<VecDeque<Answer>>,
    sent: Mutex<Vec<Sent>>,
}

/// What one request carried, in plain words.
#[derive(Clone, Debug)]
struct Sent {
    system: String,
    /// Each message's text parts joined.
    texts: Vec<String>,
    tools: Vec<String>,
}

impl Scripted {
    fn new(script: Vec<Answer>) -> Self {
        Self { script: Mutex::new(script.into()), sent: Mutex::default() }
    }

    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Provider for Scripted {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let texts = request.messages.iter().map(|seen| crate::history::texts(&seen.message.parts).collect()).collect();
        let tools = request.tools.iter().filter_map(|spec| spec["name"].as_str().map(str::to_owned)).collect();
        self.sent.lock().unwrap().push(Sent { system: request.system.to_owned(), texts, tools });
        let next = self.script.lock().unwrap().pop_front().unwrap_or_else(|| ok(text("out of script")));
        next.map(|events| futures::stream::iter(events).boxed())
    }
}

#[derive(Default)]
struct Log(Vec<AgentEvent>, Disk);

/// How the recorder's disk behaves.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Disk {
    #[default]
    Fine,
    /// Full: a flush with a checkpoint in it fails.
    Full,
}

#[async_trait::async_trait]
impl Recorder for Log {
    fn record(&mut self, event: AgentEvent) {
        self.0.push(event);
    }
    async fn flush(&mut self) -> Result<(), RecordError> {
        if self.1 == Disk::Full && matches!(self.0.last(), Some(AgentEvent::Checkpoint { .. })) {
            self.0.pop();
            return Err(RecordError::Failed("database or disk is full".into()));
        }
        Ok(())
    }
    fn failure(&self) -> Option<RecordError> {
        None
    }
}

fn text(said: &str) -> Vec<StreamEvent> {
    vec![StreamEvent::TextDelta(said.to_owned()), StreamEvent::Finish(FinishReason::Stop)]
}

/// One answer making these calls: (id, tool, arguments).
fn calls(calls: &[(&str, &str, &str)]) -> Vec<StreamEvent> {
    let mut events: Vec<StreamEvent> = calls
        .iter()
        .map(|(id, name, arguments)| {
            StreamEvent::ToolCall(ToolCallRequest {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                arguments: (*arguments).to_owned(),
            })
        })
        .collect();
    events.push(StreamEvent::Finish(FinishReason::ToolCalls));
    events
}

fn glob_call(id: &str) -> Vec<StreamEvent> {
    calls(&[(id, "glob", r#"{"pattern":"*.rs"}"#)])
}

/// Everything a test turn starts from; `Setup::default()` is a new session in ask mode.
struct Setup {
    script: Vec<Answer>,
    limits: Limits,
    mode: Mode,
    host: Arc<dyn Host>,
    history: Vec<Message>,
    rules: Vec<Rule>,
    run: Run,
    info: ModelInfo,
    context_used: u64,
    /// Answers of the summarizer; `None` turns compaction off.
    summaries: Option<Vec<Answer>>,
    compaction: crate::config::Compaction,
    /// The user's cancel.
    cancel: CancellationToken,
    /// Prompts steered into the turn while the model answers request `n` (0-based).
    steer_at: Vec<(usize, &'static str)>,
    /// The tools the model may call.
    registry: crate::tools::Registry,
    /// File checkpoints are taken, on this disk; `None`: none are.
    checkpoints: Option<Disk>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            script: Vec::new(),
            // Retries without waiting.
            limits: Limits { retry_base: std::time::Duration::ZERO, ..Limits::default() },
            mode: Mode::Ask,
            host: Arc::new(NoEditor),
            history: Vec::new(),
            rules: Vec::new(),
            run: Run::default(),
            info: plain_model(100_000, 4_000),
            context_used: 0,
            summaries: None,
            compaction: crate::config::Compaction::default(),
            cancel: CancellationToken::new(),
            steer_at: Vec::new(),
            registry: crate::tools::Registry::builtin(),
            checkpoints: None,
        }
    }
}

/// How a test turn went.
struct Outcome {
    events: Vec<AgentEvent>,
    result: Result<StopReason, TurnError>,
    history: Vec<Message>,
    rules: Vec<Rule>,
    /// The requests the session's model was sent.
    sent: Vec<Sent>,
    /// The requests the summarizer was sent.
    summarized: Vec<Sent>,
    /// The workspace the tools ran in.
    dir: tempfile::TempDir,
    /// Whether each steered prompt joined the turn, in the order they were sent.
    joined: Vec<bool>,
}

impl Outcome {
    fn phases(&self) -> Vec<Phase> {
        self.events
            .iter()
            .filter_map(|event| match event {
                AgentEvent::Phase(phase) => Some(*phase),
                _ => None,
            })
            .collect()
    }

    fn notices(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|event| match event {
                AgentEvent::Notice { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Every tool part the turn recorded, in order.
    fn tool_updates(&self) -> Vec<&ToolPart> {
        self.events
            .iter()
            .filter_map(|event| match event {
                AgentEvent::PartUpdated { part: Part::Tool(tool), .. } => Some(tool),
                _ => None,
            })
            .collect()
    }

    /// The call's states as the editor was shown them, in order.
    fn states_of(&self, call: &str) -> Vec<crate::history::CallState> {
        let mut states: Vec<_> =
            self.tool_updates().into_iter().filter(|tool| tool.call_id == call).map(|tool| tool.state).collect();
        states.dedup();
        states
    }

    /// The call as the history keeps it at the end.
    fn call(&self, call: &str) -> Option<&ToolPart> {
        self.history.iter().flat_map(|m| &m.parts).find_map(|part| match part {
            Part::Tool(tool) if tool.call_id == call => Some(tool),
            _ => None,
        })
    }
}

/// A model with this window and output limit, and nothing else known: no prices, no
/// reasoning, no images, no search of its provider's.
fn plain_model(context_window: u64, max_output: u64) -> ModelInfo {
    ModelInfo { context_window, max_output, prices: None, reasoning: false, images: false, web_search: false }
}

/// Runs one turn for the prompt "go".
async fn drive(setup: Setup) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let provider = Scripted::new(setup.script);
    let (steer_tx, steer_rx) = tokio::sync::mpsc::unbounded_channel();
    let steerer = Steerer { inner: &provider, at: Mutex::new(setup.steer_at), tx: steer_tx, told: Mutex::default() };
    let run = if steerer.at.lock().unwrap().is_empty() { setup.run } else { Run::steered(Steering::new(steer_rx)) };
    let summarizer_model = Scripted::new(setup.summaries.clone().unwrap_or_default());
    let mut history = setup.history;
    let mut log = Log(Vec::new(), setup.checkpoints.unwrap_or_default());
    let mut tracker = setup.checkpoints.map(|_| {
        let root = dir.path().canonicalize().unwrap();
        let mut tracker =
            crate::tools::checkpoint::Tracker::new(&root, crate::config::CheckpointSettings::default(), Vec::new());
        tracker.load(Vec::new());
        tracker
    });
    let mut rules = setup.rules;
    let (mode_tx, mode) = watch::channel(setup.mode);
    let summarizer = setup.summaries.map(|_| compact::Summarizer {
        provider: &summarizer_model,
        model: "small".into(),
        model_ref: "test/small".into(),
        info: plain_model(100_000, 4_000),
        settings: setup.compaction,
        retry: crate::llm::retry::RetryPolicy { retries: 1, base: std::time::Duration::ZERO },
    });
    let turn = Turn {
        provider: &steerer,
        model: "m".into(),
        model_ref: "test/m".into(),
        system: Arc::new(prompt::assemble(&prompt::Sources::default())),
        history: &mut history,
        recorder: &mut log,
        cancel: setup.cancel,
        limits: setup.limits,
        tools: Toolbox {
            workspace: Workspace::new(dir.path(), &[]),
            host: setup.host,
            mode,
            switch: Some(mode_tx),
            rules: &mut rules,
            rulebook: None,
            remember: crate::permissions::Scope::Session,
            process: Arc::default(),
            registry: Arc::new(setup.registry),
            jobs: crate::tools::Jobs::none(),
            lsp: crate::tools::Lsp::none(),
            checkpoints: tracker.as_mut(),
            confined: false,
        },
        info: setup.info,
        thought: None,
        spent: 0.0,
        context_used: setup.context_used,
        summarizer,
        run,
    };
    let result = run_turn(turn, vec![Part::Text { text: "go".into() }]).await;
    let told = std::mem::take(&mut *steerer.told.lock().unwrap());
    let joined = told.into_iter().map(|mut told| told.try_recv().is_ok()).collect();
    let (events, sent, summarized) = (log.0, provider.sent(), summarizer_model.sent());
    Outcome { events, result, history, rules, sent, summarized, dir, joined }
}

/// The scripted model, and a user who types while it answers: the prompts of `at` are steered
/// into the turn when their request comes.
struct Steerer<'a> {
    inner: &'a Scripted,
    at: Mutex<Vec<(usize, &'static str)>>,
    tx: tokio::sync::mpsc::UnboundedSender<Steered>,
    /// Each steered prompt's signal, in the order they were sent.
    told: Mutex<Vec<tokio::sync::oneshot::Receiver<()>>>,
}

#[async_trait::async_trait]
impl Provider for Steerer<'_> {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let n = self.inner.sent.lock().unwrap().len();
        for (_, text) in self.at.lock().unwrap().extract_if(.., |(at, _)| *at == n) {
            let (joined, told) = tokio::sync::oneshot::channel();
            let _ = self.tx.send(Steered { parts: vec![Part::Text { text: text.to_owned() }], joined });
            self.told.lock().unwrap().push(told);
        }
        self.inner.stream(request).await
    }
}

async fn run(script: Vec<Answer>, limits: Limits) -> (Vec<Phase>, Result<StopReason, TurnError>) {
    let outcome = drive(Setup { script, limits, ..Setup::default() }).await;
    (outcome.phases(), outcome.result)
}

#[tokio::test]
async fn phases_come_in_order_for_a_step_with_a_tool_and_a_final_answer() {
    use Phase::*;
    let (phases, result) = run(vec![ok(glob_call("a")), ok(text("done"))], Limits::default()).await;
    assert_eq!(result, Ok(StopReason::EndTurn));
    assert_eq!(
        phases,
        [
            RunStart,
            StepStart,
            BeforeInference,
            AfterInference,
            BeforeTool,
            AfterTool,
            StepEnd,
            StepStart,
            BeforeInference,
            AfterInference,
            StepEnd,
            RunEnd
        ]
    );
}

#[tokio::test]
async fn the_run_end_comes_after_a_failure_and_after_a_limit() {
    use Phase::*;
    let failed = Err(LlmError::Stream("broken".into()));
    let (phases, result) = run(vec![failed], Limits::default()).await;
    assert!(result.is_err());
    assert_eq!(phases, [RunStart, StepStart, BeforeInference, StepEnd, RunEnd]);

    let limits = Limits { max_rounds: 1, ..Limits::default() };
    let (phases, result) = run(vec![ok(glob_call("a"))], limits).await;
    assert_eq!(result, Ok(StopReason::MaxTurnRequests));
    assert_eq!(phases.last(), Some(&RunEnd));
    assert_eq!(phases.iter().filter(|p| **p == StepStart).count(), 1);
}

#[tokio::test]
async fn every_assistant_message_records_the_system_prompt_digest() {
    let outcome = drive(Setup { script: vec![ok(glob_call("a")), ok(text("done"))], ..Setup::default() }).await;
    let expected = prompt::assemble(&prompt::Sources::default()).digest;
    let digests: Vec<_> = outcome
        .events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::AssistantFinished { meta, .. } => Some(meta.system_digest.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(digests, [Some(expected.clone()), Some(expected)]);
}

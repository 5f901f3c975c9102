//! The driver against a scripted provider and a recorder that keeps everything: the order of the
//! run-level phases, and that the run end comes whatever ends the turn.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::llm::catalog::ModelInfo;
use crate::llm::{EventStream, FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest};
use crate::tools::NoEditor;

/// Answers each request with the next script entry.
struct Scripted(Mutex<VecDeque<Result<Vec<StreamEvent>, LlmError>>>);

#[async_trait::async_trait]
impl Provider for Scripted {
    async fn stream(&self, _request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let next = self.0.lock().unwrap().pop_front().unwrap_or_else(|| Ok(text("out of script")));
        next.map(|events| futures::stream::iter(events.into_iter().map(Ok)).boxed())
    }
}

#[derive(Default)]
struct Log(Vec<AgentEvent>);

#[async_trait::async_trait]
impl Recorder for Log {
    fn record(&mut self, event: AgentEvent) {
        self.0.push(event);
    }
    async fn flush(&mut self) -> Result<(), RecordError> {
        Ok(())
    }
    fn failure(&self) -> Option<RecordError> {
        None
    }
}

fn text(said: &str) -> Vec<StreamEvent> {
    vec![StreamEvent::TextDelta(said.to_owned()), StreamEvent::Finish(FinishReason::Stop)]
}

fn glob_call(id: &str) -> Vec<StreamEvent> {
    let call =
        ToolCallRequest { id: id.to_owned(), name: "glob".to_owned(), arguments: r#"{"pattern":"*.rs"}"#.into() };
    vec![StreamEvent::ToolCall(call), StreamEvent::Finish(FinishReason::ToolCalls)]
}

async fn run(
    script: Vec<Result<Vec<StreamEvent>, LlmError>>,
    limits: Limits,
) -> (Vec<Phase>, Result<StopReason, TurnError>) {
    let (log, result) = run_logged(script, limits).await;
    let phases = log
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Phase(phase) => Some(*phase),
            _ => None,
        })
        .collect();
    (phases, result)
}

async fn run_logged(
    script: Vec<Result<Vec<StreamEvent>, LlmError>>,
    limits: Limits,
) -> (Vec<AgentEvent>, Result<StopReason, TurnError>) {
    let dir = tempfile::tempdir().unwrap();
    let provider = Scripted(Mutex::new(script.into()));
    let mut history = Vec::new();
    let mut log = Log::default();
    let mut rules = Vec::new();
    let (_mode_tx, mode) = watch::channel(Mode::Ask);
    let turn = Turn {
        provider: &provider,
        model: "m".into(),
        model_ref: "test/m".into(),
        system: Arc::new(prompt::assemble(&prompt::Sources::default())),
        history: &mut history,
        recorder: &mut log,
        cancel: CancellationToken::new(),
        limits,
        tools: Toolbox {
            workspace: Workspace::new(dir.path(), &[]),
            host: Arc::new(NoEditor),
            mode,
            rules: &mut rules,
            process: Arc::default(),
            registry: Arc::new(crate::tools::Registry::builtin()),
        },
        info: ModelInfo { context_window: 100_000, max_output: 4_000, prices: None, reasoning: false },
        thought: None,
        spent: 0.0,
        context_used: 0,
        summarizer: None,
        run: Run::default(),
    };
    let result = run_turn(turn, vec![Part::Text { text: "go".into() }]).await;
    (log.0, result)
}

#[tokio::test]
async fn phases_come_in_order_for_a_step_with_a_tool_and_a_final_answer() {
    use Phase::*;
    let (phases, result) = run(vec![Ok(glob_call("a")), Ok(text("done"))], Limits::default()).await;
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
    let (phases, result) = run(vec![Ok(glob_call("a"))], limits).await;
    assert_eq!(result, Ok(StopReason::MaxTurnRequests));
    assert_eq!(phases.last(), Some(&RunEnd));
    assert_eq!(phases.iter().filter(|p| **p == StepStart).count(), 1);
}

#[tokio::test]
async fn every_assistant_message_records_the_system_prompt_digest() {
    let (log, _) = run_logged(vec![Ok(glob_call("a")), Ok(text("done"))], Limits::default()).await;
    let expected = prompt::assemble(&prompt::Sources::default()).digest;
    let digests: Vec<_> = log
        .iter()
        .filter_map(|event| match event {
            AgentEvent::AssistantFinished { meta, .. } => Some(meta.system_digest.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(digests, [Some(expected.clone()), Some(expected)]);
}

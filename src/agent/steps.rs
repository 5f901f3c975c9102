//! One handler per turn state; each takes the state's data and returns the next state.
//!
//! Every await here races the turn's cancellation token, so a cancel ends the turn at the next
//! scheduling point: the HTTP request or stream is dropped (closing its connection) and the
//! partial answer is kept, marked `interrupted`.

use futures::StreamExt;

use super::Turn;
use super::events::{AgentEvent, StreamKind};
use super::state::{DoneReason, ModelStop, Streaming, TurnError, TurnState};
use crate::history::{Finish, Message, MessageMeta, Part, Role, ToolPart, ToolState};
use crate::llm::retry::RetryPolicy;
use crate::llm::{FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest};

/// Sends the conversation to the model, retrying what may succeed on a second try.
pub async fn sampling(turn: &mut Turn<'_>) -> TurnState {
    if turn.rounds >= turn.limits.max_rounds {
        return TurnState::Done(DoneReason::MaxTurns);
    }
    turn.rounds += 1;
    let request =
        ModelRequest { model: turn.model.clone(), system: turn.system.clone(), messages: turn.history.clone() };
    let policy = RetryPolicy { retries: turn.limits.retries, base: turn.limits.retry_base };
    let mut attempt = 0;
    let events = loop {
        let sent = tokio::select! {
            biased;
            () = turn.cancel.cancelled() => return TurnState::Done(DoneReason::UserAbort),
            sent = turn.provider.stream(&request) => sent,
        };
        let err = match sent {
            Ok(events) => break events,
            Err(err) => err,
        };
        attempt += 1;
        let Some(delay) = policy.delay(attempt, &err) else {
            return TurnState::Done(DoneReason::Error(err.into()));
        };
        tracing::warn!(attempt, ?delay, %err, "model request failed; retrying");
        turn.recorder.record(AgentEvent::Retrying { attempt, delay, reason: err.to_string() });
        tokio::select! {
            biased;
            () = turn.cancel.cancelled() => return TurnState::Done(DoneReason::UserAbort),
            () = tokio::time::sleep(delay) => {}
        }
    };
    let meta = MessageMeta { model: Some(turn.model_ref.clone()), ..MessageMeta::default() };
    let message = Message::new(Role::Assistant, Vec::new(), meta);
    turn.recorder.record(AgentEvent::AssistantStarted { message: message.id.clone(), model: turn.model_ref.clone() });
    TurnState::Streaming(Streaming { events, message, open: None, calls: Vec::new(), finish: None })
}

/// Relays the model's answer chunk by chunk until it ends, fails, stalls or is cancelled.
pub async fn streaming(turn: &mut Turn<'_>, mut s: Streaming) -> TurnState {
    let idle = turn.limits.stream_idle_timeout;
    loop {
        if let Some(err) = turn.recorder.failure() {
            return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
        }
        let next = tokio::select! {
            biased;
            () = turn.cancel.cancelled() => {
                return finish(turn, s, Finish::Interrupted, None, DoneReason::UserAbort);
            }
            next = tokio::time::timeout(idle, s.events.next()) => next,
        };
        let event = match next {
            Err(_elapsed) => {
                let err = LlmError::IdleTimeout(idle);
                return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
            }
            Ok(None) => return answered(turn, s),
            Ok(Some(Err(err))) => {
                return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
            }
            Ok(Some(Ok(event))) => event,
        };
        match event {
            StreamEvent::TextDelta(text) => delta(turn, &mut s, StreamKind::Text, text),
            StreamEvent::ReasoningDelta(text) => delta(turn, &mut s, StreamKind::Reasoning, text),
            StreamEvent::ToolCallStarted { id, name } => tracing::debug!(%id, %name, "tool call streaming"),
            StreamEvent::ToolCall(call) => {
                close_part(turn, &mut s);
                let part = Part::Tool(ToolPart {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    input: call.arguments.clone(),
                    state: ToolState::InputAvailable,
                    output: None,
                });
                let index = next_index(&s.message);
                s.message.parts.push(part.clone());
                turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
                s.calls.push(call);
            }
            StreamEvent::Usage(usage) => s.message.meta.usage = Some(usage),
            StreamEvent::Finish(reason) => s.finish = Some(reason),
        }
    }
}

/// Answers every tool call. No tool is registered yet, so each call gets an error result naming
/// the problem, and the model is asked again with those results.
pub fn executing(turn: &mut Turn<'_>, calls: Vec<ToolCallRequest>) -> TurnState {
    let Some(message) = turn.history.last_mut() else {
        return TurnState::Done(DoneReason::Error(TurnError::Internal("tool calls without a message".into())));
    };
    for call in calls {
        let found = message.parts.iter_mut().enumerate().find_map(|(index, part)| match part {
            Part::Tool(tool) if tool.call_id == call.id => Some((index, tool)),
            _ => None,
        });
        let Some((index, tool)) = found else { continue };
        tool.state = ToolState::OutputError;
        tool.output = Some(format!("Unknown tool `{}`: this session has no tools available.", call.name));
        let part = Part::Tool(tool.clone());
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        turn.recorder.record(AgentEvent::PartUpdated { message: message.id.clone(), index, part });
    }
    TurnState::Sampling
}

fn next_index(message: &Message) -> u32 {
    u32::try_from(message.parts.len()).unwrap_or(u32::MAX)
}

fn delta(turn: &mut Turn<'_>, s: &mut Streaming, kind: StreamKind, text: String) {
    let index = match s.open {
        Some((index, open_kind)) if open_kind == kind => index,
        _ => {
            close_part(turn, s);
            let index = next_index(&s.message);
            s.message.parts.push(kind.empty_part());
            turn.recorder.record(AgentEvent::PartStarted { message: s.message.id.clone(), index, kind });
            s.open = Some((index, kind));
            index
        }
    };
    if let Some(Part::Text { text: all } | Part::Reasoning { text: all }) = s.message.parts.last_mut() {
        all.push_str(&text);
    }
    turn.recorder.record(AgentEvent::Delta { message: s.message.id.clone(), index, kind, text });
}

fn close_part(turn: &mut Turn<'_>, s: &mut Streaming) {
    if let Some((index, _)) = s.open.take() {
        turn.recorder.record(AgentEvent::PartFinished { message: s.message.id.clone(), index });
    }
}

/// The stream ended cleanly: decide between answering and running tools.
fn answered(turn: &mut Turn<'_>, mut s: Streaming) -> TurnState {
    let finish_reason = s.finish.take();
    if finish_reason.is_none() {
        tracing::debug!("model stream ended without a finish reason");
    }
    let (ending, next) = match finish_reason {
        Some(FinishReason::Length) => (Finish::MaxTokens, DoneReason::ModelStop(ModelStop::MaxTokens)),
        Some(FinishReason::ContentFilter) => (Finish::Refusal, DoneReason::ModelStop(ModelStop::Refusal)),
        Some(FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_)) | None => {
            if s.calls.is_empty() {
                (Finish::EndTurn, DoneReason::ModelStop(ModelStop::EndTurn))
            } else {
                let calls = std::mem::take(&mut s.calls);
                complete(turn, s, Finish::ToolUse, None);
                return TurnState::Executing(calls);
            }
        }
    };
    finish(turn, s, ending, None, next)
}

/// Completes the assistant message and ends the turn with `done`.
fn finish(turn: &mut Turn<'_>, s: Streaming, finish: Finish, error: Option<String>, done: DoneReason) -> TurnState {
    complete(turn, s, finish, error);
    TurnState::Done(done)
}

/// Completes the assistant message and moves it into the history, whatever ended it.
fn complete(turn: &mut Turn<'_>, mut s: Streaming, finish: Finish, error: Option<String>) {
    close_part(turn, &mut s);
    s.message.meta.finish = Some(finish);
    s.message.meta.error = error;
    turn.recorder.record(AgentEvent::AssistantFinished { message: s.message.id.clone(), meta: s.message.meta.clone() });
    turn.history.push(s.message);
}

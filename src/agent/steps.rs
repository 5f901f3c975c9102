//! The Sampling and Streaming states: sending a step's request and relaying the answer.
//!
//! The request is the model's view of the history, borrowed while it is sent, plus the step's
//! reminders and minus the tools on cooldown; a failure that may pass is sent again through
//! `retry`, and a request refused as too long goes to Compacting once. The streamed answer
//! becomes one assistant message, stamped with the system prompt's digest; it ends the turn, or
//! queues its tool calls for Executing.
//!
//! Every await here races the turn's cancellation token, so a cancel ends the turn at the next
//! scheduling point: the HTTP request or stream is dropped (closing its connection) and the
//! partial answer is kept, marked `interrupted`.

use futures::StreamExt;
use tokio::time::Instant;

use super::Turn;
use super::events::{AgentEvent, StreamKind};
use super::retry::{GaveUp, Retry};
use super::state::{After, CallQueue, DoneReason, ModelStop, QueuedCall, Request, Streaming, TurnState, Why};
use crate::history::view::{self, Seen};
use crate::history::{CallState, Finish, Message, MessageMeta, Part, Role, ToolPart};
use crate::llm::{FinishReason, LlmError, ModelRequest, StreamEvent};

/// Sends the step's request to the model, retrying what may succeed on a second try. The
/// messages are the model's view of the history, borrowed for as long as the sending takes.
pub async fn sampling(turn: &mut Turn<'_>, mut request: Box<Request>) -> TurnState {
    let step_timeout = turn.limits.step_timeout;
    let view = view::model_view(turn.history);
    // With telemetry, the request's `traceparent` names its exported span.
    let ours = turn.run.otel.request_start(&turn.model, turn.run.trace.as_ref());
    let asked = ModelRequest {
        model: &turn.model,
        system: &turn.system.text,
        messages: view.messages().chain(request.reminder.as_ref().map(Seen::whole)).collect(),
        tools: turn
            .tools
            .registry
            .specs()
            .iter()
            .map(|spec| &**spec)
            .filter(|spec| !request.cooling.iter().any(|tool| spec["name"] == **tool))
            // A model whose provider searches the web uses that search, not the endpoint's.
            .filter(|spec| !(turn.info.web_search && spec["name"] == crate::tools::web_search::NAME))
            .collect(),
        max_output: turn.info.max_output,
        thought: turn.thought.filter(|_| turn.info.reasoning),
        images: turn.info.images,
        trace: ours.as_ref().or(turn.run.trace.as_ref()),
        cache_key: turn.run.cache_key.as_deref(),
        web_search: turn.info.web_search,
    };
    let mut retry = Retry { policy: turn.retry_policy(), cancel: &turn.cancel, notices: Some(&mut *turn.recorder) };
    let (events, deadline) = loop {
        let deadline = Instant::now() + step_timeout;
        let sent = tokio::select! {
            biased;
            () = retry.cancel.cancelled() => return TurnState::StepEnd(After::End(DoneReason::UserAbort)),
            sent = tokio::time::timeout_at(deadline, turn.provider.stream(&asked)) => {
                sent.unwrap_or(Err(LlmError::StepTimeout(step_timeout)))
            }
        };
        match sent {
            Ok(events) => break (events, deadline),
            Err(LlmError::ContextTooLong { detail })
                if !turn.run.overflow_retried && turn.summarizer.is_some() && request.attempts == 0 =>
            {
                // One compaction and one more try; a second refusal is the turn's error.
                turn.run.overflow_retried = true;
                return TurnState::Compacting(Why::Overflow(detail));
            }
            Err(err) => {
                if let Err(gave_up) = retry.wait(&mut request.attempts, err).await {
                    return gave_up.into();
                }
            }
        }
    };
    let meta = MessageMeta {
        model: Some(turn.model_ref.clone()),
        system_digest: Some(turn.system.digest.clone()),
        ..MessageMeta::default()
    };
    let message = Message::new(Role::Assistant, Vec::new(), meta);
    TurnState::Streaming(Box::new(Streaming {
        request,
        events,
        message,
        deadline,
        started: false,
        open: None,
        calls: Vec::new(),
        finish: None,
    }))
}

impl From<GaveUp> for TurnState {
    fn from(gave_up: GaveUp) -> Self {
        match gave_up {
            GaveUp::Failed(err) => TurnState::StepEnd(After::End(DoneReason::Error(err.into()))),
            GaveUp::Cancelled => TurnState::StepEnd(After::End(DoneReason::UserAbort)),
        }
    }
}

/// Relays the model's answer chunk by chunk until it ends, fails, stalls or is cancelled.
pub async fn streaming(turn: &mut Turn<'_>, s: Box<Streaming>) -> TurnState {
    let mut s = *s;
    let idle = turn.limits.stream_idle_timeout;
    loop {
        if let Some(err) = turn.recorder.failure() {
            return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
        }
        // A client that stops reading holds the stream here, and TCP holds the model; that wait
        // is not the model's time. (Readiness first: the usual case never registers the cancel.)
        let held = Instant::now();
        tokio::select! {
            biased;
            () = turn.recorder.writable() => s.deadline += held.elapsed(),
            () = turn.cancel.cancelled() => return finish(turn, s, Finish::Interrupted, None, DoneReason::UserAbort),
        }
        let next = tokio::select! {
            biased;
            () = turn.cancel.cancelled() => {
                return finish(turn, s, Finish::Interrupted, None, DoneReason::UserAbort);
            }
            () = tokio::time::sleep_until(s.deadline) => Err(LlmError::StepTimeout(turn.limits.step_timeout)),
            next = tokio::time::timeout(idle, s.events.next()) => next.map_err(|_| LlmError::IdleTimeout(idle)),
        };
        let event = match next {
            Err(err) => {
                return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
            }
            Ok(None) => return answered(turn, s),
            Ok(Some(Err(err))) if !s.started && err.is_retryable() => {
                // Nothing was shown yet: this attempt can be forgotten and the request sent again.
                let mut retry =
                    Retry { policy: turn.retry_policy(), cancel: &turn.cancel, notices: Some(&mut *turn.recorder) };
                return match retry.wait(&mut s.request.attempts, err).await {
                    Ok(()) => TurnState::Sampling(s.request),
                    Err(gave_up) => gave_up.into(),
                };
            }
            Ok(Some(Err(err))) => {
                return finish(turn, s, Finish::Error, Some(err.to_string()), DoneReason::Error(err.into()));
            }
            Ok(Some(Ok(event))) => event,
        };
        if !s.started {
            s.started = true;
            turn.run.otel.first_token();
            let started = AgentEvent::AssistantStarted { message: s.message.id.clone(), model: turn.model_ref.clone() };
            turn.recorder.record(started);
        }
        match event {
            StreamEvent::TextDelta(text) => delta(turn, &mut s, StreamKind::Text, text),
            StreamEvent::ReasoningDelta(text) => delta(turn, &mut s, StreamKind::Reasoning, text),
            StreamEvent::ReasoningSignature(signature) => {
                let index = match s.open {
                    Some((index, StreamKind::Reasoning)) => index,
                    _ => {
                        close_part(turn, &mut s);
                        s.message.parts.push(Part::Reasoning { text: String::new(), signature: None });
                        next_index(&s.message) - 1
                    }
                };
                close_part(turn, &mut s);
                if let Some(Part::Reasoning { signature: slot, .. }) = s.message.parts.get_mut(index as usize) {
                    *slot = Some(signature);
                }
                if let Some(part) = s.message.parts.get(index as usize).cloned() {
                    turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
                }
            }
            StreamEvent::RedactedReasoning(data) => {
                close_part(turn, &mut s);
                let index = next_index(&s.message);
                let part = Part::RedactedReasoning { data };
                s.message.parts.push(part.clone());
                turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
            }
            StreamEvent::ToolCallStarted { id, name } => {
                // The call is shown once its arguments are complete, with its real title.
                close_part(turn, &mut s);
                let index = next_index(&s.message);
                let mut tool = ToolPart::new(id.clone(), name);
                tool.kind = turn.tools.registry.kind(&tool.name);
                let part = Part::Tool(tool);
                s.message.parts.push(part.clone());
                s.calls.push((id, index));
                turn.recorder.record(AgentEvent::ToolNamed { message: s.message.id.clone(), index, part });
            }
            StreamEvent::ToolCall(call) => {
                close_part(turn, &mut s);
                let index = match s.calls.iter().find(|(id, _)| *id == call.id) {
                    Some((_, index)) => *index,
                    None => {
                        let index = next_index(&s.message);
                        s.message.parts.push(Part::Tool(ToolPart::new(call.id.clone(), call.name.clone())));
                        s.calls.push((call.id.clone(), index));
                        index
                    }
                };
                let workspace = &turn.tools.workspace;
                if let Some(Part::Tool(tool)) = s.message.parts.get_mut(index as usize) {
                    tool.input = call.arguments.clone();
                    if let Ok(invocation) = turn.tools.registry.parse(&call.name, &call.arguments) {
                        tool.title = invocation.title(workspace);
                        tool.kind = invocation.kind();
                        tool.locations = invocation.locations(workspace);
                    }
                    let part = Part::Tool(tool.clone());
                    turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
                }
            }
            StreamEvent::WebSearch(search) => super::searched::searched(turn, &mut s, search),
            StreamEvent::Usage(usage) => s.message.meta.usage = Some(usage),
            StreamEvent::Finish(reason) => s.finish = Some(reason),
        }
    }
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
    if let Some(Part::Text { text: all } | Part::Reasoning { text: all, .. }) = s.message.parts.last_mut() {
        all.push_str(&text);
    }
    turn.recorder.record(AgentEvent::Delta { message: s.message.id.clone(), index, kind, text });
}

pub(super) fn close_part(turn: &mut Turn<'_>, s: &mut Streaming) {
    if let Some((index, _)) = s.open.take() {
        turn.recorder.record(AgentEvent::PartFinished { message: s.message.id.clone(), index });
    }
}

/// The stream ended cleanly: decide between answering and running tools. An answer cut off by
/// the output limit inside a tool call's arguments is asked to continue in smaller pieces, up to
/// `max_continuations` times.
fn answered(turn: &mut Turn<'_>, mut s: Streaming) -> TurnState {
    let finish_reason = s.finish.take();
    if finish_reason.is_none() {
        tracing::debug!("model stream ended without a finish reason");
    }
    let broken_call = s.calls.iter().any(|(_, index)| match s.message.parts.get(*index as usize) {
        Some(Part::Tool(tool)) => serde_json::from_str::<serde_json::Value>(&tool.input).is_err(),
        _ => false,
    });
    match finish_reason {
        Some(FinishReason::Length) if s.calls.is_empty() => {
            finish(turn, s, Finish::MaxTokens, None, DoneReason::ModelStop(ModelStop::MaxTokens))
        }
        Some(FinishReason::Length) if broken_call => {
            if turn.run.continuations >= turn.limits.max_continuations {
                return finish(turn, s, Finish::MaxTokens, None, DoneReason::ModelStop(ModelStop::MaxTokens));
            }
            turn.run.continuations += 1;
            turn.remind(CUT_OFF);
            run_calls(turn, s)
        }
        Some(FinishReason::ContentFilter) => {
            finish(turn, s, Finish::Refusal, None, DoneReason::ModelStop(ModelStop::Refusal))
        }
        Some(FinishReason::Length | FinishReason::Stop | FinishReason::ToolCalls | FinishReason::Other(_)) | None => {
            if s.calls.is_empty() {
                finish(turn, s, Finish::EndTurn, None, DoneReason::ModelStop(ModelStop::EndTurn))
            } else {
                run_calls(turn, s)
            }
        }
    }
}

const CUT_OFF: &str = "Your previous answer was cut off at the output-token limit while writing a tool call, so \
that call could not run. Break the work into smaller pieces: write a large file in several smaller edits and keep \
each call's arguments short.";

/// Completes the message and queues its tool calls in the order the model made them.
fn run_calls(turn: &mut Turn<'_>, s: Streaming) -> TurnState {
    let calls = s
        .calls
        .iter()
        .filter_map(|(_, index)| match s.message.parts.get(*index as usize) {
            Some(Part::Tool(tool)) => Some(QueuedCall {
                index: *index,
                invocation: turn.tools.registry.parse(&tool.name, &tool.input),
                approved: None,
                hooked: None,
            }),
            _ => None,
        })
        .collect();
    let queue = CallQueue { message: s.message.id.clone(), calls };
    complete(turn, s, Finish::ToolUse, None);
    TurnState::Executing(queue)
}

/// Completes the assistant message and ends the step, and the turn with `done`.
fn finish(turn: &mut Turn<'_>, s: Streaming, finish: Finish, error: Option<String>, done: DoneReason) -> TurnState {
    complete(turn, s, finish, error);
    TurnState::StepEnd(After::End(done))
}

/// Completes the assistant message and moves it into the history, whatever ended it. Tool calls
/// of an answer that will not run them are cancelled.
fn complete(turn: &mut Turn<'_>, mut s: Streaming, finish: Finish, error: Option<String>) {
    let failed = match finish {
        Finish::Error => Some("error"),
        Finish::Interrupted => Some("cancelled"),
        Finish::EndTurn | Finish::MaxTokens | Finish::Refusal | Finish::ToolUse => None,
    };
    if !s.started {
        // The model said nothing: there is no message to keep.
        turn.run.otel.request_end(None, None, failed);
        return;
    }
    close_part(turn, &mut s);
    if finish != Finish::ToolUse {
        for (_, index) in &s.calls {
            if let Some(Part::Tool(tool)) = s.message.parts.get_mut(*index as usize)
                && tool.state.advance(CallState::Cancelled).is_ok()
            {
                tool.output = Some("The answer ended before this call could run.".to_owned());
                let part = Part::Tool(tool.clone());
                turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index: *index, part });
            }
        }
    }
    // A search the provider never finished (the answer was cut or cancelled) ends with it.
    for (index, part) in s.message.parts.iter_mut().enumerate() {
        if let Part::Tool(tool) = part
            && tool.hosted
            && tool.state.advance(CallState::Cancelled).is_ok()
        {
            tool.output = Some("The answer ended before this search finished.".to_owned());
            let (index, part) = (u32::try_from(index).unwrap_or(u32::MAX), Part::Tool(tool.clone()));
            turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
        }
    }
    s.message.meta.finish = Some(finish);
    s.message.meta.error = error;
    s.message.meta.cost = s.message.meta.usage.and_then(|usage| turn.info.cost(&usage));
    let tokens = s.message.meta.usage.map(|usage| crate::telemetry::spans::Tokens {
        input: usage.input,
        output: usage.output,
        cache_read: usage.cache_read,
        cache_write: usage.cache_write,
    });
    turn.run.otel.request_end(tokens, s.message.meta.cost, failed);
    turn.recorder.record(AgentEvent::AssistantFinished { message: s.message.id.clone(), meta: s.message.meta.clone() });
    if let Some(usage) = s.message.meta.usage {
        turn.charge(s.message.meta.cost.unwrap_or(0.0));
        turn.context_used = usage.context();
        turn.report_usage();
    }
    turn.history.push(s.message);
}

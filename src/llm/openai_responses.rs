//! OpenAI Responses over SSE (`POST /responses`).
//!
//! The conversation goes out as input items (messages, `function_call`s and their
//! `function_call_output`s, whose output is a list of text and images when the tool returned
//! images); the answer streams as typed events: output text deltas, reasoning
//! summary deltas (shown as thoughts), function-call items whose arguments stream by item id, and
//! a final `response.completed` (or `response.incomplete`) carrying the usage.

use std::collections::{HashMap, VecDeque};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{DataUrl, Joined, UserBlock, tool_result, user_blocks};
use super::{FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest, sse};
use crate::history::view::Seen;
use crate::history::{Part, Role, Usage};

/// The request body, borrowing from the request.
fn request_body<'a>(request: &ModelRequest<'a>) -> Body<'a> {
    let mut input = Vec::new();
    for seen in &request.messages {
        match seen.message.role {
            Role::User => {
                let content: Vec<Content<'a>> = user_blocks(*seen, request)
                    .into_iter()
                    .map(|block| match block {
                        UserBlock::Text(text) => Content::InputText { text },
                        UserBlock::Image { mime_type, data } => {
                            Content::InputImage { image_url: DataUrl { mime_type, data } }
                        }
                    })
                    .collect();
                if !content.is_empty() {
                    input.push(Item::Message { role: "user", content });
                }
            }
            Role::Assistant => assistant_items(*seen, request, &mut input),
        }
    }
    Body {
        model: request.model,
        input,
        stream: true,
        store: false,
        max_output_tokens: request.max_output,
        instructions: (!request.system.is_empty()).then_some(request.system),
        tools: request
            .tools
            .iter()
            .map(|spec| Tool {
                kind: "function",
                name: &spec["name"],
                description: &spec["description"],
                parameters: &spec["parameters"],
            })
            .collect(),
        reasoning: request.thought.map(|thought| Reasoning { effort: thought.effort(), summary: "auto" }),
    }
}

/// The request body as sent.
pub fn encode(request: &ModelRequest<'_>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&request_body(request))
}

/// A Responses request.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    input: Vec<Item<'a>>,
    stream: bool,
    store: bool,
    max_output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning>,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a Value,
    description: &'a Value,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct Reasoning {
    effort: &'static str,
    summary: &'static str,
}

/// One input item: a message, a function call, or a call's output.
#[derive(Serialize)]
#[serde(untagged)]
enum Item<'a> {
    Message {
        role: &'static str,
        content: Vec<Content<'a>>,
    },
    Call {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    Output {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        output: Output<'a>,
    },
}

/// A call's output: its text, or `input_text` and `input_image` items when the tool returned
/// images.
#[derive(Serialize)]
#[serde(untagged)]
enum Output<'a> {
    Text(Cow<'a, str>),
    Items(Vec<Content<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content<'a> {
    InputText { text: Cow<'a, str> },
    InputImage { image_url: DataUrl<'a> },
    OutputText { text: Cow<'a, str> },
}

fn assistant_items<'a>(seen: Seen<'a>, request: &ModelRequest<'_>, input: &mut Vec<Item<'a>>) {
    let said = |text: Cow<'a, str>| Item::Message { role: "assistant", content: vec![Content::OutputText { text }] };
    let mut text = Joined::default();
    for part in &seen.message.parts {
        match part {
            Part::Text { text: chunk } => text.push(Cow::Borrowed(chunk), ""),
            Part::Tool(tool) => {
                if !text.is_empty() {
                    input.push(said(text.take()));
                }
                input.push(Item::Call {
                    kind: "function_call",
                    call_id: &tool.call_id,
                    name: &tool.name,
                    arguments: &tool.input,
                });
                let (text, images) = tool_result(request, seen, tool);
                let output = if images.is_empty() {
                    Output::Text(text)
                } else {
                    let images = images.iter().map(|image| Content::InputImage {
                        image_url: DataUrl { mime_type: &image.mime_type, data: &image.data },
                    });
                    Output::Items(std::iter::once(Content::InputText { text }).chain(images).collect())
                };
                input.push(Item::Output { kind: "function_call_output", call_id: &tool.call_id, output });
            }
            Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::Image { .. }
            | Part::ResourceLink { .. }
            | Part::Resource { .. }
            | Part::BlobResource { .. }
            | Part::Compaction(_) => {}
        }
    }
    if !text.is_empty() {
        input.push(said(text.take()));
    }
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    item_id: Option<String>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    response: Option<Value>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<Details>,
    #[serde(default)]
    output_tokens_details: Option<Details>,
}

#[derive(Deserialize, Default)]
struct Details {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    reasoning_tokens: u64,
}

/// Function calls by item id (`call_id`, name, arguments so far), and whether it finished.
#[derive(Default)]
pub struct Decoder {
    calls: HashMap<String, (String, String, String)>,
    called: bool,
    finished: bool,
}

impl sse::Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        if data.trim().is_empty() || data.trim() == "[DONE]" {
            return Ok(false);
        }
        let event: Event = serde_json::from_str(data)
            .map_err(|err| LlmError::Stream(format!("unreadable event ({err}): {}", sse::excerpt(data))))?;
        let field = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        match event.kind.as_str() {
            "response.output_text.delta" => out.push_back(StreamEvent::TextDelta(event.delta.unwrap_or_default())),
            "response.reasoning_summary_text.delta" => {
                out.push_back(StreamEvent::ReasoningDelta(event.delta.unwrap_or_default()));
            }
            "response.output_item.added" => {
                let item = event.item.unwrap_or_default();
                if field(&item, "type") == "function_call" {
                    let (call_id, name) = (field(&item, "call_id"), field(&item, "name"));
                    out.push_back(StreamEvent::ToolCallStarted { id: call_id.clone(), name: name.clone() });
                    self.calls.insert(field(&item, "id"), (call_id, name, field(&item, "arguments")));
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = event.item_id.and_then(|id| self.calls.get_mut(&id)) {
                    call.2.push_str(&event.delta.unwrap_or_default());
                }
            }
            "response.output_item.done" => {
                let item = event.item.unwrap_or_default();
                if field(&item, "type") == "function_call" {
                    let streamed = self.calls.remove(&field(&item, "id"));
                    let arguments = match (field(&item, "arguments"), streamed) {
                        (whole, _) if !whole.is_empty() => whole,
                        (_, Some((_, _, streamed))) => streamed,
                        (empty, None) => empty,
                    };
                    self.called = true;
                    out.push_back(StreamEvent::ToolCall(ToolCallRequest {
                        id: field(&item, "call_id"),
                        name: field(&item, "name"),
                        arguments,
                    }));
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = event.response.unwrap_or_default();
                if let Some(usage) =
                    response.get("usage").cloned().and_then(|u| serde_json::from_value::<WireUsage>(u).ok())
                {
                    let cache_read = usage.input_tokens_details.as_ref().map_or(0, |d| d.cached_tokens);
                    // `input_tokens` counts the cached tokens too; `output_tokens` includes reasoning.
                    out.push_back(StreamEvent::Usage(Usage {
                        input: usage.input_tokens.saturating_sub(cache_read),
                        output: usage.output_tokens,
                        reasoning: usage.output_tokens_details.as_ref().map_or(0, |d| d.reasoning_tokens),
                        cache_read,
                        cache_write: 0,
                    }));
                }
                let incomplete = response.pointer("/incomplete_details/reason").and_then(Value::as_str);
                out.push_back(StreamEvent::Finish(match incomplete {
                    Some("max_output_tokens") => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    Some(other) => FinishReason::Other(other.to_owned()),
                    None if self.called => FinishReason::ToolCalls,
                    None => FinishReason::Stop,
                }));
                self.finished = true;
                return Ok(true);
            }
            "response.failed" | "error" => {
                let response = event.response.unwrap_or_default();
                let code = event.code.unwrap_or_else(|| field(&response["error"], "code"));
                let message = event.message.unwrap_or_else(|| field(&response["error"], "message"));
                if sse::is_context_error(&code, &message) {
                    return Err(LlmError::ContextTooLong { detail: message });
                }
                return Err(LlmError::Stream(format!("the server reported an error ({code}): {message}")));
            }
            _ => {}
        }
        Ok(false)
    }

    fn closed(&mut self, _out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if self.finished { Ok(()) } else { Err(sse::cut_short()) }
    }
}

#[cfg(test)]
mod tests;

//! OpenAI Chat Completions over SSE, for OpenAI and every compatible server (Ollama, vLLM, …).
//!
//! Requests carry the whole conversation; responses stream `chat.completion.chunk` events. A
//! `tool` message carries text only, so images a tool returned follow its step's tool messages in
//! a user message.
//! Text and reasoning (`reasoning_content` or `reasoning`, whichever the server sends) pass
//! straight through; tool-call deltas are accumulated per `index` and released whole when the
//! model finishes; usage arrives in a last chunk with empty `choices` (`stream_options`).

use std::collections::{BTreeMap, VecDeque};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::wire::{DataUrl, Joined, UserBlock, tool_result, user_blocks};
use super::{FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest, sse};
use crate::history::view::Seen;
use crate::history::{Part, Role, Usage};

/// The request body, borrowing from the request.
fn request_body<'a>(request: &ModelRequest<'a>) -> Body<'a> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(Said::System { content: request.system });
    }
    for seen in &request.messages {
        match seen.message.role {
            Role::User => messages.extend(user_message(*seen, request)),
            Role::Assistant => assistant_messages(*seen, request, &mut messages),
        }
    }
    Body {
        model: request.model,
        messages,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tools: request.tools.iter().map(|spec| Tool { kind: "function", function: spec }).collect(),
        reasoning_effort: request.thought.map(|thought| thought.effort()),
        prompt_cache_key: request.cache_key,
    }
}

/// The request body as sent.
pub fn encode(request: &ModelRequest<'_>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&request_body(request))
}

/// A Chat Completions request.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Said<'a>>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: &'a Value,
}

/// One message of the conversation.
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum Said<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: Cow<'a, str>,
    },
}

/// A user message's content: one string when it is all text, else typed items.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(Cow<'a, str>),
    Items(Vec<Item<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: DataUrl<'a>,
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

fn user_message<'a>(seen: Seen<'a>, request: &ModelRequest<'_>) -> Option<Said<'a>> {
    let blocks = user_blocks(seen, request);
    if blocks.is_empty() {
        return None;
    }
    let all_text = blocks.iter().all(|block| matches!(block, UserBlock::Text(_)));
    let content = if all_text {
        let mut text = Joined::default();
        for block in blocks {
            if let UserBlock::Text(said) = block {
                text.push(said, "\n\n");
            }
        }
        UserContent::Text(text.take())
    } else {
        let items = blocks
            .into_iter()
            .map(|block| match block {
                UserBlock::Text(text) => Item::Text { text },
                UserBlock::Image { mime_type, data } => {
                    Item::ImageUrl { image_url: ImageUrl { url: DataUrl { mime_type, data } } }
                }
            })
            .collect();
        UserContent::Items(items)
    };
    Some(Said::User { content })
}

/// An assistant message, then one `tool` message per call it made (the API requires both), then,
/// when calls returned images, one user message with them (a `tool` message holds text only),
/// each after a line naming its call.
fn assistant_messages<'a>(seen: Seen<'a>, request: &ModelRequest<'_>, out: &mut Vec<Said<'a>>) {
    let mut text = Joined::default();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut images = Vec::new();
    for part in &seen.message.parts {
        match part {
            Part::Text { text: chunk } => text.push(Cow::Borrowed(chunk), ""),
            // The provider's own search (a session that changed models): its answer says it all.
            Part::Tool(tool) if tool.hosted => {}
            Part::Tool(tool) => {
                let function = Function { name: &tool.name, arguments: &tool.input };
                calls.push(Call { id: &tool.call_id, kind: "function", function });
                let (content, returned) = tool_result(request, seen, tool);
                results.push(Said::Tool { tool_call_id: &tool.call_id, content });
                if !returned.is_empty() {
                    let intro = format!("The image returned by the `{}` call {}:", tool.name, tool.call_id);
                    images.push(Item::Text { text: Cow::Owned(intro) });
                    images.extend(returned.iter().map(|image| Item::ImageUrl {
                        image_url: ImageUrl { url: DataUrl { mime_type: &image.mime_type, data: &image.data } },
                    }));
                }
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
    if text.is_empty() && calls.is_empty() {
        return;
    }
    out.push(Said::Assistant { content: text.take(), tool_calls: calls });
    out.extend(results);
    if !images.is_empty() {
        out.push(Said::User { content: UserContent::Items(images) });
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Keeps what spans several chunks: tool calls being written, and whether the model finished.
#[derive(Default)]
pub struct Decoder {
    calls: BTreeMap<u32, PartialCall>,
    finished: bool,
}

impl sse::Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        if data.trim() == "[DONE]" {
            self.release_calls(out);
            return Ok(true);
        }
        if data.trim().is_empty() {
            return Ok(false);
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|err| LlmError::Stream(format!("unreadable chunk ({err}): {}", sse::excerpt(data))))?;
        if let Some(error) = chunk.error {
            let message = error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned);
            if sse::is_context_error("", &message) {
                return Err(LlmError::ContextTooLong { detail: message });
            }
            return Err(LlmError::Stream(format!("the server reported an error: {message}")));
        }
        for choice in chunk.choices {
            let delta = choice.delta;
            if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                out.push_back(StreamEvent::ReasoningDelta(text));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                out.push_back(StreamEvent::TextDelta(text));
            }
            for call in delta.tool_calls {
                let partial = self.calls.entry(call.index).or_default();
                let was_named = !partial.name.is_empty();
                if let Some(id) = call.id {
                    partial.id = id;
                }
                if let Some(function) = call.function {
                    partial.name.push_str(function.name.as_deref().unwrap_or_default());
                    partial.arguments.push_str(function.arguments.as_deref().unwrap_or_default());
                }
                if !was_named && !partial.name.is_empty() {
                    out.push_back(StreamEvent::ToolCallStarted { id: partial.id.clone(), name: partial.name.clone() });
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.release_calls(out);
                self.finished = true;
                out.push_back(StreamEvent::Finish(match reason.as_str() {
                    "stop" => FinishReason::Stop,
                    "length" => FinishReason::Length,
                    "tool_calls" | "function_call" => FinishReason::ToolCalls,
                    "content_filter" => FinishReason::ContentFilter,
                    _ => FinishReason::Other(reason),
                }));
            }
        }
        if let Some(usage) = chunk.usage {
            let cache_read = usage.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
            // `prompt_tokens` counts the cached tokens too; `completion_tokens` includes reasoning.
            out.push_back(StreamEvent::Usage(Usage {
                input: usage.prompt_tokens.saturating_sub(cache_read),
                output: usage.completion_tokens,
                reasoning: usage.completion_tokens_details.map_or(0, |d| d.reasoning_tokens),
                cache_read,
                cache_write: 0,
            }));
        }
        Ok(false)
    }

    fn closed(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if !self.finished {
            return Err(sse::cut_short());
        }
        self.release_calls(out);
        Ok(())
    }
}

impl Decoder {
    fn release_calls(&mut self, out: &mut VecDeque<StreamEvent>) {
        for (index, call) in std::mem::take(&mut self.calls) {
            let id = if call.id.is_empty() { format!("call_{index}") } else { call.id };
            out.push_back(StreamEvent::ToolCall(ToolCallRequest { id, name: call.name, arguments: call.arguments }));
        }
    }
}

#[cfg(test)]
mod tests;

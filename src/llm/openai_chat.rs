//! OpenAI Chat Completions over SSE, for OpenAI and every compatible server (Ollama, vLLM, …).
//!
//! Requests carry the whole conversation; responses stream `chat.completion.chunk` events.
//! Text and reasoning (`reasoning_content` or `reasoning`, whichever the server sends) pass
//! straight through; tool-call deltas are accumulated per `index` and released whole when the
//! model finishes; usage arrives in a last chunk with empty `choices` (`stream_options`).

use std::collections::{BTreeMap, VecDeque};

use serde::Deserialize;
use serde_json::{Value, json};

use super::{FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest, UserBlock, sse};
use crate::history::{Message, Part, Role, Usage};

/// The request body; public for the benchmarks.
pub fn request_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        match message.role {
            Role::User => messages.extend(user_message(message)),
            Role::Assistant => messages.extend(assistant_messages(message)),
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        let tools: Vec<Value> =
            request.tools.iter().map(|spec| json!({"type": "function", "function": spec})).collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(thought) = request.thought {
        body["reasoning_effort"] = json!(thought.effort());
    }
    body
}

fn user_message(message: &Message) -> Option<Value> {
    let blocks = super::user_blocks(message);
    if blocks.is_empty() {
        return None;
    }
    let all_text = blocks.iter().all(|block| matches!(block, UserBlock::Text(_)));
    let content = if all_text {
        let texts: Vec<&str> = blocks
            .iter()
            .filter_map(|block| match block {
                UserBlock::Text(text) => Some(text.as_ref()),
                UserBlock::Image { .. } => None,
            })
            .collect();
        Value::String(texts.join("\n\n"))
    } else {
        let items = blocks
            .iter()
            .map(|block| match block {
                UserBlock::Text(text) => json!({"type": "text", "text": text}),
                UserBlock::Image { mime_type, data } => image(mime_type, data),
            })
            .collect();
        Value::Array(items)
    };
    Some(json!({"role": "user", "content": content}))
}

fn image(mime_type: &str, data: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{mime_type};base64,{data}")}})
}

/// An assistant message, then one `tool` message per call it made (the API requires both).
fn assistant_messages(message: &Message) -> Vec<Value> {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for part in &message.parts {
        match part {
            Part::Text { text: chunk } => text.push_str(chunk),
            Part::Tool(tool) => {
                calls.push(json!({
                    "id": tool.call_id, "type": "function",
                    "function": {"name": tool.name, "arguments": tool.input},
                }));
                results.push(json!({"role": "tool", "tool_call_id": tool.call_id, "content": tool.model_output()}));
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
        return Vec::new();
    }
    let mut assistant = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        assistant["tool_calls"] = Value::Array(calls);
    }
    let mut out = vec![assistant];
    out.extend(results);
    out
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

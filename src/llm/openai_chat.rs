//! OpenAI Chat Completions over SSE, for OpenAI and every compatible server (Ollama, vLLM, …).
//!
//! Requests carry the whole conversation; responses stream `chat.completion.chunk` events.
//! Text and reasoning (`reasoning_content` or `reasoning`, whichever the server sends) pass
//! straight through; tool-call deltas are accumulated per `index` and released whole when the
//! model finishes; usage arrives in a last chunk with empty `choices` (`stream_options`).

use std::collections::{BTreeMap, VecDeque};

use eventsource_stream::Eventsource;
use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::retry::parse_retry_after;
use super::{EventStream, FinishReason, LlmError, ModelRequest, Provider, StreamEvent, ToolCallRequest};
use crate::config::{ProviderConfig, Secret};
use crate::history::{Message, Part, Role, Usage};

/// How much of an error body we quote back to the user.
const DETAIL_LIMIT: usize = 600;

pub struct OpenAiChat {
    client: reqwest::Client,
    url: String,
    api_key: Option<Secret>,
    key_env: String,
}

impl OpenAiChat {
    pub fn new(client: reqwest::Client, config: &ProviderConfig) -> Self {
        Self {
            client,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            api_key: config.api_key.clone(),
            key_env: config.api_key_env.clone().unwrap_or_else(|| "the provider's api_key_env".to_owned()),
        }
    }
}

impl Provider for OpenAiChat {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        Box::pin(async move {
            let mut http = self.client.post(&self.url).json(&request_body(request));
            if let Some(key) = &self.api_key {
                http = http.bearer_auth(key.expose());
            }
            let response = http.send().await.map_err(|err| transport_error(&self.url, &err))?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let retry_after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|value| value.to_str().ok())
                    .and_then(parse_retry_after);
                let body = response.text().await.unwrap_or_default();
                return Err(self.status_error(status, &body, &request.model, retry_after));
            }
            Ok(decode(response.bytes_stream().eventsource()).boxed())
        })
    }
}

impl OpenAiChat {
    fn status_error(&self, status: u16, body: &str, model: &str, retry_after: Option<std::time::Duration>) -> LlmError {
        let parsed: Option<Value> = serde_json::from_str(body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        let code = error.and_then(|e| e.get("code")).and_then(Value::as_str).unwrap_or_default();
        let detail =
            error.and_then(|e| e.get("message").and_then(Value::as_str).or_else(|| e.as_str())).unwrap_or(body);
        let detail: String = detail.chars().take(DETAIL_LIMIT).collect();
        let url = self.url.clone();
        if status == 401 || status == 403 {
            return LlmError::Unauthorized { url, status, env: self.key_env.clone(), detail };
        }
        if code == "model_not_found" || (status == 404 && detail.to_lowercase().contains("model")) {
            return LlmError::UnknownModel { model: model.to_owned(), url, detail };
        }
        LlmError::Status { url, status, detail, retry_after }
    }
}

fn transport_error(url: &str, err: &reqwest::Error) -> LlmError {
    // reqwest's own message repeats the URL; the innermost cause says what actually happened.
    let mut root: &dyn std::error::Error = err;
    while let Some(cause) = root.source() {
        root = cause;
    }
    let detail = if err.is_timeout() { format!("timed out ({root})") } else { root.to_string() };
    // A server that is not there will not be there in a second either; a reset or a timeout may be.
    LlmError::Unreachable { url: url.to_owned(), detail, retryable: !err.is_connect() }
}

fn request_body(request: &ModelRequest) -> Value {
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
    body
}

fn user_message(message: &Message) -> Option<Value> {
    let mut content = Vec::new();
    for part in &message.parts {
        let item = match part {
            Part::Text { text } => json!({"type": "text", "text": text}),
            Part::Image { mime_type, data, .. } => image(mime_type, data),
            Part::ResourceLink { uri, name, title, description, .. } => {
                let mut text = format!("[@{name}]({uri})");
                for extra in [title, description].into_iter().flatten() {
                    text.push_str(&format!(" — {extra}"));
                }
                json!({"type": "text", "text": text})
            }
            Part::Resource { uri, text, .. } => {
                json!({"type": "text", "text": format!("<resource uri=\"{uri}\">\n{text}\n</resource>")})
            }
            Part::BlobResource { uri, mime_type, blob } => match mime_type.as_deref() {
                Some(mime) if mime.starts_with("image/") => image(mime, blob),
                other => json!({"type": "text", "text": format!(
                    "<resource uri=\"{uri}\">binary content ({}, {} base64 bytes) not shown</resource>",
                    other.unwrap_or("unknown type"),
                    blob.len()
                )}),
            },
            Part::Reasoning { .. } | Part::Tool(_) => continue,
        };
        content.push(item);
    }
    if content.is_empty() {
        return None;
    }
    let all_text = content.iter().all(|item| item["type"] == "text");
    let content = if all_text {
        Value::String(content.iter().filter_map(|item| item["text"].as_str()).collect::<Vec<_>>().join("\n\n"))
    } else {
        Value::Array(content)
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
            | Part::Image { .. }
            | Part::ResourceLink { .. }
            | Part::Resource { .. }
            | Part::BlobResource { .. } => {}
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

/// Turns SSE events into [`StreamEvent`]s, keeping what spans several chunks.
struct Decoder {
    pending: VecDeque<StreamEvent>,
    calls: BTreeMap<u32, PartialCall>,
    finished: bool,
    ended: bool,
}

fn decode<S, E>(events: S) -> impl Stream<Item = Result<StreamEvent, LlmError>>
where
    S: Stream<Item = Result<eventsource_stream::Event, E>> + Unpin,
    E: std::fmt::Display,
{
    let decoder = Decoder { pending: VecDeque::new(), calls: BTreeMap::new(), finished: false, ended: false };
    futures::stream::unfold((events, decoder), |(mut events, mut decoder)| async move {
        loop {
            if let Some(event) = decoder.pending.pop_front() {
                return Some((Ok(event), (events, decoder)));
            }
            if decoder.ended {
                return None;
            }
            let error = match events.next().await {
                Some(Ok(event)) if event.data.trim() == "[DONE]" => {
                    decoder.release_calls();
                    decoder.ended = true;
                    continue;
                }
                Some(Ok(event)) => match decoder.chunk(&event.data) {
                    Ok(()) => continue,
                    Err(err) => err,
                },
                Some(Err(err)) => LlmError::Stream(err.to_string()),
                None if decoder.finished => {
                    decoder.release_calls();
                    decoder.ended = true;
                    continue;
                }
                None => LlmError::Stream("the connection closed before the answer was complete".to_owned()),
            };
            decoder.ended = true;
            return Some((Err(error), (events, decoder)));
        }
    })
}

impl Decoder {
    fn chunk(&mut self, data: &str) -> Result<(), LlmError> {
        if data.trim().is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data)
            .map_err(|err| LlmError::Stream(format!("unreadable chunk ({err}): {}", truncate(data))))?;
        if let Some(error) = chunk.error {
            let message = error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned);
            return Err(LlmError::Stream(format!("the server reported an error: {message}")));
        }
        for choice in chunk.choices {
            let delta = choice.delta;
            if let Some(text) = delta.reasoning_content.or(delta.reasoning).filter(|t| !t.is_empty()) {
                self.pending.push_back(StreamEvent::ReasoningDelta(text));
            }
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.pending.push_back(StreamEvent::TextDelta(text));
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
                    let started = StreamEvent::ToolCallStarted { id: partial.id.clone(), name: partial.name.clone() };
                    self.pending.push_back(started);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.release_calls();
                self.finished = true;
                self.pending.push_back(StreamEvent::Finish(match reason.as_str() {
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
            self.pending.push_back(StreamEvent::Usage(Usage {
                input: usage.prompt_tokens.saturating_sub(cache_read),
                output: usage.completion_tokens,
                reasoning: usage.completion_tokens_details.map_or(0, |d| d.reasoning_tokens),
                cache_read,
                cache_write: 0,
            }));
        }
        Ok(())
    }

    fn release_calls(&mut self) {
        for (index, call) in std::mem::take(&mut self.calls) {
            let id = if call.id.is_empty() { format!("call_{index}") } else { call.id };
            self.pending.push_back(StreamEvent::ToolCall(ToolCallRequest {
                id,
                name: call.name,
                arguments: call.arguments,
            }));
        }
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(200).collect()
}

#[cfg(test)]
mod tests;

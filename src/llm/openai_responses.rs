//! OpenAI Responses over SSE (`POST /responses`).
//!
//! The conversation goes out as input items (messages, `function_call`s and their
//! `function_call_output`s, whose output is a list of text and images when the tool returned
//! images); the answer streams as typed events: output text deltas, reasoning
//! summary deltas (shown as thoughts), function-call items whose arguments stream by item id, and
//! a final `response.completed` (or `response.incomplete`) carrying the usage. Where the model
//! has it, OpenAI's `web_search` is offered with the pages each search found; its
//! `web_search_call` items become [`WebSearch`] events and the `url_citation` annotations the
//! answer's "Sources" list ([`super::search`]). A session's requests carry its
//! `prompt_cache_key`.

use std::collections::{HashMap, VecDeque};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::search::{Cited, Source, WebSearch};
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
            .map(|spec| Tool::Function {
                kind: "function",
                name: &spec["name"],
                description: &spec["description"],
                parameters: &spec["parameters"],
            })
            .chain(request.web_search.then_some(Tool::Hosted { kind: "web_search" }))
            .collect(),
        // The pages each search found, for its card.
        include: if request.web_search { &["web_search_call.action.sources"] } else { &[] },
        reasoning: request.thought.map(|thought| Reasoning { effort: thought.effort(), summary: "auto" }),
        prompt_cache_key: request.cache_key,
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
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    include: &'static [&'static str],
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Reasoning>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
}

/// A function the model may call, or a tool the provider runs itself (its web search).
#[derive(Serialize)]
#[serde(untagged)]
enum Tool<'a> {
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'a Value,
        description: &'a Value,
        parameters: &'a Value,
    },
    Hosted {
        #[serde(rename = "type")]
        kind: &'static str,
    },
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
            // The provider's own search: what it found is in the answer that follows.
            Part::Tool(tool) if tool.hosted => {}
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
    annotation: Option<Value>,
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

/// Function calls by item id (`call_id`, name, arguments so far), the pages the answer cites,
/// and whether it finished.
#[derive(Default)]
pub struct Decoder {
    calls: HashMap<String, (String, String, String)>,
    cited: Cited,
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
                if field(&item, "type") == "web_search_call" {
                    out.push_back(StreamEvent::WebSearch(web_search(&item, false)));
                } else if field(&item, "type") == "function_call" {
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
            "response.output_text.annotation.added" => self.cite(&event.annotation.unwrap_or_default()),
            "response.output_item.done" => {
                let item = event.item.unwrap_or_default();
                if field(&item, "type") == "web_search_call" {
                    out.push_back(StreamEvent::WebSearch(web_search(&item, true)));
                }
                if field(&item, "type") == "message" {
                    let contents = item.get("content").and_then(Value::as_array).into_iter().flatten();
                    for annotation in contents.flat_map(|c| c.get("annotations").and_then(Value::as_array)).flatten() {
                        self.cite(annotation);
                    }
                }
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
                if let Some(footer) = self.cited.take_footer() {
                    out.push_back(StreamEvent::TextDelta(footer));
                }
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

impl Decoder {
    /// Notes a `url_citation` annotation.
    fn cite(&mut self, annotation: &Value) {
        if annotation.get("type").and_then(Value::as_str) == Some("url_citation") {
            let text = |key| annotation.get(key).and_then(Value::as_str);
            self.cited.note(text("url").unwrap_or_default(), text("title"));
        }
    }
}

/// A `web_search_call` item as a search: what it looked for (a query, or a page it opened or
/// searched within) and, once `done`, the pages it found.
fn web_search(item: &Value, done: bool) -> WebSearch {
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let action = item.get("action").cloned().unwrap_or_default();
    let mut queries: Vec<String> = action
        .get("queries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|q| q.as_str().map(str::to_owned))
        .collect();
    match (text(&action, "type").as_deref(), text(&action, "query"), text(&action, "url"), text(&action, "pattern")) {
        (Some("search") | None, Some(query), _, _) if !queries.contains(&query) => queries.insert(0, query),
        (Some("open_page"), _, Some(url), _) => queries.push(format!("open {url}")),
        (Some("find"), _, Some(url), Some(pattern)) => queries.push(format!("find \"{pattern}\" in {url}")),
        _ => {}
    }
    let sources = action
        .get("sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|source| Some(Source { url: text(source, "url")?, title: text(source, "title") }))
        .collect();
    let failed = text(item, "status").as_deref() == Some("failed");
    WebSearch {
        id: text(item, "id").unwrap_or_default(),
        queries,
        sources,
        done: done || failed,
        error: failed.then(|| "the provider's search failed".to_owned()),
    }
}

#[cfg(test)]
mod tests;

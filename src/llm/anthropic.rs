//! Anthropic Messages over SSE (`POST /messages`).
//!
//! Thinking blocks stream as reasoning deltas and close with a `signature_delta`; both are stored
//! and sent back unchanged in later requests (Anthropic rejects a tool-use turn whose thinking was
//! altered), redacted thinking goes back as the opaque data it came as, and thinking without a
//! signature (cut off mid-stream) is left out. Tool results travel as `tool_result` blocks in the
//! next user message (text, or text and `image` blocks when the tool returned images). Prompt-cache
//! breakpoints sit on the system prompt and on the latest user content. Usage: `input_tokens` here already excludes cached tokens.
//! Where the model has it, Anthropic's server-side web search is offered beside the functions;
//! its `server_tool_use` and `web_search_tool_result` blocks become [`WebSearch`] events, the
//! answer's citations its "Sources" list ([`super::search`]), and none of them is sent back.

use std::collections::{BTreeMap, VecDeque};

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::search::{Cited, Source, WebSearch};
use super::wire::{Arguments, UserBlock, tool_result, user_blocks};
use super::{FinishReason, LlmError, ModelRequest, StreamEvent, ToolCallRequest, sse};
use crate::history::view::Seen;
use crate::history::{CallState, Part, Role, Usage};

/// The request body, borrowing from the request.
fn request_body<'a>(request: &ModelRequest<'a>) -> Body<'a> {
    let mut messages: Vec<Said<'a>> = Vec::new();
    let mut push = |role: &'static str, mut content: Vec<Content<'a>>| {
        if content.is_empty() {
            return;
        }
        // The API wants roles to alternate: merge what follows a message of the same role.
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.append(&mut content),
            _ => messages.push(Said { role, content }),
        }
    };
    for seen in &request.messages {
        match seen.message.role {
            Role::User => push("user", user_content(*seen, request)),
            Role::Assistant => {
                let (said, results) = assistant_content(*seen, request);
                push("assistant", said);
                push("user", results);
            }
        }
    }
    // Cache everything up to the latest user content.
    if let Some(block) = messages.iter_mut().rev().find(|m| m.role == "user").and_then(|m| m.content.last_mut()) {
        block.cache();
    }
    let thinking = request.thought.and_then(|level| level.thinking_budget());
    Body {
        model: request.model,
        // The answer must fit after the thinking.
        max_tokens: thinking.map_or(request.max_output, |budget| request.max_output.max(budget + 4_096)),
        stream: true,
        messages,
        system: (!request.system.is_empty()).then_some([System {
            kind: "text",
            text: request.system,
            cache_control: EPHEMERAL,
        }]),
        tools: request
            .tools
            .iter()
            .map(|spec| Tool::Function {
                name: &spec["name"],
                description: &spec["description"],
                input_schema: &spec["parameters"],
            })
            .chain(request.web_search.then_some(Tool::Hosted {
                kind: WEB_SEARCH_TOOL,
                name: "web_search",
                max_uses: WEB_SEARCHES,
            }))
            .collect(),
        thinking: thinking.map(|budget_tokens| Thinking { kind: "enabled", budget_tokens }),
    }
}

/// The request body as sent.
pub fn encode(request: &ModelRequest<'_>) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&request_body(request))
}

/// A Messages request.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u64,
    stream: bool,
    messages: Vec<Said<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<[System<'a>; 1]>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
}

#[derive(Serialize)]
struct System<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    cache_control: Cache,
}

/// A function the model may call, or a tool Anthropic runs itself (its web search).
#[derive(Serialize)]
#[serde(untagged)]
enum Tool<'a> {
    Function {
        name: &'a Value,
        description: &'a Value,
        input_schema: &'a Value,
    },
    Hosted {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'static str,
        max_uses: u32,
    },
}

/// Anthropic's server-side web search, and the most searches one answer may make.
const WEB_SEARCH_TOOL: &str = "web_search_20250305";
const WEB_SEARCHES: u32 = 5;

#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u64,
}

/// A prompt-cache breakpoint.
#[derive(Clone, Copy, Serialize)]
struct Cache {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Cache = Cache { kind: "ephemeral" };

/// One message of the conversation, after merging neighbours of the same role.
#[derive(Serialize)]
struct Said<'a> {
    role: &'static str,
    content: Vec<Content<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Cache>,
    },
    Image {
        source: ImageSource<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Cache>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Arguments<'a>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<Cache>,
    },
}

/// A tool result's content: its text, or text and images as blocks.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Content<'a>>),
}

impl Content<'_> {
    /// Puts a cache breakpoint after this block (user content only).
    fn cache(&mut self) {
        match self {
            Content::Text { cache_control, .. }
            | Content::Image { cache_control, .. }
            | Content::ToolResult { cache_control, .. } => *cache_control = Some(EPHEMERAL),
            Content::Thinking { .. } | Content::RedactedThinking { .. } | Content::ToolUse { .. } => {}
        }
    }
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

fn image<'a>(mime_type: &'a str, data: &'a str) -> Content<'a> {
    Content::Image { source: ImageSource { kind: "base64", media_type: mime_type, data }, cache_control: None }
}

fn user_content<'a>(seen: Seen<'a>, request: &ModelRequest<'_>) -> Vec<Content<'a>> {
    user_blocks(seen, request)
        .into_iter()
        .filter_map(|block| match block {
            UserBlock::Text(text) if text.is_empty() => None,
            UserBlock::Text(text) => Some(Content::Text { text, cache_control: None }),
            UserBlock::Image { mime_type, data } => Some(image(mime_type, data)),
        })
        .collect()
}

/// What the assistant said, in order, and the tool results that answer its calls.
fn assistant_content<'a>(seen: Seen<'a>, request: &ModelRequest<'_>) -> (Vec<Content<'a>>, Vec<Content<'a>>) {
    let mut said = Vec::new();
    let mut results = Vec::new();
    for part in &seen.message.parts {
        match part {
            Part::Reasoning { text, signature: Some(signature) } => {
                said.push(Content::Thinking { thinking: text, signature });
            }
            Part::RedactedReasoning { data } => said.push(Content::RedactedThinking { data }),
            Part::Text { text } if !text.is_empty() => {
                said.push(Content::Text { text: Cow::Borrowed(text), cache_control: None });
            }
            // The provider's own search: what it found is in the answer that follows.
            Part::Tool(tool) if tool.hosted => {}
            Part::Tool(tool) => {
                said.push(Content::ToolUse { id: &tool.call_id, name: &tool.name, input: Arguments::of(&tool.input) });
                let (text, images) = tool_result(request, seen, tool);
                let content = if images.is_empty() {
                    ResultContent::Text(text)
                } else {
                    // A text block may not be empty.
                    let text = (!text.is_empty()).then_some(Content::Text { text, cache_control: None });
                    let images = images.iter().map(|shown| image(&shown.mime_type, &shown.data));
                    ResultContent::Blocks(text.into_iter().chain(images).collect())
                };
                results.push(Content::ToolResult {
                    tool_use_id: &tool.call_id,
                    content,
                    is_error: !matches!(tool.state, CallState::Succeeded),
                    cache_control: None,
                });
            }
            Part::Reasoning { signature: None, .. }
            | Part::Text { .. }
            | Part::Notice { .. }
            | Part::Image { .. }
            | Part::ResourceLink { .. }
            | Part::Resource { .. }
            | Part::BlobResource { .. }
            | Part::Compaction(_) => {}
        }
    }
    (said, results)
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: usize,
    #[serde(default)]
    message: Option<MessageStart>,
    #[serde(default)]
    content_block: Option<Value>,
    /// Typed and borrowed from the event where it can be: a delta is most of a stream's events.
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

/// A `content_block_delta`'s or `message_delta`'s `delta`: the field its type names.
#[derive(Default, Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Cow<'a, str>,
    #[serde(default, borrow)]
    thinking: Cow<'a, str>,
    #[serde(default, borrow)]
    signature: Cow<'a, str>,
    #[serde(default, borrow)]
    partial_json: Cow<'a, str>,
    #[serde(default, borrow)]
    stop_reason: Cow<'a, str>,
    #[serde(default)]
    citation: Option<Value>,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Clone, Copy, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// A content block being streamed.
enum Block {
    Text,
    Thinking {
        signature: String,
    },
    Tool {
        id: String,
        name: String,
        input: String,
    },
    /// A search Anthropic runs (`server_tool_use`), its input streaming.
    Search {
        id: String,
        input: String,
    },
    Other,
}

/// Keeps the open blocks, the usage so far, the queries of the searches run, the pages the
/// answer cites, and whether the message ended.
#[derive(Default)]
pub struct Decoder {
    blocks: BTreeMap<usize, Block>,
    usage: Usage,
    searches: BTreeMap<String, Vec<String>>,
    cited: Cited,
    finished: bool,
}

fn text_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

impl sse::Decode for Decoder {
    fn event(&mut self, _name: &str, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError> {
        if data.trim().is_empty() {
            return Ok(false);
        }
        let event: Envelope = serde_json::from_str(data)
            .map_err(|err| LlmError::Stream(format!("unreadable event ({err}): {}", sse::excerpt(data))))?;
        match &*event.kind {
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    self.add_usage(usage);
                }
            }
            "content_block_start" => {
                let block = event.content_block.unwrap_or_default();
                let opened = match text_of(&block, "type") {
                    "text" => {
                        for citation in block.get("citations").and_then(Value::as_array).into_iter().flatten() {
                            self.cited.note(text_of(citation, "url"), citation.get("title").and_then(Value::as_str));
                        }
                        let text = text_of(&block, "text");
                        if !text.is_empty() {
                            out.push_back(StreamEvent::TextDelta(text.to_owned()));
                        }
                        Block::Text
                    }
                    "thinking" => {
                        let text = text_of(&block, "thinking");
                        if !text.is_empty() {
                            out.push_back(StreamEvent::ReasoningDelta(text.to_owned()));
                        }
                        Block::Thinking { signature: text_of(&block, "signature").to_owned() }
                    }
                    "redacted_thinking" => {
                        out.push_back(StreamEvent::RedactedReasoning(text_of(&block, "data").to_owned()));
                        Block::Other
                    }
                    "server_tool_use" => {
                        let id = text_of(&block, "id").to_owned();
                        out.push_back(StreamEvent::WebSearch(WebSearch { id: id.clone(), ..WebSearch::default() }));
                        Block::Search { id, input: String::new() }
                    }
                    "web_search_tool_result" => {
                        out.push_back(StreamEvent::WebSearch(self.search_result(&block)));
                        Block::Other
                    }
                    "tool_use" => {
                        let (id, name) = (text_of(&block, "id").to_owned(), text_of(&block, "name").to_owned());
                        out.push_back(StreamEvent::ToolCallStarted { id: id.clone(), name: name.clone() });
                        Block::Tool { id, name, input: String::new() }
                    }
                    _ => Block::Other,
                };
                self.blocks.insert(event.index, opened);
            }
            "content_block_delta" => {
                let delta = event.delta.unwrap_or_default();
                match (self.blocks.get_mut(&event.index), &*delta.kind) {
                    (Some(Block::Text), "text_delta") => {
                        out.push_back(StreamEvent::TextDelta(delta.text.into_owned()));
                    }
                    (Some(Block::Thinking { .. }), "thinking_delta") => {
                        out.push_back(StreamEvent::ReasoningDelta(delta.thinking.into_owned()));
                    }
                    (Some(Block::Thinking { signature }), "signature_delta") => {
                        signature.push_str(&delta.signature);
                    }
                    (Some(Block::Tool { input, .. } | Block::Search { input, .. }), "input_json_delta") => {
                        input.push_str(&delta.partial_json);
                    }
                    (Some(Block::Text), "citations_delta") => {
                        let citation = delta.citation.unwrap_or_default();
                        self.cited.note(text_of(&citation, "url"), citation.get("title").and_then(Value::as_str));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => match self.blocks.remove(&event.index) {
                Some(Block::Thinking { signature }) => out.push_back(StreamEvent::ReasoningSignature(signature)),
                Some(Block::Tool { id, name, input }) => {
                    let arguments = if input.trim().is_empty() { "{}".to_owned() } else { input };
                    out.push_back(StreamEvent::ToolCall(ToolCallRequest { id, name, arguments }));
                }
                Some(Block::Search { id, input }) => {
                    let input: Value = serde_json::from_str(&input).unwrap_or_default();
                    let queries: Vec<String> =
                        input.get("query").and_then(Value::as_str).map(str::to_owned).into_iter().collect();
                    self.searches.insert(id.clone(), queries.clone());
                    out.push_back(StreamEvent::WebSearch(WebSearch { id, queries, ..WebSearch::default() }));
                }
                Some(Block::Text | Block::Other) | None => {}
            },
            "message_delta" => {
                if let Some(usage) = event.usage {
                    self.add_usage(usage);
                }
                let reason = event.delta.map(|d| d.stop_reason.into_owned()).unwrap_or_default();
                if !reason.is_empty() {
                    self.finished = true;
                    if let Some(footer) = self.cited.take_footer() {
                        out.push_back(StreamEvent::TextDelta(footer));
                    }
                    out.push_back(StreamEvent::Usage(self.usage));
                    out.push_back(StreamEvent::Finish(match reason.as_str() {
                        "end_turn" | "stop_sequence" => FinishReason::Stop,
                        "max_tokens" => FinishReason::Length,
                        "tool_use" => FinishReason::ToolCalls,
                        "refusal" => FinishReason::ContentFilter,
                        _ => FinishReason::Other(reason),
                    }));
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error = event.error.unwrap_or(WireError { kind: String::new(), message: data.to_owned() });
                return Err(stream_error(&error));
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
    /// A `web_search_tool_result` block as the search it ends: the pages found, or the error.
    fn search_result(&self, block: &Value) -> WebSearch {
        let id = text_of(block, "tool_use_id").to_owned();
        let queries = self.searches.get(&id).cloned().unwrap_or_default();
        let content = block.get("content").cloned().unwrap_or_default();
        let sources = content
            .as_array()
            .into_iter()
            .flatten()
            .filter(|result| text_of(result, "type") == "web_search_result")
            .map(|result| Source {
                url: text_of(result, "url").to_owned(),
                title: result.get("title").and_then(Value::as_str).map(str::to_owned),
            })
            .collect();
        let error = (text_of(&content, "type") == "web_search_tool_result_error")
            .then(|| text_of(&content, "error_code").to_owned());
        WebSearch { id, queries, sources, done: true, error }
    }

    /// Anthropic reports usage in pieces; later numbers replace earlier ones.
    fn add_usage(&mut self, usage: WireUsage) {
        let target = &mut self.usage;
        if let Some(input) = usage.input_tokens {
            target.input = input;
        }
        if let Some(output) = usage.output_tokens {
            target.output = output;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            target.cache_read = read;
        }
        if let Some(write) = usage.cache_creation_input_tokens {
            target.cache_write = write;
        }
    }
}

/// An `error` event as an [`LlmError`]; overload and server errors may be retried.
fn stream_error(error: &WireError) -> LlmError {
    let status = match error.kind.as_str() {
        "overloaded_error" => Some(529),
        "api_error" => Some(500),
        "rate_limit_error" => Some(429),
        _ => None,
    };
    match status {
        Some(status) => LlmError::Status {
            url: "the Anthropic stream".to_owned(),
            status,
            detail: format!("{}: {}", error.kind, error.message),
            retry_after: None,
        },
        None if sse::is_context_error(&error.kind, &error.message) => {
            LlmError::ContextTooLong { detail: error.message.clone() }
        }
        None => LlmError::Stream(format!("{}: {}", error.kind, error.message)),
    }
}

#[cfg(test)]
mod tests;

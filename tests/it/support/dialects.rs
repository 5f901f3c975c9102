//! Answers in the other dialects the mock model speaks: Anthropic Messages (SSE frames with
//! event names) and OpenAI Responses (typed events), plain text or one tool call each, or a web
//! search the provider runs itself followed by an answer citing what it found.

use std::time::Duration;

use serde_json::{Value, json};

use super::Reply;

impl Reply {
    /// A plain Anthropic answer.
    pub fn anthropic(text: &str) -> Self {
        Reply::Stream { events: anthropic_text(text), delay: Duration::ZERO }
    }

    /// One Anthropic `tool_use` block `(id, name, input)`, ending with `tool_use`.
    pub fn anthropic_tool_call(id: &str, name: &str, input: Value) -> Self {
        let frame = |name: &str, data: Value| format!("event: {name}\ndata: {data}");
        let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
        let delta = json!({"type": "input_json_delta", "partial_json": input.to_string()});
        let events = vec![
            frame("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})),
            frame("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": block})),
            frame("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta})),
            frame("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            frame("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}})),
            frame("message_stop", json!({"type": "message_stop"})),
        ];
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// One OpenAI Responses `function_call` `(call_id, name, arguments)`, then `completed`.
    pub fn responses_tool_call(call_id: &str, name: &str, arguments: Value) -> Self {
        let item = json!({"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name,
            "arguments": arguments.to_string()});
        let events = vec![
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": ""}})
            .to_string(),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": arguments.to_string()})
                .to_string(),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}).to_string(),
            json!({"type": "response.completed", "response": {"status": "completed"}}).to_string(),
        ];
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// A plain OpenAI Responses answer with usage.
    pub fn responses(text: &str) -> Self {
        let events = vec![
            json!({"type": "response.output_text.delta", "delta": text}).to_string(),
            json!({"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 50, "output_tokens": 5}}}).to_string(),
        ];
        Reply::Stream { events, delay: Duration::ZERO }
    }
}

/// A page a provider's web search finds and its answer cites: `(url, title)`.
pub type Found<'a> = (&'a str, &'a str);

impl Reply {
    /// An OpenAI Responses answer that searches the web for `query` (finding `found`), then
    /// says `text` citing the first page found, as the Responses API streams it.
    pub fn responses_web_search(query: &str, found: &[Found<'_>], text: &str) -> Self {
        let sources: Vec<Value> = found.iter().map(|(url, _)| json!({"type": "url", "url": url})).collect();
        let done = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
            "action": {"type": "search", "query": query, "sources": sources}});
        let (url, title) = found.first().copied().unwrap_or_default();
        let citation = json!({"type": "url_citation", "url": url, "title": title, "start_index": 0, "end_index": 1});
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "web_search_call", "id": "ws_1", "status": "in_progress"}}),
            json!({"type": "response.web_search_call.in_progress", "item_id": "ws_1"}),
            json!({"type": "response.web_search_call.searching", "item_id": "ws_1"}),
            json!({"type": "response.web_search_call.completed", "item_id": "ws_1"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": done}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "delta": text}),
            json!({"type": "response.output_text.annotation.added", "item_id": "msg_1", "annotation": citation}),
            json!({"type": "response.completed", "response": {"status": "completed",
                "usage": {"input_tokens": 50, "output_tokens": 5}}}),
        ];
        Reply::Stream { events: events.iter().map(Value::to_string).collect(), delay: Duration::ZERO }
    }

    /// An Anthropic answer whose server-side search looks for `query` (finding `found`), then
    /// says `text` citing the first page found, as the Messages API streams it.
    pub fn anthropic_web_search(query: &str, found: &[Found<'_>], text: &str) -> Self {
        let frame = |data: Value| format!("event: {}\ndata: {data}", data["type"].as_str().unwrap_or_default());
        let results: Vec<Value> = found
            .iter()
            .map(|(url, title)| json!({"type": "web_search_result", "url": url, "title": title, "encrypted_content": "e"}))
            .collect();
        let (url, title) = found.first().copied().unwrap_or_default();
        let citation = json!({"type": "web_search_result_location", "url": url, "title": title,
            "cited_text": text, "encrypted_index": "i"});
        let search = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}});
        let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": results});
        let events = vec![
            frame(json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})),
            frame(json!({"type": "content_block_start", "index": 0, "content_block": search})),
            frame(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": json!({"query": query}).to_string()}})),
            frame(json!({"type": "content_block_stop", "index": 0})),
            frame(json!({"type": "content_block_start", "index": 1, "content_block": result})),
            frame(json!({"type": "content_block_stop", "index": 1})),
            frame(json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}})),
            frame(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": citation}}),
            ),
            frame(json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": text}})),
            frame(json!({"type": "content_block_stop", "index": 2})),
            frame(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3, "server_tool_use": {"web_search_requests": 1}}})),
            frame(json!({"type": "message_stop"})),
        ];
        Reply::Stream { events, delay: Duration::ZERO }
    }
}

/// A plain Anthropic answer, as SSE frames with event names.
pub fn anthropic_text(text: &str) -> Vec<String> {
    let frame = |name: &str, data: Value| format!("event: {name}\ndata: {data}");
    vec![
        frame(
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        frame(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        frame(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        frame("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        frame(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        frame("message_stop", json!({"type": "message_stop"})),
    ]
}

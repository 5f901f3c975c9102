//! Answers in the other dialects the mock model speaks: Anthropic Messages (SSE frames with
//! event names) and OpenAI Responses (typed events), plain text or one tool call each.

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

//! The Anthropic adapter against recorded streams, and the requests it builds.

use serde_json::json;

use super::*;
use crate::history::{Message, MessageMeta, ToolPart};
use crate::llm::sse::decode_transcript;

const THINKING: &str = include_str!("../../../tests/fixtures/anthropic_thinking_tool_use.sse");
const OVERLOADED: &str = include_str!("../../../tests/fixtures/anthropic_overloaded.sse");

#[tokio::test]
async fn a_recorded_stream_decodes_event_by_event() {
    let events: Vec<StreamEvent> =
        decode_transcript(THINKING, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        [
            StreamEvent::ReasoningDelta("Let me look ".into()),
            StreamEvent::ReasoningDelta("at the file.\n  Indented, \"quoted\", ünïcödé 🦀".into()),
            StreamEvent::ReasoningSignature("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYjEz+/==".into()),
            StreamEvent::RedactedReasoning("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into()),
            StreamEvent::TextDelta("I'll read it.".into()),
            StreamEvent::ToolCallStarted { id: "toolu_01".into(), name: "read".into() },
            StreamEvent::ToolCall(ToolCallRequest {
                id: "toolu_01".into(),
                name: "read".into(),
                arguments: "{\"path\": \"src/lib.rs\"}".into()
            }),
            // Anthropic's input_tokens already leave out the cached ones.
            StreamEvent::Usage(Usage { input: 1200, output: 89, reasoning: 0, cache_read: 5000, cache_write: 300 }),
            StreamEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn overload_before_any_content_is_a_retryable_error() {
    let events = decode_transcript(OVERLOADED, Decoder::default()).await;
    assert_eq!(events.len(), 1);
    let err = events[0].clone().unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("overloaded_error"), "{err}");
}

#[tokio::test]
async fn a_stream_cut_mid_event_ends_with_an_error_after_what_arrived() {
    let cut = &THINKING[..THINKING.find("c/lib.rs").unwrap()];
    let events = decode_transcript(cut, Decoder::default()).await;
    let (last, before) = events.split_last().unwrap();
    assert!(matches!(last, Err(LlmError::Reset(why)) if why.contains("closed before")), "{last:?}");
    assert!(before.iter().all(Result::is_ok));
    assert!(before.contains(&Ok(StreamEvent::TextDelta("I'll read it.".into()))));
}

#[test]
fn thinking_goes_back_byte_for_byte_with_tool_results_and_cache_breakpoints() {
    let thinking = "at the file.\n  Indented, \"quoted\", ünïcödé 🦀";
    let signature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYjEz+/==";
    let mut tool = ToolPart::new("toolu_01".into(), "read".into());
    tool.input = "{\"path\": \"src/lib.rs\"}".into();
    tool.state = CallState::Succeeded;
    tool.output = Some("     1\tfn main() {}\n".into());
    let user = Message::new(Role::User, vec![Part::Text { text: "Read lib.rs".into() }], MessageMeta::default());
    let assistant = Message::new(
        Role::Assistant,
        vec![
            Part::Reasoning { text: thinking.into(), signature: Some(signature.into()) },
            Part::RedactedReasoning { data: "EmwKAhgB".into() },
            Part::Reasoning { text: "cut off".into(), signature: None },
            Part::Text { text: "I'll read it.".into() },
            Part::Tool(tool),
        ],
        MessageMeta::default(),
    );
    let messages = [user, assistant];
    let read = json!({"name": "read", "description": "Read a file", "parameters": {"type": "object"}});
    let request = ModelRequest {
        model: "claude-sonnet-4-5",
        system: "be brief",
        messages: messages.iter().map(Seen::whole).collect(),
        tools: vec![&read],
        max_output: 8_000,
        thought: Some(crate::llm::catalog::ThoughtLevel::Low),
        images: true,
        trace: None,
        cache_key: None,
        web_search: false,
    };
    let body: Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(body["system"], json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]));
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 4096}));
    assert_eq!(body["max_tokens"], 8_192, "room for the answer after the thinking budget");
    assert_eq!(
        body["tools"],
        json!([{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Read lib.rs"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": thinking, "signature": signature},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "I'll read it."},
                {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "src/lib.rs"}}
            ]},
            {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": "toolu_01", "content": "     1\tfn main() {}\n",
                "is_error": false, "cache_control": {"type": "ephemeral"}
            }]}
        ])
    );
}

/// A finished `read` call that returned one image, in an assistant message.
fn read_an_image() -> Message {
    let mut tool = ToolPart::new("toolu_img".into(), "read".into());
    tool.input = r#"{"path":"a.png"}"#.into();
    tool.state = CallState::Succeeded;
    tool.output = Some("a.png: PNG image, 1×1, 67 bytes (the image follows).".into());
    tool.images = vec![crate::history::ToolImage { mime_type: "image/png".into(), data: "iVBORw0K".into() }];
    Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default())
}

#[test]
fn an_image_a_tool_returned_goes_in_its_tool_result_until_the_message_is_pruned() {
    let messages = [read_an_image()];
    let body = |pruned: bool| -> Value {
        let request = ModelRequest::plain(
            "m",
            messages.iter().map(|message| if pruned { Seen::pruned(message) } else { Seen::whole(message) }).collect(),
            true,
        );
        serde_json::from_slice(&encode(&request).unwrap()).unwrap()
    };
    assert_eq!(
        body(false)["messages"][1]["content"][0]["content"],
        json!([
            {"type": "text", "text": "a.png: PNG image, 1×1, 67 bytes (the image follows)."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}}
        ])
    );
    assert_eq!(
        body(true)["messages"][1]["content"][0]["content"],
        "a.png: PNG image, 1×1, 67 bytes (the image follows).\n<image pruned: image/png, 6 bytes>",
        "a pruned message keeps a line saying which image it no longer carries"
    );
}

#[test]
fn a_model_without_images_gets_a_placeholder_for_each_prompt_and_tool_image() {
    let prompt = Message::new(
        Role::User,
        vec![
            Part::Text { text: "look".into() },
            Part::Image { mime_type: "image/png".into(), data: "AAA=".into(), uri: None },
        ],
        MessageMeta::default(),
    );
    let messages = [prompt, read_an_image()];
    let request = ModelRequest::plain("haiku-text", messages.iter().map(Seen::whole).collect(), false);
    let sent = encode(&request).unwrap();
    let body: Value = serde_json::from_slice(&sent).unwrap();
    let placeholder = "[image omitted: image/png, 2 bytes — haiku-text does not take images]";
    assert_eq!(body["messages"][0]["content"][0], json!({"type": "text", "text": "look"}));
    assert_eq!(body["messages"][0]["content"][1], json!({"type": "text", "text": placeholder}));
    let placeholder = "[image omitted: image/png, 6 bytes — haiku-text does not take images]";
    assert_eq!(
        body["messages"][2]["content"][0]["content"],
        format!("a.png: PNG image, 1×1, 67 bytes (the image follows).\n{placeholder}"),
        "the tool result is text only, naming the image it leaves out"
    );
    let sent = String::from_utf8(sent).unwrap();
    assert!(!sent.contains("base64") && !sent.contains("iVBORw0K") && !sent.contains("AAA="), "{sent}");
    assert_eq!(messages[1].parts.len(), 1, "the history keeps the image");
}

/// A transcript of `(event, data)` frames.
fn frames(events: &[serde_json::Value]) -> String {
    events.iter().map(|event| format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap())).collect()
}

#[tokio::test]
async fn a_server_side_search_is_announced_with_its_query_then_its_results_and_citations_end_the_answer() {
    use serde_json::json;
    let results = json!([
        {"type": "web_search_result", "url": "https://a.example/", "title": "A", "encrypted_content": "x"},
        {"type": "web_search_result", "url": "https://b.example/", "title": "B", "encrypted_content": "y"}
    ]);
    let citation = json!({"type": "web_search_result_location", "url": "https://a.example/", "title": "A",
        "cited_text": "...", "encrypted_index": "z"});
    let stream = frames(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 9}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"weather"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": " paris\"}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": results}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": citation}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Sunny."}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
        json!({"type": "message_stop"}),
    ]);
    let events: Vec<StreamEvent> =
        decode_transcript(&stream, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    let queries = vec!["weather paris".to_owned()];
    let source = |url: &str, title: &str| Source { url: url.into(), title: Some(title.into()) };
    assert_eq!(
        events[..5],
        [
            StreamEvent::WebSearch(WebSearch { id: "srvtoolu_1".into(), ..WebSearch::default() }),
            StreamEvent::WebSearch(WebSearch {
                id: "srvtoolu_1".into(),
                queries: queries.clone(),
                ..WebSearch::default()
            }),
            StreamEvent::WebSearch(WebSearch {
                id: "srvtoolu_1".into(),
                queries,
                sources: vec![source("https://a.example/", "A"), source("https://b.example/", "B")],
                done: true,
                error: None,
            }),
            StreamEvent::TextDelta("Sunny.".into()),
            StreamEvent::TextDelta("\n\nSources:\n- [A](https://a.example/)".into()),
        ]
    );
}

#[tokio::test]
async fn a_failed_server_side_search_carries_its_error_code() {
    use serde_json::json;
    let stream = frames(&[
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_2",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        json!({"type": "message_stop"}),
    ]);
    let events: Vec<StreamEvent> =
        decode_transcript(&stream, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    let StreamEvent::WebSearch(search) = &events[0] else { panic!("{events:?}") };
    assert_eq!((search.done, search.error.as_deref()), (true, Some("max_uses_exceeded")));
}

#[test]
fn the_server_side_search_is_offered_beside_the_functions_and_never_sent_back() {
    use serde_json::json;
    let mut search = ToolPart::new("srvtoolu_1".into(), "web_search".into());
    search.hosted = true;
    search.state = CallState::Succeeded;
    let messages = [
        Message::new(Role::User, vec![Part::Text { text: "weather?".into() }], MessageMeta::default()),
        Message::new(
            Role::Assistant,
            vec![Part::Tool(search), Part::Text { text: "Sunny.".into() }],
            MessageMeta::default(),
        ),
    ];
    let mut request = ModelRequest::plain("claude-sonnet-4-5", messages.iter().map(Seen::whole).collect(), true);
    request.web_search = true;
    let body: serde_json::Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(body["tools"], json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]));
    assert_eq!(body["messages"][1]["content"], json!([{"type": "text", "text": "Sunny."}]));
}

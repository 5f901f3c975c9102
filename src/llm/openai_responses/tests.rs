//! The OpenAI Responses adapter against a recorded stream, and the requests it builds.

use serde_json::json;

use super::*;
use crate::history::{CallState, Message, MessageMeta, ToolPart};
use crate::llm::sse::decode_transcript;

const STREAM: &str = include_str!("../../../tests/fixtures/responses_reasoning_tool_call.sse");

#[tokio::test]
async fn a_recorded_stream_decodes_event_by_event() {
    let events: Vec<StreamEvent> =
        decode_transcript(STREAM, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        [
            StreamEvent::ReasoningDelta("Thinking about".into()),
            StreamEvent::ReasoningDelta(" the answer".into()),
            StreamEvent::TextDelta("Hello".into()),
            StreamEvent::ToolCallStarted { id: "call_9".into(), name: "grep".into() },
            StreamEvent::ToolCall(ToolCallRequest {
                id: "call_9".into(),
                name: "grep".into(),
                arguments: "{\"pattern\":\"TODO\"}".into()
            }),
            StreamEvent::Usage(Usage { input: 500, output: 300, reasoning: 200, cache_read: 1500, cache_write: 0 }),
            StreamEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn a_cut_stream_and_a_failed_response_are_errors() {
    let cut = &STREAM[..STREAM.find("response.completed").unwrap()];
    let events = decode_transcript(cut, Decoder::default()).await;
    assert!(matches!(events.last(), Some(Err(LlmError::Reset(_)))), "{events:?}");
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"error\":{\"code\":\"context_length_exceeded\",\"message\":\"Your input exceeds the context window\"}}}\n\n";
    let events = decode_transcript(failed, Decoder::default()).await;
    assert!(matches!(&events[0], Err(LlmError::ContextTooLong { .. })), "{events:?}");
}

#[test]
fn history_becomes_input_items() {
    let mut tool = ToolPart::new("call_9".into(), "grep".into());
    tool.input = "{\"pattern\":\"TODO\"}".into();
    tool.state = CallState::Succeeded;
    tool.output = Some("src/a.rs:2:// TODO".into());
    let messages = [
        Message::new(Role::User, vec![Part::Text { text: "find todos".into() }], MessageMeta::default()),
        Message::new(
            Role::Assistant,
            vec![Part::Text { text: "Searching.".into() }, Part::Tool(tool)],
            MessageMeta::default(),
        ),
    ];
    let request = ModelRequest {
        model: "gpt-5",
        system: "be brief",
        messages: messages.iter().map(Seen::whole).collect(),
        tools: Vec::new(),
        max_output: 1000,
        thought: Some(crate::llm::catalog::ThoughtLevel::High),
        images: true,
        trace: None,
        cache_key: None,
        web_search: false,
    };
    let body: Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["reasoning"], json!({"effort": "high", "summary": "auto"}));
    assert_eq!(
        body["input"],
        json!([
            {"role": "user", "content": [{"type": "input_text", "text": "find todos"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Searching."}]},
            {"type": "function_call", "call_id": "call_9", "name": "grep", "arguments": "{\"pattern\":\"TODO\"}"},
            {"type": "function_call_output", "call_id": "call_9", "output": "src/a.rs:2:// TODO"}
        ])
    );
}

#[test]
fn an_image_a_tool_returned_is_an_input_image_of_its_call_output() {
    let mut tool = ToolPart::new("call_img".into(), "read".into());
    tool.input = r#"{"path":"a.webp"}"#.into();
    tool.state = CallState::Succeeded;
    tool.output = Some("a.webp: WebP image".into());
    tool.images = vec![crate::history::ToolImage { mime_type: "image/webp".into(), data: "UklG".into() }];
    let messages = [Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default())];
    let request = ModelRequest::plain("gpt-5", messages.iter().map(Seen::whole).collect(), true);
    let body: Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(
        body["input"][1],
        json!({"type": "function_call_output", "call_id": "call_img", "output": [
            {"type": "input_text", "text": "a.webp: WebP image"},
            {"type": "input_image", "image_url": "data:image/webp;base64,UklG"}
        ]})
    );
}

#[test]
fn a_model_without_images_gets_a_placeholder_for_each_prompt_and_tool_image() {
    let prompt = Message::new(
        Role::User,
        vec![Part::Image { mime_type: "image/webp".into(), data: "UklG".into(), uri: None }],
        MessageMeta::default(),
    );
    let mut tool = ToolPart::new("call_img".into(), "read".into());
    tool.state = CallState::Succeeded;
    tool.output = Some("a.webp: WebP image".into());
    tool.images = vec![crate::history::ToolImage { mime_type: "image/webp".into(), data: "UklG".into() }];
    let messages = [prompt, Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default())];
    let request = ModelRequest::plain("o-text", messages.iter().map(Seen::whole).collect(), false);
    let sent = encode(&request).unwrap();
    let body: Value = serde_json::from_slice(&sent).unwrap();
    let placeholder = "[image omitted: image/webp, 3 bytes — o-text does not take images]";
    assert_eq!(body["input"][0], json!({"role": "user", "content": [{"type": "input_text", "text": placeholder}]}));
    assert_eq!(
        body["input"][2],
        json!({"type": "function_call_output", "call_id": "call_img",
               "output": format!("a.webp: WebP image\n{placeholder}")})
    );
    let sent = String::from_utf8(sent).unwrap();
    assert!(!sent.contains("base64") && !sent.contains("UklG"), "{sent}");
}

/// A transcript of `events`, each as `data:` (the event name is in the JSON's `type`).
fn transcript(events: &[serde_json::Value]) -> String {
    events.iter().map(|event| format!("event: {}\ndata: {event}\n\n", event["type"].as_str().unwrap())).collect()
}

#[tokio::test]
async fn a_providers_search_is_announced_then_listed_and_its_citations_end_the_answer() {
    let done = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
        "action": {"type": "search", "query": "rust let chains",
            "sources": [{"type": "url", "url": "https://blog.rust-lang.org/"}]}});
    let stream = transcript(&[
        json!({"type": "response.output_item.added", "item": {"type": "web_search_call", "id": "ws_1", "status": "in_progress"}}),
        json!({"type": "response.web_search_call.searching", "item_id": "ws_1"}),
        json!({"type": "response.output_item.done", "item": done}),
        json!({"type": "response.output_text.delta", "delta": "Stable in 1.88."}),
        json!({"type": "response.output_text.annotation.added", "annotation": {"type": "url_citation",
            "url": "https://blog.rust-lang.org/", "title": "Rust Blog", "start_index": 0, "end_index": 5}}),
        json!({"type": "response.output_item.done", "item": {"type": "message", "content": [{"type": "output_text",
            "annotations": [{"type": "url_citation", "url": "https://blog.rust-lang.org/", "title": "Rust Blog"}]}]}}),
        json!({"type": "response.completed", "response": {"usage": {"input_tokens": 10, "output_tokens": 3}}}),
    ]);
    let events: Vec<StreamEvent> =
        decode_transcript(&stream, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    let source = Source { url: "https://blog.rust-lang.org/".into(), title: None };
    assert_eq!(
        events[..4],
        [
            StreamEvent::WebSearch(WebSearch { id: "ws_1".into(), ..WebSearch::default() }),
            StreamEvent::WebSearch(WebSearch {
                id: "ws_1".into(),
                queries: vec!["rust let chains".into()],
                sources: vec![source],
                done: true,
                error: None
            }),
            StreamEvent::TextDelta("Stable in 1.88.".into()),
            StreamEvent::TextDelta("\n\nSources:\n- [Rust Blog](https://blog.rust-lang.org/)".into()),
        ]
    );
    assert_eq!(events.last(), Some(&StreamEvent::Finish(FinishReason::Stop)));
}

#[test]
fn the_providers_search_is_asked_for_only_when_the_model_has_it() {
    let message = Message::new(Role::User, vec![Part::Text { text: "news?".into() }], MessageMeta::default());
    let mut request = ModelRequest::plain("gpt-5", vec![Seen::whole(&message)], true);
    let body: serde_json::Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!((body.get("tools"), body.get("include")), (None, None));
    request.web_search = true;
    let body: serde_json::Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(body["tools"], json!([{"type": "web_search"}]));
    assert_eq!(body["include"], json!(["web_search_call.action.sources"]));
}

#[test]
fn a_search_is_not_sent_back_but_the_answer_that_used_it_is() {
    let mut search = ToolPart::new("ws_1".into(), "web_search".into());
    search.hosted = true;
    search.state = CallState::Succeeded;
    search.output = Some("1. [Rust Blog](https://blog.rust-lang.org/)".into());
    let messages = [
        Message::new(Role::User, vec![Part::Text { text: "news?".into() }], MessageMeta::default()),
        Message::new(
            Role::Assistant,
            vec![Part::Tool(search), Part::Text { text: "Stable in 1.88.".into() }],
            MessageMeta::default(),
        ),
    ];
    let request = ModelRequest::plain("gpt-5", messages.iter().map(Seen::whole).collect(), true);
    let body: serde_json::Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    let input = body["input"].as_array().unwrap();
    assert_eq!(input.len(), 2, "{input:?}");
    assert_eq!(input[1]["content"][0]["text"], "Stable in 1.88.");
}

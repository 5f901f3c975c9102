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

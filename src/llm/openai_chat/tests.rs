//! Unit tests of the Chat Completions adapter: request bodies and SSE decoding.

use futures::StreamExt;
use serde_json::json;

use super::*;
use crate::history::{CallState, Message, MessageMeta, ToolPart};

fn event(
    data: &str,
) -> Result<eventsource_stream::Event, eventsource_stream::EventStreamError<std::convert::Infallible>> {
    Ok(eventsource_stream::Event { data: data.to_owned(), ..Default::default() })
}

async fn decode_all(data: &[&str]) -> Vec<Result<StreamEvent, LlmError>> {
    let events: Vec<_> = data.iter().map(|d| event(d)).collect();
    sse::decode(futures::stream::iter(events), Decoder::default()).collect().await
}

#[tokio::test]
async fn text_reasoning_usage_and_finish_are_decoded_in_order() {
    let got = decode_all(&[
        r#"{"choices":[{"delta":{"reasoning_content":"think"}}]}"#,
        r#"{"choices":[{"delta":{"reasoning":"more"}}]}"#,
        r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":20,"prompt_tokens_details":{"cached_tokens":60},"completion_tokens_details":{"reasoning_tokens":5}}}"#,
        "[DONE]",
    ])
    .await;
    let got: Vec<StreamEvent> = got.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        got,
        [
            StreamEvent::ReasoningDelta("think".into()),
            StreamEvent::ReasoningDelta("more".into()),
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage { input: 40, output: 20, reasoning: 5, cache_read: 60, cache_write: 0 }),
        ]
    );
}

#[tokio::test]
async fn a_recorded_stream_with_comments_and_crlf_decodes() {
    let transcript = include_str!("../../../tests/fixtures/openai_chat_reasoning_usage.sse");
    let events: Vec<StreamEvent> =
        sse::decode_transcript(transcript, Decoder::default()).await.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        events,
        [
            StreamEvent::ReasoningDelta("hmm".into()),
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::Finish(FinishReason::Stop),
            StreamEvent::Usage(Usage { input: 40, output: 20, reasoning: 5, cache_read: 60, cache_write: 0 }),
        ]
    );
}

#[tokio::test]
async fn tool_call_deltas_are_accumulated_per_index() {
    let got = decode_all(&[
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"name":"read","arguments":""}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"grep","arguments":"{\"q\":"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"a\"}"}}]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ])
    .await;
    let got: Vec<StreamEvent> = got.into_iter().map(Result::unwrap).collect();
    let call = |id: &str, name: &str, arguments: &str| {
        StreamEvent::ToolCall(ToolCallRequest { id: id.into(), name: name.into(), arguments: arguments.into() })
    };
    assert_eq!(
        got,
        [
            StreamEvent::ToolCallStarted { id: "call_a".into(), name: "read".into() },
            StreamEvent::ToolCallStarted { id: "call_b".into(), name: "grep".into() },
            call("call_a", "read", r#"{"path":"a"}"#),
            call("call_b", "grep", r#"{"q":"x"}"#),
            StreamEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[tokio::test]
async fn a_stream_cut_before_the_finish_is_an_error_but_one_without_done_is_not() {
    let cut = decode_all(&[r#"{"choices":[{"delta":{"content":"par"}}]}"#]).await;
    assert_eq!(cut[0], Ok(StreamEvent::TextDelta("par".into())));
    assert!(matches!(&cut[1], Err(LlmError::Reset(why)) if why.contains("closed before")));

    let no_done = decode_all(&[r#"{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}"#]).await;
    assert!(no_done.iter().all(Result::is_ok), "{no_done:?}");
}

#[tokio::test]
async fn garbage_and_in_stream_errors_end_the_stream_with_their_reason() {
    let garbage = decode_all(&["{not json", r#"{"choices":[{"delta":{"content":"never"}}]}"#]).await;
    assert_eq!(garbage.len(), 1);
    assert!(matches!(&garbage[0], Err(LlmError::Stream(why)) if why.contains("unreadable chunk")));

    let reported = decode_all(&[r#"{"error":{"message":"overloaded"}}"#]).await;
    assert!(matches!(&reported[0], Err(LlmError::Stream(why)) if why.contains("overloaded")));
}

#[test]
fn the_request_carries_history_tool_results_and_images() {
    let user = Message::new(
        Role::User,
        vec![
            Part::Text { text: "look".into() },
            Part::Image { mime_type: "image/png".into(), data: "AAA=".into(), uri: None },
        ],
        MessageMeta::default(),
    );
    let mut tool = ToolPart::new("c1".into(), "read".into());
    tool.input = "{}".into();
    tool.state = CallState::Failed;
    tool.output = Some("no such tool".into());
    let assistant = Message::new(
        Role::Assistant,
        vec![
            Part::Reasoning { text: "hidden".into(), signature: None },
            Part::Text { text: "Let me read.".into() },
            Part::Tool(tool),
        ],
        MessageMeta::default(),
    );
    let empty = Message::new(
        Role::Assistant,
        vec![Part::Reasoning { text: "only thoughts".into(), signature: None }],
        MessageMeta::default(),
    );
    let messages = [user, assistant, empty];
    let request = ModelRequest {
        model: "m",
        system: "sys",
        messages: messages.iter().map(Seen::whole).collect(),
        tools: Vec::new(),
        max_output: 1000,
        thought: None,
        images: true,
        trace: None,
        cache_key: None,
        web_search: false,
    };
    let body: Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA="}}
            ]},
            {"role": "assistant", "content": "Let me read.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "no such tool"}
        ])
    );
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[test]
fn images_a_tool_returned_follow_the_tool_messages_in_a_user_message_naming_the_call() {
    let mut tool = ToolPart::new("c7".into(), "read".into());
    tool.input = r#"{"path":"a.gif"}"#.into();
    tool.state = CallState::Succeeded;
    tool.output = Some("a.gif: GIF image".into());
    tool.images = vec![crate::history::ToolImage { mime_type: "image/gif".into(), data: "R0lG".into() }];
    let mut plain = ToolPart::new("c8".into(), "glob".into());
    plain.state = CallState::Succeeded;
    plain.output = Some("a.gif".into());
    let messages = [Message::new(Role::Assistant, vec![Part::Tool(tool), Part::Tool(plain)], MessageMeta::default())];
    let request = ModelRequest::plain("m", messages.iter().map(Seen::whole).collect(), true);
    let body: Value = serde_json::from_slice(&encode(&request).unwrap()).unwrap();
    let sent = body["messages"].as_array().unwrap();
    assert_eq!(sent[1], json!({"role": "tool", "tool_call_id": "c7", "content": "a.gif: GIF image"}));
    assert_eq!(sent[2]["role"], "tool", "every tool message comes first");
    assert_eq!(
        sent[3],
        json!({"role": "user", "content": [
            {"type": "text", "text": "The image returned by the `read` call c7:"},
            {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}}
        ]})
    );
    assert_eq!(sent.len(), 4);
}

#[test]
fn a_model_without_images_gets_a_placeholder_for_each_prompt_and_tool_image() {
    let prompt = Message::new(
        Role::User,
        vec![
            Part::Text { text: "look".into() },
            Part::BlobResource {
                uri: "file:///a.jpg".into(),
                mime_type: Some("image/jpeg".into()),
                blob: "/9j/".into(),
            },
        ],
        MessageMeta::default(),
    );
    let mut tool = ToolPart::new("c7".into(), "read".into());
    tool.state = CallState::Succeeded;
    tool.output = Some("a.gif: GIF image".into());
    tool.images = vec![crate::history::ToolImage { mime_type: "image/gif".into(), data: "R0lG".repeat(1_000) }];
    let messages = [prompt, Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default())];
    let request = ModelRequest::plain("llama3", messages.iter().map(Seen::whole).collect(), false);
    let sent = encode(&request).unwrap();
    let body: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "look\n\n[image omitted: image/jpeg, 3 bytes — llama3 does not take images]"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c7", "type": "function", "function": {"name": "read", "arguments": ""}}
            ]},
            {"role": "tool", "tool_call_id": "c7",
             "content": "a.gif: GIF image\n[image omitted: image/gif, 2.9 KiB — llama3 does not take images]"}
        ]),
        "no user message of images follows the tool message"
    );
    let sent = String::from_utf8(sent).unwrap();
    assert!(!sent.contains("base64") && !sent.contains("R0lG") && !sent.contains("/9j/"), "{sent}");
}

#[test]
fn a_pasted_image_past_what_one_request_carries_goes_as_a_line() {
    let prompt = Message::new(
        Role::User,
        vec![
            Part::Text { text: "look".into() },
            Part::Image { mime_type: "image/png".into(), data: "iVBO".repeat(512), uri: None },
        ],
        MessageMeta::default(),
    );
    let request = |seen: Seen<'_>| {
        let request = ModelRequest::plain("gpt-4o", vec![seen], true);
        serde_json::from_slice::<Value>(&encode(&request).unwrap()).unwrap()
    };
    let past = request(Seen { images: false, ..Seen::whole(&prompt) });
    assert_eq!(past["messages"][0]["content"], "look\n\n<image pruned: image/png, 1.5 KiB>");
    let carried = request(Seen::whole(&prompt));
    assert_eq!(carried["messages"][0]["content"][1]["type"], "image_url");
}

//! A prompt turn: streamed chunks, stop reasons, content blocks, and the queue of a busy session.

use serde_json::json;

use crate::support::{Reply, TestEnv, messages_of, text_of, updates};

#[tokio::test]
async fn a_prompt_streams_the_answer_as_chunks_and_ends_the_turn() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hel", "lo, ", "world"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;

    let id = agent.prompt(&session, "Say hello").await;
    let (response, notifications) = agent.response(id).await;

    // The mock reports 12 prompt tokens (2 of them cached) and 5 written per request.
    let usage = json!({"totalTokens": 17, "inputTokens": 10, "outputTokens": 5, "cachedReadTokens": 2});
    assert_eq!(response, json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn", "usage": usage}}));
    let updates = updates(&notifications, &session);
    let chunks: Vec<_> = updates.iter().filter(|u| u["sessionUpdate"] == "agent_message_chunk").collect();
    assert_eq!(chunks.len(), 3, "one chunk per delta: {updates:?}");
    let messages = messages_of(&updates, "agent_message_chunk");
    assert_eq!(messages.len(), 1);
    assert!(messages[0].0.starts_with("msg_"));
    assert_eq!(messages[0].1, "Hello, world");
    let sent = env.mock.requests();
    assert_eq!(sent[0]["model"], "mock-model");
    assert_eq!(sent[0]["stream"], true);
    let last = sent[0]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last, json!({"role": "user", "content": "Say hello"}));
    assert_eq!(text_of(&updates, "agent_message_chunk"), "Hello, world");
}

#[tokio::test]
async fn text_links_embedded_resources_and_images_all_reach_the_model() {
    let mut env = TestEnv::new().await;
    // A model that takes images (the mock's own takes none).
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    env.mock.push(Reply::text(&["Seen."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = json!([
        {"type": "text", "text": "Review this"},
        {"type": "resource_link", "uri": "file:///w/src/lib.rs", "name": "lib.rs", "mimeType": "text/x-rust"},
        {"type": "resource", "resource": {"uri": "file:///w/src/main.rs", "mimeType": "text/x-rust", "text": "fn main() {}"}},
        {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}
    ]);
    let result = agent.call("session/prompt", json!({"sessionId": session, "prompt": prompt})).await;
    assert_eq!(result["stopReason"], "end_turn");
    let sent = env.mock.requests()[0]["messages"][1].clone();
    assert_eq!(
        sent,
        json!({"role": "user", "content": [
            {"type": "text", "text": "Review this"},
            {"type": "text", "text": "[@lib.rs](file:///w/src/lib.rs)"},
            {"type": "text", "text": "<resource uri=\"file:///w/src/main.rs\">\nfn main() {}\n</resource>"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
        ]})
    );

    // The blocks come back as they were sent when the session is loaded.
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replayed: Vec<_> = updates(&replay, &session)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| u["content"].clone())
        .collect();
    assert_eq!(replayed, prompt.as_array().unwrap().clone());
}

#[tokio::test]
async fn audio_is_refused_because_it_is_not_advertised() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = json!([{"type": "audio", "mimeType": "audio/wav", "data": "UklGRg=="}]);
    let error = agent.call_err("session/prompt", json!({"sessionId": session, "prompt": prompt})).await;
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("audio"), "{error}");
    assert!(env.mock.requests().is_empty());
}

#[tokio::test]
async fn the_model_finish_reason_becomes_the_stop_reason() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::finishing(&["cut o"], "length"));
    env.mock.push(Reply::finishing(&[], "content_filter"));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for expected in ["max_tokens", "refusal"] {
        let id = agent.prompt(&session, "go").await;
        let (response, _) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], expected, "{response}");
    }
}

#[tokio::test]
async fn reasoning_is_relayed_as_thought_chunks_of_the_same_message() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::thinking_then_text(&["Hmm, ", "2+2."], &["4"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "2+2?").await;
    let (_, notifications) = agent.response(id).await;
    let updates = updates(&notifications, &session);
    let thoughts = messages_of(&updates, "agent_thought_chunk");
    let answer = messages_of(&updates, "agent_message_chunk");
    assert_eq!(thoughts[0].1, "Hmm, 2+2.");
    assert_eq!(answer[0].1, "4");
    assert_eq!(thoughts[0].0, answer[0].0, "one model step is one message");
}

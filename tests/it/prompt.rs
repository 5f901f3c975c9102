//! A prompt turn: streamed chunks, stop reasons, content blocks, and the queue of a busy session.

use std::time::Duration;

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

    assert_eq!(response, json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}}));
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
    let _ = Duration::ZERO;
    let _ = text_of(&updates, "agent_message_chunk");
}

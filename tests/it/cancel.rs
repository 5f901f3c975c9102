//! Cancellation and the prompt queue: a cancel ends the turn at once, drops the model stream,
//! keeps the partial answer, and leaves the session usable; a busy session queues prompts.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Reply, TestEnv, text_of, updates};

#[tokio::test]
async fn cancel_mid_stream_answers_cancelled_drops_the_stream_and_keeps_the_partial_reply() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(15)));
    env.mock.push(Reply::text(&["Back again."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "Count forever").await;
    let mut shown = String::new();
    while shown.len() < 30 {
        shown.push_str(&agent.next_chunk().await);
    }

    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let sent = Instant::now();
    let (response, late) = agent.response(prompt).await;
    let took = sent.elapsed();
    // The endless stream never reported its tokens: the turn used none that are known.
    let none = json!({"totalTokens": 0, "inputTokens": 0, "outputTokens": 0});
    assert_eq!(response["result"], json!({"stopReason": "cancelled", "usage": none}));
    // The stream is endless: only an immediate cancel ends the turn. (Speed is measured in benches.)
    assert!(took < Duration::from_secs(2), "cancel took {took:?}");
    shown.push_str(&text_of(&updates(&late, &session), "agent_message_chunk"));
    env.mock.wait_dropped(1, Duration::from_secs(1)).await;
    // Nothing of the cancelled turn arrives after its answer.
    while let Some(late) = agent.try_recv(Duration::from_millis(100)).await {
        let kind = late["params"]["update"]["sessionUpdate"].as_str().unwrap_or_default();
        assert!(kind == "session_info_update", "only the title may still change: {late}");
    }

    let finish: String = rusqlite::Connection::open(env.database())
        .unwrap()
        .query_row(
            "SELECT json_extract(metadata_json, '$.finish') FROM messages WHERE session_id = ?1 AND role = 'assistant'",
            [&session],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(finish, "interrupted");

    let next = agent.prompt(&session, "Still there?").await;
    let (response, notifications) = agent.response(next).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(text_of(&updates(&notifications, &session), "agent_message_chunk"), "Back again.");
    let history = &env.mock.requests()[1]["messages"];
    let partial = history[2]["content"].as_str().unwrap();
    assert!(partial.starts_with(&shown), "the model sees the partial reply it gave: {partial:?} vs {shown:?}");
}

#[tokio::test]
async fn a_cancel_right_behind_a_prompt_is_never_lost() {
    let env = TestEnv::new().await;
    for _ in 0..20 {
        env.mock.push(Reply::endless(Duration::from_millis(5)));
    }
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for round in 0..20 {
        let id = round + 100;
        let prompt = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}});
        let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}});
        agent.send_raw(&format!("{prompt}\n{cancel}")).await;
        let (response, _) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "cancelled", "round {round}");
    }
}

#[tokio::test]
async fn a_prompt_sent_while_busy_is_queued_and_runs_after_the_current_turn() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text_with_delay(&["first ", "answer"], Duration::from_millis(50)));
    env.mock.push(Reply::text(&["second answer"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let first = agent.prompt(&session, "one").await;
    let second = agent.prompt(&session, "two").await;
    let (answers, notifications) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "end_turn");
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn");
    let texts: Vec<String> = updates(&notifications, &session)
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap().to_owned())
        .collect();
    let (queued, answers): (Vec<String>, Vec<String>) = texts.into_iter().partition(|t| t.contains("queued"));
    assert_eq!(answers, ["first ", "answer", "second answer"], "never interleaved");
    assert_eq!(
        queued,
        ["This prompt is queued behind 1 turn; it runs when the session is free.\n\n"],
        "the queue is shown"
    );
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    let second_request = requests[1]["messages"].as_array().unwrap();
    assert_eq!(second_request.len(), 4, "the queued prompt sees the first turn: {second_request:?}");
    assert_eq!(second_request[2]["content"], "first answer");
}

#[tokio::test]
async fn cancel_also_answers_the_queued_prompts_cancelled() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(10)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let running = agent.prompt(&session, "one").await;
    let queued = agent.prompt(&session, "two").await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (answers, _) = agent.responses(&[running, queued]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"]["stopReason"], "cancelled");
    assert!(env.mock.requests().len() <= 1, "the queued prompt never reached the model");
}

#[tokio::test]
async fn cancel_on_an_idle_session_changes_nothing() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["fine"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let prompt = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
}

//! Every model a user has: Anthropic thinking kept byte for byte across turns and restarts,
//! OpenAI Responses, token accounting, model and thinking options, discovery, and errors.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, TestEnv, messages_of, text_of, updates};
use crate::tools::turn;

const THINKING: &str = include_str!("../fixtures/anthropic_thinking_tool_use.sse");
const RESPONSES: &str = include_str!("../fixtures/responses_reasoning_tool_call.sse");

fn anthropic_env(env: &mut TestEnv) {
    let url = env.mock.url.clone();
    env.set_env("CAIRN_MODEL", "anthropic/claude-sonnet-4-5");
    env.set_env("ANTHROPIC_BASE_URL", &url);
    env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
}

#[tokio::test]
async fn anthropic_thinking_is_shown_and_sent_back_byte_for_byte_even_after_a_restart() {
    let mut env = TestEnv::new().await;
    anthropic_env(&mut env);
    std::fs::create_dir_all(env.workspace().join("src")).unwrap();
    std::fs::write(env.workspace().join("src/lib.rs"), "fn main() {}\n").unwrap();
    env.mock.push(Reply::transcript(THINKING)).push(Reply::anthropic("It is a main function."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, shown) = turn(&mut agent, &session, "What is in lib.rs?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let thinking = "Let me look at the file.\n  Indented, \"quoted\", ünïcödé 🦀";
    let shown_refs: Vec<&Value> = shown.iter().collect();
    assert_eq!(text_of(&shown_refs, "agent_thought_chunk"), thinking);
    let expected =
        json!({"type": "thinking", "thinking": thinking, "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYjEz+/=="});
    let sent = env.mock.requests();
    assert_eq!(sent[1]["messages"][1]["content"][0], expected, "the tool round trip carries the thinking back");
    assert_eq!(sent[1]["messages"][1]["content"][1]["type"], "redacted_thinking");
    assert_eq!(sent[1]["messages"][2]["content"][0]["type"], "tool_result");
    let headers = &env.mock.request_headers()[0];
    assert_eq!(
        (&headers["x-api-key"], &headers["anthropic-version"]),
        (&"sk-ant-test".parse().unwrap(), &"2023-06-01".parse().unwrap())
    );
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    agent.call("session/resume", json!({"sessionId": session, "cwd": env.cwd()})).await;
    env.mock.push(Reply::anthropic("Still main."));
    turn(&mut agent, &session, "And now?").await;
    let third = &env.mock.requests()[2]["messages"];
    assert_eq!(third[1]["content"][0], expected, "unchanged after a reload in a new process");
    assert_eq!(third.as_array().unwrap().len(), 5, "user, assistant, tool results, assistant, user");
}

#[tokio::test]
async fn openai_responses_streams_summaries_as_thoughts_and_runs_function_calls() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/gpt-5");
    std::fs::write(env.workspace().join("a.rs"), "// TODO: later\n").unwrap();
    env.mock.push(Reply::transcript(RESPONSES)).push(Reply::responses("Found one."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, shown) = turn(&mut agent, &session, "find todos").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let shown_refs: Vec<&Value> = shown.iter().collect();
    assert_eq!(text_of(&shown_refs, "agent_thought_chunk"), "Thinking about the answer");
    assert_eq!(
        messages_of(&shown_refs, "agent_message_chunk").iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        ["Hello", "Found one."]
    );
    let input = env.mock.requests()[1]["input"].as_array().unwrap().clone();
    let output = input.iter().find(|item| item["type"] == "function_call_output").unwrap();
    assert_eq!(output["call_id"], "call_9");
    assert_eq!(output["output"], "a.rs:1:// TODO: later\n");
    let usage = shown.iter().find(|u| u["sessionUpdate"] == "usage_update").unwrap();
    assert_eq!(usage["used"], 2300, "input 500 + cache read 1500 + output 300");
    assert_eq!(usage["size"], 400_000);
}

#[tokio::test]
async fn usage_is_reported_after_each_step_and_summed_in_the_session() {
    let env = TestEnv::new().await;
    env.write_config(
        "[models.\"openai/mock-model\"]\ncontext_window = 1000\ninput_price = 1.0\noutput_price = 2.0\ncache_read_price = 0.5\n",
    );
    env.mock.push(Reply::text(&["one"])).push(Reply::text(&["two"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let mut costs = Vec::new();
    for text in ["first", "second"] {
        let (_, shown) = turn(&mut agent, &session, text).await;
        let usage = shown.iter().find(|u| u["sessionUpdate"] == "usage_update").expect("a usage_update").clone();
        // The mock reports 12 prompt tokens (2 cached) and 5 completion tokens per step.
        assert_eq!((usage["used"].clone(), usage["size"].clone()), (json!(17), json!(1000)));
        assert_eq!(usage["cost"]["currency"], "USD");
        costs.push(usage["cost"]["amount"].as_f64().unwrap());
    }
    assert!((costs[0] - 21e-6).abs() < 1e-12 && (costs[1] - 42e-6).abs() < 1e-12, "cumulative: {costs:?}");
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let totals: (i64, i64, i64, i64, f64) = db
        .query_row(
            "SELECT prompt_tokens, completion_tokens, cache_read, total_tokens, cost_usd FROM sessions WHERE id = ?1",
            [&session],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)),
        )
        .unwrap();
    assert_eq!((totals.0, totals.1, totals.2, totals.3), (20, 10, 4, 34));
    assert!((totals.4 - 42e-6).abs() < 1e-12);
    let usage: Value = serde_json::from_str(
        &db.query_row(
            "SELECT json_extract(metadata_json, '$.usage') FROM messages WHERE role = 'assistant' LIMIT 1",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(usage, json!({"input": 10, "output": 5, "reasoning": 0, "cache_read": 2, "cache_write": 0}));

    // A new process shows the same numbers on load.
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let usage = updates(&replay, &session).into_iter().rfind(|u| u["sessionUpdate"] == "usage_update").unwrap().clone();
    assert_eq!(usage["used"], 17);
    assert!((usage["cost"]["amount"].as_f64().unwrap() - 42e-6).abs() < 1e-12);
}

#[tokio::test]
async fn switching_models_updates_the_options_and_refuses_a_window_too_small() {
    let env = TestEnv::new().await;
    env.write_config(
        "[providers.openai]\nmodels = [\"mock-model\", \"tiny\", \"gpt-5\"]\n[models.\"openai/tiny\"]\ncontext_window = 10\n",
    );
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "hello").await;
    let error = agent
        .call_err(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "openai/tiny"}),
        )
        .await;
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("smaller than the 17 tokens"), "{error}");

    let id = agent
        .request(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "openai/gpt-5"}),
        )
        .await;
    let (response, notifications) = agent.response(id).await;
    let options = response["result"]["configOptions"].as_array().unwrap();
    let thinking = options.iter().find(|o| o["id"] == "thought_level").expect("gpt-5 reasons");
    assert_eq!(
        (thinking["category"].as_str(), thinking["currentValue"].as_str()),
        (Some("thought_level"), Some("medium"))
    );
    let shown = updates(&notifications, &session);
    assert!(shown.iter().any(|u| u["sessionUpdate"] == "config_option_update"));
    assert_eq!(shown.iter().find(|u| u["sessionUpdate"] == "usage_update").unwrap()["size"], 400_000);

    agent
        .call("session/set_config_option", json!({"sessionId": session, "configId": "thought_level", "value": "high"}))
        .await;
    env.mock.push(Reply::text(&["thought hard"]));
    turn(&mut agent, &session, "think").await;
    let sent = env.mock.requests().last().unwrap().clone();
    assert_eq!((sent["model"].as_str(), sent["reasoning_effort"].as_str()), (Some("gpt-5"), Some("high")));
    let history = sent["messages"].as_array().unwrap();
    assert_eq!(history.len(), 4, "system, hello, its answer, think: the switch kept the conversation");
}

#[tokio::test]
async fn a_retry_is_shown_as_a_message_to_clients_without_notices_and_kept() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nretry_base_ms = 10\n");
    env.mock.push(Reply::status(503, "busy")).push(Reply::text(&["fine"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, shown) = turn(&mut agent, &session, "hi").await;
    let shown_refs: Vec<&Value> = shown.iter().collect();
    let said = messages_of(&shown_refs, "agent_message_chunk");
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].1.contains("retry 1 of 2") && said[0].1.contains("busy"), "{said:?}");
    assert_eq!(said[1].1, "fine");
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replayed = messages_of(&updates(&replay, &session), "agent_message_chunk");
    assert_eq!(replayed, said, "the note survives a reload");
    env.mock.push(Reply::text(&["again"]));
    turn(&mut agent, &session, "again").await;
    let roles: Vec<Value> =
        env.mock.requests().last().unwrap()["messages"].as_array().unwrap().iter().map(|m| m["role"].clone()).collect();
    assert_eq!(
        roles,
        [json!("system"), json!("user"), json!("assistant"), json!("user")],
        "the note is not sent to the model"
    );
}

#[tokio::test]
async fn a_context_length_error_says_so() {
    let env = TestEnv::new().await;
    let body = json!({"error": {"message": "This model's maximum context length is 128000 tokens.", "code": "context_length_exceeded"}});
    env.mock.push(Reply::Status { status: 400, body: body.to_string(), retry_after: None });
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "hi").await;
    let message = response["error"]["message"].as_str().unwrap();
    assert!(message.contains("no longer fits the model's context window"), "{message}");
    assert_eq!(env.mock.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn providers_can_list_their_models() {
    let env = TestEnv::new().await;
    env.write_config(&format!("[providers.local]\nbase_url = \"{}\"\ndiscover_models = true\n", env.mock.url));
    let mut agent = env.ready().await;
    let mut found = Vec::new();
    for _ in 0..100 {
        let created = agent.call("session/new", json!({"cwd": env.cwd()})).await;
        found = created["configOptions"][0]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap().to_owned())
            .collect();
        if found.contains(&"local/found-b".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(found.contains(&"local/found-a".to_owned()) && found.contains(&"local/found-b".to_owned()), "{found:?}");
}

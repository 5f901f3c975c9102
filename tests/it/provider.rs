//! The model provider seen through the agent: retries, errors that say what to fix, configured
//! providers, and a stream that stalls or breaks.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{PATIENCE, Reply, TestEnv, text_of, updates};

async fn prompt_error(env: &TestEnv) -> (Value, crate::support::Agent, String) {
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(id).await;
    let error = response.get("error").cloned().unwrap_or_else(|| panic!("expected an error: {response}"));
    (error, agent, session)
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_and_shown_as_notices() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(500, "boom"));
    env.mock.push(Reply::status(500, "still booming"));
    env.mock.push(Reply::text(&["made it"]));
    let mut agent = env.spawn().await;
    agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": {"notices": {}}}})).await;
    let session = agent.new_session(&env.cwd()).await;
    let started = Instant::now();
    let id = agent.prompt(&session, "hello").await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(started.elapsed() >= Duration::from_millis(1500), "backoff 500 ms then 1 s");
    assert_eq!(env.mock.requests().len(), 3);
    let updates = updates(&notifications, &session);
    let notices: Vec<_> = updates.iter().filter(|u| u["sessionUpdate"] == "notice").collect();
    assert_eq!(notices.len(), 2, "{updates:?}");
    assert_eq!(notices[0]["severity"], "warning");
    assert!(notices[1]["title"].as_str().unwrap().contains("still booming"), "{notices:?}");
    assert_eq!(text_of(&updates, "agent_message_chunk"), "made it");
}

#[tokio::test]
async fn retries_honour_retry_after_and_give_up_after_two() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(429, "slow down").retry_after("0"));
    env.mock.push(Reply::status(429, "slow down").retry_after("0"));
    env.mock.push(Reply::status(429, "slow down").retry_after("0"));
    let started = Instant::now();
    let (error, _, _) = prompt_error(&env).await;
    assert!(started.elapsed() < Duration::from_millis(1500), "Retry-After: 0 replaces the backoff");
    assert_eq!(env.mock.requests().len(), 3, "one request and two retries");
    assert_eq!(error["code"], -32603);
    assert!(error["message"].as_str().unwrap().contains("429"), "{error}");
}

#[tokio::test]
async fn a_huge_error_body_is_read_only_as_far_as_its_message_needs() {
    let env = TestEnv::new().await;
    let head = "upstream exploded: ";
    let size = 32 << 20;
    // The same error with a short body, for the message it gives.
    let short = format!("{head}{}", "x".repeat(2_000));
    env.mock.push(Reply::Status { status: 400, body: short, retry_after: None });
    env.mock.push(Reply::Flood { status: 400, head: head.into(), size });
    let (expected, mut agent, session) = prompt_error(&env).await;
    assert!(expected["message"].as_str().unwrap().contains(&format!("{head}{}", "x".repeat(581))), "{expected}");
    let id = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["error"], expected, "the same message: the body's first 600 characters");
    env.mock.wait_flood_cut(PATIENCE).await;
    let sent = env.mock.flood_sent();
    assert!(sent < size / 2, "cairn closed the connection after {sent} of {size} bytes");
    assert_eq!(env.mock.requests().len(), 2, "a 400 is not retried");
}

#[tokio::test]
async fn a_rejected_key_is_reported_and_the_session_stays_usable() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(401, "Incorrect API key provided"));
    env.mock.push(Reply::text(&["works now"]));
    let (error, mut agent, session) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("OPENAI_API_KEY") && message.contains("Incorrect API key"), "{message}");
    assert_eq!(env.mock.requests().len(), 1, "a 401 is not retried");
    assert_eq!(env.mock.request_headers()[0]["authorization"], "Bearer sk-test");

    let id = agent.prompt(&session, "again").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn a_missing_key_names_the_variable_to_set() {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_API_KEY", "");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(error["code"], -32000, "ACP's auth-required, which editors answer with their login: {error}");
    assert!(error["message"].as_str().unwrap().contains("set OPENAI_API_KEY"), "{error}");

    // A session of another provider whose model is then switched to the keyless one: the prompt
    // says the same.
    env.set_env("OPENAI_API_KEY", "sk-test");
    env.set_env("ANTHROPIC_API_KEY", "");
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let changed = agent
        .call_err(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "anthropic/claude-sonnet-4-5"}),
        )
        .await;
    assert_eq!(changed["code"], -32000, "{changed}");
    assert!(changed["message"].as_str().unwrap().contains("set ANTHROPIC_API_KEY"), "{changed}");
    assert!(env.mock.requests().is_empty());

    // A key the server refuses is the same to the editor.
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(401, "bad key"));
    let (error, _, _) = prompt_error(&env).await;
    assert_eq!(error["code"], -32000, "{error}");
    assert!(error["message"].as_str().unwrap().contains("check OPENAI_API_KEY"), "{error}");
}

#[tokio::test]
async fn an_unknown_model_or_provider_says_what_to_check() {
    let env = TestEnv::new().await;
    let body = json!({"error": {"message": "The model `mock-model` does not exist", "code": "model_not_found"}});
    env.mock.push(Reply::Status { status: 404, body: body.to_string(), retry_after: None });
    let (error, _, _) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("mock-model") && message.contains("CAIRN_MODEL"), "{message}");

    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "nowhere/llm");
    let (error, _, _) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("nowhere") && message.contains("config.toml"), "{message}");
}

#[tokio::test]
async fn an_unreachable_server_says_what_to_check() {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    let (error, _, _) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("cannot reach") && message.contains("OPENAI_BASE_URL"), "{message}");
}

#[tokio::test]
async fn providers_from_config_toml_serve_their_models_without_a_key() {
    let mut env = TestEnv::new().await;
    env.write_config(&format!(
        "[providers.ollama]\nbase_url = \"{}\"\nmodels = [\"qwen3\", \"llama3\"]\n",
        env.mock.url
    ));
    env.set_env("CAIRN_MODEL", "ollama/qwen3");
    env.set_env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    env.mock.push(Reply::text(&["local answer"]));
    let mut agent = env.ready().await;
    let created = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let values: Vec<&str> = created["configOptions"][0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert!(values.contains(&"ollama/llama3") && values[0] == "ollama/qwen3", "{values:?}");
    let session = created["sessionId"].as_str().unwrap();
    let id = agent.prompt(session, "hi").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(env.mock.requests()[0]["model"], "qwen3");
    assert!(env.mock.request_headers()[0].get("authorization").is_none());
}

#[tokio::test]
async fn a_stream_that_breaks_mid_answer_is_an_error_and_keeps_what_arrived() {
    let env = TestEnv::new().await;
    let events = vec![crate::support::mock_llm::delta(json!({"content": "half an "}))];
    env.mock.push(Reply::Stream { events, delay: Duration::ZERO });
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    let (response, notifications) = agent.response(id).await;
    assert!(
        response["error"]["message"].as_str().unwrap().contains("closed before the answer was complete"),
        "{response}"
    );
    assert_eq!(text_of(&updates(&notifications, &session), "agent_message_chunk"), "half an ");

    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    assert_eq!(text_of(&updates(&replay, &session), "agent_message_chunk"), "half an ");
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nstream_idle_timeout_secs = 1\n");
    env.mock.push(Reply::endless(Duration::from_secs(30)));
    let (error, _, _) = prompt_error(&env).await;
    assert!(error["message"].as_str().unwrap().contains("sent nothing for 1 s"), "{error}");
    env.mock.wait_dropped(1, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_broken_config_file_is_reported_on_every_session_call() {
    let env = TestEnv::new().await;
    env.write_config("modle = \"typo\"\n");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("config.toml") && message.contains("modle"), "{message}");
}

#[tokio::test]
async fn the_model_menu_leaves_out_providers_without_a_key_and_choosing_one_asks_for_it() {
    let models = |result: &Value| -> Vec<String> {
        result["configOptions"][0]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap().to_owned())
            .collect()
    };
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let offered = models(&result);
    assert!(offered.iter().any(|m| m == "openai/gpt-5"), "{offered:?}");
    assert!(!offered.iter().any(|m| m.starts_with("anthropic/")), "no ANTHROPIC_API_KEY: {offered:?}");
    let session = result["sessionId"].as_str().unwrap();
    let chosen = json!({"sessionId": session, "configId": "model", "value": "anthropic/claude-haiku-4-5"});
    let error = agent.call_err("session/set_config_option", chosen).await;
    assert_eq!(error["code"], -32000, "{error}");
    assert!(error["message"].as_str().unwrap().contains("set ANTHROPIC_API_KEY"), "{error}");

    let mut env = TestEnv::new().await;
    env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
    let mut agent = env.ready().await;
    let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert!(models(&result).iter().any(|m| m == "anthropic/claude-haiku-4-5"), "{:?}", models(&result));
}

#[tokio::test]
async fn a_stream_cut_after_the_headers_before_any_token_is_retried() {
    let env = TestEnv::new().await;
    // 200 and its headers, then the connection closes with nothing of the answer.
    env.mock.push(Reply::Stream { events: Vec::new(), delay: Duration::ZERO });
    env.mock.push(Reply::text(&["made it"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(env.mock.requests().len(), 2, "sent again");
    let updates = updates(&notifications, &session);
    let shown = text_of(&updates, "agent_message_chunk");
    assert!(
        shown.contains("retry 1 of 2") && shown.ends_with("made it"),
        "the retry is told, then the answer: {shown}"
    );
}

#[tokio::test]
async fn a_success_carrying_a_json_error_and_an_html_error_page_say_what_the_server_meant() {
    let env = TestEnv::new().await;
    let body = json!({"error": {"message": "quota exhausted for this project", "type": "insufficient_quota"}});
    env.mock.push(Reply::Status { status: 200, body: body.to_string(), retry_after: None });
    let (error, _, _) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("quota exhausted for this project"), "{message}");
    assert_eq!(env.mock.requests().len(), 1, "not a retryable failure");

    let env = TestEnv::new().await;
    let page =
        "<!DOCTYPE html>\n<html><head><title>502 Bad\n Gateway</title><style>body{}</style></head><body><h1>nginx</h1>"
            .to_owned()
            + &"<p>padding</p>".repeat(200)
            + "</body></html>";
    for _ in 0..3 {
        env.mock.push(Reply::Status { status: 502, body: page.clone(), retry_after: Some("0".into()) });
    }
    let (error, _, _) = prompt_error(&env).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("an HTML page titled \"502 Bad Gateway\""), "{message}");
    assert!(!message.contains('<'), "no markup in what the user reads: {message}");
}

/// What a session's first prompt would pay for (the HTTP client, its TLS setup, the connection)
/// is done while the client is still opening the session: once the agent is set up, it opens a
/// connection to the default model's provider, and the prompt's request goes out on it, even
/// when sent right behind `session/new`.
#[tokio::test]
async fn the_first_prompt_uses_a_connection_opened_before_the_session_was() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let deadline = Instant::now() + PATIENCE;
    let warmed = loop {
        if let Some(seen) = env.mock.seen().into_iter().find(|(method, ..)| method == "HEAD") {
            break seen;
        }
        assert!(Instant::now() < deadline, "no connection was warmed after initialize");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(warmed.1, "/v1/chat/completions", "the warm-up goes to the endpoint the prompt uses");
    assert!(env.mock.requests().is_empty(), "warming sends no model request");

    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hi"]));
    let id = agent.prompt(&session, "hello").await;
    agent.response(id).await;
    let posted: Vec<_> = env.mock.seen().into_iter().filter(|(method, ..)| method == "POST").collect();
    assert_eq!(posted[0].2, warmed.2, "the prompt's request came on the warmed connection");
    assert!(!warmed.3, "the warm-up does not carry the key");
    let heads = env.mock.seen().into_iter().filter(|(method, ..)| method == "HEAD").count();
    assert_eq!(heads, 1, "the session's own warm-up found the connection warmed");
}

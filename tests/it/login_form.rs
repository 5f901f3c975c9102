//! Logging in through the editor's own form, for clients that show elicitation forms but cannot
//! run a terminal login: the agent method `key` is offered to them alone; `authenticate` with it
//! asks for a provider and a key, checks the key as `cairn login` does (the mock's `GET
//! /v1/models`) and saves it, after which sessions work with no key in the environment. A
//! refused key, a declined or cancelled form, or a token's principal on `cairn serve --auth`
//! saves nothing, and the key never reaches stderr, the log or the database.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::support::mock_llm::WRONG_KEY;
use crate::support::served::{Server, try_connect_with};
use crate::support::{Agent, Editor, Reply, TestEnv};

fn credentials(env: &TestEnv) -> std::path::PathBuf {
    env.workspace().parent().unwrap().join("config").join("cairn").join("credentials.toml")
}

/// An agent for a client with forms and no key anywhere.
async fn keyless(env: &mut TestEnv) -> Agent {
    env.set_env("OPENAI_API_KEY", "");
    env.ready_with(Editor::with_forms()).await
}

/// Sends `authenticate` with `key` and waits for the form it asks: (request id, the form).
async fn form(agent: &mut Agent) -> (i64, Value) {
    let id = agent.request("authenticate", json!({"methodId": "key"})).await;
    let form = agent.recv().await;
    assert_eq!(form["method"], "elicitation/create", "{form}");
    (id, form)
}

/// Answers the form with `answer` and returns the answer to `authenticate`.
async fn answer(agent: &mut Agent, form: &Value, id: i64, answer: Value) -> Value {
    agent.respond(&form["id"], answer).await;
    agent.response(id).await.0
}

#[tokio::test]
async fn the_key_form_is_offered_only_to_clients_that_show_forms_and_last() {
    let env = TestEnv::new().await;
    for (capabilities, offered) in [
        (json!({}), vec!["environment"]),
        (json!({"fs": {"readTextFile": true, "writeTextFile": true}}), vec!["environment"]),
        (json!({"elicitation": {"url": {}}}), vec!["environment"]),
        (json!({"elicitation": {"form": {}}}), vec!["environment", "key"]),
        (json!({"auth": {"terminal": true}, "elicitation": {"form": {}}}), vec!["login", "environment", "key"]),
    ] {
        let mut agent = env.spawn().await;
        let answer = agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
        let methods = answer["authMethods"].as_array().unwrap();
        let ids: Vec<&str> = methods.iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, offered, "{capabilities}");
        if let Some(key) = methods.iter().find(|m| m["id"] == "key") {
            assert_eq!(key.get("type"), None, "an agent method: {key}");
            assert_eq!(key["name"], "Enter an API key");
        }
    }
}

#[tokio::test]
async fn a_key_entered_in_the_form_is_checked_saved_and_then_used() {
    let mut env = TestEnv::new().await;
    let mut agent = keyless(&mut env).await;
    let refused = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(refused["code"], -32000, "no key: auth-required: {refused}");

    let (id, form) = form(&mut agent).await;
    let params = &form["params"];
    assert_eq!(params["mode"], "form");
    assert_eq!(params["requestId"], id, "scoped to the authenticate request: {params}");
    assert_eq!(params.get("sessionId"), None);
    let schema = &params["requestedSchema"];
    assert_eq!(schema["required"], json!(["provider", "secret"]), "{schema}");
    let providers: Vec<&str> = schema["properties"]["provider"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["const"].as_str().unwrap())
        .collect();
    assert_eq!(providers, ["anthropic", "openai", "openai-responses"]);
    assert_eq!(schema["properties"]["provider"]["default"], "openai", "the default model's provider");
    assert_eq!(schema["properties"]["secret"]["type"], "string");
    assert_eq!(schema["properties"]["secret"]["title"], "API key");
    let order: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(order, ["provider", "secret"], "the provider is asked first");
    assert_eq!(env.mock.seen().len(), 0, "nothing is checked before the form is answered");

    let done = answer(
        &mut agent,
        &form,
        id,
        json!({"action": "accept", "content": {"provider": "openai", "secret": "  sk-typed-in-form \n"}}),
    )
    .await;
    assert_eq!(done["result"], json!({}), "{done}");
    let checked = env.mock.seen().into_iter().filter(|(_, path, ..)| path == "/v1/models").count();
    assert_eq!(checked, 1, "checked with one request, as cairn login does");
    let file = credentials(&env);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&file).unwrap().contains("OPENAI_API_KEY = \"sk-typed-in-form\""));

    // New sessions work, with no key in the environment.
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hi"]));
    let prompt = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let sent = env.mock.request_headers().last().unwrap()["authorization"].to_str().unwrap().to_owned();
    assert_eq!(sent, "Bearer sk-typed-in-form");
    agent.close_stdin();
    agent.wait_exit().await;
    assert!(agent.stderr().contains("saved a key entered in the editor's form"), "{}", agent.stderr());
    assert!(!agent.stderr().contains("sk-typed-in-form"), "the key is not in the log: {}", agent.stderr());
    let database = std::fs::read(env.database()).unwrap();
    assert!(!database.windows(16).any(|w| w == b"sk-typed-in-form"), "nor in the database");

    // `cairn login` in another process replaces it, and the next process uses that one.
    let mut login = env.command();
    login.args(["login", "--provider", "openai"]).stdin(std::process::Stdio::piped());
    let mut child = login.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    tokio::io::AsyncWriteExt::write_all(child.stdin.as_mut().unwrap(), b"sk-from-the-terminal\n").await.unwrap();
    drop(child.stdin.take());
    assert!(child.wait().await.unwrap().success());
    let mut agent = env.ready_with(Editor::with_forms()).await;
    assert_eq!(agent.call("authenticate", json!({"methodId": "environment"})).await, json!({}));
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hi"]));
    let prompt = agent.prompt(&session, "hello").await;
    agent.response(prompt).await;
    let sent = env.mock.request_headers().last().unwrap()["authorization"].to_str().unwrap().to_owned();
    assert_eq!(sent, "Bearer sk-from-the-terminal");
}

#[tokio::test]
async fn a_key_the_provider_refuses_is_an_error_that_says_so_and_saves_nothing() {
    let mut env = TestEnv::new().await;
    let mut agent = keyless(&mut env).await;
    let (id, form) = form(&mut agent).await;
    let refused = answer(
        &mut agent,
        &form,
        id,
        json!({"action": "accept", "content": {"provider": "openai", "secret": WRONG_KEY}}),
    )
    .await;
    let error = &refused["error"];
    assert_eq!(error["code"], -32000, "still not logged in: {refused}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("refused the key (HTTP 401)") && message.contains("Nothing was saved"), "{message}");
    assert!(!message.contains(WRONG_KEY), "{message}");
    assert!(!credentials(&env).exists(), "nothing was saved");
    let still = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(still["code"], -32000);
    assert!(!agent.stderr().contains(WRONG_KEY), "{}", agent.stderr());

    // A provider that is not one, an empty key, a key that is not text: nothing is saved either.
    for (content, says) in [
        (json!({"provider": "nope", "secret": "sk-x"}), "unknown provider `nope`"),
        (json!({"provider": "openai", "secret": "   "}), "No key was entered for openai"),
        (json!({"secret": "sk-x"}), "No provider was picked"),
        (json!({"provider": "openai", "secret": 424242}), "the field `secret` with something other than text"),
    ] {
        let (id, form) = self::form(&mut agent).await;
        let failed = answer(&mut agent, &form, id, json!({"action": "accept", "content": content})).await;
        let message = failed["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{content}: {failed}");
        assert!(!message.contains("424242"), "a key is never quoted: {message}");
    }
    assert!(!credentials(&env).exists());
    assert_eq!(env.mock.seen().len(), 1, "only the one key that was given was checked");
}

#[tokio::test]
async fn a_key_for_another_provider_is_saved_and_the_default_models_missing_key_named() {
    let mut env = TestEnv::new().await;
    let url = env.mock.url.clone();
    env.set_env("ANTHROPIC_BASE_URL", &url);
    let mut agent = keyless(&mut env).await;
    let (id, form) = form(&mut agent).await;
    let content = json!({"provider": "anthropic", "secret": "sk-ant-for-later"});
    let answered = answer(&mut agent, &form, id, json!({"action": "accept", "content": content})).await;
    assert_eq!(answered["error"]["code"], -32000, "the default model still has no key: {answered}");
    let message = answered["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Saved the key for anthropic (ANTHROPIC_API_KEY), but the default model openai/mock-model"),
        "{message}"
    );
    assert!(message.contains("OPENAI_API_KEY"), "{message}");
    assert!(std::fs::read_to_string(credentials(&env)).unwrap().contains("ANTHROPIC_API_KEY = \"sk-ant-for-later\""));
    assert!(!message.contains("sk-ant-for-later") && !agent.stderr().contains("sk-ant-for-later"));
}

#[tokio::test]
async fn declining_or_cancelling_the_form_says_how_else_to_log_in() {
    let mut env = TestEnv::new().await;
    let mut agent = keyless(&mut env).await;
    for action in ["decline", "cancel"] {
        let (id, form) = form(&mut agent).await;
        let refused = answer(&mut agent, &form, id, json!({"action": action})).await;
        assert_eq!(refused["error"]["code"], -32000, "{action}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("No key was entered, so nothing was saved"), "{message}");
        assert!(message.contains("`cairn login`") && message.contains("OPENAI_API_KEY"), "{message}");
    }
    // A client that announced forms but does not serve them is told the same.
    let (id, form) = form(&mut agent).await;
    agent
        .send(json!({"jsonrpc": "2.0", "id": form["id"], "error": {"code": -32601, "message": "Method not found"}}))
        .await;
    let (refused, _) = agent.response(id).await;
    assert!(refused["error"]["message"].as_str().unwrap().contains("`cairn login`"), "{refused}");
    assert!(!credentials(&env).exists());
    assert!(env.mock.seen().is_empty(), "nothing was checked");
}

#[tokio::test]
async fn a_client_without_forms_cannot_use_the_key_method() {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_API_KEY", "");
    let mut agent = env.ready().await;
    let refused = agent.call_err("authenticate", json!({"methodId": "key"})).await;
    assert_eq!(refused["code"], -32602, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("announced no elicitation forms"), "{refused}");
    let sent = agent.try_recv(std::time::Duration::from_millis(300)).await;
    assert_eq!(sent, None, "no form was sent");
}

#[tokio::test]
async fn a_token_principal_on_the_server_may_not_save_the_servers_keys() {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_API_KEY", "");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_clear()
        .envs(env.agent_env())
        .args(["serve", "token", "create", "--principal", "alice"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let secret = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let server = Server::start_with(&env, &["--auth"]).await;
    let mut client = try_connect_with(&server.url, Some(&secret)).await.unwrap();
    let capabilities = json!({"elicitation": {"form": {}}});
    let answer = client.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    let ids: Vec<&str> = answer["authMethods"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["environment"], "no key form for a token's principal");
    let id = client.request("authenticate", json!({"methodId": "key"})).await;
    let (refused, before) = client.response(id).await;
    assert!(before.iter().all(|m| m["method"] != "elicitation/create"), "no form was asked: {before:?}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("may not do") && message.contains("cairn login"), "{message}");
    assert!(!credentials(&env).exists());
}

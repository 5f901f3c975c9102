//! Logging in from the editor: the auth methods advertised, `cairn login` saving a checked key
//! where only its owner reads it, `authenticate` and `logout`, and auth-required when no key is
//! usable. The environment still wins over a saved key.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;

use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::support::mock_llm::WRONG_KEY;
use crate::support::{Reply, TestEnv};

/// Runs `cairn login …` with `key` on stdin; returns (status, stderr).
async fn login(env: &TestEnv, args: &[&str], key: &str) -> (Option<i32>, String) {
    let mut child = env
        .command()
        .arg("login")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{key}\n").as_bytes()).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    assert!(output.stdout.is_empty(), "login prints nothing on stdout");
    (output.status.code(), String::from_utf8(output.stderr).unwrap())
}

fn credentials(env: &TestEnv) -> std::path::PathBuf {
    env.workspace().parent().unwrap().join("config").join("cairn").join("credentials.toml")
}

/// The terminal login only for a client that can run one (ACP forbids offering it otherwise);
/// the environment always.
#[tokio::test]
async fn initialize_offers_a_terminal_login_to_clients_that_run_one_and_the_environment_to_all() {
    let env = TestEnv::new().await;
    for (capabilities, terminal) in [
        (json!({"auth": {"terminal": true}}), true),
        (json!({"_meta": {"terminal_output": true, "terminal-auth": true}}), true),
        (json!({}), false),
    ] {
        let mut agent = env.spawn().await;
        let answer = agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
        let methods = answer["authMethods"].as_array().unwrap();
        let offered =
            methods.iter().any(|m| m["type"] == "terminal" && m["id"] == "login" && m["args"] == json!(["login"]));
        assert_eq!(offered, terminal, "{capabilities}: {answer}");
        assert!(methods.iter().any(|m| m["id"] == "environment" && m.get("type").is_none()), "{answer}");
        assert_eq!(answer["agentCapabilities"]["auth"]["logout"], json!({}), "{answer}");
    }
}

#[tokio::test]
async fn a_login_saves_a_checked_key_that_sessions_then_use_and_logout_forgets() {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_API_KEY", "");
    let mut agent = env.ready().await;
    let refused = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(refused["code"], -32000, "no key: auth-required, so the editor shows its login: {refused}");
    assert!(refused["message"].as_str().unwrap().contains("cairn login"), "{refused}");

    let (status, stderr) = login(&env, &["--provider", "openai"], "sk-saved-key").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stderr.contains("Saved the key for openai (OPENAI_API_KEY)"), "{stderr}");
    assert!(!stderr.contains("sk-saved-key"), "the key is never shown: {stderr}");
    let file = credentials(&env);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let checked = env.mock.seen().into_iter().find(|(_, path, ..)| path == "/v1/models");
    assert!(checked.is_some_and(|(.., authorized)| authorized), "the key was checked with one request");

    // The editor says the login is done; the same process now has a key.
    let done = agent.call("authenticate", json!({"methodId": "login"})).await;
    assert_eq!(done, json!({}));
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hi"]));
    let id = agent.prompt(&session, "hello").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let sent = env.mock.request_headers().last().unwrap()["authorization"].to_str().unwrap().to_owned();
    assert_eq!(sent, "Bearer sk-saved-key");
    agent.close_stdin();
    agent.wait_exit().await;
    let database = std::fs::read(env.database()).unwrap();
    assert!(!database.windows(12).any(|w| w == b"sk-saved-key"), "the key is not in the database");
    assert!(!agent.stderr().contains("sk-saved-key"), "nor in the log");

    let mut agent = env.ready().await;
    assert_eq!(agent.call("logout", json!({})).await, json!({}));
    let refused = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(refused["code"], -32000, "logged out: {refused}");
    let failed = agent.call_err("authenticate", json!({"methodId": "login"})).await;
    assert_eq!(failed["code"], -32000, "authenticate without a usable key still needs a login: {failed}");
}

#[tokio::test]
async fn a_wrong_key_is_refused_in_the_providers_words_and_nothing_is_saved() {
    let env = TestEnv::new().await;
    let (status, stderr) = login(&env, &["--provider", "openai"], WRONG_KEY).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("refused the key (HTTP 401)") && stderr.contains("Incorrect API key provided"), "{stderr}");
    assert!(!credentials(&env).exists(), "nothing was saved");

    let (status, stderr) = login(&env, &["--provider", "nope"], "sk").await;
    assert_eq!(status, Some(1));
    assert!(stderr.contains("unknown provider `nope`") && stderr.contains("openai"), "{stderr}");
    let (status, stderr) = login(&env, &[], "sk").await;
    assert_eq!(status, Some(1));
    assert!(stderr.contains("--provider"), "piped without a provider: {stderr}");
    let (status, stderr) = login(&env, &["--provider", "openai"], "   ").await;
    assert_eq!(status, Some(1));
    assert!(stderr.contains("no key was given"), "{stderr}");
}

#[tokio::test]
async fn the_environment_wins_over_a_saved_key() {
    let mut env = TestEnv::new().await;
    let (status, stderr) = login(&env, &["--provider", "openai"], "sk-from-file").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stderr.contains("is set in this environment, and wins"), "{stderr}");
    env.set_env("OPENAI_API_KEY", "sk-from-env");
    env.mock.push(Reply::text(&["Hi"]));
    let output = env.command().args(["exec", "hello"]).output().await.unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(env.mock.request_headers()[0]["authorization"], "Bearer sk-from-env");
}

#[tokio::test]
async fn an_unusable_credentials_file_is_named_and_a_garbled_one_is_not_used() {
    let mut env = TestEnv::new().await;
    // A directory where the file should be: no one, root included, can save there.
    std::fs::create_dir_all(credentials(&env).join("in-the-way")).unwrap();
    let (status, stderr) = login(&env, &["--provider", "openai", "--no-check"], "sk-x").await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("credentials.toml") && stderr.contains("fix or remove it"), "{stderr}");
    std::fs::remove_dir_all(credentials(&env)).unwrap();

    std::fs::write(credentials(&env), "OPENAI_API_KEY = sk-unquoted-secret\n").unwrap();
    env.set_env("OPENAI_API_KEY", "");
    let output = env.command().args(["exec", "hello"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("set OPENAI_API_KEY, or save one with `cairn login`"), "{stderr}");
    assert!(!stderr.contains("sk-unquoted-secret"), "the file's content is not repeated: {stderr}");
    assert!(env.mock.requests().is_empty());
}

#[tokio::test]
async fn a_live_session_takes_a_key_saved_after_its_first_prompt() {
    // A session keeps its model's provider between prompts; a new login must still reach it.
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_API_KEY", "");
    let (status, stderr) = login(&env, &["--provider", "openai"], "sk-first-key").await;
    assert_eq!(status, Some(0), "{stderr}");
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for key in ["sk-first-key", "sk-second-key"] {
        if key == "sk-second-key" {
            let (status, stderr) = login(&env, &["--provider", "openai"], key).await;
            assert_eq!(status, Some(0), "{stderr}");
        }
        env.mock.push(Reply::text(&["Hi"]));
        let id = agent.prompt(&session, "hello").await;
        let (response, _) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        let sent = env.mock.request_headers().last().unwrap()["authorization"].to_str().unwrap().to_owned();
        assert_eq!(sent, format!("Bearer {key}"));
    }
}

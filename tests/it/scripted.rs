//! The scripted model (`scripted:<file.json>`): a deterministic cairn for client developers,
//! with no model server and no key. Every test here leaves the mock model server unasked.

use serde_json::json;

use crate::support::{TestEnv, text_of, updates};

/// Where the scripts go: beside the workspace, not in it.
fn scripts(env: &TestEnv) -> std::path::PathBuf {
    let dir = env.workspace().parent().unwrap().join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn script(env: &TestEnv, name: &str, script: &serde_json::Value) -> String {
    let path = scripts(env).join(name);
    std::fs::write(&path, serde_json::to_string_pretty(script).unwrap()).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn exec_answers_from_the_script_running_its_tool_calls() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "the secret word is basalt\n").unwrap();
    let file = script(
        &env,
        "script.json",
        &json!({"replies": [
            {"text": "Let me look. ", "tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]},
            {"text": ["It says ", "basalt."], "delay_ms": 1}
        ]}),
    );
    let output = env
        .command()
        .args(["exec", "--cwd", &env.cwd(), "--model", &format!("scripted:{file}"), "What does notes.txt say?"])
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "Let me look. It says basalt.\n");
    assert!(stderr.contains("basalt"), "the read's result is shown: {stderr}");
    assert!(env.mock.requests().is_empty() && env.mock.title_requests().is_empty(), "no model server was asked");
}

#[tokio::test]
async fn an_editor_session_takes_the_next_reply_at_each_prompt_and_replays_on_load() {
    let mut env = TestEnv::new().await;
    let file = script(
        &env,
        "script.json",
        &json!({"replies": [{"thinking": "hmm", "text": ["One", " two"]}, {"text": "Three"}], "aside": "A title"}),
    );
    env.set_env("CAIRN_MODEL", &format!("scripted:{file}"));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "first").await;
    let (response, first) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(text_of(&updates(&first, &session), "agent_message_chunk"), "One two");
    assert_eq!(text_of(&updates(&first, &session), "agent_thought_chunk"), "hmm");
    let id = agent.prompt(&session, "second").await;
    let (_, second) = agent.response(id).await;
    assert_eq!(text_of(&updates(&second, &session), "agent_message_chunk"), "Three");

    // A third prompt has no reply left: the error says so, and what to do.
    let id = agent.prompt(&session, "third").await;
    let (response, _) = agent.response(id).await;
    let message = response["error"].to_string();
    assert!(message.contains("has 2 replies") && message.contains("needs reply 3"), "{response}");
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let loaded = agent.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    assert!(loaded.get("error").is_none(), "{loaded}");
    assert!(env.mock.requests().is_empty(), "no model server was asked");
}

#[tokio::test]
async fn a_script_that_does_not_parse_is_refused_naming_the_line() {
    let env = TestEnv::new().await;
    let path = scripts(&env).join("broken.json");
    std::fs::write(&path, "{\n  \"replies\": [\n    {\"text\": \"fine\"},\n    {\"txet\": \"typo\"}\n  ]\n}\n")
        .unwrap();
    let output = env
        .command()
        .args(["exec", "--model", &format!("scripted:{}", path.display()), "hello"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("broken.json") && stderr.contains("line 4") && stderr.contains("txet"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[tokio::test]
async fn an_error_reply_fails_like_a_server_would() {
    let env = TestEnv::new().await;
    let file = script(&env, "script.json", &json!({"replies": [{"error": {"status": 400, "message": "bad things"}}]}));
    let output = env.command().args(["exec", "--model", &format!("scripted:{file}"), "hello"]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HTTP 400") && stderr.contains("bad things"), "{stderr}");
}

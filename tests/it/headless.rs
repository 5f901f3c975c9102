//! Headless mode: `cairn exec` streams one turn to stdout; `cairn sessions list` shows the store.

use serde_json::{Value, json};

use crate::support::{Reply, TestEnv};

async fn run(env: &TestEnv, args: &[&str]) -> (std::process::Output, String, String) {
    let output = env.command().args(args).output().await.expect("run cairn");
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    (output, stdout, stderr)
}

fn session_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("session: "))
        .unwrap_or_else(|| panic!("no session line in {stderr}"))
        .to_owned()
}

#[tokio::test]
async fn exec_prints_the_answer_and_can_continue_the_session() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::thinking_then_text(&["pondering"], &["Hello ", "from cairn."]));
    env.mock.push(Reply::text(&["Still here."]));

    let (output, stdout, stderr) = run(&env, &["exec", "Say hello"]).await;
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello from cairn.\n", "only the answer goes to stdout");
    assert!(stderr.contains("pondering"), "reasoning goes to stderr: {stderr}");
    let session = session_of(&stderr);

    let (output, stdout, stderr) = run(&env, &["exec", "--session", &session, "Again"]).await;
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout, "Still here.\n");
    assert_eq!(session_of(&stderr), session);
    let second = &env.mock.requests()[1]["messages"];
    assert_eq!(second[1]["content"], "Say hello");
    assert_eq!(second[2]["content"], "Hello from cairn.");

    // The same session is visible to an editor.
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = agent.response(id).await;
    assert!(response["result"].is_object());
    let kinds: Vec<&str> = replay.iter().map(|m| m["params"]["update"]["sessionUpdate"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk",
            "user_message_chunk",
            "agent_message_chunk",
            "usage_update"
        ]
    );
}

#[tokio::test]
async fn exec_fails_with_a_clear_message_and_a_non_zero_status() {
    let mut env = TestEnv::new().await;
    env.mock.push(Reply::status(401, "bad key"));
    let (output, stdout, stderr) = run(&env, &["exec", "hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stdout.is_empty());
    assert!(stderr.contains("cairn: ") && stderr.contains("OPENAI_API_KEY"), "{stderr}");
    assert!(!stderr.contains("session: "), "no session to name: {stderr}");
    let (_, listed, _) = run(&env, &["sessions", "list", "--json"]).await;
    assert!(listed.is_empty(), "the failed run left no session behind: {listed}");
    assert!(env.mock.title_requests().is_empty(), "no title is asked for a turn that failed");

    // Naming what does not exist is a mistake in the call: 2, like an empty prompt.
    let (output, _, stderr) = run(&env, &["exec", "--session", "ses_missing", "hello"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("ses_missing not found; `cairn sessions list` shows"), "{stderr}");

    let (output, _, stderr) = run(&env, &["exec", "  "]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("the prompt is empty"), "{stderr}");

    let (output, _, stderr) = run(&env, &["exec", "--cwd", "/nonexistent/cairn-dir", "hello"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("--cwd /nonexistent/cairn-dir is not a directory"), "{stderr}");

    env.set_env("OPENAI_API_KEY", "");
    let (output, _, stderr) = run(&env, &["exec", "hello"]).await;
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("set OPENAI_API_KEY"), "{stderr}");
}

#[tokio::test]
async fn sessions_list_prints_the_stored_sessions() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["one"]));
    env.mock.push(Reply::text(&["two"]));
    let (_, _, first) = run(&env, &["exec", "First task"]).await;
    let (_, _, second) = run(&env, &["exec", "Second task"]).await;

    let (output, stdout, stderr) = run(&env, &["sessions", "list"]).await;
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("ID"));
    // The first line is the title until the model's title lands (it may, before exec exits).
    let titled = |line: &str| line.contains("Second task") || line.contains(crate::support::mock_llm::MOCK_TITLE);
    assert!(lines[1].starts_with(&session_of(&second)) && titled(lines[1]), "{stdout}");
    assert!(lines[2].starts_with(&session_of(&first)), "{stdout}");

    let (_, stdout, _) = run(&env, &["sessions", "list", "--json"]).await;
    let rows: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2);
    let title = rows[0]["title"].as_str().unwrap();
    assert!(title == "Second task" || title == crate::support::mock_llm::MOCK_TITLE, "{title}");
    assert_eq!(rows[0]["cwd"], env.cwd());
    let updated = rows[0]["updatedAt"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(updated).is_ok() && updated.ends_with('Z'),
        "ISO 8601 like ACP: {updated}"
    );
    for cwd in [env.cwd(), format!("{}/", env.cwd())] {
        let (_, stdout, _) = run(&env, &["sessions", "list", "--json", "--cwd", &cwd]).await;
        assert_eq!(stdout.lines().count(), 2, "with or without the trailing slash: {cwd}");
    }

    let (_, stdout, _) = run(&env, &["sessions", "list", "--json", "--cwd", "/nowhere"]).await;
    assert!(stdout.is_empty());
}

#[tokio::test]
async fn help_says_how_to_pick_a_model_where_settings_live_and_what_no_command_does() {
    let env = TestEnv::new().await;
    let (output, stdout, _) = run(&env, &["--help"]).await;
    assert!(output.status.success());
    for needed in [
        "serves the Agent Client Protocol",
        "CAIRN_MODEL=provider/model",
        "OPENAI_API_KEY",
        "config.toml",
        "CAIRN_HOME",
    ] {
        assert!(stdout.contains(needed), "{needed}: {stdout}");
    }
}

#[tokio::test]
async fn a_retry_is_told_once_on_stderr() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    env.mock.push(Reply::status(500, "boom")).push(Reply::text(&["fine"]));
    let (output, stdout, stderr) = run(&env, &["exec", "hello"]).await;
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "fine");
    assert_eq!(stderr.matches("retry 1 of 2").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("boom").count(), 1, "{stderr}");
}

//! `cairn exec` for scripts: JSON lines, the prompt on stdin, which session a run continues or
//! forks, and exit statuses that say how the turn ended.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::support::{Reply, TestEnv};

/// Runs `cairn` with `args`, writing `stdin` to it; returns (status, stdout, stderr).
pub async fn run(env: &TestEnv, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut child =
        env.command().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.as_bytes()).await.unwrap();
    drop(pipe);
    let output = child.wait_with_output().await.unwrap();
    (output.status.code(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}"))).collect()
}

#[tokio::test]
async fn json_prints_every_update_as_acp_shapes_it_then_how_the_turn_ended() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::thinking_then_text(&["hmm"], &["Hello ", "there."]));
    let (status, stdout, stderr) = run(&env, &["exec", "--json", "-"], "Say hello\nplease").await;
    assert_eq!(status, Some(0), "{stderr}");
    let lines = lines(&stdout);
    let (last, updates) = lines.split_last().unwrap();
    let session = last["sessionId"].as_str().unwrap();
    assert_eq!(last["stopReason"], "end_turn", "{last}");
    assert!(last["usage"]["size"].as_u64().unwrap() > 0, "the session's usage: {last}");
    assert!(updates.iter().all(|line| line["sessionId"] == session && line["update"]["sessionUpdate"].is_string()));
    let text: String = updates
        .iter()
        .filter(|line| line["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|line| line["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello there.");
    assert!(updates.iter().any(|line| line["update"]["sessionUpdate"] == "agent_thought_chunk"));
    assert_eq!(
        crate::support::mock_llm::first_user_text(&env.mock.requests()[0]),
        "Say hello\nplease",
        "the prompt came from stdin"
    );
    assert!(!stderr.contains("session:"), "JSON mode names the session in its lines: {stderr}");
}

#[tokio::test]
async fn json_ends_with_an_error_line_when_the_run_fails() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(400, "no such thing"));
    let (status, stdout, stderr) = run(&env, &["exec", "--json", "hello"], "").await;
    assert_eq!(status, Some(1), "{stderr}");
    let last = lines(&stdout).pop().unwrap();
    assert!(last["error"].as_str().unwrap().contains("no such thing"), "{last}");
    assert!(last["sessionId"].is_null(), "the failed run's new session was removed: {last}");
}

#[tokio::test]
async fn continue_takes_the_latest_session_of_the_directory_and_fork_copies_one() {
    let env = TestEnv::new().await;
    let (status, _, stderr) = run(&env, &["exec", "--continue", "hello"], "").await;
    assert_eq!(status, Some(2), "nothing to continue is a usage mistake: {stderr}");
    assert!(stderr.contains("no session to continue"), "{stderr}");

    env.mock.push(Reply::text(&["First."]));
    let (_, stdout, _) = run(&env, &["exec", "--json", "one"], "").await;
    let first = lines(&stdout).pop().unwrap()["sessionId"].as_str().unwrap().to_owned();
    env.mock.push(Reply::text(&["Second."]));
    let (status, stdout, stderr) = run(&env, &["exec", "--json", "--continue", "two"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(lines(&stdout).pop().unwrap()["sessionId"], first.as_str());
    let texts = crate::support::user_texts(&env.mock.requests()[1]);
    assert_eq!(texts, ["one", "two"], "the continued run sees the session so far");

    env.mock.push(Reply::text(&["Forked."]));
    let (status, stdout, stderr) = run(&env, &["exec", "--json", "--fork", &first, "three"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let fork = lines(&stdout).pop().unwrap()["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, first);
    assert_eq!(crate::support::user_texts(&env.mock.requests()[2]), ["one", "two", "three"]);
    env.mock.push(Reply::text(&["Original."]));
    run(&env, &["exec", "--session", &first, "four"], "").await;
    assert_eq!(
        crate::support::user_texts(&env.mock.requests()[3]),
        ["one", "two", "four"],
        "the fork left its original as it was"
    );
}

#[tokio::test]
async fn reasoning_on_stderr_ends_its_line_before_the_session_is_named() {
    let mut env = TestEnv::new().await;
    // Debug log lines would interleave with what exec writes.
    env.set_env("CAIRN_LOG", "warn");
    env.mock.push(Reply::thinking_then_text(&["let me ", "think"], &["Done."]));
    let (status, stdout, stderr) = run(&env, &["exec", "hello"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout, "Done.\n");
    assert!(stderr.contains("let me think\nsession: ses_"), "{stderr:?}");
}

#[tokio::test]
async fn a_limit_that_stops_the_turn_exits_3() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::finishing(&["Cut sh"], "length"));
    let (status, stdout, stderr) = run(&env, &["exec", "hello"], "").await;
    assert_eq!(status, Some(3), "{stderr}");
    assert_eq!(stdout, "Cut sh\n");
    assert!(stderr.contains("[stopped: the model hit its output limit]"), "{stderr}");
}

/// The results the model was sent for its tool calls, in order.
pub fn tool_results(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// One bash call per line, then a closing answer; returns what each call got.
pub async fn bash_calls(env: &TestEnv, lines: &[&str], flags: &[&str]) -> Vec<String> {
    let calls: Vec<(String, Value)> =
        lines.iter().enumerate().map(|(n, line)| (format!("call_{n}"), serde_json::json!({"command": line}))).collect();
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, args)| (id.as_str(), "bash", args.clone())).collect();
    let before = env.mock.requests().len();
    env.mock.push(Reply::tool_calls(&calls));
    env.mock.push(Reply::text(&["Done."]));
    let mut args = vec!["exec", "--cwd"];
    let cwd = env.cwd();
    args.push(&cwd);
    args.extend_from_slice(flags);
    args.push("go");
    let (status, _, stderr) = run(env, &args, "").await;
    assert_eq!(status, Some(0), "{stderr}");
    // The request carries the session's earlier results too; this run's are the last ones.
    let results = tool_results(&env.mock.requests()[before + 1]);
    results[results.len() - lines.len()..].to_vec()
}

fn refused(result: &str) -> bool {
    result.contains("denied")
        || result.contains("refused")
        || result.contains("rejected")
        || result.contains("not allowed")
}

#[tokio::test]
async fn allow_runs_what_its_rule_covers_and_nothing_riding_on_it() {
    let env = TestEnv::new().await;
    let victim = env.workspace().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let results = bash_calls(
        &env,
        &["echo allowed-ran", "echo x && rm victim.txt", "echo $(rm victim.txt)", "env rm victim.txt"],
        &["--allow", "bash:echo"],
    )
    .await;
    assert!(results[0].contains("allowed-ran"), "the allowed command ran without a question: {results:?}");
    for result in &results[1..] {
        assert!(refused(result), "a line that also runs rm is not covered by `echo`: {result}");
    }
    assert!(victim.exists(), "nothing riding on the allowed command ran");

    // Rules of a run are not stored: the same session asks (and headless, refuses) again.
    let results = bash_calls(&env, &["echo allowed-ran"], &["--continue"]).await;
    assert!(refused(&results[0]), "the run's rule is gone with the run: {results:?}");
}

#[tokio::test]
async fn deny_refuses_its_commands_in_bypass_mode_through_every_wrapper() {
    let env = TestEnv::new().await;
    let victim = env.workspace().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let lines = [
        "rm victim.txt",
        "env rm victim.txt",
        "echo victim.txt | xargs rm",
        "bash -c 'rm victim.txt'",
        "find . -name victim.txt -exec rm {} \\;",
        "sudo rm victim.txt",
        "'r''m' victim.txt",
        "echo fine",
    ];
    let results = bash_calls(&env, &lines, &["--mode", "bypass", "--deny", "bash:rm"]).await;
    for (line, result) in lines.iter().zip(&results).take(lines.len() - 1) {
        assert!(refused(result), "`{line}` ran despite --deny bash:rm: {result}");
    }
    assert!(results.last().unwrap().contains("fine"), "what the rule does not cover still runs: {results:?}");
    assert!(victim.exists());
}

#[tokio::test]
async fn an_allow_rule_never_reaches_outside_the_workspace_or_protected_files() {
    let env = TestEnv::new().await;
    let outside = env.workspace().parent().unwrap().join("outside.txt");
    env.mock.push(Reply::tool_calls(&[
        ("call_0", "write", serde_json::json!({"path": "../outside.txt", "content": "escaped"})),
        ("call_1", "write", serde_json::json!({"path": outside.to_string_lossy(), "content": "escaped"})),
        ("call_2", "write", serde_json::json!({"path": ".git/config", "content": "[core]"})),
        ("call_3", "write", serde_json::json!({"path": "inside.txt", "content": "fine"})),
    ]));
    env.mock.push(Reply::text(&["Done."]));
    let cwd = env.cwd();
    let (status, _, stderr) =
        run(&env, &["exec", "--cwd", &cwd, "--allow", "edit:**", "--allow", "edit:/**", "go"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let results = tool_results(&env.mock.requests()[1]);
    assert!(results[..3].iter().all(|result| refused(result)), "{results:?}");
    assert!(!outside.exists() && !env.workspace().join(".git/config").exists());
    assert_eq!(std::fs::read_to_string(env.workspace().join("inside.txt")).unwrap(), "fine");
}

#[tokio::test]
async fn a_rule_that_cannot_be_read_is_refused_before_anything_runs() {
    let env = TestEnv::new().await;
    for (rule, says) in [
        ("bash", "PERMISSION:PATTERN"),
        ("paint:walls", "unknown permission `paint`"),
        ("edit:src/[oops", "not a valid path pattern"),
        ("bash:", "empty"),
        ("bash:=", "no command"),
    ] {
        let (status, _, stderr) = run(&env, &["exec", "--allow", rule, "hello"], "").await;
        assert_eq!(status, Some(2), "{rule}: {stderr}");
        assert!(stderr.contains(says), "{rule}: {stderr}");
    }
    assert!(env.mock.requests().is_empty(), "no model request was made");
}

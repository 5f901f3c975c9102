//! `cairn exec` for scripts: JSON lines, the prompt on stdin, which session a run continues or
//! forks, and exit statuses that say how the turn ended.

use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::support::{Reply, TestEnv};

/// Runs `cairn` with `args`, writing `stdin` to it; returns (status, stdout, stderr).
async fn run(env: &TestEnv, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
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
async fn a_limit_that_stops_the_turn_exits_3() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::finishing(&["Cut sh"], "length"));
    let (status, stdout, stderr) = run(&env, &["exec", "hello"], "").await;
    assert_eq!(status, Some(3), "{stderr}");
    assert_eq!(stdout, "Cut sh\n");
    assert!(stderr.contains("[stopped: the model hit its output limit]"), "{stderr}");
}

//! `cairn store migrate`: sessions made by real turns in SQLite are copied whole to PostgreSQL
//! (the private server of `serve::postgres::fixture`) and back to a fresh SQLite file, where
//! `cairn sessions` shows and exports them as it did; a second run skips what is there; a
//! session whose turn is running is not copied until it ends; stores that cannot be used are
//! refused with exit 1, naming the problem and never a password. Project rules, owners and
//! archived marks are the store's specs (`both_transfer_tests`).

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::postgres::fixture;
use crate::support::{Reply, TestEnv};

/// Runs `cairn` with `args`; returns (status, stdout, stderr).
async fn run(env: &TestEnv, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = env.command();
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = command.spawn().unwrap().wait_with_output().await.unwrap();
    (output.status.code(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

/// A session made by a real turn in bypass mode: a bash call, a `write` of `file` (so a file
/// checkpoint with its content), and an answer. Its id.
async fn session_with_calls(env: &TestEnv, prompt: &str, file: &str) -> String {
    env.mock.push(Reply::tool_calls(&[
        ("call_1", "bash", json!({"command": "echo tool-said-hi"})),
        ("call_2", "write", json!({"path": file, "content": "written\n"})),
    ]));
    env.mock.push(Reply::thinking_then_text(&["pondering"], &["All done."]));
    let cwd = env.cwd();
    let (status, stdout, stderr) = run(env, &["exec", "--json", "--cwd", &cwd, "--mode", "bypass", prompt]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    last["sessionId"].as_str().unwrap().to_owned()
}

/// What `cairn sessions` says of `session` in `env`'s store: `show`, and the lossless export.
async fn seen(env: &TestEnv, session: &str) -> (String, String) {
    let (status, shown, stderr) = run(env, &["sessions", "show", session]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let (status, exported, stderr) = run(env, &["sessions", "export", session, "--format", "jsonl"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    (shown, exported)
}

/// The ids `cairn sessions list --json` shows, sorted.
async fn listed(env: &TestEnv) -> Vec<String> {
    let (status, stdout, stderr) = run(env, &["sessions", "list", "--json"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let mut ids: Vec<String> = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn sessions_made_in_sqlite_read_the_same_from_postgresql_and_back_from_a_fresh_sqlite_file() {
    let env = TestEnv::new().await;
    let first = session_with_calls(&env, "Say hi and write a file", "a.txt").await;
    let second = session_with_calls(&env, "Once more", "b.txt").await;
    let before = [seen(&env, &first).await, seen(&env, &second).await];
    assert!(
        before[0].1.contains("\"type\":\"checkpoint\"") && before[0].1.contains("\"type\":\"blob\""),
        "{}",
        before[0].1
    );
    let sessions = listed(&env).await;
    assert_eq!(sessions.len(), 2);
    let (status, _, stderr) = run(&env, &["serve", "token", "create", "--principal", "alice"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let (_, tokens, _) = run(&env, &["serve", "token", "list"]).await;
    assert!(tokens.contains("alice"), "{tokens}");

    let url = fixture::database().await;
    let (status, stdout, stderr) = run(&env, &["store", "migrate", "--from", "sqlite:", "--to", &url]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("copied 2 sessions from sqlite:") && stdout.contains("skipped 0 (already there)"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stderr.contains("copied 2/2 sessions"), "{stderr}");

    // `cairn sessions` against PostgreSQL shows and exports exactly what SQLite did.
    env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
    assert_eq!(listed(&env).await, sessions);
    assert_eq!([seen(&env, &first).await, seen(&env, &second).await], before);
    assert_eq!(run(&env, &["serve", "token", "list"]).await.1, tokens, "the token, by its hash, with its times");

    // Again: everything is there already (`--to` is `[store] url` now).
    let (status, stdout, stderr) = run(&env, &["store", "migrate", "--json"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((summary["copied"].as_u64(), summary["skipped"].as_u64()), (Some(0), Some(2)), "{stdout}");

    // And back, to a fresh SQLite file: another home's database.
    let fresh = TestEnv::new().await;
    std::fs::create_dir_all(fresh.home()).unwrap();
    let to = format!("sqlite:{}", fresh.database().display());
    let (status, stdout, stderr) = run(&env, &["store", "migrate", "--from", &url, "--to", &to]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with("copied 2 sessions from postgres://"), "{stdout}");
    assert_eq!(listed(&fresh).await, sessions);
    assert_eq!([seen(&fresh, &first).await, seen(&fresh, &second).await], before);
}

#[tokio::test]
async fn a_session_whose_turn_is_running_is_not_copied_until_a_run_after_that_turn() {
    let env = TestEnv::new().await;
    let done = session_with_calls(&env, "Finished before", "a.txt").await;
    let mut agent = env.ready().await;
    env.mock.push(Reply::endless(Duration::from_millis(2)));
    let busy = agent.new_session(&env.cwd()).await;
    let turn = agent.prompt(&busy, "keep going").await;
    agent.next_chunk().await;

    // Into another home's database, where `cairn sessions` reads it.
    let copy = TestEnv::new().await;
    std::fs::create_dir_all(copy.home()).unwrap();
    let to = format!("sqlite:{}", copy.database().display());
    let (status, stdout, stderr) = run(&env, &["store", "migrate", "--to", &to]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stdout.starts_with("copied 1 session from"), "the others are copied: {stdout}");
    let pid = agent.child.id().unwrap();
    assert!(
        stderr.contains(&format!("not copied: session {busy} is in use by another cairn process (pid {pid}")),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 session not copied: a turn is running in them") && stderr.contains("run the migrate again"),
        "{stderr}"
    );

    agent.notify("session/cancel", json!({"sessionId": busy})).await;
    agent.response(turn).await;
    let (status, stdout, stderr) = run(&env, &["store", "migrate", "--to", &to]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with("copied 1 session from") && stdout.contains("skipped 1 (already there)"), "{stdout}");
    let mut both = vec![done, busy];
    both.sort();
    assert_eq!(listed(&copy).await, both);
}

#[tokio::test]
async fn stores_that_cannot_be_used_are_refused_naming_the_problem_and_never_a_password() {
    let env = TestEnv::new().await;
    session_with_calls(&env, "Something to copy", "a.txt").await;
    let database = format!("sqlite:{}", env.database().display());
    let newer = env.workspace().join("../newer.db");
    rusqlite::Connection::open(&newer).unwrap().pragma_update(None, "user_version", 999).unwrap();
    let newer = format!("sqlite:{}", newer.display());
    let refused = [
        (vec!["--to", &newer], "has schema version 999, newer than this cairn supports"),
        (vec!["--to", "mysql://cairn:hunter2-secret@db/x"], "names no store; write sqlite:PATH"),
        (
            vec!["--to", "postgres://cairn:hunter2-secret@127.0.0.1:1/gone"],
            "cannot connect to PostgreSQL at cairn@127.0.0.1:1/gone",
        ),
        (vec!["--to", "postgres://cairn:hunter2-secret@db:notaport/x"], "PostgreSQL URL is malformed"),
        (
            vec!["--from", "sqlite:/nowhere/cairn.db", "--to", "sqlite:/tmp/x.db"],
            "no SQLite database at /nowhere/cairn.db",
        ),
        (vec!["--to", &database], "are the same store"),
        (vec![], "give --to, or set `[store] url`"),
    ];
    for (args, expected) in refused {
        let mut command = vec!["store", "migrate"];
        command.extend(&args);
        let (status, stdout, stderr) = run(&env, &command).await;
        assert_eq!(status, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("hunter2"), "the password was shown: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
}

//! Sessions never prompted: `session/list`, `cairn sessions list` and `exec --continue` leave
//! them out (a client that opens two sessions per chat would fill its picker with untitled
//! ones); one a `kill -9` left behind stays stored but unlisted.

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv};

fn listed(list: &Value) -> Vec<String> {
    list["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap().to_owned()).collect()
}

/// Whether the store holds the session, read straight from the database.
fn stored(env: &TestEnv, session: &str) -> bool {
    let conn = rusqlite::Connection::open(env.database()).unwrap();
    conn.query_row("SELECT count(*) FROM sessions WHERE id = ?1", [session], |row| row.get::<_, i64>(0)).unwrap() == 1
}

/// A new session that answered one prompt.
async fn prompted(agent: &mut Agent, env: &TestEnv, text: &str) -> String {
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["ok"]));
    let id = agent.prompt(&session, text).await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    session
}

/// `cairn ARGS…` run to its end: its stdout and stderr.
async fn cli(env: &TestEnv, args: &[&str]) -> (String, String) {
    let output = env.command().args(args).output().await.expect("run cairn");
    assert!(output.status.success(), "{args:?}: {output:?}");
    (String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

#[tokio::test]
async fn a_session_never_prompted_is_listed_nowhere_while_a_prompted_one_is() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let asked = prompted(&mut agent, &env, "First task").await;
    // Newer than the prompted one, and with a setting changed: still never prompted.
    let empty = agent.new_session(&env.cwd()).await;
    agent.call("session/set_mode", json!({"sessionId": empty, "modeId": "accept-edits"})).await;

    assert_eq!(listed(&agent.call("session/list", json!({})).await), [asked.as_str()]);
    let with_subagents = json!({"_meta": {"cairn": {"subagents": true}}});
    assert_eq!(listed(&agent.call("session/list", with_subagents).await), [asked.as_str()]);
    let (stdout, _) = cli(&env, &["sessions", "list", "--json"]).await;
    let ids: Vec<String> = stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, [asked.as_str()]);

    // `exec --continue` takes the latest session with a conversation, not the newer empty one
    // (which is this other process's, and may be prompted any moment).
    env.mock.push(Reply::text(&["continued"]));
    let (stdout, stderr) = cli(&env, &["exec", "--continue", "And then?"]).await;
    assert_eq!(stdout, "continued\n");
    assert!(stderr.contains(&format!("session: {asked}")), "{stderr}");
    assert!(stored(&env, &empty));
}

#[tokio::test]
async fn after_kill_9_a_session_never_prompted_stays_stored_but_unlisted_and_no_other_process_removes_it() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let asked = prompted(&mut agent, &env, "Survive").await;
    let empty = agent.new_session(&env.cwd()).await;
    agent.kill9().await;
    assert!(stored(&env, &empty), "a killed process removes nothing");

    let mut next = env.ready().await;
    assert_eq!(listed(&next.call("session/list", json!({})).await), [asked.as_str()]);
    next.close_stdin();
    next.wait_exit().await;
    assert!(stored(&env, &empty), "not this process's to remove");
    let (stdout, _) = cli(&env, &["sessions", "list"]).await;
    assert!(stdout.contains(&asked) && !stdout.contains(&empty), "{stdout}");
}

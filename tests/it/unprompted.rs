//! Sessions never prompted: `session/list`, `cairn sessions list` and `exec --continue` leave
//! them out (a client that opens two sessions per chat would fill its picker with untitled
//! ones); the process that created one removes it when it exits normally, on stdio and under
//! `cairn serve`; one a `kill -9` left behind stays stored but unlisted; and a process never
//! removes one it did not create, which another process may be about to prompt.

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv};

fn listed(list: &Value) -> Vec<String> {
    list["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap().to_owned()).collect()
}

fn load_params(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
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
async fn a_session_never_prompted_is_removed_when_its_process_exits_and_a_prompted_one_stays() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let empty = agent.new_session(&env.cwd()).await;
    agent.call("session/set_mode", json!({"sessionId": empty, "modeId": "accept-edits"})).await;
    let asked = prompted(&mut agent, &env, "Keep me").await;
    // A copy of a session never prompted holds nothing either.
    let fork = agent.call("session/fork", json!({"sessionId": empty, "cwd": env.cwd(), "mcpServers": []})).await;
    let fork = fork["sessionId"].as_str().unwrap().to_owned();
    assert!(stored(&env, &empty) && stored(&env, &fork));
    agent.close_stdin();
    let (status, _) = agent.wait_exit().await;
    assert!(status.success(), "{status:?}");

    assert!(!stored(&env, &empty), "removed at exit");
    assert!(!stored(&env, &fork), "removed at exit");
    assert!(stored(&env, &asked));
    let mut next = env.ready().await;
    let error = next.call_err("session/load", load_params(&empty, &env)).await;
    assert_eq!(error["code"], -32002, "{error}");
    let id = next.request("session/load", load_params(&asked, &env)).await;
    let (response, replay) = next.response(id).await;
    assert!(response["result"].is_object(), "{response}");
    assert_eq!(crate::support::text_of(&crate::support::updates(&replay, &asked), "agent_message_chunk"), "ok");
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

#[tokio::test]
async fn a_session_another_process_created_is_not_removed_when_a_process_that_loaded_it_exits() {
    let env = TestEnv::new().await;
    let mut first = env.ready().await;
    let session = first.new_session(&env.cwd()).await;

    let mut second = env.ready().await;
    let loaded = second.call("session/load", load_params(&session, &env)).await;
    assert!(loaded.is_object(), "{loaded}");
    second.close_stdin();
    second.wait_exit().await;
    assert!(stored(&env, &session));

    // The process that created it goes on with it.
    env.mock.push(Reply::text(&["still here"]));
    let id = first.prompt(&session, "Hello").await;
    let (response, _) = first.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    first.close_stdin();
    first.wait_exit().await;
    assert!(stored(&env, &session), "prompted, it stays");
}

#[tokio::test]
async fn a_server_removes_the_sessions_its_clients_never_prompted_when_it_stops() {
    let env = TestEnv::new().await;
    let mut server = crate::support::served::Server::start(&env).await;
    let mut client = server.client().await;
    let empty = client.new_session(&env.cwd()).await;
    let asked = client.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["ok"]));
    let id = client.prompt(&asked, "Keep me").await;
    assert_eq!(client.response(id).await.0["result"]["stopReason"], "end_turn");
    // A client that goes away leaves the sessions to the server: nothing is removed yet.
    client.drop_connection();
    let mut next = server.client().await;
    assert_eq!(listed(&next.call("session/list", json!({})).await), [asked.as_str()]);
    assert!(stored(&env, &empty));

    let status = server.terminate().await;
    assert!(status.success(), "{status:?}; stderr:\n{}", server.stderr());
    assert!(!stored(&env, &empty), "removed when the server stopped");
    assert!(stored(&env, &asked));
}

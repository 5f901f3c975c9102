//! One session, two processes: the process running a turn holds the session's lease. Another
//! process's prompt, delete or `cairn exec --session` is refused with an error naming the holder
//! and records nothing; it can still load the session; once the turn ends (or its process is
//! killed) the other process carries on from the history as stored. A holder in another pid
//! namespace on this host (a container) is judged by its heartbeat, never by what its pid means
//! here.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates, user_texts};

/// The JSON-RPC code of a session another process is running a turn in.
const SESSION_IN_USE: i64 = -32010;

/// Rows whose stored JSON contains `text`.
fn rows_with(env: &TestEnv, text: &str) -> i64 {
    let conn = rusqlite::Connection::open(env.database()).unwrap();
    conn.query_row("SELECT count(*) FROM parts WHERE data_json LIKE ?1", [format!("%{text}%")], |row| row.get(0))
        .unwrap()
}

fn prompt_params(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// A starts a turn that streams until it is cancelled; answers the session and the prompt's id
/// once A holds the session (its first chunk is shown after its prompt is committed).
async fn a_streams(env: &TestEnv, a: &mut Agent) -> (String, i64) {
    env.mock.push(Reply::endless(Duration::from_millis(2)));
    let session = a.new_session(&env.cwd()).await;
    let turn = a.prompt(&session, "from A").await;
    a.next_chunk().await;
    (session, turn)
}

/// The refusal names A's process and says what to do.
fn assert_names_the_holder(error: &Value, a: &Agent, session: &str) {
    let pid = a.child.id().unwrap();
    assert_eq!(error["code"], SESSION_IN_USE, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains(&format!("pid {pid}")), "{message}");
    assert!(message.contains("in use by another cairn process") && message.contains("try again"), "{message}");
    assert_eq!(error["data"]["sessionId"], session);
    assert_eq!(error["data"]["holder"]["pid"], pid);
    assert!(error["data"]["holder"]["since"].as_str().unwrap().ends_with('Z'), "{error}");
}

async fn cancel(a: &mut Agent, session: &str, turn: i64) {
    a.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, _) = a.response(turn).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
}

#[tokio::test]
async fn another_process_is_refused_mid_turn_records_nothing_and_carries_on_once_the_turn_ends() {
    let env = TestEnv::new().await;
    let mut a = env.ready().await;
    let mut b = env.ready().await;
    let (session, turn) = a_streams(&env, &mut a).await;

    let error = b.call_err("session/prompt", prompt_params(&session, "from B")).await;
    assert_names_the_holder(&error, &a, &session);
    assert_eq!(rows_with(&env, "from B"), 0, "the refused prompt left no row");
    assert_eq!(env.mock.requests().len(), 1, "the refused prompt never reached the model");
    a.next_chunk().await;

    cancel(&mut a, &session, turn).await;
    let id = a.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = a.response(id).await;
    let kept = text_of(&updates(&replay, &session), "agent_message_chunk");
    env.mock.push(Reply::text(&["B's answer"]));
    let turn = b.prompt(&session, "from B").await;
    let (response, _) = b.response(turn).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    // B continued from the history as A left it (not as B first read it), its refused prompt
    // nowhere.
    let sent = &env.mock.requests()[1];
    assert_eq!(user_texts(sent), ["from A", "from B"]);
    let answer = sent["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(answer["content"].as_str().unwrap(), kept);
    assert_eq!(rows_with(&env, "from B"), 1);
}

#[tokio::test]
async fn load_from_another_process_replays_a_running_turn_as_it_is_and_leaves_its_calls_alone() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "x\n"}))]));
    env.mock.push(Reply::text(&["Written."]));
    let mut a = env.ready().await;
    let mut b = env.ready().await;
    let session = a.new_session(&env.cwd()).await;
    let turn = a.prompt(&session, "write a.txt").await;
    let question = loop {
        let message = a.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };

    // A waits for its user; B reads the session meanwhile.
    let id = b.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = b.response(id).await;
    assert!(response["result"].is_object(), "{response}");
    let shown = updates(&replay, &session);
    assert_eq!(text_of(&shown, "user_message_chunk"), "write a.txt");
    let call = shown.iter().find(|u| u["sessionUpdate"] == "tool_call").unwrap();
    assert_eq!((&call["toolCallId"], &call["status"]), (&json!("c1"), &json!("pending")), "{call}");
    assert_eq!(rows_with(&env, "Interrupted"), 0, "A's call is not taken for one a crash left behind");
    let error = b.call_err("session/prompt", prompt_params(&session, "from B")).await;
    assert_names_the_holder(&error, &a, &session);

    a.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    let (response, _) = a.response(turn).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(env.workspace().join("a.txt")).unwrap(), "x\n");
}

#[tokio::test]
async fn a_holder_killed_mid_turn_does_not_lock_the_session() {
    let env = TestEnv::new().await;
    let mut a = env.ready().await;
    let mut b = env.ready().await;
    let (session, _) = a_streams(&env, &mut a).await;
    let error = b.call_err("session/prompt", prompt_params(&session, "too early")).await;
    assert_names_the_holder(&error, &a, &session);

    a.kill9().await;
    env.mock.push(Reply::text(&["Carrying on."]));
    let turn = b.prompt(&session, "from B").await;
    let (response, _) = b.response(turn).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let sent = &env.mock.requests()[1];
    assert_eq!(user_texts(sent), ["from A", "from B"], "what A committed before it died is kept");
    assert_eq!(rows_with(&env, "too early"), 0);
}

#[tokio::test]
async fn delete_from_another_process_is_refused_while_a_turn_runs_and_works_after() {
    let env = TestEnv::new().await;
    let mut a = env.ready().await;
    let mut b = env.ready().await;
    let (session, turn) = a_streams(&env, &mut a).await;

    let error = b.call_err("session/delete", json!({"sessionId": session})).await;
    assert_names_the_holder(&error, &a, &session);
    a.next_chunk().await;
    assert_eq!(rows_with(&env, "from A"), 1, "the rows stay under the running turn");

    cancel(&mut a, &session, turn).await;
    b.call("session/delete", json!({"sessionId": session})).await;
    assert_eq!(rows_with(&env, "from A"), 0);
}

#[tokio::test]
async fn exec_on_a_session_another_process_is_running_fails_plainly_and_records_nothing() {
    let env = TestEnv::new().await;
    let mut a = env.ready().await;
    let (session, turn) = a_streams(&env, &mut a).await;

    let output = env.command().args(["exec", "--session", &session, "from exec"]).output().await.unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let pid = a.child.id().unwrap();
    assert!(stderr.contains("in use by another cairn process") && stderr.contains(&format!("pid {pid}")), "{stderr}");
    assert!(output.stdout.is_empty());
    assert_eq!(rows_with(&env, "from exec"), 0);
    assert_eq!(env.mock.requests().len(), 1);
    cancel(&mut a, &session, turn).await;
}

/// The mode and model stored for `session`.
fn mode_and_model(env: &TestEnv, session: &str) -> (Option<String>, String) {
    let conn = rusqlite::Connection::open(env.database()).unwrap();
    conn.query_row("SELECT mode, model FROM sessions WHERE id = ?1", [session], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
}

#[tokio::test]
async fn a_refused_exec_leaves_the_mode_and_model_it_asked_for_unstored_and_a_later_one_stores_them() {
    let env = TestEnv::new().await;
    let mut a = env.ready().await;
    let (session, turn) = a_streams(&env, &mut a).await;
    let before = mode_and_model(&env, &session);
    let exec = ["exec", "--session", &session, "--mode", "bypass", "--model", "openai/other-model", "from exec"];

    let output = env.command().args(exec).output().await.unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use by another cairn process"), "{stderr}");
    assert_eq!(mode_and_model(&env, &session), before, "a later `exec --continue` must not run in bypass");

    cancel(&mut a, &session, turn).await;
    env.mock.push(Reply::text(&["Done."]));
    let output = env.command().args(exec).output().await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(mode_and_model(&env, &session), (Some("bypass".to_owned()), "openai/other-model".to_owned()));
}

/// `cairn` in a pid namespace of its own, as in a container sharing this host's name, with its
/// own `/proc` (`with_proc`) or this one's. `None` (the test skips) where `unshare` cannot make
/// one.
async fn in_pid_namespace(env: &TestEnv, with_proc: bool) -> Option<Agent> {
    let mut args = vec!["--user", "--map-root-user", "--pid", "--fork", "--kill-child"];
    if with_proc {
        args.push("--mount-proc");
    }
    let probe = tokio::process::Command::new("unshare").args(&args).arg("true").output().await;
    if !probe.is_ok_and(|probe| probe.status.success()) {
        println!("skipped: unshare cannot make a pid namespace here");
        return None;
    }
    let mut command = env.command_on_path("unshare");
    command.args(&args).arg("cairn");
    let mut agent = Agent::spawn(command, Editor::default()).await;
    agent.initialize().await;
    Some(agent)
}

#[tokio::test]
async fn a_live_holder_in_another_pid_namespace_on_this_host_keeps_the_session() {
    for with_proc in [true, false] {
        let env = TestEnv::new().await;
        let Some(mut a) = in_pid_namespace(&env, with_proc).await else { return };
        let mut b = env.ready().await;
        let (session, turn) = a_streams(&env, &mut a).await;

        // A's pid (1 or 2 in its namespace) names another process here, or none.
        let error = b.call_err("session/prompt", prompt_params(&session, "from B")).await;
        assert_eq!(error["code"], SESSION_IN_USE, "with its own /proc: {with_proc}: {error}");
        assert_eq!(rows_with(&env, "from B"), 0);
        let error = b.call_err("session/delete", json!({"sessionId": session})).await;
        assert_eq!(error["code"], SESSION_IN_USE, "{error}");

        cancel(&mut a, &session, turn).await;
        env.mock.push(Reply::text(&["B's answer"]));
        let turn = b.prompt(&session, "from B").await;
        let (response, _) = b.response(turn).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "released: {response}");
    }
}

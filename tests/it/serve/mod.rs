//! `cairn serve`: ACP over WebSocket to several clients, with sessions that belong to the server.
//! A client that goes away mid-turn has detached, not aborted: the turn goes on and is recorded,
//! and the next client loads all of it. Two clients on one live turn see the same answer, each
//! chunk once. A question goes to every client viewing the session, and the first answer wins.
//! A client that lost its connection resumes from the last numbered update it saw. What
//! misbehaving clients meet is in `limits`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::served::{Client, Server};
use crate::support::{Reply, TestEnv, text_of, updates};

/// A slow answer: `n` numbered pieces, one every `every`.
fn slow_answer(n: usize, every: Duration) -> (Reply, String) {
    let pieces: Vec<String> = (0..n).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    (Reply::text_with_delay(&refs, every), pieces.concat())
}

fn open(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
}

/// Reads until a chunk of the answer to `session` arrives; what came, that chunk included.
async fn until_first_chunk(client: &mut Client, session: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let message = client.recv().await;
        let chunk = message["params"]["sessionId"] == session
            && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk";
        seen.push(message);
        if chunk {
            return seen;
        }
    }
}

/// Polls `session/list` until `session` is idle.
async fn until_idle(client: &mut Client, session: &str) {
    for _ in 0..400 {
        let listed = client.call("session/list", json!({})).await;
        let status = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|info| info["sessionId"] == session)
            .map(|info| info["_meta"]["cairn"]["status"].clone());
        if status == Some(json!("idle")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("session {session} never went idle");
}

#[tokio::test]
async fn a_client_that_goes_away_mid_turn_detaches_and_the_next_one_loads_the_whole_answer() {
    let env = TestEnv::new().await;
    let (reply, whole) = slow_answer(40, Duration::from_millis(15));
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    first.prompt(&session, "Count").await;
    until_first_chunk(&mut first, &session).await;
    first.drop_connection();

    let mut next = server.client().await;
    until_idle(&mut next, &session).await;
    let id = next.request("session/load", open(&session, &env)).await;
    let (loaded, during) = next.response(id).await;
    assert!(loaded["result"].is_object(), "{loaded}");
    let shown = updates(&during, &session);
    assert_eq!(text_of(&shown, "agent_message_chunk"), whole, "the turn went on to its end after the client left");
    assert_eq!(text_of(&shown, "user_message_chunk"), "Count");
    let answers =
        env.mock.requests_with("Count").iter().filter(|body| body.to_string().contains("You are cairn")).count();
    assert_eq!(answers, 1, "one request for the answer, never cancelled and retried: {:#?}", env.mock.requests());
}

#[tokio::test]
async fn two_clients_on_one_live_turn_see_the_whole_answer_each_chunk_once() {
    let env = TestEnv::new().await;
    let (reply, whole) = slow_answer(60, Duration::from_millis(10));
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let prompt = first.prompt(&session, "Count").await;
    let mut seen_first = until_first_chunk(&mut first, &session).await;

    // The second client loads the session while its turn streams: the replay, then the rest live.
    let mut second = server.client().await;
    let load = second.request("session/load", open(&session, &env)).await;
    let (loaded, mut seen_second) = second.response(load).await;
    assert!(loaded["result"].is_object(), "{loaded}");

    let (done, rest) = first.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    seen_first.extend(rest);
    assert_eq!(text_of(&updates(&seen_first, &session), "agent_message_chunk"), whole);

    // The second client reads until it has as much text as the whole answer; nothing may follow.
    loop {
        let text = text_of(&updates(&seen_second, &session), "agent_message_chunk");
        if text.len() >= whole.len() {
            break;
        }
        seen_second.push(second.recv().await);
    }
    assert_eq!(text_of(&updates(&seen_second, &session), "agent_message_chunk"), whole, "each chunk once, in order");
    let late = tokio::time::timeout(Duration::from_millis(300), second.next()).await;
    if let Ok(Some(message)) = late {
        assert_ne!(message["params"]["update"]["sessionUpdate"], "agent_message_chunk", "a chunk twice: {message}");
    }
}

#[tokio::test]
async fn a_question_goes_to_every_client_viewing_the_session_and_the_first_answer_wins() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("note.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let mut second = server.client().await;
    second.call("session/resume", open(&session, &env)).await;
    let prompt = first.prompt(&session, "Write it").await;

    let asked = |message: &Value| message["method"] == "session/request_permission";
    let mut to_first = first.recv().await;
    while !asked(&to_first) {
        to_first = first.recv().await;
    }
    let mut to_second = second.recv().await;
    while !asked(&to_second) {
        to_second = second.recv().await;
    }
    assert_eq!(to_first["params"]["toolCall"]["toolCallId"], to_second["params"]["toolCall"]["toolCallId"]);

    second
        .send(json!({"jsonrpc": "2.0", "id": to_second["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    // The first client's copy is withdrawn.
    let withdrawn = loop {
        let message = first.recv().await;
        if message["method"] == "$/cancel_request" {
            break message;
        }
        if message.get("method").is_none() && message["id"] == prompt {
            panic!("the turn ended before the other copy was withdrawn: {message}");
        }
    };
    assert_eq!(withdrawn["params"]["requestId"], to_first["id"], "{withdrawn}");
    let (done, _) = first.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n");
}

#[tokio::test]
async fn a_question_asked_while_nobody_views_the_session_waits_for_the_next_client() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("later.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "y\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    first.prompt(&session, "Write it").await;
    loop {
        let message = first.recv().await;
        if message["method"] == "session/request_permission" {
            break;
        }
    }
    first.drop_connection();

    let mut next = server.client().await;
    let resume = next.request("session/resume", open(&session, &env)).await;
    // The question may come before the answer to the resume.
    let (_, mut before) = next.response(resume).await;
    let asked = loop {
        if let Some(at) = before.iter().position(|message| message["method"] == "session/request_permission") {
            break before.remove(at);
        }
        before.push(next.recv().await);
    };
    next.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
        .await;
    until_idle(&mut next, &session).await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "y\n", "the question was put again and answered");
}

#[tokio::test]
async fn sigterm_stops_the_server_and_keeps_what_was_shown() {
    let env = TestEnv::new().await;
    let (reply, _) = slow_answer(400, Duration::from_millis(10));
    env.mock.push(reply);
    let mut server = Server::start(&env).await;
    let mut client = server.client().await;
    let session = client.new_session(&env.cwd()).await;
    client.prompt(&session, "Count").await;
    let seen = until_first_chunk(&mut client, &session).await;
    let shown = text_of(&updates(&seen, &session), "agent_message_chunk");
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}; stderr:\n{}", server.stderr());

    let server = Server::start(&env).await;
    let mut client = server.client().await;
    let id = client.request("session/load", open(&session, &env)).await;
    let (_, during) = client.response(id).await;
    let stored = text_of(&updates(&during, &session), "agent_message_chunk");
    assert!(stored.starts_with(&shown), "what the client was shown is stored: {shown:?} against {stored:?}");
}

#[tokio::test]
async fn the_python_sdks_websocket_client_drives_a_prompt_a_question_and_a_load() {
    drives_a_prompt_a_question_and_a_load(python_client, |server| server.url.clone()).await;
}

/// The RFD says a client MUST speak both profiles; the SDK's HTTP client reads every session's
/// updates where cairn sends them (the connection's stream, or the session's once opened).
#[tokio::test]
async fn the_python_sdks_streamable_http_client_drives_a_prompt_a_question_and_a_load() {
    let http = |server: &Server| crate::support::streamable::http_url(&server.url);
    drives_a_prompt_a_question_and_a_load(python_client, http).await;
}

#[tokio::test]
async fn the_typescript_sdks_websocket_client_drives_a_prompt_a_question_and_a_load() {
    drives_a_prompt_a_question_and_a_load(typescript_client, |server| server.url.clone()).await;
}

#[tokio::test]
async fn the_typescript_sdks_streamable_http_client_drives_a_prompt_a_question_and_a_load() {
    let http = |server: &Server| crate::support::streamable::http_url(&server.url);
    drives_a_prompt_a_question_and_a_load(typescript_client, http).await;
}

/// `tests/conformance/remote_client.py` with the pinned Python SDK, given `config`.
async fn python_client(config: Value) -> tokio::process::Command {
    let sdk = tokio::task::spawn_blocking(crate::support::python::acp_sdk)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let mut command = crate::support::python::python(&sdk);
    command.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/remote_client.py")).arg(config.to_string());
    command
}

/// `tests/conformance/node/remote_client.mjs` with the pinned TypeScript SDK, given `config`.
async fn typescript_client(mut config: Value) -> tokio::process::Command {
    let sdk = tokio::task::spawn_blocking(crate::support::node::ts_sdk)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    config["modules"] = json!(sdk);
    let mut command = crate::support::node::node();
    command
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/node/remote_client.mjs"))
        .arg(config.to_string());
    command
}

/// A client nobody here wrote (`client`, given `{url, workspace, secret}`) prompts through `cairn serve`
/// at `url`, answers the permission question the turn's `write` asks, closes, and loads the
/// session over a new connection; it prints what it saw.
async fn drives_a_prompt_a_question_and_a_load<C>(client: impl FnOnce(Value) -> C, url: impl FnOnce(&Server) -> String)
where
    C: Future<Output = tokio::process::Command>,
{
    let env = TestEnv::new().await;
    let path = env.workspace().join("note.md");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "kept\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let server = Server::start(&env).await;
    let secret = crate::support::served::secret_for(&server.url).unwrap();
    let mut command = client(json!({"url": url(&server), "workspace": env.cwd(), "secret": secret})).await;
    command.current_dir(env.workspace()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the client failed: {stderr}\ncairn serve:\n{}", server.stderr());
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();

    assert_eq!(summary["stopReason"], "end_turn", "{summary}");
    assert_eq!(summary["permissions"].as_array().unwrap().len(), 1, "{summary}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept\n");
    let text = |part: &str, kind: &str| -> String {
        summary[part]
            .as_array()
            .unwrap()
            .iter()
            .filter(|update| update["sessionUpdate"] == kind)
            .map(|update| update["content"]["text"].as_str().unwrap_or_default())
            .collect()
    };
    assert_eq!(text("first", "agent_message_chunk"), "written", "{summary}");
    assert_eq!(text("loaded", "user_message_chunk"), "Write the note", "{summary}");
    assert_eq!(text("loaded", "agent_message_chunk"), "written", "{summary}");
    assert!(
        summary["loaded"].as_array().unwrap().iter().any(|update| update["sessionUpdate"] == "tool_call"),
        "{summary}"
    );
}

#[tokio::test]
async fn a_settings_change_on_one_connection_reaches_the_others_viewing_the_session() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let mut second = server.client().await;
    second.call("session/resume", open(&session, &env)).await;
    first.call("session/set_mode", json!({"sessionId": session, "modeId": "accept-edits"})).await;
    let update = loop {
        let message = second.recv().await;
        if message["params"]["update"]["sessionUpdate"] == "config_option_update" {
            break message;
        }
    };
    let options = update["params"]["update"]["configOptions"].as_array().unwrap();
    let mode = options.iter().find(|option| option["id"] == "mode").expect("the mode option");
    assert_eq!(mode["currentValue"], "accept-edits", "{update}");
}

#[tokio::test]
async fn a_client_answering_a_question_with_an_error_has_answered() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("never.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["could not"]));
    let server = Server::start(&env).await;
    let mut client = server.client().await;
    let session = client.new_session(&env.cwd()).await;
    let prompt = client.prompt(&session, "Write it").await;
    let asked = loop {
        let message = client.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    client.send(json!({"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -32603, "message": "no UI here"}})).await;
    let (done, _) = client.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "the turn went on: {done}");
    assert!(!path.exists(), "an error is no permission");
}

/// The `_meta.cairn.seq` of a served update.
fn seq(message: &Value) -> Option<u64> {
    message["params"]["_meta"]["cairn"]["seq"].as_u64()
}

#[tokio::test]
async fn a_client_that_lost_its_connection_resumes_after_the_last_number_it_saw() {
    let env = TestEnv::new().await;
    let (reply, whole) = slow_answer(60, Duration::from_millis(10));
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    first.prompt(&session, "Count").await;
    // Some chunks, each numbered one after the other.
    let mut seen = Vec::new();
    while updates(&seen, &session).iter().filter(|u| u["sessionUpdate"] == "agent_message_chunk").count() < 5 {
        seen.push(first.recv().await);
    }
    let numbers: Vec<u64> = seen.iter().filter_map(seq).collect();
    assert!(numbers.windows(2).all(|pair| pair[1] == pair[0] + 1), "numbered in order: {numbers:?}");
    let last = *numbers.last().expect("served updates carry _meta.cairn.seq");
    first.drop_connection();
    // The turn goes on meanwhile: a few chunks are missed.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let mut next = server.client().await;
    // What was missed comes before the answer, in wire order; what is live after it.
    let id = next.request("_cairn/stream/resume", json!({"sessionId": session, "afterSeq": last})).await;
    let (resumed, mut after) = next.response(id).await;
    assert!(resumed["result"]["lastSeq"].as_u64().unwrap() >= last, "{resumed}");
    while text_of(&updates(&seen, &session), "agent_message_chunk").len()
        + text_of(&updates(&after, &session), "agent_message_chunk").len()
        < whole.len()
    {
        after.push(next.recv().await);
    }
    let numbers_after: Vec<u64> = after.iter().filter_map(seq).collect();
    assert_eq!(numbers_after.first(), Some(&(last + 1)), "exactly what was missed, from the next number");
    assert!(numbers_after.windows(2).all(|pair| pair[1] == pair[0] + 1), "{numbers_after:?}");
    let joined = text_of(&updates(&seen, &session), "agent_message_chunk")
        + &text_of(&updates(&after, &session), "agent_message_chunk");
    assert_eq!(joined, whole, "each chunk once, in order, across the drop");
}

#[tokio::test]
async fn a_resume_from_a_number_no_longer_kept_says_to_load_the_session() {
    let env = TestEnv::new().await;
    let (reply, _) = slow_answer(400, Duration::ZERO);
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let prompt = first.prompt(&session, "Count").await;
    first.response(prompt).await;

    let mut next = server.client().await;
    let id = next.request("_cairn/stream/resume", json!({"sessionId": session, "afterSeq": 1})).await;
    let (answer, _) = next.response(id).await;
    assert_eq!(answer["error"]["data"]["reason"], "too_old", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("session/load"), "{answer}");
    let id = next.request("_cairn/stream/resume", json!({"sessionId": session, "afterSeq": 1_000_000})).await;
    let (answer, _) = next.response(id).await;
    assert_eq!(answer["error"]["data"]["reason"], "ahead", "{answer}");
    let id = next.request("_cairn/stream/resume", json!({"sessionId": "ses_none", "afterSeq": 0})).await;
    let (answer, _) = next.response(id).await;
    assert_eq!(answer["error"]["code"], -32002, "an unknown session: {answer}");
}

/// On a server as on stdio, a turn reads and writes through the editor's files when the editor
/// offers them: the client whose prompt the turn answers, not the others viewing the session.
#[tokio::test]
async fn a_turn_reads_through_the_files_of_the_client_that_prompted_it() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("unsaved.txt");
    std::fs::write(&path, "as saved on disk\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": path}))]));
    env.mock.push(Reply::text(&["seen"]));
    let server = Server::start(&env).await;
    let mut editor = server.connect().await;
    let capabilities = json!({"fs": {"readTextFile": true, "writeTextFile": true}});
    editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    let session = editor.new_session(&env.cwd()).await;
    let mut watcher = server.client().await;
    watcher.call("session/resume", open(&session, &env)).await;

    let prompt = editor.prompt(&session, "Read it").await;
    let asked = loop {
        let message = editor.recv().await;
        if message["method"] == "fs/read_text_file" {
            break message;
        }
        assert!(message["id"] != prompt, "the turn ended without reading through the editor: {message}");
    };
    assert_eq!(asked["params"]["path"], json!(path), "{asked}");
    editor
        .send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"content": "only in the editor's buffer"}}))
        .await;
    let (done, _) = editor.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let sent: String = env.mock.requests().iter().map(Value::to_string).collect();
    assert!(sent.contains("only in the editor's buffer") && !sent.contains("as saved on disk"), "{sent}");
    // The other viewer saw the turn, and was asked for no file.
    let mut seen = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(300), watcher.next()).await {
        seen.push(message);
    }
    assert!(seen.iter().all(|message| message["method"] != "fs/read_text_file"), "{seen:?}");
    assert!(seen.iter().any(|message| message["params"]["update"]["sessionUpdate"] == "tool_call"), "{seen:?}");
}

/// Commands too: the prompting client's terminal runs them, when it offers one.
#[tokio::test]
async fn a_turn_runs_its_commands_in_the_terminal_of_the_client_that_prompted_it() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo on the server"}))]));
    env.mock.push(Reply::text(&["ran"]));
    let server = Server::start(&env).await;
    let mut editor = server.connect().await;
    editor.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"terminal": true}})).await;
    let session = editor.new_session(&env.cwd()).await;
    let mut watcher = server.client().await;
    watcher.call("session/resume", open(&session, &env)).await;

    let prompt = editor.prompt(&session, "Run it").await;
    let mut asked = Vec::new();
    loop {
        let message = editor.recv().await;
        if message.get("method").is_none() && message["id"] == prompt {
            assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
            break;
        }
        let Some(method) = message["method"].as_str().map(str::to_owned) else { continue };
        let result = match method.as_str() {
            "session/request_permission" => json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
            "terminal/create" => json!({"terminalId": "t1"}),
            "terminal/wait_for_exit" => json!({"exitCode": 0}),
            "terminal/output" => {
                json!({"output": "in the editor's terminal\n", "truncated": false, "exitStatus": {"exitCode": 0}})
            }
            "terminal/kill" | "terminal/release" => json!({}),
            _ => continue,
        };
        asked.push(method);
        editor.send(json!({"jsonrpc": "2.0", "id": message["id"], "result": result})).await;
    }
    assert!(asked.iter().any(|method| method == "terminal/create"), "{asked:?}");
    let sent: String = env.mock.requests().iter().map(Value::to_string).collect();
    assert!(sent.contains("in the editor's terminal") && !sent.contains("on the server\\n"), "{sent}");
    let mut seen = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(300), watcher.next()).await {
        seen.push(message);
    }
    assert!(seen.iter().all(|message| message["method"] != "terminal/create"), "{seen:?}");
}

mod auth;
mod http;
mod limits;
pub(crate) mod postgres;
mod postgres_auth;
mod replica_commands;
mod replica_death;
mod replica_questions;
mod replica_resume;
mod replica_withdrawn;
mod replicas;
mod secret;

#[tokio::test]
async fn a_server_killed_mid_turn_loses_nothing_it_showed() {
    let env = TestEnv::new().await;
    let (reply, _) = slow_answer(400, Duration::from_millis(10));
    env.mock.push(reply);
    let mut server = Server::start(&env).await;
    let mut client = server.client().await;
    let session = client.new_session(&env.cwd()).await;
    client.prompt(&session, "Count").await;
    let mut seen = until_first_chunk(&mut client, &session).await;
    for _ in 0..20 {
        seen.push(client.recv().await);
    }
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
    // Whatever else was on its way when the server died.
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_millis(200), client.next()).await {
        seen.push(message);
    }
    let shown = text_of(&updates(&seen, &session), "agent_message_chunk");

    let server = Server::start(&env).await;
    let mut client = server.client().await;
    let id = client.request("session/load", open(&session, &env)).await;
    let (_, during) = client.response(id).await;
    let stored = text_of(&updates(&during, &session), "agent_message_chunk");
    assert!(stored.starts_with(&shown) && !shown.is_empty(), "shown {shown:?}, stored {stored:?}");
}

//! `cairn serve`: ACP over WebSocket to several clients, with sessions that belong to the server.
//! A client that goes away mid-turn has detached, not aborted: the turn goes on and is recorded,
//! and the next client loads all of it. Two clients on one live turn see the same answer, each
//! chunk once. A question goes to every client viewing the session, and the first answer wins.

use std::time::Duration;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::mock_llm::Long;
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
async fn the_upgrade_names_the_connection_and_a_binary_frame_is_refused_without_ending_it() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let mut client = server.connect().await;
    assert!(client.connection.starts_with("conn_"), "Acp-Connection-Id on the 101: {:?}", client.connection);
    let other = server.connect().await;
    assert_ne!(client.connection, other.connection, "each connection has its own id");

    client.send_frame(Message::Binary(vec![1, 2, 3].into())).await;
    let refusal = client.recv().await;
    assert_eq!(refusal["error"]["code"], -32600, "{refusal}");
    assert!(refusal["error"]["message"].as_str().unwrap().contains("text frame"), "{refusal}");
    // A message written over several lines is still one message.
    client.send_frame(Message::Text("{\"jsonrpc\": \"2.0\",\n \"id\": 7,\r\n \"method\": \"nope\"}".into())).await;
    let (answer, _) = client.response(7).await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let result = client.initialize().await;
    assert_eq!(result["protocolVersion"], 1, "{result}");
}

#[tokio::test]
async fn a_plain_get_is_told_to_upgrade_and_a_non_loopback_address_is_refused() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let http = server.url.replace("ws://", "http://");
    let answer = reqwest_get(&http).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    assert!(answer.contains("WebSocket"), "{answer}");

    let output = env.command().args(["serve", "--listen", "0.0.0.0:0"]).output().await.unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a loopback address") && stderr.contains("127.0.0.1"), "{stderr}");
}

/// A bare HTTP/1.1 GET, as a plain client sends one: the status line and the body.
async fn reqwest_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
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
async fn a_client_that_stops_reading_is_cut_off_and_does_not_slow_the_turn() {
    let env = TestEnv::new().await;
    // 48 MB of answer: far more than a stalled client may have queued (16 MiB) plus what the
    // sockets between hold.
    let answer = Long { chunks: 12_000, size: 4_000, thought_every: None };
    env.mock.push(Reply::long(answer));
    let server = Server::start(&env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let mut stalled = server.client().await;
    stalled.call("session/resume", open(&session, &env)).await;

    // The stalled client reads nothing from here on; the first reads everything.
    let prompt = first.prompt(&session, "Go").await;
    let (done, seen) = first.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(text_of(&updates(&seen, &session), "agent_message_chunk"), answer.text());

    // What the stalled client gets now is what was queued before it was cut off, then the end.
    let mut got = 0;
    let closed = loop {
        match stalled.next_frame().await {
            Some(Message::Text(text)) => got += text.len(),
            Some(Message::Close(frame)) => break frame,
            Some(_) => {}
            None => break None,
        }
    };
    assert!(got < answer.text().len(), "the stalled client was cut off before the end ({got} bytes)");
    if let Some(frame) = closed {
        assert_eq!(u16::from(frame.code), 1013, "{frame:?}");
        assert!(frame.reason.contains("behind"), "{frame:?}");
    }
    assert!(server.stderr().contains("fell too far behind"), "{}", server.stderr());
}

/// The official Python SDK's WebSocket client (`acp.ws`) drives a prompt with a permission
/// question through `cairn serve`, closes, then loads the session over a new connection.
#[tokio::test]
async fn the_python_sdks_websocket_client_drives_a_prompt_a_question_and_a_load() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("note.md");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "kept\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let server = Server::start(&env).await;
    let sdk = tokio::task::spawn_blocking(crate::support::python::acp_sdk)
        .await
        .unwrap_or_else(|err| std::panic::resume_unwind(err.into_panic()));
    let config = json!({"url": server.url, "workspace": env.cwd()});
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/ws_client.py");
    let mut command = crate::support::python::python(&sdk);
    command.arg(script).arg(config.to_string()).current_dir(env.workspace()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the Python client failed: {stderr}\ncairn serve:\n{}", server.stderr());
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
async fn a_silent_connection_is_closed_after_two_heartbeats_and_the_cap_answers_503() {
    let env = TestEnv::new().await;
    let server = Server::start_with(&env, &["--heartbeat", "1", "--max-connections", "1"]).await;
    let mut silent = server.client().await;
    // The cap: one connection is open, the next upgrade is refused with a reason.
    match server.try_connect().await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("--max-connections"), "{body}");
        }
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("a second connection was taken past --max-connections 1"),
    }
    // Not reading answers no ping: two heartbeats on, the server closes the connection.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(server.stderr().contains("answered no ping"), "{}", server.stderr());
    let closed = loop {
        match silent.next_frame().await {
            Some(Message::Close(frame)) => break frame,
            Some(_) => {}
            None => break None,
        }
    };
    if let Some(frame) = closed {
        assert_eq!(u16::from(frame.code), 1001, "{frame:?}");
    }
    // Its slot is free again.
    let mut next = server.client().await;
    assert!(next.call("session/list", json!({})).await["sessions"].is_array());
}

#[tokio::test]
async fn a_frame_over_the_limit_closes_the_connection_with_the_reason() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let mut client = server.client().await;
    let huge = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"{}\"}}", "a".repeat(64 * 1024 * 1024));
    // The server stops reading at the frame's header: the rest of the frame may meet a closed
    // socket (a reset), so the close frame reaches the client only when the frame was sent whole.
    if client.try_send_frame(Message::Text(huge.into())).await.is_ok() {
        let closed = loop {
            match client.next_frame().await {
                Some(Message::Close(frame)) => break frame,
                Some(_) => {}
                None => break None,
            }
        };
        if let Some(frame) = closed {
            assert_eq!(u16::from(frame.code), 1009, "{frame:?}");
            assert!(frame.reason.contains("64 MiB"), "{frame:?}");
        }
    }
    for _ in 0..200 {
        if server.stderr().contains("a frame was over 64 MiB") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(server.stderr().contains("a frame was over 64 MiB"), "{}", server.stderr());
    // The server goes on.
    let mut other = server.client().await;
    assert!(other.call("session/list", json!({})).await["sessions"].is_array());
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
async fn a_web_page_cannot_open_a_connection() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    // What a browser sends for a page's `new WebSocket("ws://127.0.0.1:…/acp")`.
    let mut request = server.url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("origin", "https://attacker.example".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("web pages"), "{body}");
        }
        Err(other) => panic!("refused otherwise: {other}"),
        Ok(_) => panic!("a connection with an Origin header was taken"),
    }
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

    let mut next = server.client().await;
    let resumed = next.call("_cairn/stream/resume", json!({"sessionId": session, "afterSeq": last})).await;
    assert!(resumed["lastSeq"].as_u64().unwrap() >= last, "{resumed}");
    let mut after = Vec::new();
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

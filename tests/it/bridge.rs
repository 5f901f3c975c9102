//! `cairn acp --server ADDR`: what an editor spawns to reach a running `cairn serve`. The
//! sessions live in the server, so an editor that crashes or quits mid-turn only detaches: the
//! turn goes on, and the editor's next start loads all of it. With no server there, cairn says so
//! and serves the editor itself.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::served::Server;
use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates};

async fn bridge(env: &TestEnv, server: &str) -> Agent {
    started(env, &["acp", "--server", server]).await
}

/// `cairn ARGS…` as an editor starts it, initialized.
async fn started(env: &TestEnv, args: &[&str]) -> Agent {
    let mut command = env.command();
    command.args(args);
    let mut agent = Agent::spawn(command, Editor::default()).await;
    agent.initialize().await;
    agent
}

fn open(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
}

/// Waits (up to ten seconds) until `session`, the only one, is idle, then loads it: what the
/// load replayed.
async fn load_once_idle(agent: &mut Agent, session: &str, env: &TestEnv) -> Vec<Value> {
    for _ in 0..400 {
        let listed = agent.call("session/list", json!({})).await;
        if listed["sessions"][0]["_meta"]["cairn"]["status"] == "idle" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let id = agent.request("session/load", open(session, env)).await;
    let (loaded, during) = agent.response(id).await;
    assert!(loaded["result"].is_object(), "{loaded}");
    during
}

#[tokio::test]
async fn an_editor_killed_mid_turn_only_detaches_and_its_next_start_loads_the_whole_turn() {
    let env = TestEnv::new().await;
    let pieces: Vec<String> = (0..40).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(15)));
    let socket = env.dir.path().join("serve.sock");
    let socket = socket.to_str().unwrap();
    let server = Server::start_on(&env, socket, &[]).await;
    let mode = std::fs::metadata(socket).map(|meta| std::os::unix::fs::PermissionsExt::mode(&meta.permissions()));
    assert_eq!(mode.unwrap() & 0o777, 0o600, "the socket is the user's alone");

    let mut editor = bridge(&env, socket).await;
    let session = editor.new_session(&env.cwd()).await;
    editor.prompt(&session, "Count").await;
    assert!(editor.next_chunk().await.starts_with('<'));
    editor.kill9().await;

    // The editor starts again: the turn went on without it.
    let mut again = bridge(&env, socket).await;
    let during = load_once_idle(&mut again, &session, &env).await;
    assert_eq!(text_of(&updates(&during, &session), "agent_message_chunk"), pieces.concat());
    assert!(!server.stderr().contains("ERROR"), "{}", server.stderr());
}

/// What an editor configured once gets: `[serve] url = "local"` makes the plain `cairn acp` it
/// launches a bridge to the server on the user's own socket (`cairn serve --listen local`, in
/// the runtime directory), so a crash mid-turn only detaches, as with `--server`.
#[tokio::test]
async fn serve_url_in_the_config_makes_a_plain_cairn_acp_a_bridge_to_the_users_own_socket() {
    let mut env = TestEnv::new().await;
    let runtime = env.dir.path().join("run");
    std::fs::create_dir(&runtime).unwrap();
    env.set_env("XDG_RUNTIME_DIR", runtime.to_str().unwrap());
    env.write_config("[serve]\nurl = \"local\"\n");
    let pieces: Vec<String> = (0..30).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(15)));
    let server = Server::start_on(&env, "local", &[]).await;
    assert_eq!(server.url, runtime.join("cairn.sock").to_str().unwrap(), "{}", server.stderr());

    let mut editor = started(&env, &["acp"]).await;
    let session = editor.new_session(&env.cwd()).await;
    editor.prompt(&session, "Count").await;
    assert!(editor.next_chunk().await.starts_with('<'));
    editor.kill9().await;
    // `--server` with no address is the same socket.
    let mut again = started(&env, &["acp", "--server"]).await;
    let during = load_once_idle(&mut again, &session, &env).await;
    assert_eq!(text_of(&updates(&during, &session), "agent_message_chunk"), pieces.concat(), "the turn went on");
    assert!(!again.stderr().contains("no server answers"), "{}", again.stderr());
}

#[tokio::test]
async fn an_editor_closing_stdin_gets_its_last_answers_then_the_bridge_ends() {
    let env = TestEnv::new().await;
    let socket = env.dir.path().join("serve.sock");
    let socket = socket.to_str().unwrap();
    let _server = Server::start_on(&env, socket, &[]).await;
    let mut editor = bridge(&env, socket).await;
    let listing = editor.request("session/list", json!({})).await;
    editor.close_stdin();
    let (answer, _) = editor.response(listing).await;
    assert!(answer["result"]["sessions"].is_array(), "{answer}");
    let (status, _) = editor.wait_exit().await;
    assert!(status.success(), "{status:?}: {}", editor.stderr());
}

#[tokio::test]
async fn with_no_server_there_the_editor_is_told_and_served_here() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["here"]));
    let missing = env.dir.path().join("no-server.sock");
    let mut editor = bridge(&env, missing.to_str().unwrap()).await;
    assert!(editor.stderr().contains("no server answers at"), "{}", editor.stderr());
    let session = editor.new_session(&env.cwd()).await;
    let prompt = editor.prompt(&session, "Hi").await;
    let (done, seen) = editor.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(text_of(&updates(&seen, &session), "agent_message_chunk"), "here");
}

#[tokio::test]
async fn a_line_over_the_limit_is_refused_by_the_bridge_and_the_next_goes_through() {
    let env = TestEnv::new().await;
    let socket = env.dir.path().join("serve.sock");
    let socket = socket.to_str().unwrap();
    let _server = Server::start_on(&env, socket, &[]).await;
    let mut editor = bridge(&env, socket).await;
    editor
        .send_raw(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"x\",\"params\":\"{}\"}}",
            "a".repeat(64 << 20)
        ))
        .await;
    let refusal = editor.recv().await;
    assert_eq!(refusal["error"]["code"], -32700, "{refusal}");
    assert!(refusal["error"]["message"].as_str().unwrap().contains("64 MiB"), "{refusal}");
    let listed = editor.call("session/list", json!({})).await;
    assert!(listed["sessions"].is_array(), "{listed}");
}

#[tokio::test]
async fn a_server_that_answers_nothing_is_given_up_and_the_editor_is_served_here() {
    let env = TestEnv::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Takes connections and never answers, as a stuck server or an impostor would.
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            kept.push(stream);
        }
    });
    let started = std::time::Instant::now();
    let editor = bridge(&env, &format!("ws://{address}/acp")).await;
    assert!(started.elapsed() < Duration::from_secs(9), "gave up within the connect timeout");
    assert!(editor.stderr().contains("no answer within"), "{}", editor.stderr());
    held.abort();
}

#[tokio::test]
async fn the_bridge_writes_one_line_per_frame_and_refuses_what_is_not_utf8() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let env = TestEnv::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // A server that answers every frame with a message holding line breaks between its tokens.
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
        while let Some(Ok(Message::Text(text))) = socket.next().await {
            let request: Value = serde_json::from_str(&text).unwrap();
            let answer = format!("{{\"jsonrpc\":\"2.0\",\n\"id\":{},\r\n\"result\":{{}}\n}}", request["id"]);
            socket.send(Message::Text(answer.into())).await.unwrap();
        }
    });
    let mut command = env.command();
    command.args(["acp", "--server", &format!("ws://{address}/acp")]);
    let mut editor = Agent::spawn(command, Editor::default()).await;
    editor.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":\"a\xffb\"}\n").await;
    let refused = editor.recv().await;
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    let id = editor.request("initialize", json!({"protocolVersion": 1})).await;
    // One line: the harness fails on any stdout line that is not JSON, as half a message is.
    let (answer, _) = editor.response(id).await;
    assert!(answer["result"].is_object(), "{answer}");
}

/// A server on another machine serves TLS: the bridge speaks `wss://`, checking the server's
/// certificate as cairn checks its model providers'; a certificate no trusted root signed ends
/// the bridge with the reason, rather than serving the editor here and splitting its sessions.
#[tokio::test]
async fn the_bridge_reaches_a_tls_server_over_wss_and_refuses_an_untrusted_one() {
    let mut env = TestEnv::new().await;
    let fixture = |name: &str| format!("{}/tests/it/fixtures/tls/{name}", env!("CARGO_MANIFEST_DIR"));
    let (cert, key) = (fixture("server.pem"), fixture("server.key"));
    let server = Server::start_with(&env, &["--tls-cert", &cert, "--tls-key", &key]).await;
    assert!(server.url.starts_with("wss://127.0.0.1:"), "{}", server.url);

    env.set_env("SSL_CERT_FILE", &fixture("ca.pem"));
    let mut editor = bridge(&env, &server.url).await;
    let session = editor.new_session(&env.cwd()).await;
    assert!(session.starts_with("ses_"), "{session}");
    assert!(!editor.stderr().contains("serving here"), "{}", editor.stderr());

    env.set_env("SSL_CERT_FILE", &fixture("other-ca.pem"));
    let mut command = env.command();
    command.args(["acp", "--server", &server.url]).stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(Duration::from_secs(20), command.output()).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("TLS handshake failed") && stderr.contains("SSL_CERT_FILE"), "{stderr}");
}

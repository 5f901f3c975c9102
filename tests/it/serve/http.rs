//! `cairn serve`'s Streamable HTTP profile, as the transport's RFD lays it out: `initialize` is
//! answered 200 with the connection's id, every other message 202, the answers and updates come
//! on the connection's and the sessions' event streams, and `DELETE` ends the connection while
//! its sessions go on. A stream that dropped reopens after the last event seen, on the same
//! connection or on a new one. Requests the profile does not take get its statuses.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{open, slow_answer};
use crate::support::mock_llm::Long;
use crate::support::served::{Client, Server};
use crate::support::streamable::{HttpClient, http_client, http_client_for, http_url, secret_headers};
use crate::support::{Reply, TestEnv, text_of, updates};

fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// The text of the message chunks among `events`, and the update numbers they carried.
fn chunks(events: &[(String, Value)]) -> (String, Vec<u64>) {
    let mut text = String::new();
    let mut seqs = Vec::new();
    for (_, message) in events {
        if message["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
            text.push_str(message["params"]["update"]["content"]["text"].as_str().unwrap());
        }
        if let Some(seq) = message["params"]["_meta"]["cairn"]["seq"].as_u64() {
            seqs.push(seq);
        }
    }
    (text, seqs)
}

#[tokio::test]
async fn a_prompt_over_http_streams_on_the_sessions_stream_and_is_answered_there() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hello", " over", " HTTP"]));
    let server = Server::start(&env).await;
    let url = http_url(&server.url);
    let (mut client, result) = HttpClient::initialize(&url).await;
    assert_eq!(result["protocolVersion"], 1, "{result}");
    assert!(client.connection.len() >= 32, "an unguessable connection id: {}", client.connection);

    let (mut connection, session, mut events) = client.new_session(&env.cwd()).await;
    let id = client.request("session/prompt", prompt(&session, "Hi"), Some(&session)).await;
    let (done, before) = events.response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let (text, seqs) = chunks(&before);
    assert_eq!(text, "Hello over HTTP");
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "numbered in order: {seqs:?}");
    // Every numbered update's event id is its session and number.
    for (event, message) in &before {
        if let Some(seq) = message["params"]["_meta"]["cairn"]["seq"].as_u64() {
            assert_eq!(event, &format!("{session}:{seq}"));
        }
    }
    // Nothing of the session went to the connection's stream.
    assert!(connection.is_quiet(Duration::from_millis(200)).await);
    assert_eq!(client.delete().await, StatusCode::ACCEPTED);
    let (status, body) =
        client.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}}), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.contains("initialize"), "{body}");
}

#[tokio::test]
async fn requests_the_profile_does_not_take_get_its_statuses_and_say_what_to_do() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let url = http_url(&server.url);
    let http = http_client_for(&url);
    let (client, _) = HttpClient::initialize(&url).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}});

    let status = |response: reqwest::Response| async move { (response.status(), response.text().await.unwrap()) };
    let plain = http.post(&url).header("content-type", "text/plain").body(list.to_string()).send().await.unwrap();
    let (code, body) = status(plain).await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    assert!(body.contains("application/json"), "{body}");

    let (code, body) = status(http.post(&url).json(&list).send().await.unwrap()).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "no connection id: {body}");
    assert!(body.contains("Acp-Connection-Id") && body.contains("initialize"), "{body}");

    let stranger = http.post(&url).header("acp-connection-id", "conn_nobody").json(&list).send().await.unwrap();
    let (code, body) = status(stranger).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{body}");

    let (code, body) = client.post(&json!([list]), None).await;
    assert_eq!(code, StatusCode::NOT_IMPLEMENTED, "a batch: {body}");
    let broken = http
        .post(&url)
        .header("acp-connection-id", &client.connection)
        .header("content-type", "application/json")
        .body("{\"jsonrpc\": ")
        .send()
        .await
        .unwrap();
    let (code, body) = status(broken).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("not JSON"), "{body}");

    let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "ses_x"}});
    let (code, body) = client.post(&cancel, None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "a session's method without its header: {body}");
    assert!(body.contains("Acp-Session-Id"), "{body}");
    let (code, body) = client.post(&cancel, Some("ses_y")).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "the header and the message disagree: {body}");
    let (code, body) = client.post(&cancel, Some("ses_x")).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "an unknown session: {body}");
    let (code, body) = client.try_open(Some("ses_x"), None).await.err().unwrap();
    assert_eq!(code, StatusCode::NOT_FOUND, "an unknown session's stream: {body}");

    let get = http.get(&url).header("acp-connection-id", &client.connection).send().await.unwrap();
    let (code, body) = status(get).await;
    assert_eq!(code, StatusCode::NOT_ACCEPTABLE, "{body}");
    assert!(body.contains("text/event-stream") && body.contains("websocket"), "{body}");
    let (code, body) = status(http.put(&url).send().await.unwrap()).await;
    assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    let page = http.post(&url).header("origin", "https://evil.example").json(&list).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::FORBIDDEN);
    let missing = http.delete(&url).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);

    let huge = format!("{{\"jsonrpc\": \"2.0\", \"method\": \"x\", \"params\": \"{}\"}}", "a".repeat(65 << 20));
    let (code, body) = status(
        http.post(&url)
            .header("acp-connection-id", &client.connection)
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // An id no answer could be routed back by; params naming a session twice.
    let (code, body) = client.post(&json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list"}), None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("string or a number"), "{body}");
    let twice = "{\"jsonrpc\": \"2.0\", \"method\": \"session/cancel\", \"params\": {\"sessionId\": \"ses_a\", \"sessionId\": \"ses_b\"}}";
    let sent = http
        .post(&url)
        .header("acp-connection-id", &client.connection)
        .header("acp-session-id", "ses_a")
        .header("content-type", "application/json")
        .body(twice)
        .send()
        .await
        .unwrap();
    let (code, body) = status(sent).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    // Without a connection, only a small initialize is read.
    let big = format!(
        "{{\"jsonrpc\": \"2.0\", \"id\": 0, \"method\": \"initialize\", \"params\": \"{}\"}}",
        "a".repeat(2 << 20)
    );
    let (code, body) =
        status(http.post(&url).header("content-type", "application/json").body(big).send().await.unwrap()).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    // An initialize the agent refuses opens no connection.
    let refused = http
        .post(&url)
        .json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::OK);
    assert!(!refused.headers().contains_key("acp-connection-id"));
    let answer: Value = refused.json().await.unwrap();
    assert!(answer["error"].is_object(), "{answer}");

    // After all that, the connection serves as before.
    let (code, body) = client.post(&list, None).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
}

#[tokio::test]
async fn the_profile_is_served_over_http2_as_the_rfd_requires() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["two"]));
    let server = Server::start(&env).await;
    let url = http_url(&server.url);
    let http2 =
        reqwest::Client::builder().http2_prior_knowledge().default_headers(secret_headers(&url)).build().unwrap();
    let probe = http2.get(&url).send().await.unwrap();
    assert_eq!(probe.version(), reqwest::Version::HTTP_2);
    let (mut client, _) = HttpClient::initialize_with(&url, http2).await;
    let (_connection, session, mut events) = client.new_session(&env.cwd()).await;
    let id = client.request("session/prompt", prompt(&session, "Hi"), Some(&session)).await;
    let (done, before) = events.response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(chunks(&before).0, "two");
}

/// A server whose next answer is 48 MB (far more than a connection may have waiting, 16 MiB), a
/// WebSocket client with a session, and a Streamable HTTP connection that resumed it: the
/// server, the first client, the session, the second connection and the answer.
async fn stalled_beside_a_long_turn(env: &TestEnv) -> (Server, Client, String, HttpClient, Long) {
    let answer = Long { chunks: 12_000, size: 4_000, thought_every: None };
    env.mock.push(Reply::long(answer));
    let server = Server::start(env).await;
    let mut first = server.client().await;
    let session = first.new_session(&env.cwd()).await;
    let (mut stalled, _) = HttpClient::initialize(&http_url(&server.url)).await;
    stalled.request("session/resume", open(&session, env), None).await;
    (server, first, session, stalled, answer)
}

#[tokio::test]
async fn a_connection_that_reads_nothing_is_cut_off_and_does_not_slow_the_turn() {
    let env = TestEnv::new().await;
    let (server, mut first, session, stalled, answer) = stalled_beside_a_long_turn(&env).await;
    let prompt = first.prompt(&session, "Go").await;
    let (done, seen) = first.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(text_of(&updates(&seen, &session), "agent_message_chunk"), answer.text());
    let (code, body) =
        stalled.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "the stalled connection was ended: {body}");
    assert!(server.stderr().contains("behind"), "{}", server.stderr());
}

/// A client that reopens its event stream again and again, reading none of them, still has
/// everything it holds counted: what the old streams hold goes with them, and the rest waits
/// in the server, where the budget ends the connection.
#[tokio::test]
async fn event_streams_reopened_and_never_read_are_cut_off_with_their_connection() {
    let env = TestEnv::new().await;
    let (server, mut first, session, stalled, answer) = stalled_beside_a_long_turn(&env).await;
    let mut held = vec![stalled.open(Some(&session)).await];

    let prompt = first.prompt(&session, "Go").await;
    let mut seen = Vec::new();
    let done = loop {
        let message = first.recv().await;
        if message.get("method").is_none() && message["id"] == prompt {
            break message;
        }
        seen.push(message);
        if seen.len() % 2_000 == 0 {
            match stalled.try_open(Some(&session), None).await {
                Ok(events) => held.push(events),
                Err((code, _)) => assert_eq!(code, StatusCode::NOT_FOUND, "cut off"),
            }
        }
    };
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(text_of(&updates(&seen, &session), "agent_message_chunk"), answer.text());
    let (code, body) =
        stalled.post(&json!({"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}}), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "the connection was ended: {body}");
    assert!(server.stderr().contains("behind"), "{}", server.stderr());
    drop(held);
}

#[tokio::test]
async fn an_idle_connection_ends_and_http_connections_count_against_the_cap() {
    let env = TestEnv::new().await;
    let server = Server::start_with(&env, &["--heartbeat", "1", "--max-connections", "1"]).await;
    let url = http_url(&server.url);
    let (idle, _) = HttpClient::initialize(&url).await;
    let message = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}});
    let refused = http_client_for(&url).post(&url).json(&message).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.text().await.unwrap().contains("--max-connections"));
    // Nothing read or posted for three heartbeats: the connection ends, its slot is free.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    let (code, _) = idle.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}), None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (next, _) = HttpClient::initialize(&url).await;
    assert_eq!(next.delete().await, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_dropped_event_stream_reopens_after_the_last_event_seen_each_event_once() {
    let env = TestEnv::new().await;
    let (reply, answer) = slow_answer(40, Duration::from_millis(15));
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let (mut client, _) = HttpClient::initialize(&http_url(&server.url)).await;
    let (_connection, session, mut events) = client.new_session(&env.cwd()).await;
    let id = client.request("session/prompt", prompt(&session, "Count"), Some(&session)).await;

    let mut seen = Vec::new();
    while chunks(&seen).0.len() < 12 {
        seen.push(events.recv().await);
    }
    let last = events.last_id.clone().unwrap();
    drop(events);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut again = client.try_open(Some(&session), Some(&last)).await.unwrap();
    let (done, rest) = again.response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    seen.extend(rest);
    let (text, seqs) = chunks(&seen);
    assert_eq!(text, answer, "every piece once, in order");
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "{seqs:?}");

    let (code, body) = client.try_open(Some(&session), Some("something else")).await.err().unwrap();
    assert_eq!(code, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("session/load"), "{body}");
}

#[tokio::test]
async fn a_new_connection_resumes_a_session_after_the_last_update_number_its_client_saw() {
    let env = TestEnv::new().await;
    let (reply, answer) = slow_answer(40, Duration::from_millis(15));
    env.mock.push(reply);
    let server = Server::start(&env).await;
    let url = http_url(&server.url);
    let (mut first, _) = HttpClient::initialize(&url).await;
    let (_connection, session, mut events) = first.new_session(&env.cwd()).await;
    first.request("session/prompt", prompt(&session, "Count"), Some(&session)).await;
    let mut seen = Vec::new();
    while chunks(&seen).0.len() < 12 {
        seen.push(events.recv().await);
    }
    let last = events.last_id.clone().unwrap();
    // The client goes away; the turn goes on.
    assert_eq!(first.delete().await, StatusCode::ACCEPTED);

    let (next, _) = HttpClient::initialize(&url).await;
    let ahead = format!("{session}:1000000");
    let (code, body) = next.try_open(Some(&session), Some(&ahead)).await.err().unwrap();
    assert_eq!(code, StatusCode::CONFLICT, "a number the session never reached: {body}");
    let mut resumed = next.try_open(Some(&session), Some(&last)).await.unwrap();
    while chunks(&seen).0.len() < answer.len() {
        seen.push(resumed.recv().await);
    }
    let (text, seqs) = chunks(&seen);
    assert_eq!(text, answer, "exactly the missing pieces");
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "{seqs:?}");
}

#[tokio::test]
async fn a_permission_asked_on_the_sessions_stream_is_answered_by_a_post() {
    let env = TestEnv::new().await;
    let path = env.workspace().join("note.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let server = Server::start(&env).await;
    let (mut client, _) = HttpClient::initialize(&http_url(&server.url)).await;
    let (_connection, session, mut events) = client.new_session(&env.cwd()).await;
    let id = client.request("session/prompt", prompt(&session, "Write it"), Some(&session)).await;
    let asked = loop {
        let (_, message) = events.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}});
    let (code, body) = client.post(&answer, None).await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    let (done, _) = events.response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n");
}

#[tokio::test]
async fn over_tls_both_profiles_are_served_and_http2_is_negotiated() {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["secure"]));
    let fixture = |name: &str| format!("{}/tests/it/fixtures/tls/{name}", env!("CARGO_MANIFEST_DIR"));
    let (cert, key) = (fixture("server.pem"), fixture("server.key"));
    let server = Server::start_with(&env, &["--tls-cert", &cert, "--tls-key", &key]).await;
    assert!(server.url.starts_with("wss://"), "{}", server.url);
    let url = server.url.replace("wss://", "https://");

    let ca = std::fs::read(fixture("ca.pem")).unwrap();
    let _ = http_client(); // installs the crypto provider
    let https = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(&ca).unwrap()])
        .default_headers(secret_headers(&url))
        .build()
        .unwrap();
    let (mut client, _) = HttpClient::initialize_with(&url, https.clone()).await;
    let (_connection, session, mut events) = client.new_session(&env.cwd()).await;
    let id = client.request("session/prompt", prompt(&session, "Hi"), Some(&session)).await;
    let (done, before) = events.response(id).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(chunks(&before).0, "secure");
    let probe = https.get(&url).send().await.unwrap();
    assert_eq!(probe.version(), reqwest::Version::HTTP_2, "ALPN picks HTTP/2");

    // The WebSocket upgrades over the same TLS (HTTP/1.1 by ALPN).
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(&ca).unwrap()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let address = server.url.trim_start_matches("wss://").trim_end_matches("/acp").to_owned();
    let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, tcp).await.unwrap();
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(&server.url).unwrap();
    request.headers_mut().extend(secret_headers(&server.url));
    let (mut socket, response) = tokio_tungstenite::client_async(request, tls).await.unwrap();
    assert!(response.headers().contains_key("acp-connection-id"));
    use futures::{SinkExt, StreamExt};
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}});
    socket.send(tokio_tungstenite::tungstenite::Message::Text(list.to_string().into())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.unwrap().unwrap().unwrap();
    assert!(answer.to_text().unwrap().contains("protocolVersion"), "{answer}");

    // A plain client gets no answer it could mistake for one.
    assert!(http_client().get(http_url(&url.replace("https://", "ws://"))).send().await.is_err());
}

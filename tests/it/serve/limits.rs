//! `cairn serve` against clients that misbehave or hostile ones: what a frame may be, what a
//! client may leave unread, how long a request may take to arrive, how many connections may
//! wait, who may connect at all (no web page), and whose socket a server removes.

use std::time::Duration;

use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::open;
use crate::support::mock_llm::Long;
use crate::support::served::Server;
use crate::support::{Reply, TestEnv, text_of, updates};

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
async fn a_plain_get_is_told_what_to_ask_for_and_a_non_loopback_address_is_refused() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let http = server.url.replace("ws://", "http://");
    let answer = reqwest_get(&http).await;
    assert!(answer.starts_with("HTTP/1.1 406"), "{answer}");
    assert!(answer.contains("Upgrade: websocket") && answer.contains("text/event-stream"), "{answer}");
    let elsewhere = reqwest_get(&http.replace("/acp", "/other")).await;
    assert!(elsewhere.starts_with("HTTP/1.1 404") && elsewhere.contains("/acp only"), "{elsewhere}");

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
    let secret = crate::support::served::secret_for(url).unwrap();
    let request =
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {secret}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
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
    let sent = tokio::time::timeout(Duration::from_secs(10), client.try_send_frame(Message::Text(huge.into()))).await;
    if matches!(sent, Ok(Ok(()))) {
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
    server.until_said("a frame was over 64 MiB").await;
    // The server goes on.
    let mut other = server.client().await;
    assert!(other.call("session/list", json!({})).await["sessions"].is_array());
}

#[tokio::test]
async fn a_web_page_cannot_open_a_connection() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    // What a browser sends for a page's `new WebSocket("ws://127.0.0.1:…/acp")`.
    let mut request = server.url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("origin", "https://attacker.example".parse().unwrap());
    // Even one that somehow holds the server's secret.
    let secret = crate::support::served::secret_for(&server.url).unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {secret}").parse().unwrap());
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
async fn a_flood_of_binary_frames_is_told_once_and_queues_nothing() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let mut client = server.client().await;
    for _ in 0..5_000 {
        client.send_frame(Message::Binary(Vec::new().into())).await;
    }
    let id = client.request("session/list", json!({})).await;
    let (answer, before) = client.response(id).await;
    assert!(answer["result"]["sessions"].is_array(), "{answer}");
    let refusals = before.iter().filter(|message| message["error"]["code"] == -32600).count();
    assert_eq!(refusals, 1, "one refusal for 5,000 binary frames");
}

#[tokio::test]
async fn a_client_that_sends_requests_and_reads_nothing_is_cut_off() {
    let env = TestEnv::new().await;
    let server = Server::start(&env).await;
    let pid = server.child.id().unwrap();
    let mut client = crate::support::served::connect_narrow(&server.url).await;
    // Answers of about 600 bytes, asked for until the server cuts the client off (past the
    // 16 MiB it may fall behind and what the sockets between hold), for at most 30 s. The kernel
    // may stop taking the client's frames first (a socket's buffers are the kernel's to size):
    // then the server is sent nothing more, and what it holds must still be bounded.
    let request =
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).to_string();
    let started = std::time::Instant::now();
    let mut stuck = false;
    'flood: while !server.stderr().contains("fell too far behind") && started.elapsed() < Duration::from_secs(30) {
        for _ in 0..1_000 {
            let frame = Message::Text(request.clone().into());
            match tokio::time::timeout(Duration::from_secs(2), client.try_send_frame(frame)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break 'flood,
                Err(_) => {
                    stuck = true;
                    break 'flood;
                }
            }
        }
    }
    let rss_kib = crate::support::status_kib(pid, "VmRSS:").expect("the server's RSS");
    if stuck {
        assert!(rss_kib < 200 * 1024, "the server holds {rss_kib} KiB for a client it cannot send to");
    } else {
        server.until_said("fell too far behind").await;
    }
    let mut other = server.client().await;
    assert!(other.call("session/list", json!({})).await["sessions"].is_array());
}

#[tokio::test]
async fn half_requests_and_quiet_http2_sockets_are_closed_and_http_sockets_are_capped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = TestEnv::new().await;
    let server = Server::start_with(&env, &["--max-connections", "1"]).await;
    let address = server.url.trim_start_matches("ws://").trim_end_matches("/acp").to_owned();
    // With one connection allowed, four sockets may be served over HTTP (a Streamable HTTP
    // client's POSTs and its streams); with all four held, by half requests and by HTTP/2
    // sockets that open no stream, the next is 503.
    let mut held = Vec::new();
    for i in 0..4 {
        let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
        if i % 2 == 0 {
            slow.write_all(b"GET /acp HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        } else {
            // HTTP/2's preface and an empty SETTINGS frame, then nothing.
            slow.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
        }
        held.push(slow);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut next = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), next.read_to_string(&mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // The half requests are dropped once their headers are late (10 s), the quiet HTTP/2
    // sockets once they have been idle as long.
    for mut slow in held {
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(15), slow.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "a quiet socket was still open after 15 s");
    }
    let mut client = server.client().await;
    assert!(client.call("session/list", json!({})).await["sessions"].is_array());
}

#[tokio::test]
async fn a_server_leaves_a_socket_it_did_not_bind_where_it_is() {
    let env = TestEnv::new().await;
    let socket = env.dir.path().join("serve.sock");
    let socket = socket.to_str().unwrap();
    let mut first = Server::start_on(&env, socket, &[]).await;
    std::fs::remove_file(socket).unwrap();
    let _second = Server::start_on(&env, socket, &[]).await;
    assert!(first.terminate().await.success());
    assert!(std::path::Path::new(socket).exists(), "the second server's socket stays");
}

#[tokio::test]
async fn pings_between_the_pieces_of_a_long_line_never_cut_it() {
    let env = TestEnv::new().await;
    // Updates larger than the pipe between the peer and the socket (64 KiB), over several
    // heartbeats: a ping sent while one is half read must not lose the half.
    let pieces: Vec<String> = (0..40).map(|i| format!("<{i}>{}", ".".repeat(100_000))).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(100)));
    let server = Server::start_with(&env, &["--heartbeat", "1"]).await;
    let mut client = server.client().await;
    let session = client.new_session(&env.cwd()).await;
    let prompt = client.prompt(&session, "Go").await;
    // Every frame must be one whole JSON message (the client fails on any that is not).
    let (done, seen) = client.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(text_of(&updates(&seen, &session), "agent_message_chunk"), pieces.concat());
}

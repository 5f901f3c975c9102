//! The warm-up against a plain HTTP/1.1 server that counts its connections: a request sent
//! while a connection is opened ahead waits for it, and one URL is warmed once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::config::{Api, ProviderConfig};
use crate::llm::sse::{Auth, Endpoint};
use crate::llm::{ModelRequest, Provider, StreamEvent, openai_chat};

/// A model server over plain HTTP/1.1 that counts the connections it accepts. It answers `HEAD`
/// with 405 after `head_delay` (a warm-up still under way meanwhile) and `POST` with a short
/// chat stream, keeping each connection open for the next request.
struct Server {
    url: String,
    connections: Arc<AtomicUsize>,
    /// How many connections the server had accepted when it answered the first `HEAD`.
    at_head: Arc<AtomicUsize>,
}

impl Server {
    async fn start(head_delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        // A path of its own: warm-ups are remembered per URL for the whole process, and another
        // test's server may have had this port a moment ago.
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let url =
            format!("http://{}/warm{}/v1", listener.local_addr().unwrap(), SERVERS.fetch_add(1, Ordering::SeqCst));
        let connections = Arc::new(AtomicUsize::new(0));
        let at_head = Arc::new(AtomicUsize::new(0));
        let (counted, seen) = (Arc::clone(&connections), Arc::clone(&at_head));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(socket, head_delay, Arc::clone(&counted), Arc::clone(&seen)));
            }
        });
        Self { url, connections, at_head }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn serve(
    socket: tokio::net::TcpStream,
    head_delay: Duration,
    connections: Arc<AtomicUsize>,
    at_head: Arc<AtomicUsize>,
) {
    let (read, mut write) = socket.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push(line.to_ascii_lowercase());
        }
        let length = head
            .iter()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        let mut body = vec![0; length];
        read.read_exact(&mut body).await.unwrap();
        let answer = if head[0].starts_with("head ") {
            tokio::time::sleep(head_delay).await;
            let _ = at_head.compare_exchange(0, connections.load(Ordering::SeqCst), Ordering::SeqCst, Ordering::SeqCst);
            "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n".to_owned()
        } else {
            let chunk = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
            let end = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
            let stream = format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n");
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{stream}",
                stream.len()
            )
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn endpoint(url: &str) -> Endpoint<openai_chat::Decoder> {
    let config = ProviderConfig {
        api: Api::OpenaiChat,
        base_url: url.to_owned(),
        api_key_env: None,
        api_key: None,
        models: Vec::new(),
        discover_models: false,
        prompt_cache_key: false,
    };
    Endpoint::new(&config, "chat/completions", Auth::Bearer, openai_chat::encode)
}

async fn ask(endpoint: &Endpoint<openai_chat::Decoder>) -> Vec<StreamEvent> {
    let request = ModelRequest::plain("m", Vec::new(), false);
    let events = endpoint.stream(&request).await.unwrap();
    events.map(Result::unwrap).collect().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_while_a_connection_is_opened_ahead_waits_for_it_instead_of_racing_it() {
    let server = Server::start(Duration::from_millis(100)).await;
    let endpoint = Arc::new(endpoint(&server.url));
    let warming = tokio::spawn({
        let endpoint = Arc::clone(&endpoint);
        async move { endpoint.warm().await }
    });
    // The warm-up's connection is open and its answer still to come: the prompt arrives now.
    while server.connections() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let events = ask(&endpoint).await;
    assert_eq!(events.first(), Some(&StreamEvent::TextDelta("Hi".into())));
    warming.await.unwrap();
    assert_eq!(
        server.at_head.load(Ordering::SeqCst),
        1,
        "no second connection was opened while the warm-up's was still busy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_is_warmed_once_for_many_sessions_and_later_requests_reuse_it() {
    let server = Server::start(Duration::ZERO).await;
    let endpoint = endpoint(&server.url);
    endpoint.warm().await;
    endpoint.warm().await;
    assert_eq!(server.connections(), 1, "the second session's warm-up opened nothing");
    for _ in 0..2 {
        // Time for the connection of the answer before to be back in the pool.
        tokio::time::sleep(Duration::from_millis(50)).await;
        ask(&endpoint).await;
    }
    assert_eq!(server.connections(), 1, "every request after the warm-up went over its connection");
}

//! A streamable HTTP server's transport, over cairn's reqwest, with the configured headers,
//! which follows redirects only within the configured origin. The header checks are shared
//! with `config`, which runs them when `config.toml` is read.
//!
//! One task owns the HTTP session: every message is POSTed (`Accept: application/json,
//! text/event-stream`), a request's answer read from a JSON body or an event stream (`reply.rs`)
//! that may carry the server's own requests and notifications first. `initialize` is POSTed by
//! the task itself: its `Mcp-Session-Id` (visible ASCII only, else the start fails: a header
//! cairn cannot send back as it came is never sent) and the protocol version the server chose
//! go with every later message; after `notifications/initialized` the task listens on a GET
//! event stream when the server offers one (405: none). A 404 to a message of the session
//! means it expired: the task starts a new one with the same `initialize` and sends the message
//! again, once. At the end the session is DELETEd. Bodies and events are read up to
//! [`MAX_MESSAGE`] bytes; what a notification's POST answers is not read at all. At most
//! [`MAX_ANSWERS`] answers to the server's own requests are POSTed at once (a server asking
//! without end gets no more connections than that); an answer past them is dropped.

mod reply;

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::rpc::{INBOUND, Inbound, Kind, Link, OUTBOUND, Outgoing};
use reply::{Exchange, Posted};

/// Headers the transport sets itself; a configured one would clash.
const RESERVED: [&str; 4] = ["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];
/// The largest JSON body or event read as one message.
pub(super) const MAX_MESSAGE: usize = 16 << 20;
/// The longest session id kept.
const MAX_SESSION_ID: usize = 1024;
/// How long the DELETE that ends a session may take.
const DELETE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long starting a new session after one expired may take.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a notification's POST may take.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(30);
/// At most this many answers to the server's own requests are being POSTed at once; past that
/// an answer is dropped (the server is asking faster than it takes answers).
const MAX_ANSWERS: usize = 16;

/// The transport to `url`; the error names what is wrong with the settings.
pub(super) fn link(server: &str, url: &str, headers: &[(String, String)]) -> Result<Link, String> {
    check_url(url)?;
    let mut configured = HeaderMap::new();
    for (name, value) in headers {
        let (name, value) = header(name, value)?;
        configured.insert(name, value);
    }
    let client = crate::net::client_builder()
        .redirect(reqwest::redirect::Policy::custom(same_origin))
        .build()
        .map_err(|err| format!("cannot build an HTTP client: {err}"))?;
    let (outbound, to_send) = mpsc::channel(OUTBOUND);
    let (received, inbound) = mpsc::channel(INBOUND);
    let (expired_tx, expired) = mpsc::channel(OUTBOUND);
    let exchange = Exchange { server: server.to_owned(), client, url: url.to_owned(), received };
    let session = Session { configured, id: None, version: None, generation: 0, initialize: None, listening: None };
    let ended = CancellationToken::new();
    let answering = Arc::new(Semaphore::new(MAX_ANSWERS));
    let transport = Transport { exchange, session, expired_tx, ended, answering };
    tokio::spawn(transport.run(to_send, expired));
    Ok(Link { outbound, inbound })
}

/// A message sent on a session that expired.
struct Expired {
    generation: u64,
    outgoing: Outgoing,
}

/// The HTTP session and what every message carries.
struct Session {
    configured: HeaderMap,
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// Counts the sessions started.
    generation: u64,
    /// The `initialize` request as first sent, to start a new session with.
    initialize: Option<String>,
    /// Ends the GET stream of the session.
    listening: Option<CancellationToken>,
}

impl Session {
    fn headers(&self) -> HeaderMap {
        let mut headers = self.configured.clone();
        headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(id) = &self.id {
            headers.insert("mcp-session-id", id.clone());
        }
        if let Some(version) = &self.version {
            headers.insert("mcp-protocol-version", version.clone());
        }
        headers
    }
}

struct Transport {
    exchange: Exchange,
    session: Session,
    expired_tx: mpsc::Sender<Expired>,
    /// Ends every task of the transport.
    ended: CancellationToken,
    /// Bounds the answers to the server's requests being POSTed.
    answering: Arc<Semaphore>,
}

impl Transport {
    async fn run(mut self, mut to_send: mpsc::Receiver<Outgoing>, mut expired: mpsc::Receiver<Expired>) {
        let _end_tasks = self.ended.clone().drop_guard();
        loop {
            tokio::select! {
                biased;
                Some(expired) = expired.recv() => self.expired(expired).await,
                outgoing = to_send.recv() => match outgoing {
                    Some(outgoing) => self.send(outgoing).await,
                    None => break,
                },
            }
        }
        self.ended.cancel();
        if self.session.id.is_some() {
            let mut headers = self.session.headers();
            headers.remove(reqwest::header::CONTENT_TYPE);
            let request = self.exchange.client.delete(&self.exchange.url).headers(headers);
            if let Err(err) = request.timeout(DELETE_TIMEOUT).send().await {
                tracing::debug!(server = %self.exchange.server, %err, "ending the HTTP session failed");
            }
        }
    }

    async fn send(&mut self, outgoing: Outgoing) {
        match &outgoing.kind {
            Kind::Request { id, method, settled } if method == "initialize" => {
                let (id, settled) = (*id, settled.clone());
                self.session.initialize = Some(outgoing.text.clone());
                // A start given up (or the connection's end) gives this up too.
                let answer = tokio::select! {
                    () = settled.cancelled() => return,
                    opened = self.open(&outgoing.text, id) => match opened {
                        Ok(answer) => Inbound::Message(answer),
                        Err(why) => Inbound::Failed { id, why },
                    },
                };
                let _ = self.exchange.received.send(answer).await;
            }
            Kind::Notification { method, .. } if method == "notifications/initialized" => {
                let Outgoing { text, kind } = outgoing;
                let delivered = self.exchange.notify(&text, self.session.headers()).await;
                if delivered.is_ok() {
                    self.listen();
                }
                if let Kind::Notification { delivered: Some(tell), .. } = kind {
                    let _ = tell.send(delivered);
                }
            }
            _ => self.post(outgoing, false),
        }
    }

    /// POSTs `outgoing` on a task of its own.
    fn post(&self, outgoing: Outgoing, retried: bool) {
        let exchange = self.exchange.clone();
        let (headers, generation, has_session) =
            (self.session.headers(), self.session.generation, self.session.id.is_some());
        let expired_tx = self.expired_tx.clone();
        let ended = self.ended.clone();
        let permit = match outgoing.kind {
            Kind::Response => match self.answering.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    tracing::debug!(server = %self.exchange.server, "{MAX_ANSWERS} answers to the server are being sent; one more dropped");
                    return;
                }
            },
            Kind::Request { .. } | Kind::Notification { .. } => None,
        };
        tokio::spawn(async move {
            let _permit = permit;
            let Outgoing { text, kind } = outgoing;
            let settled = match &kind {
                Kind::Request { settled, .. } => settled.clone(),
                Kind::Notification { .. } | Kind::Response => CancellationToken::new(),
            };
            let posted = tokio::select! {
                () = ended.cancelled() => return,
                () = settled.cancelled() => return,
                posted = exchange.post(&text, &kind, headers, has_session) => posted,
            };
            match (posted, kind) {
                (Posted::Expired, kind @ Kind::Request { .. }) if !retried => {
                    let expired = Expired { generation, outgoing: Outgoing { text, kind } };
                    let _ = expired_tx.send(expired).await;
                }
                (Posted::Expired, Kind::Request { id, .. }) => {
                    let why = "HTTP 404 Not Found: the server's session expired again".to_owned();
                    let _ = exchange.received.send(Inbound::Failed { id, why }).await;
                }
                (Posted::Failed(why), Kind::Request { id, .. }) => {
                    let _ = exchange.received.send(Inbound::Failed { id, why }).await;
                }
                (Posted::Failed(why), Kind::Notification { delivered: Some(tell), .. }) => {
                    let _ = tell.send(Err(why));
                }
                (Posted::Done | Posted::Expired, Kind::Notification { delivered: Some(tell), .. }) => {
                    let _ = tell.send(Ok(()));
                }
                (_, Kind::Request { .. } | Kind::Notification { .. } | Kind::Response) => {}
            }
        });
    }

    /// A message met an expired session: a new session is started (unless another message
    /// already did) and the message sent again.
    async fn expired(&mut self, expired: Expired) {
        let Expired { generation, outgoing } = expired;
        if generation == self.session.generation {
            tracing::info!(server = %self.exchange.server, "the HTTP session expired; starting a new one");
            let restarted = tokio::time::timeout(RESTART_TIMEOUT, self.restart()).await;
            let why = match restarted {
                Ok(Ok(())) => None,
                Ok(Err(why)) => Some(why),
                Err(_) => Some(format!("it did not answer within {} s", RESTART_TIMEOUT.as_secs())),
            };
            if let Some(why) = why {
                if let Kind::Request { id, .. } = outgoing.kind {
                    let why = format!("HTTP 404 Not Found: the server's session expired and a new one failed: {why}");
                    let _ = self.exchange.received.send(Inbound::Failed { id, why }).await;
                }
                return;
            }
        }
        self.post(outgoing, true);
    }

    /// Starts a new session with the first `initialize`.
    async fn restart(&mut self) -> Result<(), String> {
        let Some(initialize) = self.session.initialize.clone() else {
            return Err("no session was started".to_owned());
        };
        let id = serde_json::from_str::<Value>(&initialize)
            .ok()
            .and_then(|request| request.get("id").and_then(Value::as_u64))
            .unwrap_or_default();
        let answer = self.open(&initialize, id).await?;
        if let Some(error) = answer.get("error") {
            return Err(format!("it refused `initialize`: {error}"));
        }
        let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.exchange.notify(&initialized.to_string(), self.session.headers()).await?;
        self.listen();
        Ok(())
    }

    /// POSTs `initialize` (`text`, request `id`) without a session and keeps the session it
    /// starts; returns the answer.
    async fn open(&mut self, text: &str, id: u64) -> Result<Value, String> {
        if let Some(listening) = self.session.listening.take() {
            listening.cancel();
        }
        self.session.id = None;
        self.session.version = None;
        self.session.generation += 1;
        let response = self.exchange.start(text, self.session.headers()).await?;
        let session_id = match response.headers().get("mcp-session-id") {
            Some(value) => Some(session_id(value)?),
            None => None,
        };
        let answer = self.exchange.answer(response, id, self.session.headers()).await?;
        let version = answer.pointer("/result/protocolVersion").and_then(Value::as_str);
        self.session.version = version.and_then(|version| HeaderValue::from_str(version).ok());
        self.session.id = session_id;
        Ok(answer)
    }

    /// Listens on the session's GET stream, if the server offers one.
    fn listen(&mut self) {
        let stop = self.ended.child_token();
        self.session.listening = Some(stop.clone());
        let (exchange, headers) = (self.exchange.clone(), self.session.headers());
        tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = exchange.listen(headers) => {}
            }
        });
    }
}

/// A session id as the server gave it, if cairn may send it back: visible ASCII, bounded.
fn session_id(value: &HeaderValue) -> Result<HeaderValue, String> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_SESSION_ID {
        return Err(format!("the server's session id (Mcp-Session-Id) is empty or longer than {MAX_SESSION_ID} bytes"));
    }
    if !bytes.iter().all(|byte| (0x21..=0x7e).contains(byte)) {
        return Err("the server's session id (Mcp-Session-Id) holds characters other than visible ASCII, which \
                    cairn does not send back"
            .to_owned());
    }
    Ok(value.clone())
}

/// At most this many redirects are followed.
const MAX_REDIRECTS: usize = 5;

/// Follows a redirect only within the configured URL's origin (scheme, host and port): the
/// configured headers (a token) never go to another server, nor from `https` to `http`.
fn same_origin(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first().map(reqwest::Url::origin);
    if first.is_some_and(|origin| origin != attempt.url().origin()) {
        let to = attempt.url().to_string();
        attempt.error(format!("it redirects to another server ({to}), which is not followed"))
    } else if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error(format!("it redirects more than {MAX_REDIRECTS} times"))
    } else {
        attempt.follow()
    }
}

/// Whether `url` is an `http` or `https` URL.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(()),
        other => Err(format!("`{url}` is not an http(s) URL (scheme `{other}`)")),
    }
}

/// A configured header, checked.
pub fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not a valid header name"))?;
    if RESERVED.contains(&parsed.as_str()) {
        return Err(format!("header `{name}` is set by the MCP transport itself"));
    }
    let value = HeaderValue::from_str(value)
        .map_err(|_| format!("the value of header `{name}` is not a valid header value"))?;
    Ok((parsed, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_headers_are_checked() {
        assert!(check_url("https://example.com/mcp").is_ok());
        assert!(check_url("ftp://example.com").unwrap_err().contains("scheme `ftp`"));
        assert!(check_url("example.com").is_err());
        assert!(header("Authorization", "Bearer x").is_ok());
        assert!(header("Mcp-Session-Id", "x").unwrap_err().contains("set by the MCP transport"));
        assert!(header("bad name", "x").is_err());
        assert!(header("X-Ok", "line\nbreak").is_err());
    }

    #[test]
    fn only_visible_ascii_session_ids_are_sent_back() {
        assert!(session_id(&HeaderValue::from_static("abc-123_XYZ.~")).is_ok());
        for bad in [&b"a b"[..], b"tab\there", b"caf\xc3\xa9", b""] {
            let value = HeaderValue::from_bytes(bad).unwrap();
            assert!(session_id(&value).is_err(), "{bad:?}");
        }
        let long = HeaderValue::from_str(&"x".repeat(MAX_SESSION_ID + 1)).unwrap();
        assert!(session_id(&long).unwrap_err().contains("longer than"));
    }
}

#[cfg(test)]
mod flood {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::{Method, StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use serde_json::json;

    use super::*;
    use crate::mcp::rpc;

    /// How many requests the server asks on the call's stream.
    const ASKED: usize = 200;

    /// A server that asks [`ASKED`] pings on a call's stream and never answers the POSTs that
    /// carry cairn's answers to them; counts those POSTs.
    async fn serve(answers: Arc<AtomicUsize>) -> String {
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::any(move |method: Method, body: axum::body::Bytes| {
                let answers = answers.clone();
                async move {
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let json = |value: Value| -> Response {
                        ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
                    };
                    match body["method"].as_str() {
                        _ if method == Method::GET => StatusCode::METHOD_NOT_ALLOWED.into_response(),
                        Some("initialize") => json(json!({"jsonrpc": "2.0", "id": body["id"], "result": {
                            "protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}})),
                        Some("tools/call") => {
                            let mut events: String = (0..ASKED)
                                .map(|at| format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": format!("s{at}"), "method": "ping"})))
                                .collect();
                            events.push_str(&format!("data: {}\n\n", json!({"jsonrpc": "2.0", "id": body["id"], "result": {}})));
                            ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
                        }
                        Some("tools/list") => json(json!({"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}})),
                        Some(_) => StatusCode::ACCEPTED.into_response(),
                        None => {
                            answers.fetch_add(1, Ordering::SeqCst);
                            std::future::pending::<()>().await;
                            StatusCode::ACCEPTED.into_response()
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{address}/mcp")
    }

    #[tokio::test]
    async fn a_server_flooding_requests_gets_at_most_a_bounded_number_of_answers_in_flight() {
        let answers = Arc::new(AtomicUsize::new(0));
        let url = serve(answers.clone()).await;
        let (changed, _changed) = mpsc::channel(1);
        let client = rpc::start("flood", link("flood", &url, &[]).unwrap(), changed, CancellationToken::new());
        client.request("initialize", json!({})).await.unwrap();
        client.notify("notifications/initialized", Value::Null).await.unwrap();
        client.request("tools/call", json!({})).await.unwrap();
        // Sent after every answer to the pings was handed to the transport.
        client.request("tools/list", json!({})).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while answers.load(Ordering::SeqCst) < MAX_ANSWERS && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Without the bound the other answers arrive too; give them the chance to show it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = answers.load(Ordering::SeqCst);
        assert!(seen <= MAX_ANSWERS, "{seen} answers were in flight at once");
    }
}

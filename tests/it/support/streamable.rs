//! A client of `cairn serve`'s Streamable HTTP profile, written from the transport's RFD: POST
//! a message, read the connection's and the sessions' event streams (SSE), DELETE at the end.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::PATIENCE;

/// One connection: its id and what it posts with.
pub struct HttpClient {
    pub url: String,
    pub http: reqwest::Client,
    pub connection: String,
    next_id: i64,
}

/// One open event stream.
pub struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<hyper::body::Bytes>>,
    buffer: String,
    /// The id of the last event read.
    pub last_id: Option<String>,
}

pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// A client that shows the secret of the server without `--auth` at `url`, if it knows one.
pub fn http_client_for(url: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().default_headers(secret_headers(url)).build().unwrap()
}

/// `Authorization: Bearer` with the secret of the server without `--auth` at `url`, if known.
pub fn secret_headers(url: &str) -> reqwest::header::HeaderMap {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(secret) = super::served::secret_for(url) {
        headers.insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    headers
}

/// `ws://HOST:PORT/acp` as `http://HOST:PORT/acp`.
pub fn http_url(ws: &str) -> String {
    ws.replace("ws://", "http://")
}

impl HttpClient {
    /// `POST initialize` at `url`: the client, and the result.
    pub async fn initialize(url: &str) -> (Self, Value) {
        Self::initialize_with(url, http_client_for(url)).await
    }

    /// [`Self::initialize`] through `http`.
    pub async fn initialize_with(url: &str, http: reqwest::Client) -> (Self, Value) {
        let message = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}});
        let response = http.post(url).json(&message).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "initialize");
        let connection = response.headers()["acp-connection-id"].to_str().unwrap().to_owned();
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["id"], 0, "{answer}");
        (Self { url: url.to_owned(), http, connection, next_id: 1 }, answer["result"].clone())
    }

    /// POSTs `message` (about `session` when given): the status and the body.
    pub async fn post(&self, message: &Value, session: Option<&str>) -> (StatusCode, String) {
        let request = || {
            let request = self.http.post(&self.url).header("acp-connection-id", &self.connection).json(message);
            match session {
                Some(session) => request.header("acp-session-id", session),
                None => request,
            }
        };
        // A server that cut this connection off closes its sockets too: a pooled one may be
        // taken for this request just as it closes. Once more, on a fresh socket.
        let response = match request().send().await {
            Ok(response) => response,
            Err(err) if err.is_request() || err.is_connect() => request().send().await.unwrap(),
            Err(err) => panic!("{err}"),
        };
        (response.status(), response.text().await.unwrap())
    }

    /// POSTs a request; its id.
    pub async fn request(&mut self, method: &str, params: Value, session: Option<&str>) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let (status, body) =
            self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), session).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{method}: {body}");
        id
    }

    /// A new session in `cwd`, made as the RFD lays out: the connection's stream opened, the
    /// session made (its id read there), then its own stream opened. The connection's stream,
    /// the session, and the session's stream.
    pub async fn new_session(&mut self, cwd: &str) -> (Events, String, Events) {
        let mut connection = self.open(None).await;
        let id = self.request("session/new", json!({"cwd": cwd, "mcpServers": []}), None).await;
        let (answer, _) = connection.response(id).await;
        let session = answer["result"]["sessionId"].as_str().unwrap().to_owned();
        let events = self.open(Some(&session)).await;
        (connection, session, events)
    }

    /// Opens the connection's stream, or `session`'s, from after `last` when given.
    pub async fn try_open(&self, session: Option<&str>, last: Option<&str>) -> Result<Events, (StatusCode, String)> {
        let mut request = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("acp-connection-id", &self.connection);
        if let Some(session) = session {
            request = request.header("acp-session-id", session);
        }
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        let response = request.send().await.unwrap();
        if response.status() != StatusCode::OK {
            return Err((response.status(), response.text().await.unwrap()));
        }
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Ok(Events { body: response.bytes_stream().boxed(), buffer: String::new(), last_id: None })
    }

    pub async fn open(&self, session: Option<&str>) -> Events {
        self.try_open(session, None).await.unwrap_or_else(|(status, body)| panic!("GET: {status} {body}"))
    }

    /// This client (its token, say) naming `connection` instead of its own.
    pub fn naming(&self, connection: &str) -> Self {
        Self {
            url: self.url.clone(),
            http: self.http.clone(),
            connection: connection.to_owned(),
            next_id: self.next_id,
        }
    }

    pub async fn delete(&self) -> StatusCode {
        let response = self.http.delete(&self.url).header("acp-connection-id", &self.connection).send().await.unwrap();
        response.status()
    }
}

impl Events {
    /// The next event: its id and message; `None` once the stream ended.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let mut id = String::new();
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(value) = line.strip_prefix("id: ") {
                        id = value.to_owned();
                    } else if let Some(value) = line.strip_prefix("data: ") {
                        data.push_str(value);
                    }
                }
                if data.is_empty() {
                    continue; // a comment: keep-alive, or the reason the stream ends
                }
                self.last_id = Some(id.clone());
                return Some((id, serde_json::from_str(&data).unwrap_or_else(|err| panic!("{err}: {data}"))));
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next()).await.expect("an event within PATIENCE")?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk.ok()?));
        }
    }

    pub async fn recv(&mut self) -> (String, Value) {
        self.next().await.expect("the stream ended")
    }

    /// Reads until the response to `id`: it, and the events before it.
    pub async fn response(&mut self, id: i64) -> (Value, Vec<(String, Value)>) {
        let mut before = Vec::new();
        loop {
            let (event, message) = self.recv().await;
            if message.get("method").is_none() && message["id"] == id {
                return (message, before);
            }
            before.push((event, message));
        }
    }

    /// Whether nothing comes within `wait`.
    pub async fn is_quiet(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.next()).await.is_err()
    }
}

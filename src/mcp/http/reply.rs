//! One exchange with a streamable HTTP server: a message POSTed and what comes back read. A
//! request's answer is a JSON body or an event stream that may carry the server's requests and
//! notifications before it (handed to the connection as they come) and ends once the answer
//! came; a stream that ends before it is taken up again with a GET naming the last event id
//! (`Last-Event-ID`) when the server gave ids, at most [`MAX_RESUMES`] times, else the request
//! fails saying so. A notification's or answer's POST wants a 2xx and nothing else: its body is
//! not read. The GET stream of a session is read here too, and opened again when it ends.
//! An error status is told with the start of its body; a JSON-RPC error in it is the answer.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;

use super::super::rpc::{Inbound, Kind};
use super::super::sse::Parser;
use super::{MAX_MESSAGE, NOTIFY_TIMEOUT};

/// A stream that ended before its answer is taken up again at most this many times.
const MAX_RESUMES: u32 = 3;
/// The GET stream is opened again until it failed this many times in a row.
const MAX_LISTEN_FAILURES: u32 = 3;
/// How long to wait before opening a stream again, unless the server said (`retry:`) …
const RETRY_WAIT: Duration = Duration::from_secs(1);
/// … up to this long.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// … and at least this long (`retry: 0` would reopen a stream the server ends at once in a
/// busy loop).
const MIN_RETRY_WAIT: Duration = Duration::from_millis(250);
/// What is read of an error's body, and shown of it.
const ERROR_BODY: usize = 64 * 1024;
const ERROR_SHOWN: usize = 300;

/// What a client needs to POST to the server.
#[derive(Clone)]
pub(super) struct Exchange {
    pub server: String,
    pub client: reqwest::Client,
    pub url: String,
    pub received: mpsc::Sender<Inbound>,
}

/// How a POST ended.
pub(super) enum Posted {
    /// Delivered (and a request's answer handed on).
    Done,
    /// 404 to a message of a session: the session expired.
    Expired,
    Failed(String),
}

impl Exchange {
    /// POSTs one message of the session; a request's answer and whatever came with it go to
    /// the connection.
    pub async fn post(&self, text: &str, kind: &Kind, headers: HeaderMap, has_session: bool) -> Posted {
        let request = self.client.post(&self.url).headers(headers.clone()).body(text.to_owned());
        let Kind::Request { id, .. } = kind else {
            let sent = tokio::time::timeout(NOTIFY_TIMEOUT, request.send()).await;
            return match sent {
                Ok(Ok(response)) if response.status() == StatusCode::NOT_FOUND && has_session => Posted::Expired,
                Ok(Ok(response)) if response.status().is_success() => Posted::Done,
                Ok(Ok(response)) => Posted::Failed(format!("HTTP {}", response.status())),
                Ok(Err(err)) => Posted::Failed(chain(&err)),
                Err(_) => Posted::Failed(format!("the server did not take it within {} s", NOTIFY_TIMEOUT.as_secs())),
            };
        };
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return Posted::Failed(chain(&err)),
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND && has_session {
            return Posted::Expired;
        }
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            // Its answer comes on the GET stream.
            return Posted::Done;
        }
        let answer = if status.is_success() {
            self.answer(response, *id, headers).await
        } else {
            match refusal(response).await {
                Refusal::Error(error) => Ok(serde_json::json!({"jsonrpc": "2.0", "id": id, "error": error})),
                Refusal::Status(why) => Err(why),
            }
        };
        match answer {
            Ok(answer) => {
                let _ = self.received.send(Inbound::Message(answer)).await;
                Posted::Done
            }
            Err(why) => Posted::Failed(why),
        }
    }

    /// POSTs a notification and waits until the server took it.
    pub async fn notify(&self, text: &str, headers: HeaderMap) -> Result<(), String> {
        let request = self.client.post(&self.url).headers(headers).body(text.to_owned());
        match tokio::time::timeout(NOTIFY_TIMEOUT, request.send()).await {
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => Err(match refusal(response).await {
                Refusal::Error(error) => format!("it refused a notification: {error}"),
                Refusal::Status(why) => why,
            }),
            Ok(Err(err)) => Err(chain(&err)),
            Err(_) => Err(format!("the server did not take a notification within {} s", NOTIFY_TIMEOUT.as_secs())),
        }
    }

    /// POSTs `initialize`; the response, once its status says success.
    pub async fn start(&self, text: &str, headers: HeaderMap) -> Result<reqwest::Response, String> {
        let response = self
            .client
            .post(&self.url)
            .headers(headers)
            .body(text.to_owned())
            .send()
            .await
            .map_err(|err| chain(&err))?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(match refusal(response).await {
            Refusal::Error(error) => format!("it refused `initialize`: {}", message(&error)),
            Refusal::Status(why) => why,
        })
    }

    /// Reads a successful response to request `id`: what comes before the answer goes to the
    /// connection; returns the answer.
    pub async fn answer(&self, mut response: reqwest::Response, id: u64, headers: HeaderMap) -> Result<Value, String> {
        match content_type(&response).as_str() {
            "application/json" => {
                let mut body = Vec::new();
                let whole = crate::net::read_at_most(&mut response, &mut body, MAX_MESSAGE)
                    .await
                    .map_err(|err| format!("reading its answer failed: {}", chain(&err)))?;
                if !whole {
                    return Err(format!("its answer is larger than the {} MiB cairn reads", MAX_MESSAGE >> 20));
                }
                let value: Value =
                    serde_json::from_slice(&body).map_err(|err| format!("its answer is not JSON: {err}"))?;
                let mut answer = None;
                for message in batch(value) {
                    if answer.is_none() && answers(&message, id) {
                        answer = Some(message);
                    } else {
                        self.hand_on(message).await;
                    }
                }
                answer.ok_or_else(|| "its response held no answer to the request".to_owned())
            }
            "text/event-stream" => self.stream(response, id, headers).await,
            other => Err(format!("it answered with neither JSON nor an event stream (Content-Type `{other}`)")),
        }
    }

    /// Reads an event stream until the answer to `id`, taking it up again if it ends first.
    async fn stream(&self, mut response: reqwest::Response, id: u64, headers: HeaderMap) -> Result<Value, String> {
        let mut parser = Parser::new(MAX_MESSAGE);
        let mut resumes = 0;
        loop {
            let ended = loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => parser.push(&chunk).map_err(|err| err.to_string())?,
                    Ok(None) => break None,
                    Err(err) => break Some(chain(&err)),
                }
                while let Some(event) = parser.next_event() {
                    for message in self.read_event(&event.data) {
                        if answers(&message, id) {
                            return Ok(message);
                        }
                        self.hand_on(message).await;
                    }
                }
            };
            let how = ended.map_or_else(|| "ended".to_owned(), |why| format!("failed ({why})"));
            let Some(last) = parser.last_id().map(str::to_owned) else {
                return Err(format!("its event stream {how} before it answered"));
            };
            if resumes == MAX_RESUMES {
                return Err(format!("its event stream {how} before it answered, also after {MAX_RESUMES} resumes"));
            }
            resumes += 1;
            tokio::time::sleep(wait(parser.retry)).await;
            response = self
                .get(&headers, Some(&last))
                .await
                .map_err(|why| format!("resuming its event stream failed: {why}"))?;
            parser = parser.resumed();
        }
    }

    /// Listens on the session's GET stream, opened again when it ends, until it fails
    /// [`MAX_LISTEN_FAILURES`] times in a row (a 405 or 404 at once).
    pub async fn listen(&self, headers: HeaderMap) {
        let (mut last, mut retry, mut failures) = (None::<String>, None, 0);
        loop {
            match self.get(&headers, last.as_deref()).await {
                Ok(mut response) => {
                    failures = 0;
                    let mut parser = Parser::new(MAX_MESSAGE);
                    while let Ok(Some(chunk)) = response.chunk().await {
                        if let Err(err) = parser.push(&chunk) {
                            tracing::debug!(server = %self.server, %err, "its GET stream");
                            break;
                        }
                        while let Some(event) = parser.next_event() {
                            for message in self.read_event(&event.data) {
                                self.hand_on(message).await;
                            }
                        }
                    }
                    last = parser.last_id().map(str::to_owned).or(last);
                    retry = parser.retry.or(retry);
                }
                Err(why) => {
                    tracing::debug!(server = %self.server, "its GET stream: {why}");
                    failures += 1;
                    if why.starts_with("HTTP 405") || why.starts_with("HTTP 404") || failures >= MAX_LISTEN_FAILURES {
                        return;
                    }
                }
            }
            tokio::time::sleep(wait(retry)).await;
        }
    }

    /// Opens an event stream with GET, from event `last` on.
    async fn get(&self, headers: &HeaderMap, last: Option<&str>) -> Result<reqwest::Response, String> {
        let mut headers = headers.clone();
        headers.remove(header::CONTENT_TYPE);
        headers.insert(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(last) = last.and_then(|last| HeaderValue::from_str(last).ok()) {
            headers.insert("last-event-id", last);
        }
        let response = self.client.get(&self.url).headers(headers).send().await.map_err(|err| chain(&err))?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        match content_type(&response).as_str() {
            "text/event-stream" => Ok(response),
            other => Err(format!("it is not an event stream (Content-Type `{other}`)")),
        }
    }

    /// The messages of an event's data; none if it holds no JSON (a priming event holds none).
    fn read_event(&self, data: &str) -> Vec<Value> {
        if data.trim().is_empty() {
            return Vec::new();
        }
        match serde_json::from_str(data) {
            Ok(value) => batch(value),
            Err(err) => {
                tracing::debug!(server = %self.server, %err, "an event that is not JSON, skipped");
                Vec::new()
            }
        }
    }

    async fn hand_on(&self, message: Value) {
        let _ = self.received.send(Inbound::Message(message)).await;
    }
}

/// The messages of a body: a batch's, or the one.
fn batch(value: Value) -> Vec<Value> {
    match value {
        Value::Array(messages) => messages,
        one => vec![one],
    }
}

/// Whether `message` answers request `id`.
fn answers(message: &Value, id: u64) -> bool {
    let matches = match message.get("id") {
        Some(Value::Number(number)) => number.as_u64() == Some(id),
        Some(Value::String(text)) => text.parse() == Ok(id),
        _ => false,
    };
    matches && message.get("method").is_none() && (message.get("result").is_some() || message.get("error").is_some())
}

/// The media type of a response, lowercase, without parameters.
fn content_type(response: &reqwest::Response) -> String {
    let value = response.headers().get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    value.unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

fn wait(retry: Option<u64>) -> Duration {
    retry.map_or(RETRY_WAIT, Duration::from_millis).clamp(MIN_RETRY_WAIT, MAX_RETRY_WAIT)
}

/// What an error status said.
enum Refusal {
    /// A JSON-RPC error object.
    Error(Value),
    /// `HTTP <status>` and the start of its body.
    Status(String),
}

async fn refusal(mut response: reqwest::Response) -> Refusal {
    let status = response.status();
    let mut body = Vec::new();
    let read = crate::net::read_at_most(&mut response, &mut body, ERROR_BODY);
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    if let Ok(value) = serde_json::from_slice::<Value>(&body)
        && let Some(error) = value.get("error").filter(|error| error.is_object())
    {
        return Refusal::Error(error.clone());
    }
    let text = String::from_utf8_lossy(&body);
    let shown: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .take(ERROR_SHOWN)
        .collect();
    Refusal::Status(if shown.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {shown}") })
}

/// A JSON-RPC error's message.
fn message(error: &Value) -> String {
    error.get("message").and_then(Value::as_str).map_or_else(|| error.to_string(), str::to_owned)
}

/// An error and its sources, each said once.
pub(super) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        let text = err.to_string();
        let text = text.trim_end_matches([':', ' ']);
        if !parts.last().is_some_and(|last| last.contains(text)) {
            parts.push(text.to_owned());
        }
        next = err.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_cannot_make_streams_reopen_without_a_pause() {
        assert_eq!(wait(None), RETRY_WAIT);
        assert_eq!(wait(Some(2500)), Duration::from_millis(2500));
        assert_eq!(wait(Some(u64::MAX)), MAX_RETRY_WAIT);
        assert!(wait(Some(0)) >= MIN_RETRY_WAIT, "retry: 0 would reopen the GET stream in a busy loop");
    }
}

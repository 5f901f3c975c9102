//! A scripted OpenAI-compatible model server on 127.0.0.1:0 for tests and benchmarks.
//!
//! Each `POST /v1/chat/completions` takes the next [`Reply`] from the script: an SSE stream of
//! chunks with a delay before each, or an HTTP error (whose body may be made as it is sent, to see
//! how much of it the client reads). Requests are recorded with their headers (title requests
//! apart), and a stream the client abandons before its end is counted as dropped, so tests can
//! see cancellation reach the HTTP connection.
//! A request whose first user message contains a [`MockLlm::route`] marker takes its reply from
//! that route's own script instead (how a test answers a sub-agent apart from its parent), and
//! the streams open at once are counted. Every request of any method is also noted with the
//! client's address, so a test can see which connection a request came on. The bytes of answers
//! handed to the connection are counted too, so a test can see how far a long answer got while
//! the client held it back. A stream can be held part way until the test releases it. Answers
//! may report the usage of a modelled prompt cache instead of their scripted one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::dialects::anthropic_text;
use super::prompt_cache::{Charged, PromptCache, with_usage};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// SSE events (the `data:` payloads), each sent after `delay`.
    Stream { events: Vec<String>, delay: Duration },
    /// Text deltas `tick 0 `, `tick 1 `, … one per `delay`, never finishing.
    Endless { delay: Duration },
    /// An HTTP error with a body and optional `Retry-After`.
    Status { status: u16, body: String, retry_after: Option<String> },
    /// An HTTP error whose body is `head` then `x`s, `size` bytes in all, made as it is sent in
    /// 64 KiB pieces; the bytes handed to the connection are counted ([`MockLlm::flood_sent`]) and
    /// the body counts as dropped if the client closes before its end.
    Flood { status: u16, head: String, size: usize },
    /// A long answer made as it is sent ([`Long`]).
    Long(Long),
    /// A stream's events, those after the first `at` sent once `release` is notified.
    Held { events: Vec<String>, at: usize, release: Arc<tokio::sync::Notify> },
}

impl Reply {
    /// A streamed answer made of these text deltas, ending with `stop`, usage and `[DONE]`.
    pub fn text(deltas: &[&str]) -> Self {
        Self::text_with_delay(deltas, Duration::ZERO)
    }

    pub fn text_with_delay(deltas: &[&str], delay: Duration) -> Self {
        let mut events: Vec<String> = deltas.iter().map(|d| delta(json!({"content": d}))).collect();
        events.extend(finish("stop"));
        Reply::Stream { events, delay }
    }

    /// A long answer made as it is sent.
    pub fn long(long: Long) -> Self {
        Reply::Long(long)
    }

    /// Reasoning deltas, then text deltas.
    pub fn thinking_then_text(thoughts: &[&str], deltas: &[&str]) -> Self {
        let mut events: Vec<String> = thoughts.iter().map(|d| delta(json!({"reasoning_content": d}))).collect();
        events.extend(deltas.iter().map(|d| delta(json!({"content": d}))));
        events.extend(finish("stop"));
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// Text deltas that never finish: the stream stays open, sending one delta per `delay`.
    pub fn endless(delay: Duration) -> Self {
        Reply::Endless { delay }
    }

    /// Text deltas, then the given finish reason.
    pub fn finishing(deltas: &[&str], reason: &str) -> Self {
        let mut events: Vec<String> = deltas.iter().map(|d| delta(json!({"content": d}))).collect();
        events.extend(finish(reason));
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// Tool calls `(id, name, arguments JSON)`, streamed as OpenAI deltas, then `tool_calls`.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Self {
        let mut events = Vec::new();
        for (index, (id, name, arguments)) in calls.iter().enumerate() {
            let arguments = arguments.to_string();
            let (first, rest) = arguments.split_at(arguments.len() / 2);
            events.push(delta(json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": first}}]})));
            events.push(delta(json!({"tool_calls": [{"index": index, "function": {"arguments": rest}}]})));
        }
        events.extend(finish("tool_calls"));
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// A recorded transcript (`tests/fixtures/*.sse`), frame by frame.
    pub fn transcript(text: &str) -> Self {
        let events = text.split("\n\n").filter(|frame| !frame.trim().is_empty()).map(str::to_owned).collect();
        Reply::Stream { events, delay: Duration::ZERO }
    }

    /// This stream reply, holding its events after the first `at` until the handle is notified.
    pub fn held(self, at: usize) -> (Self, Arc<tokio::sync::Notify>) {
        let release = Arc::new(tokio::sync::Notify::new());
        (Reply::Held { events: self.events(), at, release: Arc::clone(&release) }, release)
    }

    /// The events of a stream reply.
    pub fn events(self) -> Vec<String> {
        match self {
            Reply::Stream { events, .. } | Reply::Held { events, .. } => events,
            Reply::Endless { .. } | Reply::Status { .. } | Reply::Flood { .. } | Reply::Long { .. } => Vec::new(),
        }
    }

    pub fn status(status: u16, message: &str) -> Self {
        let body = json!({"error": {"message": message, "type": "mock"}}).to_string();
        Reply::Status { status, body, retry_after: None }
    }

    pub fn retry_after(mut self, value: &str) -> Self {
        if let Reply::Status { retry_after, .. } = &mut self {
            *retry_after = Some(value.to_owned());
        }
        self
    }
}

/// A `chat.completion.chunk` with one choice holding `delta`.
pub fn delta(delta: Value) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        .to_string()
}

/// A long answer: `chunks` text deltas of `size` bytes ([`Long::chunk`]), with a one-word
/// thought before every `thought_every`th one when set (each closes the text part, so no stored
/// part grows past that many chunks), then `stop`.
#[derive(Clone, Copy, Debug)]
pub struct Long {
    pub chunks: usize,
    pub size: usize,
    pub thought_every: Option<usize>,
}

impl Long {
    /// Text delta `i`: its number, then dots, `size` bytes in all (at least the number and a
    /// space), so the joined text shows any chunk lost or out of order.
    pub fn chunk(&self, i: usize) -> String {
        let number = format!("{i:08} ");
        let filler = self.size.saturating_sub(number.len());
        number + &".".repeat(filler)
    }

    /// The whole answer text, as the client should see it joined.
    pub fn text(&self) -> String {
        (0..self.chunks).map(|i| self.chunk(i)).collect()
    }

    /// The SSE events, made as they are asked for.
    pub fn events(self) -> impl Iterator<Item = String> + Send + 'static {
        (0..self.chunks)
            .flat_map(move |i| {
                let thought = self.thought_every.filter(|every| i > 0 && i % every == 0);
                let thought = thought.map(|_| delta(json!({"reasoning_content": "thinking"})));
                thought.into_iter().chain(std::iter::once(delta(json!({"content": self.chunk(i)}))))
            })
            .chain(finish("stop"))
    }
}

/// The finish chunk, a usage chunk and `[DONE]`.
pub fn finish(reason: &str) -> Vec<String> {
    vec![
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
            .to_string(),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {
            "prompt_tokens": 12, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 2}}})
        .to_string(),
        "[DONE]".to_owned(),
    ]
}

/// The key `GET /v1/models` refuses with 401 (what a login check meets with a wrong key).
pub const WRONG_KEY: &str = "sk-wrong-key";

/// A request as [`MockLlm::seen`] notes it: method, path, client address, authorized.
pub type Seen = (String, String, std::net::SocketAddr, bool);

#[derive(Default)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<(HeaderMap, Value)>>,
    dropped: AtomicUsize,
    completed: AtomicUsize,
    /// When each request arrived.
    arrived: Mutex<Vec<Instant>>,
    /// Title requests with their headers, answered at once (unless held) and kept out of `requests`.
    titles: Mutex<Vec<(HeaderMap, Value)>>,
    /// When set, title answers wait for it ([`MockLlm::hold_titles`]).
    title_hold: Mutex<Option<Arc<tokio::sync::Notify>>>,
    /// When each stream sent its last event.
    finished: Mutex<Vec<Instant>>,
    /// Bytes of `Flood` bodies handed to the connection.
    flood_sent: AtomicUsize,
    /// `Flood` bodies whose connection closed before their end.
    flood_cut: AtomicUsize,
    /// Replies for requests whose first user message contains the marker, by marker.
    routes: Mutex<Vec<(String, VecDeque<Reply>)>>,
    /// Every request: its method, path, the client's address (which tells connections apart)
    /// and whether it carried an `Authorization` header.
    seen: Mutex<Vec<Seen>>,
    /// Bytes of answers' SSE frames (titles aside) handed to the connection.
    streamed: AtomicUsize,
    /// Streams open now, and the most ever open at once.
    open: AtomicUsize,
    most_open: AtomicUsize,
    /// When set, answers report the usage this cache makes of their requests.
    cache: Mutex<Option<PromptCache>>,
}

/// The running server. It stops when the test's runtime ends.
#[derive(Clone)]
pub struct MockLlm {
    /// The base URL to put in `OPENAI_BASE_URL`, ending in `/v1`.
    pub url: String,
    shared: Arc<Shared>,
}

impl MockLlm {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/v1/chat/completions", post(|state, headers, body| complete(state, headers, body, Api::Chat)))
            .route("/v1/messages", post(|state, headers, body| complete(state, headers, body, Api::Anthropic)))
            .route("/v1/responses", post(|state, headers, body| complete(state, headers, body, Api::Responses)))
            .route(
                "/v1/models",
                axum::routing::get(|headers: HeaderMap| async move {
                    // The one key this server refuses, as OpenAI words it.
                    let key = headers.get("authorization").and_then(|value| value.to_str().ok());
                    if key == Some(&format!("Bearer {WRONG_KEY}")) {
                        let body = r#"{"error":{"message":"Incorrect API key provided: sk-wr***ey"}}"#;
                        return error_response(401, body.to_owned(), None);
                    }
                    axum::Json(json!({"object": "list", "data": [{"id": "found-a"}, {"id": "found-b"}]}))
                        .into_response()
                }),
            )
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&shared), note_request))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the mock model server");
        let address = listener.local_addr().expect("mock address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await;
        });
        Self { url: format!("http://{address}/v1"), shared }
    }

    /// Queues replies, served in order.
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.script.lock().unwrap().push_back(reply);
        self
    }

    /// Queues a reply for requests whose first user message contains `marker`.
    pub fn route(&self, marker: &str, reply: Reply) -> &Self {
        let mut routes = self.shared.routes.lock().unwrap();
        match routes.iter_mut().find(|(known, _)| known == marker) {
            Some((_, replies)) => replies.push_back(reply),
            None => routes.push((marker.to_owned(), VecDeque::from([reply]))),
        }
        self
    }

    /// The requests whose first user message contains `marker`.
    pub fn requests_with(&self, marker: &str) -> Vec<Value> {
        self.requests().into_iter().filter(|body| first_user_text(body).contains(marker)).collect()
    }

    /// From now on, answers report the usage of a prompt cache modelled on OpenAI's
    /// ([`PromptCache`]) instead of their scripted usage.
    pub fn model_prompt_cache(&self) {
        *self.shared.cache.lock().unwrap() = Some(PromptCache::default());
    }

    /// What the modelled prompt cache charged each request, in order (empty when it is off).
    pub fn cache_charges(&self) -> Vec<Charged> {
        self.shared.cache.lock().unwrap().as_ref().map(PromptCache::charged).unwrap_or_default()
    }

    /// The most model streams that were open at once.
    pub fn most_open(&self) -> usize {
        self.shared.most_open.load(Ordering::SeqCst)
    }

    /// Model streams open now.
    pub fn open(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Every request so far as `(method, path, client address, authorized)`, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// The JSON bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().iter().map(|(_, body)| body.clone()).collect()
    }

    pub fn request_headers(&self) -> Vec<HeaderMap> {
        self.shared.requests.lock().unwrap().iter().map(|(headers, _)| headers.clone()).collect()
    }

    /// When each request arrived, and when each stream sent its last event (for the benchmarks).
    #[allow(dead_code)]
    pub fn timeline(&self) -> (Vec<Instant>, Vec<Instant>) {
        (self.shared.arrived.lock().unwrap().clone(), self.shared.finished.lock().unwrap().clone())
    }

    /// The title requests received so far.
    pub fn title_requests(&self) -> Vec<Value> {
        self.shared.titles.lock().unwrap().iter().map(|(_, body)| body.clone()).collect()
    }

    /// The headers of the title requests received so far.
    pub fn title_headers(&self) -> Vec<HeaderMap> {
        self.shared.titles.lock().unwrap().iter().map(|(headers, _)| headers.clone()).collect()
    }

    /// Holds every later title answer (its headers sent, its events not) until the handle is
    /// notified (`notify_one`, once per held answer).
    pub fn hold_titles(&self) -> Arc<tokio::sync::Notify> {
        let release = Arc::new(tokio::sync::Notify::new());
        *self.shared.title_hold.lock().unwrap() = Some(Arc::clone(&release));
        release
    }

    /// Bytes of `Flood` error bodies handed to the connection so far.
    pub fn flood_sent(&self) -> usize {
        self.shared.flood_sent.load(Ordering::SeqCst)
    }

    /// Waits until a `Flood` body's connection closed before the body's end, or panics after
    /// `within`.
    pub async fn wait_flood_cut(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.shared.flood_cut.load(Ordering::SeqCst) == 0 {
            assert!(tokio::time::Instant::now() < deadline, "the error body was not cut short within {within:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Bytes of answers' SSE frames handed to the connection so far (titles not counted).
    pub fn streamed(&self) -> usize {
        self.shared.streamed.load(Ordering::SeqCst)
    }

    /// Streams that sent their last event (title answers included).
    pub fn finished(&self) -> usize {
        self.shared.finished.lock().unwrap().len()
    }

    /// Streams the client abandoned before their end.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` streams were dropped, or panics after `within`.
    pub async fn wait_dropped(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.dropped() < n {
            assert!(tokio::time::Instant::now() < deadline, "the model stream was not dropped within {within:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Which wire API a route speaks.
#[derive(Clone, Copy)]
enum Api {
    Chat,
    Anthropic,
    Responses,
}

/// The marker of cairn's title requests (`session::title::INSTRUCTION`).
const TITLE_MARKER: &str = "You write short titles";

/// The title the mock writes for every session.
pub const MOCK_TITLE: &str = "Mock Title";

/// The text of a request's first user message, whatever the wire API.
pub fn first_user_text(body: &Value) -> String {
    let Some(first) = body["messages"].as_array().and_then(|m| m.iter().find(|m| m["role"] == "user")) else {
        return String::new();
    };
    match &first["content"] {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn is_title_request(body: &Value) -> bool {
    let system = [body.pointer("/messages/0/content"), body.pointer("/system/0/text"), body.get("instructions")];
    system.into_iter().flatten().any(|text| text.as_str().is_some_and(|t| t.starts_with(TITLE_MARKER)))
}

/// A title answer in the route's dialect.
fn title_answer(api: Api) -> Vec<String> {
    match api {
        Api::Chat => Reply::text(&[MOCK_TITLE]).events(),
        Api::Anthropic => anthropic_text(MOCK_TITLE),
        Api::Responses => vec![
            json!({"type": "response.output_text.delta", "delta": MOCK_TITLE}).to_string(),
            json!({"type": "response.completed", "response": {"status": "completed"}}).to_string(),
        ],
    }
}

async fn note_request(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let authorized = request.headers().contains_key(axum::http::header::AUTHORIZATION);
    let noted = (request.method().to_string(), request.uri().path().to_owned(), peer, authorized);
    shared.seen.lock().unwrap().push(noted);
    next.run(request).await
}

async fn complete(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes, api: Api) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if is_title_request(&json) {
        shared.titles.lock().unwrap().push((headers, json));
        let guard = DropGuard { shared: Arc::clone(&shared), finished: true, counted: false };
        let answer = futures::stream::iter(title_answer(api));
        return match shared.title_hold.lock().unwrap().clone() {
            Some(release) => {
                let held =
                    futures::stream::once(async move { release.notified().await }).filter_map(|()| async { None });
                sse(held.chain(answer), Duration::ZERO, guard)
            }
            None => sse(answer, Duration::ZERO, guard),
        };
    }
    shared.arrived.lock().unwrap().push(Instant::now());
    let first = first_user_text(&json);
    let charged = shared.cache.lock().unwrap().as_mut().map(|cache| cache.charge(&json));
    shared.requests.lock().unwrap().push((headers, json));
    let routed = shared
        .routes
        .lock()
        .unwrap()
        .iter_mut()
        .find(|(marker, replies)| first.contains(marker.as_str()) && !replies.is_empty())
        .and_then(|(_, replies)| replies.pop_front());
    let reply = routed.or_else(|| shared.script.lock().unwrap().pop_front());
    let Some(reply) = reply else {
        return error_response(500, r#"{"error":{"message":"mock: no scripted reply left"}}"#.to_owned(), None);
    };
    let now = shared.open.fetch_add(1, Ordering::SeqCst) + 1;
    shared.most_open.fetch_max(now, Ordering::SeqCst);
    let guard = DropGuard { shared: Arc::clone(&shared), finished: false, counted: true };
    match reply {
        Reply::Status { status, body, retry_after } => error_response(status, body, retry_after),
        Reply::Endless { delay } => {
            let ticks = (0..).map(|i: u64| delta(json!({"content": format!("tick {i} ")})));
            sse(futures::stream::iter(ticks), delay, guard)
        }
        Reply::Stream { mut events, delay } => {
            if let Some(charged) = charged {
                events = events.into_iter().map(|event| with_usage(event, charged)).collect();
            }
            sse(futures::stream::iter(events), delay, guard)
        }
        Reply::Held { mut events, at, release } => {
            let rest = events.split_off(at.min(events.len()));
            let held = futures::stream::once(async move { release.notified().await }).filter_map(|()| async { None });
            let events = futures::stream::iter(events).chain(held).chain(futures::stream::iter(rest));
            sse(events, Duration::ZERO, guard)
        }
        Reply::Long(long) => sse(futures::stream::iter(long.events()), Duration::ZERO, guard),
        Reply::Flood { status, head, size } => flood(status, head, size, Arc::clone(&shared)),
    }
}

/// An error response whose body is made piece by piece as the connection takes it.
fn flood(status: u16, head: String, size: usize, shared: Arc<Shared>) -> Response {
    const PIECE: usize = 64 * 1024;
    let guard = FloodGuard { shared, sent: 0, size };
    let stream = futures::stream::unfold((Bytes::from(head), guard), |(head, mut guard)| async move {
        if guard.sent >= guard.size {
            return None;
        }
        let piece = if guard.sent == 0 && !head.is_empty() {
            head.slice(..head.len().min(guard.size))
        } else {
            Bytes::from(vec![b'x'; PIECE.min(guard.size - guard.sent)])
        };
        guard.sent += piece.len();
        guard.shared.flood_sent.fetch_add(piece.len(), Ordering::SeqCst);
        Some((Ok::<_, std::io::Error>(piece), (head, guard)))
    });
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header("content-type", "text/plain")
        .header("content-length", size.to_string())
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Counts a `Flood` body as cut if it is dropped before all of it was handed to the connection.
struct FloodGuard {
    shared: Arc<Shared>,
    sent: usize,
    size: usize,
}

impl Drop for FloodGuard {
    fn drop(&mut self) {
        if self.sent < self.size {
            self.shared.flood_cut.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// An SSE response sending each event after `delay`; `guard` learns whether all were sent.
fn sse(events: impl Stream<Item = String> + Send + 'static, delay: Duration, guard: DropGuard) -> Response {
    let stream = futures::stream::unfold((events.boxed(), guard), move |(mut events, mut guard)| async move {
        let Some(event) = events.next().await else {
            guard.finish();
            return None;
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let frame = Bytes::from(frame(&event));
        if guard.counted {
            guard.shared.streamed.fetch_add(frame.len(), Ordering::SeqCst);
        }
        Some((Ok::<_, std::io::Error>(frame), (events, guard)))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// An event as it goes on the wire: frames that name their event (Anthropic) go out as they are.
fn frame(event: &str) -> String {
    let raw = event.starts_with("event:") || event.starts_with("data:") || event.starts_with(':');
    if raw { format!("{event}\n\n") } else { format!("data: {event}\n\n") }
}

fn error_response(status: u16, body: String, retry_after: Option<String>) -> Response {
    let mut response =
        Response::builder().status(StatusCode::from_u16(status).unwrap()).header("content-type", "application/json");
    if let Some(value) = retry_after {
        response = response.header("retry-after", value);
    }
    response.body(Body::from(body)).unwrap()
}

/// Counts a stream as dropped if it is dropped before its last event.
struct DropGuard {
    shared: Arc<Shared>,
    finished: bool,
    /// Counted among the open streams.
    counted: bool,
}

impl DropGuard {
    fn finish(&mut self) {
        self.finished = true;
        self.shared.finished.lock().unwrap().push(Instant::now());
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        let counter = if self.finished { &self.shared.completed } else { &self.shared.dropped };
        counter.fetch_add(1, Ordering::SeqCst);
        if self.counted {
            self.shared.open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

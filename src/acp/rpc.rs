//! A JSON-RPC 2.0 peer over newline-delimited JSON: the only code that writes stdout.
//!
//! One reader loop handles lines in wire order. A request's [`Handler::request`] runs
//! synchronously in that loop (so it can enqueue work before the next line is read) and returns
//! a future, which runs as its own task; its result is the response. Notifications are handled
//! inline. Responses to our own requests are matched by id through the pending map; strays are
//! ignored. One writer task owns the output and flushes whenever its queue runs dry, so a burst
//! of updates costs one flush. `$/cancel_request` aborts the named request and answers -32800.
//! On end of input the handler shuts down, the writer drains, and [`serve`] returns.
//!
//! The outgoing queue is bounded by bytes without ever making a sender wait: sending only
//! queues (counted in a [`Backlog`] until written), and a bulk producer (a streaming answer)
//! awaits [`Peer::writable`] between its pieces, which holds it while [`HIGH_WATER`] bytes or
//! more are queued for a client that is not reading. Responses, requests to the client and
//! cancellations never wait; a broken stdout, or a writer that has stopped, opens the gate for
//! good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol_schema::v1::{Error, ErrorCode};
use futures::FutureExt;
use futures::future::{AbortHandle, Abortable, Aborted, BoxFuture};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use self::wire::{ErrorOut, NotificationOut, RequestOut, SuccessOut};
use super::framing::{Line, read_line};
use crate::backlog::Backlog;

/// Bytes queued for stdout from which a bulk producer waits ([`Peer::writable`])...
pub const HIGH_WATER: usize = 1024 * 1024;
/// ...until the writer has brought them down to this.
pub const LOW_WATER: usize = 512 * 1024;

/// The longest line we accept; anything longer is answered -32700 and skipped.
pub const MAX_LINE: usize = 128 * 1024 * 1024;

/// After the input ends and the handler has shut down, how long requests still running may take
/// to produce their answers.
const DRAIN: Duration = Duration::from_millis(200);

/// The most requests of one client that may run at once; past it a request is refused, so a
/// client cannot make cairn (or, through it, another replica) hold unbounded work.
pub const MOST_IN_FLIGHT: usize = 1024;

tokio::task_local! {
    /// What a request's future asked for after its response: lines to send, and who to tell.
    static AFTER_RESPONSE: std::cell::RefCell<Vec<AfterResponse>>;
    /// The id of the request whose future is running, as the client wrote it.
    static REQUEST_ID: Value;
}

/// The id of the request being answered, inside its future (`None` elsewhere): what a request
/// made on its behalf names (an elicitation scoped to the `authenticate` that asks it).
pub fn current_request_id() -> Option<Value> {
    REQUEST_ID.try_with(Value::clone).ok()
}

enum AfterResponse {
    Line(Vec<u8>),
    Signal(tokio::sync::oneshot::Sender<()>),
}

/// What a peer serves.
pub trait Handler: Send + Sync + 'static {
    /// Starts handling a request. The synchronous part runs in wire order; the future is the answer.
    fn request(&self, method: &str, params: Value) -> Result<BoxFuture<'static, Result<Value, Error>>, Error>;
    /// Handles a notification, in wire order. Never answered.
    fn notification(&self, method: &str, params: Value);
    /// The input ended: stop work and make it durable before the process exits.
    fn shutdown(&self) -> BoxFuture<'static, ()>;
}

enum Outgoing {
    Line(Vec<u8>),
    /// Told once every line before it is written and flushed.
    Written(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// Our end of the connection: sends notifications, requests and responses.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<PeerInner>,
}

struct PeerInner {
    out: mpsc::UnboundedSender<Outgoing>,
    /// The bytes of lines in `out`, counted down by the writer.
    queued: Arc<Backlog>,
    /// Our requests awaiting an answer, by the id we gave them.
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, Error>>>>,
    /// The input ended: no answer can come any more, so requests fail at once.
    ended: std::sync::atomic::AtomicBool,
    /// A served client's limit on what may wait for it ([`Budget`]); none on stdio.
    budget: Option<Budget>,
    next_id: AtomicU64,
    /// Incoming requests not answered yet, by their id's JSON text: how to stop one, and
    /// whether `$/cancel_request` did (its id stays taken until the answer is sent).
    inflight: Mutex<HashMap<String, (AbortHandle, bool)>>,
    /// The tasks answering incoming requests, so shutdown can let them finish.
    tasks: TaskTracker,
}

/// What a request to the client fails with once the client is gone (its input ended).
const DISCONNECTED: &str = "the client disconnected before it answered";

fn disconnected() -> Error {
    Error::internal_error().data(DISCONNECTED)
}

/// Whether a request to the client failed because the client went away, not because it
/// answered with an error.
pub fn is_disconnected(error: &Error) -> bool {
    error.data.as_ref().and_then(Value::as_str) == Some(DISCONNECTED)
}

/// A line answering no request (`id` null) with an invalid-request error saying `why`: what a
/// transport tells a client about input it could not pass on.
pub fn refusal_line(why: &str) -> String {
    unanswerable_line(&error(ErrorCode::InvalidRequest, format!("Invalid request: {why}")))
}

/// A line answering no request with a parse error saying `why`, as a line that is not JSON is
/// answered on stdio.
pub fn parse_error_line(why: &str) -> String {
    unanswerable_line(&error(ErrorCode::ParseError, format!("Parse error: {why}")))
}

fn unanswerable_line(error: &Error) -> String {
    serde_json::to_string(&ErrorOut { jsonrpc: "2.0", id: RawValue::NULL, error }).unwrap_or_default()
}

/// A JSON-RPC error whose message says what went wrong.
pub fn error(code: ErrorCode, message: impl Into<String>) -> Error {
    Error::new(code.into(), message)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Peer {
    fn send<T: Serialize>(&self, message: &T) {
        match serde_json::to_vec(message) {
            Ok(mut line) => {
                line.push(b'\n');
                self.enqueue(line);
            }
            Err(err) => tracing::error!(%err, "could not serialize an outgoing message"),
        }
    }

    /// Queues a line for the writer, counted until it is written. Never waits. A served client
    /// past its budget is cut off.
    fn enqueue(&self, line: Vec<u8>) {
        let bytes = line.len();
        self.inner.queued.add(bytes);
        if self.inner.out.send(Outgoing::Line(line)).is_err() {
            // The writer is gone; the line will never be written.
            self.inner.queued.take(bytes);
        }
        if let Some(budget) = &self.inner.budget
            && !budget.exceeded.is_cancelled()
            && self.inner.queued.bytes() > budget.bytes
        {
            tracing::info!(queued = self.inner.queued.bytes(), "a client fell too far behind; disconnecting it");
            budget.exceeded.cancel();
        }
    }

    /// Resolves once the client can take more: at once while less than [`HIGH_WATER`] bytes are
    /// queued for stdout, else once the writer has brought that down to [`LOW_WATER`] or stdout
    /// is broken. What a producer of bulk awaits between pieces, so a client that stops reading
    /// holds it; nothing that answers or asks the client may wait here.
    pub fn writable(&self) -> impl Future<Output = ()> + Send + 'static {
        let queued = Arc::clone(&self.inner.queued);
        async move { queued.room().await }
    }

    /// Sends a notification.
    pub fn notify<P: Serialize>(&self, method: &str, params: &P) {
        self.send(&NotificationOut { jsonrpc: "2.0", method, params });
    }

    /// Sends a notification right after the response of the request whose future is running
    /// (e.g. what a client may only accept once it knows the new session); outside a request's
    /// future it is sent at once.
    pub fn notify_after_response<P: Serialize>(&self, method: &str, params: &P) {
        let line = match serde_json::to_vec(&NotificationOut { jsonrpc: "2.0", method, params }) {
            Ok(mut line) => {
                line.push(b'\n');
                line
            }
            Err(err) => return tracing::error!(%err, "could not serialize an outgoing message"),
        };
        let deferred = AFTER_RESPONSE.try_with(|after| after.borrow_mut().push(AfterResponse::Line(line.clone())));
        if deferred.is_err() {
            self.enqueue(line);
        }
    }

    /// Resolves once the response of the request whose future is running has been written to
    /// the client, so that whatever is sent after it comes after the response (updates of a
    /// session the response announces) and work started then (a session's MCP servers) does not
    /// delay it. Outside a request's future, or when the request ends without an answer
    /// (cancelled), it resolves at once with `Err`.
    pub fn after_response(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (signal, answered) = tokio::sync::oneshot::channel();
        self.signal_after_response(signal);
        answered
    }

    /// [`Self::after_response`] for a channel made before the request's future runs (by the
    /// synchronous part of a handler, which must queue its work in wire order): `signal` is sent
    /// once the response of the request whose future is running has been written, or dropped
    /// when there is none.
    pub fn signal_after_response(&self, signal: tokio::sync::oneshot::Sender<()>) {
        // Outside a request the closure never runs: the signal is dropped, which resolves it.
        let _ = AFTER_RESPONSE.try_with(|after| after.borrow_mut().push(AfterResponse::Signal(signal)));
    }

    /// Sends a request to the client and waits for its answer. Dropping the future sends
    /// `$/cancel_request` for it.
    pub async fn request<P: Serialize>(&self, method: &str, params: &P) -> Result<Value, Error> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        // Registered before sending, so an immediate answer finds its waiter.
        lock(&self.inner.pending).insert(id, tx);
        // Checked after registering: the end of input sets the flag, then fails every waiter
        // registered, so a request is either failed there or sees the flag here.
        if self.inner.ended.load(Ordering::Acquire) {
            lock(&self.inner.pending).remove(&id);
            return Err(disconnected());
        }
        self.send(&RequestOut { jsonrpc: "2.0", id, method, params });
        let mut guard = CancelOnDrop { peer: self, id: Some(id) };
        let answer = rx.await;
        guard.id = None;
        answer.unwrap_or_else(|_| Err(disconnected()))
    }

    fn respond(&self, id: &RawValue, result: Result<Value, Error>) {
        match &result {
            Ok(result) => self.send(&SuccessOut { jsonrpc: "2.0", id, result }),
            Err(error) => self.send(&ErrorOut { jsonrpc: "2.0", id, error }),
        }
    }

    fn invalid_request(&self, id: &RawValue, why: &str) {
        self.respond(id, Err(error(ErrorCode::InvalidRequest, format!("Invalid request: {why}"))));
    }

    /// Frees an incoming request's id as it is answered: whether `$/cancel_request` cancelled
    /// the request (answered -32800, whatever its future gave).
    fn finish_inflight(&self, key: &str) -> bool {
        lock(&self.inner.inflight).remove(key).is_none_or(|(_, cancelled)| cancelled)
    }
}

struct CancelOnDrop<'a> {
    peer: &'a Peer,
    id: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take()
            && lock(&self.peer.inner.pending).remove(&id).is_some()
        {
            self.peer.notify("$/cancel_request", &serde_json::json!({ "requestId": id }));
        }
    }
}

/// How far a served client may fall behind: past `bytes` of lines queued for it (answers,
/// requests and notifications alike), `exceeded` is cancelled and its transport cuts the
/// connection. A served turn never waits for a client, and a client that sends requests and
/// reads nothing would otherwise grow the queue without end.
pub struct Budget {
    pub bytes: usize,
    pub exceeded: tokio_util::sync::CancellationToken,
}

/// Serves `handler` on `input`/`output` until the input ends, then shuts it down and drains.
pub async fn serve<R, W, H>(input: R, output: W, make_handler: impl FnOnce(Peer) -> H)
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    serve_within(input, output, None, make_handler).await;
}

/// [`serve`], cutting the client off past `budget`.
pub async fn serve_within<R, W, H>(input: R, output: W, budget: Option<Budget>, make_handler: impl FnOnce(Peer) -> H)
where
    R: tokio::io::AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(Backlog::new(HIGH_WATER, LOW_WATER));
    let writer = tokio::spawn(write_loop(rx, output, Arc::clone(&queued)));
    let peer = Peer {
        inner: Arc::new(PeerInner {
            out: tx,
            queued,
            pending: Mutex::new(HashMap::new()),
            ended: std::sync::atomic::AtomicBool::new(false),
            budget,
            next_id: AtomicU64::new(0),
            inflight: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
        }),
    };
    let handler = Arc::new(make_handler(peer.clone()));
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::with_capacity(4096);
    loop {
        match read_line(&mut input, &mut line, MAX_LINE).await {
            Ok(Line::Complete) => handle_line(&peer, &handler, &line),
            Ok(Line::TooLong) => {
                let why = format!("Parse error: line longer than {MAX_LINE} bytes; it was skipped");
                peer.respond(RawValue::NULL, Err(error(ErrorCode::ParseError, why)));
            }
            Ok(Line::Eof) => break,
            Err(err) => {
                tracing::warn!(%err, "reading stdin failed; shutting down");
                break;
            }
        }
    }
    tracing::debug!("input closed; shutting down");
    peer.inner.ended.store(true, Ordering::Release);
    for (_, waiter) in lock(&peer.inner.pending).drain() {
        let _ = waiter.send(Err(disconnected()));
    }
    handler.shutdown().await;
    peer.inner.tasks.close();
    if tokio::time::timeout(DRAIN, peer.inner.tasks.wait()).await.is_err() {
        // A served client that goes away mid-turn is expected to: its turns go on.
        if peer.inner.budget.is_some() {
            tracing::debug!("a served client left with requests still running");
        } else {
            tracing::warn!("some requests were still running at exit and got no answer");
        }
    }
    let (done_tx, done_rx) = oneshot::channel();
    let _ = peer.inner.out.send(Outgoing::Close(done_tx));
    let _ = done_rx.await;
    let _ = writer.await;
}

fn handle_line<H: Handler>(peer: &Peer, handler: &Arc<H>, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => {
            let why = format!("Parse error: invalid JSON ({err}); send one JSON-RPC message per line");
            return peer.respond(RawValue::NULL, Err(error(ErrorCode::ParseError, why)));
        }
    };
    let Value::Object(mut message) = value else {
        return peer.invalid_request(RawValue::NULL, "a JSON-RPC message must be a JSON object");
    };
    let id = message.remove("id");
    let reply_id = reply_id(id.as_ref(), line);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return peer.invalid_request(&reply_id, "\"jsonrpc\" must be \"2.0\"");
    }
    if let Some(Value::Bool(_) | Value::Array(_) | Value::Object(_)) = id {
        return peer.invalid_request(RawValue::NULL, "\"id\" must be a string, a number or null");
    }
    let params = message.remove("params").unwrap_or(Value::Null);
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => handle_request(peer, handler, &id, &reply_id, &method, params),
        (Some(Value::String(method)), None) => handle_notification(peer, handler.as_ref(), &method, params),
        (Some(_), _) => peer.invalid_request(&reply_id, "\"method\" must be a string"),
        (None, Some(id)) if message.contains_key("result") || message.contains_key("error") => {
            handle_response(peer, &id, message);
        }
        (None, _) => peer.invalid_request(&reply_id, "a message needs a \"method\", or a \"result\" or \"error\""),
    }
}

/// The id a response carries: the request's, byte for byte as the client wrote it when parsing
/// it as JSON would change it (`18446744073709551616` is not an `f64`), `null` for none.
fn reply_id(id: Option<&Value>, line: &[u8]) -> Box<RawValue> {
    #[derive(Deserialize)]
    struct Written<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let as_written =
        || serde_json::from_slice::<Written<'_>>(line).ok().and_then(|written| written.id.map(RawValue::to_owned));
    let exact = match id {
        Some(Value::Number(number)) if number.is_f64() => as_written(),
        _ => None,
    };
    let parsed = || match id {
        Some(id @ (Value::Number(_) | Value::String(_))) => serde_json::value::to_raw_value(id).ok(),
        _ => None,
    };
    exact.or_else(parsed).unwrap_or_else(|| RawValue::NULL.to_owned())
}

/// Starts one request. `id` keys it (for `$/cancel_request` and reuse); `reply` is the id its
/// answer carries.
fn handle_request<H: Handler>(
    peer: &Peer,
    handler: &Arc<H>,
    id: &Value,
    reply: &RawValue,
    method: &str,
    params: Value,
) {
    let key = id.to_string();
    let id_value = id.clone();
    let id = reply.to_owned();
    // Two requests by one id could not be told apart: not their answers, not a cancel.
    let (taken, running) = {
        let inflight = lock(&peer.inner.inflight);
        (inflight.contains_key(&key), inflight.len())
    };
    if taken {
        let why = format!("the id {key} is already used by a request still running; give every request its own id");
        return peer.invalid_request(&id, &why);
    }
    if running >= MOST_IN_FLIGHT {
        let why = format!(
            "{running} requests of this client are still running, the most there may be; wait for their answers before sending more"
        );
        return peer.invalid_request(&id, &why);
    }
    // The client's W3C trace context (`_meta.traceparent`) is on the request's log lines, and
    // whatever the request starts takes it along (`crate::trace`).
    let trace = crate::trace::TraceContext::from_meta(params.get("_meta"));
    let span = crate::trace::span(trace.as_ref());
    let start = || crate::trace::enter(trace.as_ref(), &span, method, || handler.request(method, params));
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(start));
    let future = match started {
        Ok(Ok(future)) => future,
        Ok(Err(err)) => return peer.respond(&id, Err(err)),
        Err(panic) => return peer.respond(&id, Err(panicked(method, panic.as_ref()))),
    };
    let method = method.to_owned();
    let (abort, registration) = AbortHandle::new_pair();
    lock(&peer.inner.inflight).insert(key.clone(), (abort, false));
    let task_peer = peer.clone();
    let future = REQUEST_ID.scope(id_value, crate::trace::scope(trace, future)).instrument(span);
    peer.inner.tasks.spawn(AFTER_RESPONSE.scope(std::cell::RefCell::new(Vec::new()), async move {
        let peer = task_peer;
        // The request's future is dropped here, however it ended: a cancelled one is answered
        // only after, so what that future held has let go before the client is told (a
        // prompt's session has the cancel in its queue, ahead of anything sent later).
        let ended = Abortable::new(std::panic::AssertUnwindSafe(future).catch_unwind(), registration).await;
        let result = match (ended, peer.finish_inflight(&key)) {
            (Ok(result), false) => result,
            (Ok(_), true) | (Err(Aborted), _) => {
                return peer.respond(&id, Err(Error::from(ErrorCode::RequestCancelled)));
            }
        };
        let result = result.unwrap_or_else(|panic| Err(panicked(&method, panic.as_ref())));
        peer.respond(&id, result);
        for after in AFTER_RESPONSE.with(|after| std::mem::take(&mut *after.borrow_mut())) {
            match after {
                AfterResponse::Line(line) => peer.enqueue(line),
                AfterResponse::Signal(signal) => {
                    let _ = peer.inner.out.send(Outgoing::Written(signal));
                }
            }
        }
    }));
}

/// The answer to a request whose handler panicked: the process goes on, and the client is told.
fn panicked(method: &str, panic: &(dyn std::any::Any + Send)) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    tracing::error!(%method, %what, "a request handler panicked");
    error(
        ErrorCode::InternalError,
        format!("cairn failed while handling {method} ({what}); this is a bug in cairn, please report it"),
    )
}

fn handle_notification(peer: &Peer, handler: &dyn Handler, method: &str, params: Value) {
    if method != "$/cancel_request" {
        let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.notification(method, params)));
        if let Err(panic) = handled {
            // Nobody to answer; the log says what failed, and the process goes on.
            let _ = panicked(method, panic.as_ref());
        }
        return;
    }
    let Some(id) = params.get("requestId").filter(|id| id.is_number() || id.is_string()) else {
        return tracing::debug!("$/cancel_request without a usable requestId");
    };
    // Answered by the request's task once its future is gone; its id stays taken until then.
    if let Some((abort, cancelled)) = lock(&peer.inner.inflight).get_mut(&id.to_string()) {
        *cancelled = true;
        abort.abort();
    }
}

fn handle_response(peer: &Peer, id: &Value, mut message: serde_json::Map<String, Value>) {
    let waiter = id.as_u64().and_then(|id| lock(&peer.inner.pending).remove(&id));
    let Some(waiter) = waiter else {
        return tracing::debug!(%id, "ignoring a response to no request of ours");
    };
    let result = match message.remove("error") {
        Some(error) => {
            Err(serde_json::from_value(error.clone()).unwrap_or_else(|_| Error::internal_error().data(error)))
        }
        None => Ok(message.remove("result").unwrap_or(Value::Null)),
    };
    let _ = waiter.send(result);
}

/// Closes the backlog of stdout when the writer stops, however it stops, so no producer waits
/// for a drain that will not come.
struct CloseOnExit(Arc<Backlog>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        self.0.close();
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut rx: mpsc::UnboundedReceiver<Outgoing>, output: W, queued: Arc<Backlog>) {
    let queued = CloseOnExit(queued);
    let mut output = tokio::io::BufWriter::with_capacity(64 * 1024, output);
    let mut broken = false;
    let mut written = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let mut close = None;
        while let Some(message) = next.take() {
            match message {
                Outgoing::Line(line) if !broken => {
                    if let Err(err) = output.write_all(&line).await {
                        tracing::warn!(%err, "stdout is closed; dropping further output");
                        broken = true;
                        queued.0.close();
                    }
                    queued.0.take(line.len());
                }
                Outgoing::Line(line) => queued.0.take(line.len()),
                Outgoing::Written(signal) => written.push(signal),
                Outgoing::Close(done) => close = Some(done),
            }
            if close.is_none() {
                next = rx.try_recv().ok();
            }
        }
        if !broken && let Err(err) = output.flush().await {
            tracing::warn!(%err, "stdout is closed; dropping further output");
            broken = true;
            queued.0.close();
        }
        for signal in written.drain(..) {
            let _ = signal.send(());
        }
        if let Some(done) = close {
            let _ = done.send(());
            return;
        }
    }
}

mod wire;

#[cfg(test)]
mod tests;

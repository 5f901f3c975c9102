//! What the HTTP adapters share: sending a streaming request, classifying HTTP errors into
//! [`LlmError`]s that say what to fix, and running a per-API [`Decode`] over the SSE events.
//! An error body is read only as far as its message needs ([`crate::net::read_at_most`]); the rest is never
//! downloaded.

use std::collections::VecDeque;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

use super::retry::parse_retry_after;

use super::{EventStream, LlmError, ModelRequest, Provider, StreamEvent};

/// How much of an error body we quote back to the user.
const DETAIL_LIMIT: usize = 600;
/// How much of an error body is read: more than any provider's JSON error, and the rest is never
/// downloaded (dropping the response closes the connection), so a huge body costs nothing.
const ERROR_BODY_LIMIT: usize = 64 * 1024;
/// How long an error body may take to arrive; what came by then is used.
const ERROR_BODY_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Turns one API's SSE events into [`StreamEvent`]s.
pub trait Decode: Send + 'static {
    /// Takes one event (`event:` name, `data:` payload) and pushes what it means onto `out`.
    /// Returns `true` when the answer is complete.
    fn event(&mut self, name: &str, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<bool, LlmError>;

    /// The connection closed without a completing event; `Ok` if that is still a proper end.
    fn closed(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError>;
}

/// Runs `decoder` over an SSE byte stream.
pub fn decode<S, T, D>(events: S, decoder: D) -> impl Stream<Item = Result<StreamEvent, LlmError>> + Send
where
    S: Stream<Item = Result<eventsource_stream::Event, eventsource_stream::EventStreamError<T>>> + Unpin + Send,
    T: std::fmt::Display,
    D: Decode,
{
    let state = (events, decoder, VecDeque::new(), false);
    futures::stream::unfold(state, |(mut events, mut decoder, mut pending, mut ended)| async move {
        loop {
            if let Some(event) = pending.pop_front() {
                return Some((Ok(event), (events, decoder, pending, ended)));
            }
            if ended {
                return None;
            }
            let outcome = match events.next().await {
                Some(Ok(event)) => decoder.event(&event.event, &event.data, &mut pending),
                Some(Err(eventsource_stream::EventStreamError::Transport(err))) => {
                    Err(LlmError::Reset(err.to_string()))
                }
                Some(Err(err)) => Err(LlmError::Stream(err.to_string())),
                None => decoder.closed(&mut pending).map(|()| true),
            };
            match outcome {
                Ok(done) => ended = done,
                Err(err) => {
                    // A chunk that failed halfway is dropped whole.
                    pending.clear();
                    return Some((Err(err), (events, decoder, pending, true)));
                }
            }
        }
    })
}

/// How an endpoint wants its key.
#[derive(Clone, Copy)]
pub enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI and compatible servers).
    Bearer,
    /// `x-api-key` plus `anthropic-version` (Anthropic).
    Anthropic,
}

/// A request body written as JSON bytes from a borrowed request.
pub type Encode = fn(&ModelRequest<'_>) -> serde_json::Result<Vec<u8>>;

/// A streaming model API at one endpoint: where it is, how to authenticate, how to write a
/// request (`body`) and how to read the answer (`D`). Each wire API is one of these.
pub struct Endpoint<D> {
    url: String,
    api_key: Option<crate::config::Secret>,
    key_env: String,
    auth: Auth,
    body: Encode,
    /// The provider takes `prompt_cache_key` ([`ModelRequest::cache_key`]).
    cache_key: bool,
    decoder: std::marker::PhantomData<fn() -> D>,
}

impl<D: Decode + Default> Endpoint<D> {
    /// The API at `path` under the provider's base URL.
    pub fn new(config: &crate::config::ProviderConfig, path: &str, auth: Auth, body: Encode) -> Self {
        Self {
            url: format!("{}/{path}", config.base_url.trim_end_matches('/')),
            api_key: config.api_key.clone(),
            key_env: config.api_key_env.clone().unwrap_or_else(|| "the provider's api_key_env".to_owned()),
            auth,
            body,
            cache_key: config.prompt_cache_key,
            decoder: std::marker::PhantomData,
        }
    }
}

#[async_trait::async_trait]
impl<D: Decode + Default> Provider for Endpoint<D> {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let body = if self.cache_key || request.cache_key.is_none() {
            (self.body)(request)
        } else {
            (self.body)(&ModelRequest { cache_key: None, ..request.clone() })
        };
        let body = body.map_err(|err| LlmError::Encode(err.to_string()))?;
        // A connection being opened ahead (see `warm`) is shared, not raced.
        super::http::Warming::join(&self.url).await;
        let mut http = super::http::client()
            .await
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        http = match (self.auth, &self.api_key) {
            (Auth::Bearer, Some(key)) => http.bearer_auth(key.expose()),
            (Auth::Anthropic, key) => {
                let http = http.header("anthropic-version", "2023-06-01");
                match key {
                    Some(key) => http.header("x-api-key", key.expose()),
                    None => http,
                }
            }
            (Auth::Bearer, None) => http,
        };
        if let Some(trace) = request.trace {
            http = trace.propagate(http);
        }
        post(http, &self.url, request.model, &self.key_env, D::default()).await
    }

    /// A `HEAD` of the endpoint, without the key: its answer (likely 404 or 405) does not matter,
    /// the pooled connection it leaves behind does. A request sent meanwhile waits for it.
    async fn warm(&self) {
        let Some(warming) = super::http::Warming::start(&self.url) else { return };
        if self.url.starts_with("https:") {
            // The handshake needs the system's roots: read on a thread that may block, not on
            // the one that drives the connection.
            let _ = tokio::task::spawn_blocking(crate::net::load_roots).await;
        }
        let warmed = super::http::client().await.head(&self.url).timeout(WARM_TIMEOUT).send().await;
        if let Err(err) = &warmed {
            tracing::debug!(url = %self.url, %err, "could not open a connection ahead of the first request");
        }
        // The answer is let go (its connection goes back to the pool) before the requests
        // waiting for it are told.
        drop(warmed);
        drop(warming);
    }
}

/// How long warming a connection may take before it is given up (the request that needs it then
/// opens its own).
const WARM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends a streaming POST and returns its decoded events once the headers say success.
pub async fn post<D: Decode>(
    request: reqwest::RequestBuilder,
    url: &str,
    model: &str,
    key_env: &str,
    decoder: D,
) -> Result<EventStream, LlmError> {
    let mut response = request.send().await.map_err(|err| transport_error(url, &err))?;
    let status = response.status().as_u16();
    if !(200..300).contains(&status) {
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_retry_after);
        let mut body = Vec::new();
        // A body that fails, trickles or never ends is cut where it is: the status says enough.
        let _ =
            tokio::time::timeout(ERROR_BODY_TIME, crate::net::read_at_most(&mut response, &mut body, ERROR_BODY_LIMIT))
                .await;
        body.truncate(ERROR_BODY_LIMIT);
        drop(response);
        let body = String::from_utf8_lossy(&body);
        return Err(status_error(url, status, &body, model, key_env, retry_after));
    }
    let json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|kind| kind.trim_start().starts_with("application/json"));
    if json {
        // A success status with a JSON body instead of a stream: gateways answer errors so.
        let mut body = Vec::new();
        let _ =
            tokio::time::timeout(ERROR_BODY_TIME, crate::net::read_at_most(&mut response, &mut body, ERROR_BODY_LIMIT))
                .await;
        body.truncate(ERROR_BODY_LIMIT);
        drop(response);
        let body = String::from_utf8_lossy(&body);
        return Err(match serde_json::from_str::<Value>(&body).ok().filter(|value| value.get("error").is_some()) {
            Some(_) => status_error(url, status, &body, model, key_env, None),
            None => LlmError::Stream(format!("the server answered with JSON instead of a stream: {}", excerpt(&body))),
        });
    }
    Ok(decode(response.bytes_stream().eventsource(), decoder).boxed())
}

/// An HTTP error as an [`LlmError`] that names the cause.
pub fn status_error(
    url: &str,
    status: u16,
    body: &str,
    model: &str,
    key_env: &str,
    retry_after: Option<std::time::Duration>,
) -> LlmError {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let code = error.and_then(|e| e.get("code").or_else(|| e.get("type"))).and_then(Value::as_str).unwrap_or_default();
    let detail = error_detail(body);
    let url = url.to_owned();
    if status == 401 || status == 403 {
        return LlmError::Unauthorized { url, status, env: key_env.to_owned(), detail };
    }
    if code == "model_not_found" || (status == 404 && detail.to_lowercase().contains("model")) {
        return LlmError::UnknownModel { model: model.to_owned(), url, detail };
    }
    if is_context_error(code, &detail) {
        return LlmError::ContextTooLong { detail };
    }
    LlmError::Status { url, status, detail, retry_after }
}

/// What an error body says: its JSON `error.message` (or `error` text), else the body as
/// [`plain`] reduces it.
pub fn error_detail(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    match error.and_then(|e| e.get("message").and_then(Value::as_str).or_else(|| e.as_str())) {
        Some(message) => message.chars().take(DETAIL_LIMIT).collect(),
        None => plain(body),
    }
}

/// An error body as a short message: an HTML page (a proxy's or gateway's) as its title, other
/// text as its start.
fn plain(body: &str) -> String {
    let lower = body.to_ascii_lowercase();
    if lower.contains("<html") || lower.trim_start().starts_with("<!doctype") {
        let title = lower.find("<title>").and_then(|start| {
            let from = start + "<title>".len();
            lower[from..]
                .find("</title>")
                .map(|end| body[from..from + end].split_whitespace().collect::<Vec<_>>().join(" "))
        });
        return match title.filter(|title| !title.is_empty()) {
            Some(title) => format!("an HTML page titled \"{}\"", title.chars().take(DETAIL_LIMIT).collect::<String>()),
            None => "an HTML page (no title)".to_owned(),
        };
    }
    body.chars().take(DETAIL_LIMIT).collect()
}

/// Whether an error is the provider saying the prompt is longer than the window.
pub fn is_context_error(code: &str, detail: &str) -> bool {
    let detail = detail.to_lowercase();
    code == "context_length_exceeded"
        || detail.contains("context length")
        || detail.contains("context window")
        || detail.contains("maximum context")
        || detail.contains("prompt is too long")
}

pub fn transport_error(url: &str, err: &reqwest::Error) -> LlmError {
    if refused_certificate(err) {
        return LlmError::Untrusted { url: url.to_owned(), detail: transport_detail(err) };
    }
    // A server that is not there will not be there in a second either; a reset or a timeout may be.
    LlmError::Unreachable { url: url.to_owned(), detail: transport_detail(err), retryable: !err.is_connect() }
}

/// Whether the TLS handshake failed on the server's certificate. rustls's error reaches here
/// inside I/O errors (one per layer that passed it on), which show it but do not give it as
/// their source.
fn refused_certificate(err: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(error) = cause {
        let mut inner: &(dyn std::error::Error + 'static) = error;
        while let Some(wrapped) = inner.downcast_ref::<std::io::Error>().and_then(std::io::Error::get_ref) {
            inner = wrapped;
        }
        if matches!(inner.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidCertificate(_))) {
            return true;
        }
        cause = error.source();
    }
    false
}

/// What went wrong sending a request: reqwest's own message repeats the URL; the innermost
/// cause says what actually happened.
pub fn transport_detail(err: &reqwest::Error) -> String {
    let mut root: &dyn std::error::Error = err;
    while let Some(cause) = root.source() {
        root = cause;
    }
    if err.is_timeout() { format!("timed out ({root})") } else { root.to_string() }
}

/// The connection ended before the answer did.
pub fn cut_short() -> LlmError {
    LlmError::Reset("the connection closed before the answer was complete".to_owned())
}

/// The first characters of a payload, for error messages.
pub fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Decodes a whole recorded SSE transcript (tests, benchmarks, replaying captured streams),
/// delivered in 16 KiB pieces.
pub async fn decode_transcript<D: Decode>(transcript: &str, decoder: D) -> Vec<Result<StreamEvent, LlmError>> {
    // Fed in network-sized pieces, as a socket would deliver it.
    let pieces: Vec<Result<Vec<u8>, std::convert::Infallible>> =
        transcript.as_bytes().chunks(16 * 1024).map(|piece| Ok(piece.to_vec())).collect();
    let bytes = futures::stream::iter(pieces);
    decode(bytes.eventsource(), decoder).collect().await
}

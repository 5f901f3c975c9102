//! W3C Trace Context from the client: the `traceparent` and `tracestate` an ACP client may put
//! in any request's `_meta` (the meta-propagation convention), kept on that request's log lines
//! and passed on to the model requests it causes.
//!
//! [`TraceContext::from_meta`] takes them only as the W3C grammar allows: a `traceparent` of
//! lowercase hex fields, exactly 55 characters for version `00` (a later version is read as `00`
//! reads its fields, `ff` refused), trace id and parent id not all zeros; a `tracestate` of at
//! most 512 characters and 32 list members of valid keys and printable values, each key once.
//! An invalid value is ignored (the first one logged at debug): never an error, never passed
//! on, so nothing a client writes there reaches a header but the checked fields. A `tracestate`
//! counts only beside a valid `traceparent`; an invalid one leaves the `traceparent` standing.
//! `baggage` is not passed on: model providers are third parties, and baggage is for the
//! client's own services.
//!
//! `acp::rpc` reads the context of every request and scopes it ([`enter`], [`scope`]) around
//! the request's synchronous part and its future, inside a span carrying the trace id and the
//! client's parent id ([`TraceContext::span`]) so the request's log lines show them.
//! What starts a turn takes [`current`] with it (the session registry, into the prompt's
//! command); from there it travels explicitly, the actor's queue to the turn's `agent::Run` to
//! `llm::ModelRequest::trace`, and each model request sends `traceparent` with the client's
//! trace id and flags and a parent id of its own, and `tracestate` as it came
//! ([`TraceContext::propagate`]). When telemetry exports spans, the parent id a model request
//! sends is instead the id of that request's own exported span ([`TraceContext::of_span`]), so a
//! provider's traces join the client's and cairn's; without telemetry it names no span anyone
//! records, a new one per request.

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A version `00` `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`.
const PARENT_LEN: usize = 55;
/// The longest `traceparent` of a later version read at all (they may add fields after ours).
const MAX_PARENT_LEN: usize = 256;
/// The longest `tracestate` kept, and the most list members.
const MAX_STATE_LEN: usize = 512;
const MAX_MEMBERS: usize = 32;
/// The longest key and value of one `tracestate` member.
const MAX_KEY_LEN: usize = 256;
const MAX_VALUE_LEN: usize = 256;

/// The trace a client's request belongs to: its trace id, the client's span (the parent id),
/// its flags and its `tracestate`, all checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// Lowercase hex, as the client sent them.
    trace_id: [u8; 32],
    parent_id: [u8; 16],
    flags: [u8; 2],
    /// Sent as it came; `None` when absent, empty or invalid.
    state: Option<HeaderValue>,
    /// The parent id is a span of ours, the one making the requests: sent as it is.
    own: bool,
}

impl TraceContext {
    /// The context of a request's `_meta` object, if it holds a valid `traceparent`.
    pub fn from_meta(meta: Option<&Value>) -> Option<Self> {
        let meta = meta?.as_object()?;
        let parent = meta.get("traceparent").filter(|value| !value.is_null())?;
        let Some((trace_id, parent_id, flags)) = parent.as_str().and_then(parse_parent) else {
            ignored("traceparent", parent, &IGNORED_PARENT);
            return None;
        };
        let state = match meta.get("tracestate").filter(|value| !value.is_null()) {
            None => None,
            Some(state) => match state.as_str().filter(|text| valid_state(text)) {
                // An empty list is valid, and not worth sending.
                Some(text) if text.contains('=') => HeaderValue::from_str(text).ok(),
                Some(_) => None,
                None => {
                    ignored("tracestate", state, &IGNORED_STATE);
                    None
                }
            },
        };
        Some(Self { trace_id, parent_id, flags, state, own: false })
    }

    /// The context of a span of ours (trace id, span id and flags as bytes), which the requests
    /// made inside it name as their parent; `client`'s `tracestate` is passed on.
    pub fn of_span(trace_id: [u8; 16], span_id: [u8; 8], flags: u8, client: Option<&Self>) -> Self {
        let mut hex_trace = [0u8; 32];
        for (pair, byte) in hex_trace.chunks_exact_mut(2).zip(trace_id) {
            pair.copy_from_slice(&hex(byte));
        }
        let mut parent_id = [0u8; 16];
        for (pair, byte) in parent_id.chunks_exact_mut(2).zip(span_id) {
            pair.copy_from_slice(&hex(byte));
        }
        let state = client.and_then(|client| client.state.clone());
        Self { trace_id: hex_trace, parent_id, flags: hex(flags), state, own: true }
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        std::str::from_utf8(&self.trace_id).unwrap_or_default()
    }

    /// The client's span: the parent id it sent.
    pub fn parent_id(&self) -> &str {
        std::str::from_utf8(&self.parent_id).unwrap_or_default()
    }

    /// The trace flags, two lowercase hex digits.
    pub fn flags(&self) -> &str {
        std::str::from_utf8(&self.flags).unwrap_or_default()
    }

    /// The `tracestate` passed on, if any.
    pub fn state(&self) -> Option<&str> {
        self.state.as_ref().and_then(|state| state.to_str().ok())
    }

    /// A span whose fields, the trace id and the client's parent id, every log line inside it
    /// shows. At error level, so that it is there whatever `CAIRN_LOG` lets through: a warning
    /// is what one wants to find by its trace.
    pub fn span(&self) -> tracing::Span {
        tracing::error_span!("trace", trace_id = %self.trace_id(), parent_id = %self.parent_id())
    }

    /// The `traceparent` of one request made on this trace's behalf: version `00`, the trace id
    /// and flags, and as parent id the exported span making it ([`Self::of_span`]), or else a new
    /// id, the request's own span.
    pub fn child(&self) -> Option<HeaderValue> {
        let mut line = [0u8; PARENT_LEN];
        line[..3].copy_from_slice(b"00-");
        line[3..35].copy_from_slice(&self.trace_id);
        line[35] = b'-';
        if self.own {
            line[36..52].copy_from_slice(&self.parent_id);
        } else {
            for (pair, byte) in line[36..52].chunks_exact_mut(2).zip(new_span_id()) {
                pair.copy_from_slice(&hex(byte));
            }
        }
        line[52] = b'-';
        line[53..].copy_from_slice(&self.flags);
        // Only lowercase hex and dashes: always a valid header value.
        HeaderValue::from_bytes(&line).ok()
    }

    /// Adds `traceparent` (see [`Self::child`]) and `tracestate` to a
    /// request made on this trace's behalf.
    pub fn propagate(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = match self.child() {
            Some(parent) => request.header(TRACEPARENT, parent),
            None => request,
        };
        match &self.state {
            Some(state) => request.header(TRACESTATE, state.clone()),
            None => request,
        }
    }
}

/// [`TraceContext::span`], or no span without a context.
pub fn span(trace: Option<&TraceContext>) -> tracing::Span {
    trace.map_or_else(tracing::Span::none, TraceContext::span)
}

tokio::task_local! {
    /// The trace context of the client request being handled.
    static CURRENT: Option<TraceContext>;
}

/// The trace context of the client request being handled on this task (in its synchronous part
/// or its future), if it sent one.
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(Option::clone).ok().flatten()
}

/// Runs `future` as part of the request whose context is `trace`.
pub fn scope<F: Future>(trace: Option<TraceContext>, future: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(trace, future)
}

/// Runs `work`, the synchronous part of a request whose context is `trace`, in its `span`
/// ([`span`]), saying at debug that the request came with a context.
pub fn enter<R>(trace: Option<&TraceContext>, span: &tracing::Span, method: &str, work: impl FnOnce() -> R) -> R {
    span.in_scope(|| {
        if trace.is_some() {
            tracing::debug!(method, "a request on the client's trace");
        }
        CURRENT.sync_scope(trace.cloned(), work)
    })
}

static IGNORED_PARENT: AtomicBool = AtomicBool::new(false);
static IGNORED_STATE: AtomicBool = AtomicBool::new(false);

/// Notes an invalid value the first time one comes: a client that sends them sends them with
/// every request.
fn ignored(field: &str, value: &Value, once: &AtomicBool) {
    if !once.swap(true, Ordering::Relaxed) {
        // Quoted as JSON, cut short: whatever it holds, it stays one line.
        let quoted: String = value.to_string().chars().take(120).collect();
        tracing::debug!(field, value = %quoted, "ignoring an invalid trace context field in a request's _meta, and any later one");
    }
}

/// The fields of a valid `traceparent`: trace id, parent id, flags.
fn parse_parent(text: &str) -> Option<([u8; 32], [u8; 16], [u8; 2])> {
    let bytes = text.as_bytes();
    if bytes.len() < PARENT_LEN || bytes.len() > MAX_PARENT_LEN || !bytes.iter().all(u8::is_ascii_graphic) {
        return None;
    }
    let (version, rest) = bytes.split_at(2);
    // Version 00 is exactly its four fields; a later one may add fields, each after a dash.
    let ends_right = match version {
        b"00" => bytes.len() == PARENT_LEN,
        _ => bytes.len() == PARENT_LEN || bytes.get(PARENT_LEN) == Some(&b'-'),
    };
    if !is_hex(version) || version == b"ff" || !ends_right {
        return None;
    }
    if [rest.first(), rest.get(33), rest.get(50)].iter().any(|dash| *dash != Some(&b'-')) {
        return None;
    }
    let trace_id: [u8; 32] = rest.get(1..33)?.try_into().ok()?;
    let parent_id: [u8; 16] = rest.get(34..50)?.try_into().ok()?;
    let flags: [u8; 2] = rest.get(51..53)?.try_into().ok()?;
    let zero = |id: &[u8]| id.iter().all(|&digit| digit == b'0');
    if !is_hex(&trace_id) || !is_hex(&parent_id) || !is_hex(&flags) || zero(&trace_id) || zero(&parent_id) {
        return None;
    }
    Some((trace_id, parent_id, flags))
}

/// Lowercase hex digits only.
fn is_hex(field: &[u8]) -> bool {
    field.iter().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(byte))
}

/// Whether `text` is a `tracestate` we may pass on.
fn valid_state(text: &str) -> bool {
    if text.len() > MAX_STATE_LEN {
        return false;
    }
    let mut keys: Vec<&str> = Vec::new();
    for (index, member) in text.split(',').enumerate() {
        if index >= MAX_MEMBERS {
            return false;
        }
        // Spaces and tabs around a member are not part of it; a member may be empty.
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, value)) = member.split_once('=') else { return false };
        if !valid_key(key) || !valid_value(value) || keys.contains(&key) {
            return false;
        }
        keys.push(key);
    }
    true
}

/// `( lcalpha / DIGIT ) 0*255( lcalpha / DIGIT / "_" / "-" / "*" / "/" / "@" )`.
fn valid_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    let first = bytes.next().is_some_and(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit());
    first
        && key.len() <= MAX_KEY_LEN
        && bytes.all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"_-*/@".contains(&byte))
}

/// Printable ASCII but `,` and `=`, at most 256 characters, not ending in a space.
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_VALUE_LEN
        && !value.ends_with(' ')
        && value.bytes().all(|byte| (0x20..=0x7e).contains(&byte) && byte != b',' && byte != b'=')
}

/// A new span id: 8 random bytes, not all zero.
fn new_span_id() -> [u8; 8] {
    use ring::rand::SecureRandom as _;
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut id = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut id).is_err() {
        // No system randomness: a per-process random hash of a counter is unique enough.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(FALLBACK.fetch_add(1, Ordering::Relaxed));
        id = hasher.finish().to_be_bytes();
    }
    if id == [0; 8] {
        id[7] = 1;
    }
    id
}

fn hex(byte: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [DIGITS[usize::from(byte >> 4)], DIGITS[usize::from(byte & 0xf)]]
}

#[cfg(test)]
mod tests;

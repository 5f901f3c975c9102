//! Model providers behind one streaming interface.
//!
//! A [`Provider`] turns a [`ModelRequest`] (the conversation as [`crate::history`] messages,
//! borrowed) into a stream of provider-neutral [`StreamEvent`]s. Each wire API lives in its own
//! file and serializes its request body straight from the borrowed messages; this module owns the
//! shared types, the error type whose messages say what to set or check, [`reply`] (a whole
//! answer's text, for titles and summaries) and [`resolve`], which maps a `provider/model` name
//! to a provider through the configuration. Retries and timeouts are the turn's business (see
//! [`retry`]); dropping a stream closes its HTTP connection.

pub mod anthropic;
pub mod catalog;
pub mod http;
pub mod openai_chat;
pub mod openai_responses;
pub mod policy;
pub mod retry;
pub mod scripted;
pub mod search;
pub mod sse;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;

use crate::config::{Api, Config, split_model};
use crate::history::Usage;
use crate::history::view::Seen;
use catalog::ThoughtLevel;

/// What a turn asks of a model. Everything is borrowed: the messages are the history's own (the
/// model's view, see [`crate::history::view::ModelView`]), so making a request copies none of
/// them, and a provider writes its body straight from them.
#[derive(Clone, Debug)]
pub struct ModelRequest<'a> {
    /// The model name as the provider knows it (without the `provider/` prefix).
    pub model: &'a str,
    pub system: &'a str,
    pub messages: Vec<Seen<'a>>,
    /// The tools the model may call: `{name, description, parameters}` JSON schemas.
    pub tools: Vec<&'a serde_json::Value>,
    /// The most output tokens to ask for.
    pub max_output: u64,
    /// How hard a reasoning model should think; `None` for models that do not reason.
    pub thought: Option<ThoughtLevel>,
    /// Whether the model takes images (the catalog's `images`). When it does not, every image
    /// in the messages, prompt or tool image, is written as a one-line placeholder instead
    /// (see `wire::omitted_image`); the history keeps the image.
    pub images: bool,
    /// The client's trace, when the prompt behind the request came with one: the request then
    /// carries `traceparent` (a parent id of its own) and `tracestate` ([`crate::trace`]).
    pub trace: Option<&'a crate::trace::TraceContext>,
    /// What ties a session's requests to one prompt cache (its id), for providers that take a
    /// `prompt_cache_key`; `None` for one-off requests (titles, summaries).
    pub cache_key: Option<&'a str>,
    /// Offer the provider's own web search ([`search`]); only for models that have one.
    pub web_search: bool,
}

#[cfg(test)]
impl<'a> ModelRequest<'a> {
    /// A request with no system prompt, no tools, 1,000 output tokens and no thinking: what the
    /// encoders' tests vary the rest against.
    pub fn plain(model: &'a str, messages: Vec<Seen<'a>>, images: bool) -> Self {
        Self {
            model,
            system: "",
            messages,
            tools: Vec::new(),
            max_output: 1000,
            thought: None,
            images,
            trace: None,
            cache_key: None,
            web_search: false,
        }
    }
}

/// One increment of a model's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// The signature that closes the current reasoning block (Anthropic); it must go back verbatim.
    ReasoningSignature(String),
    /// A whole reasoning block the provider encrypted (Anthropic `redacted_thinking`).
    RedactedReasoning(String),
    /// A tool call is being written; its arguments are still streaming.
    ToolCallStarted {
        id: String,
        name: String,
    },
    /// A tool call is complete, its arguments accumulated across deltas.
    ToolCall(ToolCallRequest),
    /// The provider ran a web search itself: announced as it starts, again when it ends.
    WebSearch(search::WebSearch),
    /// Usage for the whole step, as the provider reported it at the end.
    Usage(Usage),
    Finish(FinishReason),
}

/// A finished tool call from the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    /// The raw JSON arguments text.
    pub arguments: String,
}

/// Why the model stopped, mapped from each provider's vocabulary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Other(String),
}

pub type EventStream = BoxStream<'static, Result<StreamEvent, LlmError>>;

/// A model API. `stream` returns once the response headers arrived with success.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError>;

    /// Gets ready for a request soon: opens (and for HTTPS, handshakes) a connection the next
    /// request can reuse, so a session's first prompt is as quick as its second. Failures are
    /// ignored: the request that follows reports them.
    async fn warm(&self) {}
}

/// A whole answer: its text and the usage the provider reported.
#[derive(Debug, Default)]
pub struct Reply {
    pub text: String,
    pub usage: Option<Usage>,
}

/// Sends `request` and reads the answer to the end of its stream, keeping the text (reasoning
/// and tool calls are left out): for the requests that want only words, titles and summaries.
pub async fn reply(provider: &dyn Provider, request: &ModelRequest<'_>) -> Result<Reply, LlmError> {
    let mut events = provider.stream(request).await?;
    let mut reply = Reply::default();
    while let Some(event) = events.next().await {
        match event? {
            StreamEvent::TextDelta(delta) => reply.text.push_str(&delta),
            StreamEvent::Usage(usage) => reply.usage = Some(usage),
            StreamEvent::ReasoningDelta(_)
            | StreamEvent::ReasoningSignature(_)
            | StreamEvent::RedactedReasoning(_)
            | StreamEvent::ToolCallStarted { .. }
            | StreamEvent::ToolCall(_)
            | StreamEvent::WebSearch(_)
            | StreamEvent::Finish(_) => {}
        }
    }
    Ok(reply)
}

/// A failure talking to a model. Every message says what to set or check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LlmError {
    #[error("no API key for provider `{provider}`: set {env}, or save one with `cairn login`")]
    MissingKey { provider: String, env: String },
    #[error(
        "unknown provider `{provider}` in model `{model}`; known providers: {known}. Define [providers.{provider}] in config.toml or fix CAIRN_MODEL"
    )]
    UnknownProvider { provider: String, model: String, known: String },
    #[error("provider `{provider}` has no base_url; set base_url under [providers.{provider}] in config.toml")]
    NoBaseUrl { provider: String },
    #[error("{url} rejected the API key (HTTP {status}): check {env}. Server said: {detail}")]
    Unauthorized { url: String, status: u16, env: String, detail: String },
    #[error(
        "model `{model}` is not available at {url}: check CAIRN_MODEL or the model names in config.toml. Server said: {detail}"
    )]
    UnknownModel { model: String, url: String, detail: String },
    #[error(
        "cannot reach {url}: {detail}. Check that the server is running, or OPENAI_BASE_URL / base_url in config.toml"
    )]
    Unreachable { url: String, detail: String, retryable: bool },
    #[error(
        "{url} presented a TLS certificate this system does not trust ({detail}). If the server is the one you meant (a company proxy, a self-hosted gateway), add the CA that signed its certificate to the system's store, or name that CA's file in SSL_CERT_FILE"
    )]
    Untrusted { url: String, detail: String },
    #[error("{url} answered HTTP {status}: {detail}")]
    Status { url: String, status: u16, detail: String, retry_after: Option<Duration> },
    #[error("the model stream broke: {0}")]
    Stream(String),
    /// The connection dropped mid-answer; before any of the answer arrived, a retry may work.
    #[error("the connection to the model broke: {0}")]
    Reset(String),
    #[error(
        "the conversation no longer fits the model's context window ({detail}); start a new session, or pick a model with a larger window"
    )]
    ContextTooLong { detail: String },
    #[error(
        "the model sent nothing for {} s; the request was abandoned (raise [limits] stream_idle_timeout_secs if the model is just slow)",
        .0.as_secs()
    )]
    IdleTimeout(Duration),
    #[error(
        "the model's answer took longer than {} s and was abandoned; ask for a shorter answer or raise [limits] step_timeout_secs",
        .0.as_secs()
    )]
    StepTimeout(Duration),
    /// The scripted model's file is unusable or has no reply for this request.
    #[error("the model script {path} is unusable: {why}")]
    Script { path: String, why: String },
    #[error("could not write the request to the model: {0}")]
    Encode(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        match self {
            // 529 is Anthropic's "overloaded".
            LlmError::Status { status, .. } => *status == 429 || *status == 408 || *status >= 500,
            LlmError::Unreachable { retryable, .. } => *retryable,
            LlmError::Reset(_) => true,
            LlmError::MissingKey { .. }
            | LlmError::Untrusted { .. }
            | LlmError::UnknownProvider { .. }
            | LlmError::NoBaseUrl { .. }
            | LlmError::Unauthorized { .. }
            | LlmError::UnknownModel { .. }
            | LlmError::Stream(_)
            | LlmError::ContextTooLong { .. }
            | LlmError::IdleTimeout(_)
            | LlmError::StepTimeout(_)
            | LlmError::Script { .. } => false,
            LlmError::Encode(_) => false,
        }
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::Status { retry_after, .. } => *retry_after,
            LlmError::MissingKey { .. }
            | LlmError::UnknownProvider { .. }
            | LlmError::NoBaseUrl { .. }
            | LlmError::Unauthorized { .. }
            | LlmError::UnknownModel { .. }
            | LlmError::Unreachable { .. }
            | LlmError::Untrusted { .. }
            | LlmError::Stream(_)
            | LlmError::Reset(_)
            | LlmError::ContextTooLong { .. }
            | LlmError::IdleTimeout(_)
            | LlmError::StepTimeout(_)
            | LlmError::Script { .. } => None,
            LlmError::Encode(_) => None,
        }
    }
}

/// A provider ready to serve one model.
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    /// The model name without its provider prefix.
    pub model: String,
}

/// Finds the provider for `provider/model` and checks it can be called (key present).
pub fn resolve(config: &Config, model: &str) -> Result<Resolved, LlmError> {
    let (provider_name, model_name) = split_model(model);
    if provider_name == scripted::PROVIDER && !config.providers.contains_key(provider_name) {
        let provider = Arc::new(scripted::Scripted::load(std::path::Path::new(model_name))?);
        return Ok(Resolved { provider, model: model_name.to_owned() });
    }
    let Some(provider) = config.providers.get(provider_name) else {
        return Err(LlmError::UnknownProvider {
            provider: provider_name.to_owned(),
            model: model.to_owned(),
            known: config.providers.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    if provider.base_url.is_empty() {
        return Err(LlmError::NoBaseUrl { provider: provider_name.to_owned() });
    }
    let mut provider = provider.clone();
    provider.api_key = config.key(&provider);
    if let (Some(env), None) = (&provider.api_key_env, &provider.api_key) {
        return Err(LlmError::MissingKey { provider: provider_name.to_owned(), env: env.clone() });
    }
    let provider = &provider;
    use sse::{Auth, Endpoint};
    // The HTTP client is not touched here: a request gets it (see `http`), so resolving stays
    // cheap on the path of a prompt.
    let provider: Arc<dyn Provider> = match provider.api {
        Api::OpenaiChat => Arc::new(Endpoint::<openai_chat::Decoder>::new(
            provider,
            "chat/completions",
            Auth::Bearer,
            openai_chat::encode,
        )),
        Api::OpenaiResponses => Arc::new(Endpoint::<openai_responses::Decoder>::new(
            provider,
            "responses",
            Auth::Bearer,
            openai_responses::encode,
        )),
        Api::Anthropic => {
            Arc::new(Endpoint::<anthropic::Decoder>::new(provider, "messages", Auth::Anthropic, anthropic::encode))
        }
    };
    Ok(Resolved { provider, model: model_name.to_owned() })
}

/// Resolves `model` (on a thread that may block: a saved key is read from a file) and opens a
/// connection to its provider ahead of the first request ([`Provider::warm`]). No key or no
/// such provider: nothing, the request will say so.
pub async fn warm(config: Arc<Config>, model: String) {
    if let Ok(Ok(resolved)) = tokio::task::spawn_blocking(move || resolve(&config, &model)).await {
        resolved.provider.warm().await;
    }
}

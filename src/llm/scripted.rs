//! The scripted provider: `--model scripted:<file.json>` (or `CAIRN_MODEL=scripted:…`) answers
//! from a file instead of a model server, so an editor's developers can drive a deterministic
//! cairn with no network and no key.
//!
//! The file is read at each turn (edit it between prompts). A request is answered by the reply
//! whose position is the number of assistant messages in the conversation it carries: the first
//! request of a session gets `replies[0]`, the request after a tool call gets the next one, and a
//! later prompt goes on where the session stands, in this process or another. A request without
//! tools (a title, a compaction summary) gets `aside`. Every reply streams its `thinking`, then
//! its `text`, then its tool calls, each text piece after `delay_ms`; an `error` reply fails the
//! request as a server would with that HTTP status (429 and 5xx are retried).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;

use super::{EventStream, FinishReason, LlmError, ModelRequest, Provider, StreamEvent, ToolCallRequest};
use crate::history::{Part, Role, Usage, view};

/// The provider name in `scripted/<path>`, the normalized form of `scripted:<path>`.
pub const PROVIDER: &str = "scripted";

/// Whether `model` names the scripted provider, in either spelling (`scripted:` or `scripted/`,
/// any case, spaces around): a model the user may pick, never one a project's file names (its
/// file would choose the tool calls).
pub fn named(model: &str) -> bool {
    let model = model.trim();
    model.len() > PROVIDER.len()
        && model.is_char_boundary(PROVIDER.len())
        && model[..PROVIDER.len()].eq_ignore_ascii_case(PROVIDER)
        && matches!(model.as_bytes()[PROVIDER.len()], b':' | b'/')
}

/// The longest script read.
const MAX_SCRIPT: u64 = 16 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    replies: Vec<Reply>,
    /// The answer to requests without tools (titles, compaction summaries).
    #[serde(default = "default_aside")]
    aside: String,
}

fn default_aside() -> String {
    "Scripted session".to_owned()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    #[serde(default)]
    thinking: Option<Pieces>,
    #[serde(default)]
    text: Option<Pieces>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    /// Milliseconds before each streamed piece.
    #[serde(default)]
    delay_ms: u64,
    /// `stop` (the default without tool calls), `length` or `tool_calls`.
    #[serde(default)]
    finish: Option<String>,
    #[serde(default)]
    error: Option<ScriptedError>,
}

/// Text as one string or as the pieces it streams in.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Pieces {
    One(String),
    Many(Vec<String>),
}

impl Pieces {
    fn into_vec(self) -> Vec<String> {
        match self {
            Pieces::One(text) => vec![text],
            Pieces::Many(pieces) => pieces,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedError {
    status: u16,
    message: String,
}

/// A provider answering from the script at `path`.
pub struct Scripted {
    path: PathBuf,
}

impl Scripted {
    /// The script at `path`, checked now so that a wrong file is reported before the turn starts.
    pub fn load(path: &Path) -> Result<Self, LlmError> {
        read(path)?;
        Ok(Self { path: path.to_owned() })
    }
}

fn script_error(path: &Path, why: impl std::fmt::Display) -> LlmError {
    LlmError::Script { path: path.display().to_string(), why: why.to_string() }
}

fn read(path: &Path) -> Result<Script, LlmError> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|err| script_error(path, format!("cannot read it: {err}")))?;
    let mut text = String::new();
    file.take(MAX_SCRIPT + 1)
        .read_to_string(&mut text)
        .map_err(|err| script_error(path, format!("cannot read it: {err}")))?;
    if text.len() as u64 > MAX_SCRIPT {
        return Err(script_error(path, format!("it is larger than {MAX_SCRIPT} bytes")));
    }
    serde_json::from_str(&text).map_err(|err| {
        script_error(
            path,
            format!(
                "line {}, column {}: {err}; see \"Scripted model\" in the README for the format",
                err.line(),
                err.column()
            ),
        )
    })
}

#[async_trait::async_trait]
impl Provider for Scripted {
    async fn stream(&self, request: &ModelRequest<'_>) -> Result<EventStream, LlmError> {
        let path = self.path.clone();
        let mut script =
            tokio::task::spawn_blocking(move || read(&path)).await.map_err(|err| script_error(&self.path, err))??;
        let reply = if request.tools.is_empty() {
            Reply { text: Some(Pieces::One(std::mem::take(&mut script.aside))), ..Reply::default() }
        } else {
            let step = answers(request);
            let count = script.replies.len();
            if step >= count {
                return Err(script_error(
                    &self.path,
                    format!(
                        "it has {count} replies and this request, after {step} answers, needs reply {}; add replies or start a new session",
                        step + 1
                    ),
                ));
            }
            script.replies.swap_remove(step)
        };
        if let Some(error) = reply.error {
            let body = serde_json::json!({ "error": { "message": error.message } }).to_string();
            let url = format!("scripted:{}", self.path.display());
            return Err(super::sse::status_error(&url, error.status, &body, request.model, "no key", None));
        }
        Ok(events(reply, request, answers(request)))
    }
}

/// The model's answers so far in the conversation `request` carries: assistant messages with
/// something the model said (a message holding only a notice of cairn's does not count, in this
/// process or after a reload).
fn answers(request: &ModelRequest<'_>) -> usize {
    request
        .messages
        .iter()
        .filter(|seen| {
            seen.message.role == Role::Assistant
                && seen.message.parts.iter().any(|part| !matches!(part, Part::Notice { .. }))
        })
        .count()
}

/// The reply as a stream: its pieces one by one (each after the delay), then usage and finish.
fn events(reply: Reply, request: &ModelRequest<'_>, step: usize) -> EventStream {
    let delay = Duration::from_millis(reply.delay_ms);
    let mut events = Vec::new();
    let mut written = 0;
    for piece in reply.thinking.map(Pieces::into_vec).unwrap_or_default() {
        written += piece.len();
        events.push(StreamEvent::ReasoningDelta(piece));
    }
    for piece in reply.text.map(Pieces::into_vec).unwrap_or_default() {
        written += piece.len();
        events.push(StreamEvent::TextDelta(piece));
    }
    let calls = !reply.tool_calls.is_empty();
    for (at, call) in reply.tool_calls.into_iter().enumerate() {
        // Unique in the session: editors key their cards by id.
        let id = format!("call_scripted_{step}_{at}");
        let arguments = call.arguments.to_string();
        written += arguments.len();
        events.push(StreamEvent::ToolCallStarted { id: id.clone(), name: call.name.clone() });
        events.push(StreamEvent::ToolCall(ToolCallRequest { id, name: call.name, arguments }));
    }
    // Estimated as cairn budgets (4 characters a token), so usage and cost have figures to show.
    let input = view::estimate_text(request.system) + request.messages.iter().map(view::Seen::estimate).sum::<u64>();
    events.push(StreamEvent::Usage(Usage { input, output: (written as u64).div_ceil(4), ..Usage::default() }));
    let finish = match reply.finish.as_deref() {
        Some("length") => FinishReason::Length,
        Some("tool_calls") => FinishReason::ToolCalls,
        Some(_) | None if calls => FinishReason::ToolCalls,
        Some(_) | None => FinishReason::Stop,
    };
    events.push(StreamEvent::Finish(finish));
    futures::stream::iter(events)
        .then(move |event| async move {
            if !delay.is_zero() && matches!(event, StreamEvent::TextDelta(_) | StreamEvent::ReasoningDelta(_)) {
                tokio::time::sleep(delay).await;
            }
            Ok(event)
        })
        .boxed()
}

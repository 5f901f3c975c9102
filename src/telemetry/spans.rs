//! The spans and metrics of one turn, as the turn's states open and close them: the turn
//! (`invoke_agent`), each step, each model request (`chat`) and each tool call
//! (`execute_tool`), named and attributed after the OpenTelemetry GenAI conventions where they
//! have a name (`gen_ai.*`), under `cairn.*` where they do not.
//!
//! [`TurnSpans`] is kept by the turn between its states; every method does nothing unless
//! telemetry is on ([`super::active`]), so a turn without it pays one atomic load per call. The
//! turn span's parent is the client's span when its prompt carried a `traceparent`; a model
//! request's `traceparent` then names the request's span ([`TurnSpans::request_start`]). What a
//! span may say is chosen here: model, token counts, cost, times, the tool's name, its call id,
//! the permission decision and the outcome. Never a tool's arguments or result, never file
//! contents; the prompt's text only with `[telemetry] log_prompts` (bounded to
//! [`MOST_PROMPT`] bytes).

use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::trace::{Status, TraceContextExt as _};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::trace::TraceContext;

/// The most of a prompt's text put on a turn span (with `log_prompts`).
pub const MOST_PROMPT: usize = 16 * 1024;

/// The metric instruments.
pub(super) struct Instruments {
    tokens: Counter<u64>,
    token_usage: Histogram<u64>,
    cost: Counter<f64>,
    request_duration: Histogram<f64>,
    first_token: Histogram<f64>,
    tool_calls: Counter<u64>,
    tool_duration: Histogram<f64>,
    turn_duration: Histogram<f64>,
}

impl Instruments {
    pub(super) fn new(meter: &Meter) -> Self {
        Self {
            tokens: meter.u64_counter("cairn.tokens").with_unit("{token}").with_description("Tokens by kind").build(),
            token_usage: meter.u64_histogram("gen_ai.client.token.usage").with_unit("{token}").build(),
            cost: meter.f64_counter("cairn.cost").with_unit("USD").with_description("What model requests cost").build(),
            request_duration: meter.f64_histogram("gen_ai.client.operation.duration").with_unit("s").build(),
            first_token: meter
                .f64_histogram("cairn.model.time_to_first_token")
                .with_unit("s")
                .with_description("From sending a model request to its first streamed event")
                .build(),
            tool_calls: meter.u64_counter("cairn.tool.calls").with_unit("{call}").build(),
            tool_duration: meter.f64_histogram("cairn.tool.duration").with_unit("s").build(),
            turn_duration: meter.f64_histogram("cairn.turn.duration").with_unit("s").build(),
        }
    }
}

/// How a tool call was let run, or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by the mode or a rule, nobody asked.
    Allow,
    /// Refused by the mode or a rule (or nobody could be asked).
    Deny,
    /// The user allowed it.
    UserAllow,
    /// The user refused it.
    UserDeny,
}

impl Decision {
    fn name(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::UserAllow => "user_allow",
            Self::UserDeny => "user_deny",
        }
    }
}

/// A tool call's ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// It ran and failed.
    Failed,
    /// It never ran: refused, malformed, or paused for repeating itself.
    NotRun,
    Cancelled,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failed => "failed",
            Self::NotRun => "not_run",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What a model request used, as the provider counted it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tokens {
    /// New input, not from the cache.
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

struct Open {
    span: Span,
    started: Instant,
}

struct Request {
    open: Open,
    model: String,
    first: bool,
}

/// The open spans of one turn. Empty (and inert) when telemetry is off.
#[derive(Default)]
pub struct TurnSpans {
    turn: Option<Open>,
    step: Option<Open>,
    steps: u32,
    request: Option<Request>,
    /// The permission decided for each call of the step's answer, by its index.
    decided: Vec<(u32, Decision)>,
    calls: Vec<(u32, Open, String)>,
    input: u64,
    output: u64,
    /// What the turn's requests cost, when a price was known for one of them.
    cost: Option<f64>,
}

impl TurnSpans {
    /// Opens the turn's span, as a child of the client's span when `trace` came; `prompt` is
    /// asked for the user's prompt text only when `[telemetry] log_prompts` is on (`None`: no
    /// user wrote it, as for a sub-agent's).
    pub fn start(
        &mut self,
        trace: Option<&TraceContext>,
        model: &str,
        session: Option<&str>,
        prompt: impl FnOnce() -> Option<String>,
    ) {
        if !super::active() {
            return;
        }
        let span = tracing::info_span!(target: super::TARGET, "invoke_agent", otel.name = "invoke_agent cairn");
        if let Some(parent) = trace.and_then(remote) {
            let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
        }
        span.set_attribute("gen_ai.operation.name", "invoke_agent");
        span.set_attribute("gen_ai.agent.name", "cairn");
        span.set_attribute("gen_ai.request.model", model.to_owned());
        if let Some(session) = session {
            span.set_attribute("gen_ai.conversation.id", session.to_owned());
        }
        if let Some(text) = super::log_prompts().then(prompt).flatten() {
            let text = bounded(text);
            let messages = serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": text}]}]);
            span.set_attribute("gen_ai.input.messages", messages.to_string());
        }
        self.turn = Some(Open { span, started: Instant::now() });
    }

    /// A new step: the last one ends.
    pub fn step_start(&mut self) {
        let Some(turn) = &self.turn else { return };
        self.steps += 1;
        let span = tracing::info_span!(target: super::TARGET, parent: &turn.span, "step", otel.name = "step");
        span.set_attribute("cairn.step", i64::from(self.steps));
        self.step = Some(Open { span, started: Instant::now() });
        self.decided.clear();
    }

    /// The step ends (a request or calls still open end with it).
    pub fn step_end(&mut self) {
        self.request_end(None, None, Some("error"));
        self.step = None;
    }

    /// Opens a model request's span; returns the trace context it is sent with, naming that span
    /// (and passing on the client's `tracestate`), when telemetry is on.
    pub fn request_start(&mut self, model: &str, client: Option<&TraceContext>) -> Option<TraceContext> {
        self.turn.as_ref()?;
        self.request_end(None, None, Some("retried"));
        let parent = self.step.as_ref().or(self.turn.as_ref())?;
        let name = format!("chat {model}");
        let span = tracing::info_span!(target: super::TARGET, parent: &parent.span, "chat", otel.name = %name, otel.kind = "client");
        span.set_attribute("gen_ai.operation.name", "chat");
        span.set_attribute("gen_ai.request.model", model.to_owned());
        let context = span.context();
        let ours = context.span().span_context().clone();
        self.request =
            Some(Request { open: Open { span, started: Instant::now() }, model: model.to_owned(), first: false });
        ours.is_valid().then(|| {
            TraceContext::of_span(
                ours.trace_id().to_bytes(),
                ours.span_id().to_bytes(),
                ours.trace_flags().to_u8(),
                client,
            )
        })
    }

    /// The first event of the request's answer came.
    pub fn first_token(&mut self) {
        let Some(request) = self.request.as_mut().filter(|request| !request.first) else { return };
        request.first = true;
        let seconds = request.open.started.elapsed().as_secs_f64();
        request.open.span.set_attribute("cairn.time_to_first_token", seconds);
        if let Some(instruments) = super::instruments() {
            instruments.first_token.record(seconds, &[KeyValue::new("gen_ai.request.model", request.model.clone())]);
        }
    }

    /// The request ends: what it used and cost, and the error that ended it, if one did.
    pub fn request_end(&mut self, tokens: Option<Tokens>, cost: Option<f64>, error: Option<&str>) {
        let Some(Request { open, model, .. }) = self.request.take() else { return };
        let span = &open.span;
        let model_attr = KeyValue::new("gen_ai.request.model", model);
        if let Some(tokens) = tokens {
            let input = tokens.input + tokens.cache_read + tokens.cache_write;
            span.set_attribute("gen_ai.usage.input_tokens", count(input));
            span.set_attribute("gen_ai.usage.output_tokens", count(tokens.output));
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", count(tokens.cache_read));
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", count(tokens.cache_write));
            self.input += input;
            self.output += tokens.output;
            if let Some(instruments) = super::instruments() {
                for (kind, value) in [
                    ("input", tokens.input),
                    ("output", tokens.output),
                    ("cache_read", tokens.cache_read),
                    ("cache_write", tokens.cache_write),
                ] {
                    instruments.tokens.add(value, &[model_attr.clone(), KeyValue::new("cairn.token.kind", kind)]);
                }
                let chat = KeyValue::new("gen_ai.operation.name", "chat");
                for (kind, value) in [("input", input), ("output", tokens.output)] {
                    let attributes = [chat.clone(), model_attr.clone(), KeyValue::new("gen_ai.token.type", kind)];
                    instruments.token_usage.record(value, &attributes);
                }
            }
        }
        if let Some(cost) = cost {
            span.set_attribute("cairn.cost.usd", cost);
            *self.cost.get_or_insert(0.0) += cost;
            if let Some(instruments) = super::instruments() {
                instruments.cost.add(cost, std::slice::from_ref(&model_attr));
            }
        }
        let mut attributes = vec![KeyValue::new("gen_ai.operation.name", "chat"), model_attr];
        if let Some(error) = error {
            span.set_attribute("error.type", error.to_owned());
            span.set_status(Status::error(error.to_owned()));
            attributes.push(KeyValue::new("error.type", error.to_owned()));
        }
        if let Some(instruments) = super::instruments() {
            instruments.request_duration.record(open.started.elapsed().as_secs_f64(), &attributes);
        }
    }

    /// The permission decided for the call at `index` of the step's answer.
    pub fn decided(&mut self, index: u32, decision: Decision) {
        if self.turn.is_none() {
            return;
        }
        // A call the user allowed is judged again before it runs, allowed by that answer.
        if decision == Decision::Allow && self.decision(index) == Some(Decision::UserAllow) {
            return;
        }
        self.decided.retain(|(at, _)| *at != index);
        self.decided.push((index, decision));
    }

    /// Opens the span of the call at `index`, which starts running now; a sub-agent's turn
    /// started inside it is its child.
    pub fn call_start(&mut self, index: u32, name: &str, id: &str) -> Span {
        let Some(parent) = self.step.as_ref().or(self.turn.as_ref()) else { return Span::none() };
        let span = self.call_span(&parent.span, index, name, id);
        self.calls.push((index, Open { span: span.clone(), started: Instant::now() }, name.to_owned()));
        span
    }

    /// The call at `index` ended (`name` and `id` for one that never started).
    pub fn call_end(&mut self, index: u32, name: &str, id: &str, outcome: Outcome) {
        let (open, name) = match self.calls.iter().position(|(at, ..)| *at == index) {
            Some(at) => {
                let (_, open, name) = self.calls.swap_remove(at);
                (open, name)
            }
            None => {
                let Some(parent) = self.step.as_ref().or(self.turn.as_ref()) else { return };
                (Open { span: self.call_span(&parent.span, index, name, id), started: Instant::now() }, name.to_owned())
            }
        };
        let decision = self.decision(index);
        open.span.set_attribute("cairn.tool.outcome", outcome.name());
        if matches!(outcome, Outcome::Failed | Outcome::NotRun) {
            open.span.set_attribute("error.type", outcome.name());
            open.span.set_status(Status::error(outcome.name()));
        }
        if let Some(instruments) = super::instruments() {
            let tool = KeyValue::new("gen_ai.tool.name", name);
            let ended = KeyValue::new("cairn.tool.outcome", outcome.name());
            let decided = KeyValue::new("cairn.permission.decision", decision.map_or("none", Decision::name));
            instruments.tool_calls.add(1, &[tool.clone(), decided, ended.clone()]);
            if outcome != Outcome::NotRun {
                instruments.tool_duration.record(open.started.elapsed().as_secs_f64(), &[tool, ended]);
            }
        }
    }

    /// The turn ends, for `stop` (`end_turn`, `cancelled`, `error`, …).
    pub fn end(&mut self, stop: &str) {
        self.request_end(None, None, Some(stop));
        self.step = None;
        let Some(turn) = self.turn.take() else { return };
        turn.span.set_attribute("cairn.turn.stop", stop.to_owned());
        turn.span.set_attribute("cairn.turn.steps", i64::from(self.steps));
        turn.span.set_attribute("gen_ai.usage.input_tokens", count(self.input));
        turn.span.set_attribute("gen_ai.usage.output_tokens", count(self.output));
        if let Some(cost) = self.cost {
            turn.span.set_attribute("cairn.cost.usd", cost);
        }
        if stop == "error" {
            turn.span.set_status(Status::error("error"));
        }
        if let Some(instruments) = super::instruments() {
            let seconds = turn.started.elapsed().as_secs_f64();
            instruments.turn_duration.record(seconds, &[KeyValue::new("cairn.turn.stop", stop.to_owned())]);
        }
    }

    fn decision(&self, index: u32) -> Option<Decision> {
        self.decided.iter().find(|(at, _)| *at == index).map(|(_, decision)| *decision)
    }

    fn call_span(&self, parent: &Span, index: u32, name: &str, id: &str) -> Span {
        let title = format!("execute_tool {name}");
        let span = tracing::info_span!(target: super::TARGET, parent: parent, "execute_tool", otel.name = %title);
        span.set_attribute("gen_ai.operation.name", "execute_tool");
        span.set_attribute("gen_ai.tool.name", name.to_owned());
        span.set_attribute("gen_ai.tool.call.id", id.to_owned());
        if let Some(decision) = self.decision(index) {
            span.set_attribute("cairn.permission.decision", decision.name());
        }
        span
    }
}

/// The client's span as a remote parent.
fn remote(trace: &TraceContext) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.parent_id()).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(trace.flags(), 16).ok()?);
    let state = trace.state().and_then(|state| state.parse::<TraceState>().ok()).unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// A count as an attribute (they are signed).
fn count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// At most [`MOST_PROMPT`] bytes of `text`, cut at a character.
fn bounded(mut text: String) -> String {
    if text.len() > MOST_PROMPT {
        let mut end = MOST_PROMPT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

//! Compaction: making a long history fit its window again without deleting anything.
//!
//! `compact` plans and runs one compaction over a history, cheapest step first: prune old tool
//! outputs (no model call) when that frees enough; otherwise summarize everything before the
//! kept tail (the last `tail_turns` user-led turns within `tail_budget_pct` of the usable
//! window) with the summarizer model, in one request if the transcript fits its window, as a
//! rolling summary over pieces if not, and from the transcript's head and tail with the middle
//! dropped if even that would take too many requests. A prior summary is folded into the new
//! one. Sizes are estimated on the model's view as borrowed from the history (a marker about to
//! be added included), never on a copy. [`run`] records the outcome as a marker message (see
//! `history::view`); a failure leaves the history as it was. The Compacting state (entered when
//! the context in use reaches the threshold, or after the provider refused a request as too
//! long) and `/compact` both go through `run`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::events::{AgentEvent, Recorder};
use super::retry::{GaveUp, Retry};
use crate::config;
use crate::history::view::{self, Compaction, Method, Seen};
use crate::history::{Message, MessageMeta, Part, Role, Usage};
use crate::ids::MessageId;
use crate::llm::catalog::ModelInfo;
use crate::llm::retry::RetryPolicy;
use crate::llm::{self, LlmError, ModelRequest, Provider};
use crate::trace::TraceContext;

/// Tool outputs longer than this reach the summarizer cut to it.
const OUTPUT_CAP: usize = 2_000;
/// The tighter cut tried when the transcript does not fit the summarizer.
const TIGHT_OUTPUT_CAP: usize = 300;
/// More pieces than this and the middle is dropped instead.
const MAX_PIECES: usize = 6;
/// Room kept in the summarizer's window for its prompt and answer framing.
const FRAMING: u64 = 1_000;

const INSTRUCTIONS: &str = "You compact the conversation of a coding session so that it can go on in a \
fresh context. Write a summary with exactly these sections, as short bullet points, each under 500 tokens:\n\
## Goal\n## Progress\n## Decisions\n## Errors and corrections\n## Next steps\n\
Keep file paths, names, commands, numbers and the user's own requests exactly. If a previous summary is \
given, update it with the new conversation rather than starting over. Write only the summary.";

/// The model that writes summaries, and how.
pub struct Summarizer<'a> {
    pub provider: &'a dyn Provider,
    /// The name the provider knows.
    pub model: String,
    /// `provider/model`, stored on the marker message.
    pub model_ref: String,
    pub info: ModelInfo,
    pub settings: config::Compaction,
    pub retry: RetryPolicy,
}

/// One compaction to do.
pub struct Job<'a> {
    pub history: &'a mut Vec<Message>,
    pub recorder: &'a mut dyn Recorder,
    pub cancel: &'a CancellationToken,
    /// The session model's window and output limit: the usable window comes from them.
    pub window: u64,
    pub max_output: u64,
    /// The context in use now, as the provider last counted it.
    pub context_used: u64,
    /// Started by the threshold or an overflow (keeps a tail), not by `/compact` (keeps none).
    pub auto: bool,
    /// What the user asked the summary to keep (`/compact …`).
    pub instructions: Option<String>,
    /// The session's spending so far, for the usage update; the summary's cost is added.
    pub spent: f64,
    /// The client's trace context the summary requests carry (see [`crate::trace`]).
    pub trace: Option<&'a TraceContext>,
}

/// Why a compaction did not happen; the history is unchanged.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompactError {
    #[error("there is nothing old enough to compact yet")]
    NothingToDo,
    #[error("the summarizer failed: {0}")]
    Model(#[from] LlmError),
    #[error("the summarizer sent an empty summary")]
    Empty,
    #[error("the summary took longer than {} s", .0.as_secs())]
    Timeout(Duration),
    #[error("cancelled")]
    Cancelled,
}

/// A compaction that was made: its marker, and what the summaries cost (USD, 0 without prices).
#[derive(Debug)]
pub struct Compacted {
    pub compaction: Compaction,
    pub cost: f64,
}

/// What [`compact`] needs to know of a job.
struct Ask<'a> {
    /// The id the marker message will have.
    marker: &'a MessageId,
    cancel: &'a CancellationToken,
    window: u64,
    max_output: u64,
    context_used: u64,
    auto: bool,
    instructions: Option<&'a str>,
    trace: Option<&'a TraceContext>,
}

/// The tokens the summarizer used, and what they cost.
#[derive(Debug, Default)]
struct Spent {
    usage: Option<Usage>,
    calls: u32,
}

/// The context a window leaves usable: `window − min(reserve, max_output)`, the reserve never
/// more than half a (small) window.
pub fn usable(window: u64, max_output: u64, reserve: u64) -> u64 {
    window.saturating_sub(reserve.min(max_output).min(window / 2))
}

/// Compacts, records the marker (or the failure) and returns the marker with its cost; the
/// caller's history gets the marker message appended.
pub async fn run(summarizer: &Summarizer<'_>, job: Job<'_>) -> Result<Compacted, CompactError> {
    let id = MessageId::generate();
    job.recorder.record(AgentEvent::CompactionStarted { id: id.clone() });
    let ask = Ask {
        marker: &id,
        cancel: job.cancel,
        window: job.window,
        max_output: job.max_output,
        context_used: job.context_used,
        auto: job.auto,
        instructions: job.instructions.as_deref(),
        trace: job.trace,
    };
    let planned = tokio::select! {
        biased;
        () = job.cancel.cancelled() => Err(CompactError::Cancelled),
        planned = compact(summarizer, job.history, &ask) => planned,
    };
    let (compaction, spent) = match planned {
        Ok(done) => done,
        Err(err) => {
            tracing::warn!(%err, "compaction failed");
            job.recorder.record(AgentEvent::CompactionFailed { id, error: err.to_string() });
            return Err(err);
        }
    };
    let cost = spent.usage.and_then(|usage| summarizer.info.cost(&usage));
    let meta = MessageMeta {
        model: (spent.calls > 0).then(|| summarizer.model_ref.clone()),
        usage: spent.usage,
        cost,
        ..MessageMeta::default()
    };
    let message = Message { id, role: Role::Assistant, parts: vec![Part::Compaction(compaction.clone())], meta };
    tracing::info!(
        method = ?compaction.method,
        before = compaction.tokens_before,
        after = compaction.tokens_after,
        calls = spent.calls,
        "compacted"
    );
    job.recorder.record(AgentEvent::CompactionFinished(message.clone()));
    job.history.push(message);
    let cost = cost.unwrap_or(0.0);
    let shown = summarizer.info.shown_spend(job.spent + cost);
    job.recorder.record(AgentEvent::ContextUsage { used: compaction.tokens_after, size: job.window, cost: shown });
    Ok(Compacted { compaction, cost })
}

/// Plans and runs the cheapest compaction that works; see the module documentation.
async fn compact(
    summarizer: &Summarizer<'_>,
    history: &[Message],
    job: &Ask<'_>,
) -> Result<(Compaction, Spent), CompactError> {
    let settings = &summarizer.settings;
    let previous = view::latest_marker(history);
    // Where the current view starts: the previous tail, or the start.
    let from = match previous {
        Some((at, c)) => {
            c.tail_start.as_ref().and_then(|id| history.iter().position(|m| m.id == *id)).unwrap_or(at + 1)
        }
        None => 0,
    };
    let estimated_before = view::model_view(history).estimate();
    // The provider's count minus what the compaction saves, by estimate: the system prompt and
    // the tool schemas are in the count and are never compacted.
    let predict = |estimate: u64| {
        if job.context_used == 0 {
            estimate
        } else {
            job.context_used.saturating_sub(estimated_before.saturating_sub(estimate)).max(estimate)
        }
    };
    let usable = usable(job.window, job.max_output, settings.reserve_tokens);
    let budget = usable * settings.tail_budget_pct / 100;
    let tail = if job.auto { tail_start(history, from, budget, settings.tail_turns) } else { None };
    if job.auto && tail.is_none() {
        // Only the turn in progress: summarizing it away would lose the request itself.
        return Err(CompactError::NothingToDo);
    }
    let summarize_until = tail.unwrap_or(history.len());
    let old: Vec<&Message> = history[from..summarize_until].iter().filter(|m| view::marker(m).is_none()).collect();
    if old.is_empty() {
        return Err(CompactError::NothingToDo);
    }
    let tokens_before = predict(estimated_before);

    if job.auto
        && let Some(tail) = tail
    {
        // Pruning old outputs first: free, and enough when the outputs were the bulk.
        let pruned = Compaction {
            summary: previous.map(|(_, c)| c.summary.clone()).unwrap_or_default(),
            tail_start: Some(history[from.min(history.len() - 1)].id.clone()),
            pruned_before: Some(history[tail].id.clone()),
            auto: true,
            method: Method::Pruned,
            tokens_before,
            tokens_after: 0,
            summarized: 0,
        };
        let after = predict(estimate_with(history, job.marker, &pruned));
        if after <= usable / 2 {
            return Ok((Compaction { tokens_after: after, ..pruned }, Spent::default()));
        }
    }

    let prior = previous.map(|(_, c)| c.summary.as_str()).filter(|s| !s.is_empty());
    let cap = summarizer
        .info
        .context_window
        .saturating_sub(settings.summary_max_tokens.min(summarizer.info.max_output) + FRAMING)
        .max(FRAMING);
    let mut spent = Spent::default();
    let fits = |text: &str| view::estimate_text(text) + prior.map_or(0, view::estimate_text) <= cap;
    let full = render(&old, OUTPUT_CAP);
    let (summary, method) = if fits(&full) {
        (summarize(summarizer, prior, &full, job, &mut spent).await?, Method::Summary)
    } else {
        let tight = render(&old, TIGHT_OUTPUT_CAP);
        if fits(&tight) {
            (summarize(summarizer, prior, &tight, job, &mut spent).await?, Method::Summary)
        } else {
            let room = cap.saturating_sub(prior.map_or(0, view::estimate_text)).max(FRAMING);
            let pieces = split(&old, room * 3);
            if pieces.len() <= MAX_PIECES {
                let mut rolling = prior.map(str::to_owned);
                for piece in &pieces {
                    rolling = Some(summarize(summarizer, rolling.as_deref(), piece, job, &mut spent).await?);
                }
                (rolling.unwrap_or_default(), Method::Chunked)
            } else {
                let dropped = pieces.len() - 2;
                let text = format!(
                    "{}\n[… {dropped} parts of the conversation dropped to fit …]\n{}",
                    pieces.first().map_or("", String::as_str),
                    pieces.last().map_or("", String::as_str)
                );
                (summarize(summarizer, prior, &text, job, &mut spent).await?, Method::DropMiddle)
            }
        }
    };
    let mut compaction = Compaction {
        summary,
        tail_start: tail.map(|at| history[at].id.clone()),
        pruned_before: None,
        auto: job.auto,
        method,
        tokens_before,
        tokens_after: 0,
        summarized: old.len(),
    };
    compaction.tokens_after = predict(estimate_with(history, job.marker, &compaction));
    Ok((compaction, spent))
}

/// The estimated view if `compaction`, in the marker message `id`, were added to the history.
fn estimate_with(history: &[Message], id: &MessageId, compaction: &Compaction) -> u64 {
    view::view_under(history, history.len(), id, compaction).estimate()
}

/// Where the kept tail starts: the earliest of the last user-led turns that fit `budget`
/// (at least the latest turn, whatever its size). `None` if there is nothing before it.
fn tail_start(history: &[Message], from: usize, budget: u64, keep: usize) -> Option<usize> {
    // Markers are assistant messages, so every user message starts a turn.
    let turns: Vec<usize> = (from..history.len()).filter(|&i| history[i].role == Role::User).collect();
    let kept = |start: usize| view::estimate(history[start..].iter().filter(|m| view::marker(m).is_none()));
    let latest = *turns.last()?;
    let mut start = latest;
    for &candidate in turns.iter().rev().skip(1).take(keep.saturating_sub(1)) {
        if kept(candidate) > budget {
            break;
        }
        start = candidate;
    }
    if kept(start) > budget {
        tracing::warn!(budget, "the latest turn alone is over the tail budget; keeping it anyway");
    }
    (start > from).then_some(start)
}

/// The transcript the summarizer reads: who said what, tool calls with their (cut) results.
fn render(messages: &[&Message], output_cap: usize) -> String {
    messages.iter().map(|m| render_one(m, output_cap)).collect::<Vec<_>>().join("\n")
}

fn render_one(message: &Message, output_cap: usize) -> String {
    let who = match message.role {
        Role::User => "User",
        Role::Assistant => "Assistant",
    };
    let mut out = String::new();
    for part in &message.parts {
        let line = match part {
            Part::Text { text } if !text.trim().is_empty() => format!("{who}: {}", text.trim()),
            Part::Resource { uri, text, .. } => format!("{who} attached {uri}:\n{}", cut(text, output_cap)),
            Part::ResourceLink { uri, .. } => format!("{who} linked {uri}"),
            Part::Image { .. } | Part::BlobResource { .. } => format!("{who} attached a file"),
            Part::Tool(tool) => format!(
                "{who} called {} {} → {:?}: {}",
                tool.name,
                cut(&tool.input, output_cap),
                tool.state,
                cut(tool.output.as_deref().unwrap_or(""), output_cap)
            ),
            Part::Text { .. }
            | Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::Compaction(_) => continue,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn cut(text: &str, cap: usize) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    let end = (0..=cap).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}… [{} more characters]", &text[..end], text.len() - end)
}

/// The transcript in pieces of at most `chars` characters, split between messages (a single
/// message longer than that is cut).
fn split(messages: &[&Message], chars: u64) -> Vec<String> {
    let chars = usize::try_from(chars).unwrap_or(usize::MAX);
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for message in messages {
        let text = cut(&render_one(message, TIGHT_OUTPUT_CAP), chars);
        if !piece.is_empty() && piece.len() + text.len() > chars {
            pieces.push(std::mem::take(&mut piece));
        }
        piece.push_str(&text);
        piece.push('\n');
    }
    if !piece.is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// One summary request, with the summarizer's timeout and retries.
async fn summarize(
    summarizer: &Summarizer<'_>,
    prior: Option<&str>,
    transcript: &str,
    job: &Ask<'_>,
    spent: &mut Spent,
) -> Result<String, CompactError> {
    let mut content = String::new();
    if let Some(prior) = prior {
        content.push_str(&format!("Previous summary:\n{prior}\n\n"));
    }
    content.push_str(&format!("Conversation to summarize:\n{transcript}"));
    if let Some(instructions) = job.instructions {
        content.push_str(&format!("\n\nThe user asks the summary to keep: {instructions}"));
    }
    let message = Message::new(Role::User, vec![Part::Text { text: content }], MessageMeta::default());
    let request = ModelRequest {
        model: &summarizer.model,
        system: INSTRUCTIONS,
        messages: vec![Seen::whole(&message)],
        tools: Vec::new(),
        max_output: summarizer.settings.summary_max_tokens.min(summarizer.info.max_output),
        thought: None,
        images: summarizer.info.images,
        trace: job.trace,
        cache_key: None,
        web_search: false,
    };
    let mut retry = Retry { policy: summarizer.retry, cancel: job.cancel, notices: None };
    let mut attempts = 0;
    loop {
        spent.calls += 1;
        let timeout = summarizer.settings.timeout;
        let result = match tokio::time::timeout(timeout, llm::reply(summarizer.provider, &request)).await {
            Ok(result) => result,
            Err(_) => return Err(CompactError::Timeout(timeout)),
        };
        match result {
            Ok(reply) => {
                if let Some(usage) = reply.usage {
                    *spent.usage.get_or_insert_with(Usage::default) += usage;
                }
                let text = reply.text.trim().to_owned();
                return if text.is_empty() { Err(CompactError::Empty) } else { Ok(text) };
            }
            Err(err) => match retry.wait(&mut attempts, err).await {
                Ok(()) => {}
                Err(GaveUp::Failed(err)) => return Err(err.into()),
                Err(GaveUp::Cancelled) => return Err(CompactError::Cancelled),
            },
        }
    }
}

//! Compaction markers and the model's view of a history.
//!
//! Nothing is ever deleted to save context. A compaction adds a marker message (a
//! [`Compaction`] part) that records the summary, where the verbatim tail starts, and before
//! which message tool outputs are pruned. [`model_view`] resolves what the model is sent from
//! the latest marker at read time; rewinding past a marker hides it with its turn, which brings
//! the summarized messages back by itself.

use serde::{Deserialize, Serialize};

use super::{Message, MessageMeta, Part, Role};
use crate::ids::MessageId;

/// The prefix of the user-role message that carries a summary to the model (a mid-history
/// system message is not accepted by every provider).
pub const SUMMARY_PREFIX: &str = "[Conversation Summary — older messages compacted]";

/// A compaction marker, stored as the only part of a synthetic assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// What the messages before `tail_start` amounted to; empty when only outputs were pruned
    /// and nothing was summarized yet.
    pub summary: String,
    /// The first message sent verbatim; `None`: nothing before the marker is.
    pub tail_start: Option<MessageId>,
    /// Tool outputs of messages before this one reach the model as a short stub.
    pub pruned_before: Option<MessageId>,
    /// Started by the context filling up (not by `/compact`).
    pub auto: bool,
    pub method: Method,
    /// Estimated tokens of the model's view before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// How many messages the summary replaced.
    pub summarized: usize,
}

/// How the marker's view was made, cheapest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Old tool outputs pruned; no model call.
    Pruned,
    /// One summary request.
    Summary,
    /// A rolling summary over pieces that each fit the summarizer.
    Chunked,
    /// The head and tail of the transcript summarized, the middle dropped.
    DropMiddle,
}

impl Compaction {
    /// The stub a pruned tool output becomes.
    pub fn pruned_stub(output: &str) -> String {
        format!("<output pruned, about {} tokens>", estimate_text(output))
    }
}

/// The message's compaction marker, if it is a marker message.
pub fn marker(message: &Message) -> Option<&Compaction> {
    message.parts.iter().find_map(|part| match part {
        Part::Compaction(compaction) => Some(compaction),
        _ => None,
    })
}

/// The latest marker and its position.
pub fn latest_marker(history: &[Message]) -> Option<(usize, &Compaction)> {
    history.iter().enumerate().rev().find_map(|(i, m)| marker(m).map(|c| (i, c)))
}

/// What the model is sent: the latest marker's summary as a user message, then the messages
/// from its tail on (markers left out), with tool outputs before `pruned_before` stubbed.
pub fn model_view(history: &[Message]) -> Vec<Message> {
    let Some((at, compaction)) = latest_marker(history) else { return history.to_vec() };
    let start = compaction.tail_start.as_ref().and_then(|id| history.iter().position(|m| m.id == *id)).unwrap_or(at);
    let mut view = Vec::with_capacity(history.len() - start + 1);
    if !compaction.summary.is_empty() {
        let text = format!("{SUMMARY_PREFIX}\n\n{}", compaction.summary);
        let meta = MessageMeta::default();
        view.push(Message { id: history[at].id.clone(), role: Role::User, parts: vec![Part::Text { text }], meta });
    }
    for message in &history[start..] {
        if marker(message).is_some() {
            continue;
        }
        let prune = compaction.pruned_before.as_ref().is_some_and(|before| message.id < *before);
        if prune {
            view.push(pruned(message));
        } else {
            view.push(message.clone());
        }
    }
    view
}

/// The message with its tool outputs replaced by stubs; call, input and state stay.
pub fn pruned(message: &Message) -> Message {
    let mut message = message.clone();
    for part in &mut message.parts {
        if let Part::Tool(tool) = part
            && let Some(output) = &tool.output
            && output.len() > 200
        {
            tool.output = Some(Compaction::pruned_stub(output));
        }
    }
    message
}

/// The context in use after the last step: the provider's count from the last step, or the
/// estimate a compaction made if it came later.
pub fn context_used(history: &[Message]) -> u64 {
    for message in history.iter().rev() {
        if let Some(compaction) = marker(message) {
            return compaction.tokens_after;
        }
        if let Some(u) = message.meta.usage {
            return u.context();
        }
    }
    0
}

/// A rough token count (4 characters a token); used only to compare and to budget, never shown
/// as usage.
pub fn estimate_text(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The estimated tokens of messages as the model sees them (4 per message for its framing).
pub fn estimate<'a>(messages: impl IntoIterator<Item = &'a Message>) -> u64 {
    messages.into_iter().map(|m| 4 + m.parts.iter().map(estimate_part).sum::<u64>()).sum()
}

fn estimate_part(part: &Part) -> u64 {
    match part {
        Part::Text { text } | Part::Reasoning { text, .. } => estimate_text(text),
        Part::RedactedReasoning { data } => estimate_text(data),
        Part::Image { .. } | Part::BlobResource { .. } => 1_000,
        Part::ResourceLink { uri, name, .. } => estimate_text(uri) + estimate_text(name),
        Part::Resource { text, .. } => estimate_text(text),
        Part::Tool(tool) => {
            estimate_text(&tool.name) + estimate_text(&tool.input) + tool.output.as_deref().map_or(0, estimate_text)
        }
        Part::Notice { .. } | Part::Compaction(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ToolPart, Usage};

    fn text(role: Role, text: &str) -> Message {
        Message::new(role, vec![Part::Text { text: text.into() }], MessageMeta::default())
    }

    fn marker_message(compaction: Compaction) -> Message {
        Message::new(Role::Assistant, vec![Part::Compaction(compaction)], MessageMeta::default())
    }

    fn compaction(summary: &str, tail_start: Option<MessageId>) -> Compaction {
        Compaction {
            summary: summary.into(),
            tail_start,
            pruned_before: None,
            auto: true,
            method: Method::Summary,
            tokens_before: 1_000,
            tokens_after: 100,
            summarized: 2,
        }
    }

    #[test]
    fn the_view_is_the_summary_then_the_tail_then_what_came_after() {
        let mut history = vec![text(Role::User, "old q"), text(Role::Assistant, "old a")];
        history.push(text(Role::User, "kept q"));
        history.push(text(Role::Assistant, "kept a"));
        let tail = history[2].id.clone();
        history.push(marker_message(compaction("they talked", Some(tail))));
        history.push(text(Role::User, "new q"));
        let view = model_view(&history);
        let texts: Vec<String> = view
            .iter()
            .map(|m| match &m.parts[0] {
                Part::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [format!("{SUMMARY_PREFIX}\n\nthey talked"), "kept q".into(), "kept a".into(), "new q".into()]
        );
        assert_eq!(view[0].role, Role::User);
        assert_eq!(context_used(&history[..5]), 100, "the estimate after compaction until a step reports usage");
    }

    #[test]
    fn without_a_tail_only_the_summary_and_later_messages_remain_and_old_outputs_can_be_pruned() {
        let mut tool = ToolPart::new("c1".into(), "read".into());
        tool.output = Some("x".repeat(5_000));
        let with_tool = Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default());
        let mut history = vec![text(Role::User, "q"), with_tool];
        let mut c = compaction("", Some(history[0].id.clone()));
        c.pruned_before = Some(MessageId::generate());
        history.push(marker_message(c));
        let view = model_view(&history);
        assert_eq!(view.len(), 2, "prune-only keeps every message");
        let Part::Tool(tool) = &view[1].parts[0] else { panic!() };
        assert_eq!(tool.output.as_deref(), Some("<output pruned, about 1250 tokens>"));

        history.push(marker_message(compaction("all of it", None)));
        history.push(text(Role::User, "next"));
        assert_eq!(model_view(&history).len(), 2, "summary + next");
    }

    #[test]
    fn context_used_comes_from_the_last_step_with_usage() {
        let mut answer = text(Role::Assistant, "a");
        answer.meta.usage = Some(Usage { input: 10, output: 5, reasoning: 0, cache_read: 20, cache_write: 1 });
        assert_eq!(context_used(&[text(Role::User, "q"), answer]), 36);
        assert_eq!(context_used(&[]), 0);
    }
}

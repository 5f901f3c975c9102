//! Compaction markers and the model's view of a history.
//!
//! Nothing is ever deleted to save context. A compaction adds a marker message (a
//! [`Compaction`] part) that records the summary, where the verbatim tail starts, and before
//! which message tool outputs are pruned. [`model_view`] resolves what the model is sent from
//! the latest marker at read time; rewinding past a marker hides it with its turn, which brings
//! the summarized messages back by itself.
//!
//! The view ([`ModelView`]) is the marker's summary as a user message, then the tail, each
//! message borrowed from the history as a [`Seen`] (whether its long tool outputs go as stubs,
//! and its tool images as a line naming each, as they also do past the images one request
//! carries), so nothing is copied. [`view_under`] is the view a marker about to be added would
//! give (compaction's estimates); [`context_used`] is the context in use after the last step.
//! Token estimates count 4 characters a token and serve budgeting only.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{Message, MessageMeta, Part, Role, ToolImage, ToolPart};
use crate::ids::MessageId;
use crate::images::{REQUEST_IMAGE_BYTES, REQUEST_IMAGES};

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

    /// The line a pruned image (`data` in base64) becomes.
    pub fn pruned_image(mime_type: &str, data: &str) -> String {
        let size = crate::visible::human_size(super::tool::decoded_size(data) as u64);
        format!("<image pruned: {mime_type}, {size}>")
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

/// A tool output longer than this (bytes) becomes a stub once its message is pruned.
const PRUNE_OVER: usize = 200;

/// One message as the model is sent it: borrowed from the history; when a compaction pruned
/// it, its long tool outputs reach the model as stubs (the history keeps them whole), and its
/// tool images as a line each, as do those of a message past the images one request carries.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub message: &'a Message,
    pub pruned: bool,
    /// Its tool images are sent (never when pruned).
    pub images: bool,
}

impl<'a> Seen<'a> {
    /// The message as it is.
    pub fn whole(message: &'a Message) -> Self {
        Self { message, pruned: false, images: true }
    }

    /// The message pruned by a compaction.
    pub fn pruned(message: &'a Message) -> Self {
        Self { message, pruned: true, images: false }
    }

    /// What the model is told about one of this message's tool calls: a stub for a long output
    /// of a pruned message (and a line per image it no longer sees), else
    /// [`ToolPart::model_output`].
    pub fn tool_output(&self, tool: &'a ToolPart) -> Cow<'a, str> {
        let pruned = self.pruned && tool.state.is_terminal();
        let text = match tool.output.as_deref() {
            Some(output) if pruned && output.len() > PRUNE_OVER => Cow::Owned(Compaction::pruned_stub(output)),
            Some(_) | None => tool.model_output(),
        };
        if self.images || tool.model_images().is_empty() {
            return text;
        }
        let mut text = text.into_owned();
        for image in &tool.images {
            text.push('\n');
            text.push_str(&Compaction::pruned_image(&image.mime_type, &image.data));
        }
        Cow::Owned(text)
    }

    /// The images the model is sent with one of this message's tool calls: none once the
    /// message is pruned or past the request's images (the output says which were dropped).
    pub fn tool_images(&self, tool: &'a ToolPart) -> &'a [ToolImage] {
        if self.images { tool.model_images() } else { &[] }
    }

    /// The estimated tokens of the message as sent (4 for its framing).
    pub fn estimate(&self) -> u64 {
        4 + self
            .message
            .parts
            .iter()
            .map(|part| match part {
                Part::Tool(tool) if self.pruned => {
                    let output = match tool.output.as_deref() {
                        Some(output) if output.len() > PRUNE_OVER => estimate_text(&Compaction::pruned_stub(output)),
                        Some(output) => estimate_text(output),
                        None => 0,
                    };
                    let images: u64 = tool
                        .images
                        .iter()
                        .map(|image| estimate_text(&Compaction::pruned_image(&image.mime_type, &image.data)))
                        .sum();
                    estimate_text(&tool.name) + estimate_text(&tool.input) + output + images
                }
                // Images past what the request carries go as a line each.
                Part::Tool(tool) if !self.images => {
                    let lines: u64 = tool
                        .model_images()
                        .iter()
                        .map(|image| estimate_text(&Compaction::pruned_image(&image.mime_type, &image.data)))
                        .sum();
                    estimate_part(part).saturating_sub(IMAGE_TOKENS * tool.images.len() as u64) + lines
                }
                part => match part.image() {
                    Some((mime_type, data)) if !self.images => {
                        estimate_text(&Compaction::pruned_image(mime_type, data))
                    }
                    _ => estimate_part(part),
                },
            })
            .sum::<u64>()
    }
}

/// What the model is sent, resolved from the latest marker and borrowed from the history: the
/// marker's summary as a user message (the one message made for the view), then the messages
/// from its tail on (markers left out), those before `pruned_before` pruned. Building it copies
/// nothing of the history.
#[derive(Debug)]
pub struct ModelView<'h> {
    summary: Option<Message>,
    /// The history from where the view starts.
    tail: &'h [Message],
    pruned_before: Option<&'h MessageId>,
    /// This message and those before it send no tool images (the request holds enough).
    images_through: Option<&'h MessageId>,
}

impl ModelView<'_> {
    /// The messages in the order the model reads them.
    pub fn messages(&self) -> impl Iterator<Item = Seen<'_>> {
        let (pruned_before, images_through) = (self.pruned_before, self.images_through);
        let tail = self.tail.iter().filter(|message| marker(message).is_none()).map(move |message| {
            let pruned = pruned_before.is_some_and(|before| message.id < *before);
            let images = !pruned && images_through.is_none_or(|through| message.id > *through);
            Seen { message, pruned, images }
        });
        self.summary.iter().map(Seen::whole).chain(tail)
    }

    /// The estimated tokens of the view (see [`estimate`]).
    pub fn estimate(&self) -> u64 {
        self.messages().map(|seen| seen.estimate()).sum()
    }
}

/// What the model is sent (see [`ModelView`]).
pub fn model_view(history: &[Message]) -> ModelView<'_> {
    match latest_marker(history) {
        Some((at, compaction)) => view_under(history, at, &history[at].id, compaction),
        None => ModelView {
            summary: None,
            tail: history,
            pruned_before: None,
            images_through: images_through(history, None),
        },
    }
}

/// The newest message whose tool images no longer fit one request ([`REQUEST_IMAGES`],
/// [`REQUEST_IMAGE_BYTES`]; it and the older ones are sent a line per image instead); `None`
/// when every image fits. Pruned messages send none.
fn images_through<'h>(tail: &'h [Message], pruned_before: Option<&MessageId>) -> Option<&'h MessageId> {
    let (mut count, mut bytes) = (0, 0);
    for message in tail.iter().rev() {
        if pruned_before.is_some_and(|before| message.id < *before) {
            return None;
        }
        for part in &message.parts {
            if let Part::Tool(tool) = part {
                count += tool.model_images().len();
                bytes += tool.model_images().iter().map(|image| image.data.len()).sum::<usize>();
            } else if let Some((_, data)) = part.image() {
                count += 1;
                bytes += data.len();
            }
        }
        if count > REQUEST_IMAGES || bytes > REQUEST_IMAGE_BYTES {
            return Some(&message.id);
        }
    }
    None
}

/// The view if `compaction`, in a marker message `id` at position `at`, were the latest marker
/// (`at` may be the history's length: a marker about to be added).
pub fn view_under<'h>(history: &'h [Message], at: usize, id: &MessageId, compaction: &'h Compaction) -> ModelView<'h> {
    let start = compaction.tail_start.as_ref().and_then(|id| history.iter().position(|m| m.id == *id)).unwrap_or(at);
    let summary = (!compaction.summary.is_empty()).then(|| {
        let text = format!("{SUMMARY_PREFIX}\n\n{}", compaction.summary);
        Message { id: id.clone(), role: Role::User, parts: vec![Part::Text { text }], meta: MessageMeta::default() }
    });
    let tail = history.get(start..).unwrap_or_default();
    let pruned_before = compaction.pruned_before.as_ref();
    ModelView { summary, tail, pruned_before, images_through: images_through(tail, pruned_before) }
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

/// What an image is estimated to cost in tokens, whatever its size (providers scale large
/// images down to about a megapixel, some 1,600 tokens; most are smaller).
const IMAGE_TOKENS: u64 = 1_000;

/// The estimated tokens of messages as stored (4 per message for its framing).
pub fn estimate<'a>(messages: impl IntoIterator<Item = &'a Message>) -> u64 {
    messages.into_iter().map(|m| 4 + m.parts.iter().map(estimate_part).sum::<u64>()).sum()
}

fn estimate_part(part: &Part) -> u64 {
    match part {
        Part::Text { text } | Part::Reasoning { text, .. } => estimate_text(text),
        Part::RedactedReasoning { data } => estimate_text(data),
        Part::Image { .. } | Part::BlobResource { .. } => IMAGE_TOKENS,
        Part::ResourceLink { uri, name, .. } => estimate_text(uri) + estimate_text(name),
        Part::Resource { text, .. } => estimate_text(text),
        Part::Tool(tool) => {
            estimate_text(&tool.name)
                + estimate_text(&tool.input)
                + tool.output.as_deref().map_or(0, estimate_text)
                + IMAGE_TOKENS * tool.images.len() as u64
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
            .messages()
            .map(|seen| match &seen.message.parts[0] {
                Part::Text { text } => text.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            [format!("{SUMMARY_PREFIX}\n\nthey talked"), "kept q".into(), "kept a".into(), "new q".into()]
        );
        assert_eq!(view.messages().next().map(|seen| seen.message.role), Some(Role::User));
        assert!(
            std::ptr::eq(view.messages().nth(1).map_or(std::ptr::null(), |seen| seen.message), &history[2]),
            "the tail is the history's own messages, not copies"
        );
        assert_eq!(context_used(&history[..5]), 100, "the estimate after compaction until a step reports usage");
    }

    #[test]
    fn without_a_tail_only_the_summary_and_later_messages_remain_and_old_outputs_can_be_pruned() {
        let mut tool = ToolPart::new("c1".into(), "read".into());
        tool.input = "{}".into();
        tool.state = crate::history::CallState::Succeeded;
        tool.output = Some("x".repeat(5_000));
        let with_tool = Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default());
        let mut history = vec![text(Role::User, "q"), with_tool];
        let mut c = compaction("", Some(history[0].id.clone()));
        c.pruned_before = Some(MessageId::generate());
        history.push(marker_message(c));
        let view = model_view(&history);
        let seen: Vec<Seen<'_>> = view.messages().collect();
        assert_eq!(seen.len(), 2, "prune-only keeps every message");
        let Part::Tool(tool) = &seen[1].message.parts[0] else { panic!() };
        assert_eq!(seen[1].tool_output(tool), "<output pruned, about 1250 tokens>");
        assert_eq!(tool.output.as_deref().map(str::len), Some(5_000), "the history keeps the output whole");
        let stub = estimate_text("<output pruned, about 1250 tokens>");
        assert_eq!(view.estimate(), (4 + 1) + (4 + 1 + 1 + stub), "estimated as sent, with the stub");

        history.push(marker_message(compaction("all of it", None)));
        history.push(text(Role::User, "next"));
        assert_eq!(model_view(&history).messages().count(), 2, "summary + next");
    }

    #[test]
    fn a_pruned_message_drops_its_tool_images_for_a_line_naming_each() {
        let mut tool = ToolPart::new("c1".into(), "read".into());
        tool.state = crate::history::CallState::Succeeded;
        tool.output = Some("a.png: PNG image (the image follows).".into());
        tool.images = vec![ToolImage { mime_type: "image/png".into(), data: "A".repeat(4 * 1024) }];
        let message = Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default());
        let Part::Tool(tool) = &message.parts[0] else { panic!() };
        let (whole, pruned) = (Seen::whole(&message), Seen::pruned(&message));
        assert_eq!(whole.tool_images(tool).len(), 1);
        assert_eq!(whole.tool_output(tool), "a.png: PNG image (the image follows).");
        assert!(pruned.tool_images(tool).is_empty());
        assert_eq!(
            pruned.tool_output(tool),
            "a.png: PNG image (the image follows).\n<image pruned: image/png, 3.0 KiB>"
        );
        assert!(whole.estimate() >= IMAGE_TOKENS && pruned.estimate() < 50, "pruning frees the image's tokens");
    }

    /// An answer whose one call read an image of `bytes` base64 characters.
    fn read_image(bytes: usize) -> Message {
        let mut tool = ToolPart::new("c".into(), "read".into());
        tool.state = crate::history::CallState::Succeeded;
        tool.output = Some("a.png: PNG image (the image follows).".into());
        tool.images = vec![ToolImage { mime_type: "image/png".into(), data: "A".repeat(bytes) }];
        Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default())
    }

    /// For each message of the view, whether its images are sent and what its call's output says.
    fn sent(history: &[Message]) -> Vec<(bool, String)> {
        model_view(history)
            .messages()
            .map(|seen| {
                let Some(Part::Tool(tool)) = seen.message.parts.first() else { panic!("a call") };
                (!seen.tool_images(tool).is_empty(), seen.tool_output(tool).into_owned())
            })
            .collect()
    }

    #[test]
    fn one_request_carries_the_newest_images_up_to_a_count_and_a_size_and_names_the_others() {
        let history: Vec<Message> = (0..REQUEST_IMAGES + 3).map(|_| read_image(1024)).collect();
        let seen = sent(&history);
        assert!(seen[3..].iter().all(|(images, _)| *images), "the newest {REQUEST_IMAGES} go");
        for (images, output) in &seen[..3] {
            assert!(!images);
            assert_eq!(output, "a.png: PNG image (the image follows).\n<image pruned: image/png, 768 bytes>");
        }

        let quarter = REQUEST_IMAGE_BYTES / 4;
        let history: Vec<Message> = (0..6).map(|_| read_image(quarter)).collect();
        let seen: Vec<bool> = sent(&history).into_iter().map(|(images, _)| images).collect();
        assert_eq!(seen, [false, false, true, true, true, true], "as many as fit in the size");
    }

    #[test]
    fn the_users_own_images_count_toward_what_one_request_carries() {
        let pasted = |_| {
            let image = Part::Image { mime_type: "image/png".into(), data: "A".repeat(1024), uri: None };
            Message::new(Role::User, vec![image], MessageMeta::default())
        };
        let mut history: Vec<Message> = (0..REQUEST_IMAGES).map(pasted).collect();
        history.push(read_image(1024));
        let seen: Vec<bool> = model_view(&history).messages().map(|seen| seen.images).collect();
        assert!(!seen[0] && seen[1..].iter().all(|images| *images), "the oldest paste goes as a line: {seen:?}");
        let estimates: Vec<u64> = model_view(&history).messages().map(|seen| seen.estimate()).collect();
        assert!(estimates[0] < 50 && estimates[1] >= IMAGE_TOKENS, "estimated as sent: {estimates:?}");
        let dropped = Seen { images: false, ..Seen::whole(&history[REQUEST_IMAGES]) };
        assert!(dropped.estimate() < 50, "a read image past the request is a line: {}", dropped.estimate());
    }

    #[test]
    fn context_used_comes_from_the_last_step_with_usage() {
        let mut answer = text(Role::Assistant, "a");
        answer.meta.usage = Some(Usage { input: 10, output: 5, reasoning: 0, cache_read: 20, cache_write: 1 });
        assert_eq!(context_used(&[text(Role::User, "q"), answer]), 36);
        assert_eq!(context_used(&[]), 0);
    }
}

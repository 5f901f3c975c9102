//! The conversation as cairn stores and reasons about it: messages made of parts.
//!
//! These types are the one shape shared by the turn loop, the providers, the store (which keeps
//! each `Part` verbatim as `data_json`) and the ACP adapter (which converts them to wire content).
//! They are snake_case at rest; the wire's camelCase lives only in `acp::convert`, and the model
//! requests are written from them only in `llm`. Tool calls and their lifecycle are in `tool`;
//! compaction markers and the model's view of a history in `view`.

mod tool;
pub mod view;

use serde::{Deserialize, Serialize};

use crate::ids::MessageId;

pub use tool::{
    CallState, IllegalTransition, Location, PlanEntry, PlanPriority, PlanStatus, SNIP_OVER, ToolContent, ToolImage,
    ToolKind, ToolPart, decoded_size, plan_steps,
};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a session, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    pub id: MessageId,
    pub role: Role,
    pub parts: Vec<Part>,
    pub meta: MessageMeta,
}

impl Message {
    pub fn new(role: Role, parts: Vec<Part>, meta: MessageMeta) -> Self {
        Self { id: MessageId::generate(), role, parts, meta }
    }
}

/// The text of the text parts among `parts`, in order (reasoning, tools and the rest left out).
pub fn texts(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|part| match part {
        Part::Text { text } => Some(text.as_str()),
        _ => None,
    })
}

/// What the model requests behind these messages cost (USD): their `cost`s added up, the
/// fallback when the store's running total cannot be read.
pub fn cost(messages: &[Message]) -> f64 {
    messages.iter().filter_map(|message| message.meta.cost).sum()
}

/// What we know about a message besides its parts (`messages.metadata_json`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MessageMeta {
    /// The `provider/model` that wrote (assistant) or was chosen for (user) this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How an assistant message ended; `None` while it streams, or if the process died mid-stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<Finish>,
    /// The error that ended the message, when `finish` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Token usage the provider reported for this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// What this step cost in USD, when the model's prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// SHA-256 (hex) of the system prompt this assistant message was written under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_digest: Option<String>,
}

/// Why an assistant message stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Finish {
    /// The model finished its answer.
    EndTurn,
    /// The model hit its output-token limit.
    MaxTokens,
    /// The provider refused or filtered the content.
    Refusal,
    /// The model asked for tools; the turn goes on.
    ToolUse,
    /// The user cancelled; the text stops where it stopped.
    Interrupted,
    /// The stream failed; `MessageMeta::error` says why.
    Error,
}

/// Token usage of one model step, already normalized: `input` excludes cached tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    /// Everything the request sent: new input and cached input, read or written.
    pub fn prompt(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    /// The context this step leaves in use: its prompt plus its answer.
    pub fn context(&self) -> u64 {
        self.prompt() + self.output
    }
}

impl std::ops::AddAssign for Usage {
    /// Counts another request's tokens in (a compaction's several summaries).
    fn add_assign(&mut self, other: Usage) {
        self.input += other.input;
        self.output += other.output;
        self.reasoning += other.reasoning;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// One piece of a message, stored verbatim as `parts.data_json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    /// The model's visible reasoning. For Anthropic thinking, `signature` must go back with the
    /// text, byte for byte, on every later request.
    Reasoning {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider encrypted (Anthropic `redacted_thinking`); sent back as it came.
    RedactedReasoning {
        data: String,
    },
    /// A note for the user that is not part of the conversation with the model (a retry, a limit).
    Notice {
        text: String,
    },
    Image {
        mime_type: String,
        /// Base64, as the client sent it.
        data: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<i64>,
    },
    /// A text resource embedded in the prompt (an @-mentioned file, a selection).
    Resource {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        text: String,
    },
    /// A binary resource embedded in the prompt, base64.
    BlobResource {
        uri: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        blob: String,
    },
    /// A tool call the model made, with its outcome once known.
    Tool(ToolPart),
    /// A compaction marker: the summary and where the verbatim tail starts (see `view`).
    Compaction(view::Compaction),
}

impl Part {
    /// The image this part shows the model, as `(mime_type, base64 data)`: a prompt image, or
    /// an embedded binary resource whose type is an image.
    pub fn image(&self) -> Option<(&str, &str)> {
        match self {
            Part::Image { mime_type, data, .. } => Some((mime_type, data)),
            Part::BlobResource { mime_type: Some(mime), blob, .. } if mime.starts_with("image/") => Some((mime, blob)),
            Part::Text { .. }
            | Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::ResourceLink { .. }
            | Part::Resource { .. }
            | Part::BlobResource { .. }
            | Part::Tool(_)
            | Part::Compaction(_) => None,
        }
    }

    /// Rewrites message ids this part refers to, after its session's messages were renamed.
    pub fn remap_ids(&mut self, renamed: &[(MessageId, MessageId)]) {
        let remap = |id: &mut Option<MessageId>| {
            if let Some((_, new)) = renamed.iter().find(|(old, _)| id.as_ref() == Some(old)) {
                *id = Some(new.clone());
            }
        };
        match self {
            Part::Compaction(compaction) => {
                remap(&mut compaction.tail_start);
                // `pruned_before` may name the marker's own (later) id or any id: map it to the
                // first copied message at or after it, so the same messages stay pruned.
                if let Some(before) = &compaction.pruned_before {
                    compaction.pruned_before = Some(
                        renamed
                            .iter()
                            .find(|(old, _)| old >= before)
                            .map_or_else(MessageId::generate, |(_, new)| new.clone()),
                    );
                }
            }
            Part::Text { .. }
            | Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::Image { .. }
            | Part::ResourceLink { .. }
            | Part::Resource { .. }
            | Part::BlobResource { .. }
            | Part::Tool(_) => {}
        }
    }

    /// The `parts.type` column value.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text { .. } => "text",
            Part::Reasoning { .. } => "reasoning",
            Part::RedactedReasoning { .. } => "redacted_reasoning",
            Part::Notice { .. } => "notice",
            Part::Image { .. } => "image",
            Part::ResourceLink { .. } => "resource_link",
            Part::Resource { .. } => "resource",
            Part::BlobResource { .. } => "blob_resource",
            Part::Tool(_) => "tool",
            Part::Compaction(_) => "compaction",
        }
    }
}

/// Ends every tool call a crash left unfinished, so it is shown failed and never run again.
/// Returns the parts it changed, by message and index, for the caller to store.
pub fn finalize_orphans(messages: &mut [Message]) -> Vec<(MessageId, u32, Part)> {
    let mut changed = Vec::new();
    for message in messages {
        for (index, part) in message.parts.iter_mut().enumerate() {
            if finalize_orphan(part) {
                changed.push((message.id.clone(), u32::try_from(index).unwrap_or(u32::MAX), part.clone()));
            }
        }
    }
    changed
}

/// Ends `part` if it is a tool call a crash left unfinished (a call waiting for permission is
/// cancelled, the others fail, saying why); answers whether it changed.
pub fn finalize_orphan(part: &mut Part) -> bool {
    let Part::Tool(tool) = part else { return false };
    if tool.state.is_terminal() {
        return false;
    }
    if tool.state.advance(CallState::Failed).is_err() {
        let _ = tool.state.advance(CallState::Cancelled);
    }
    let why = "Interrupted by a restart of the agent; the call did not finish and was not run again.";
    tool.output = Some(why.to_owned());
    tool.content = vec![ToolContent::Text { text: why.to_owned() }];
    // One whose arguments were still coming is shown now, failed.
    tool.streaming = false;
    true
}

/// The same messages under fresh ids (in order, so they still sort), with every reference from
/// one message to another rewritten to the new ids. Parts are otherwise copied verbatim.
pub fn with_new_ids(messages: Vec<Message>) -> Vec<Message> {
    let renamed: Vec<(MessageId, MessageId)> = messages.iter().map(|m| (m.id.clone(), MessageId::generate())).collect();
    messages
        .into_iter()
        .zip(&renamed)
        .map(|(mut message, (_, new))| {
            message.id = new.clone();
            for part in &mut message.parts {
                part.remap_ids(&renamed);
            }
            message
        })
        .collect()
}

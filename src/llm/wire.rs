//! What the three request writers share: user content and tool results as every API can express
//! them (with the one placeholder an image becomes for a model that takes none), and small
//! serializers that write borrowed data straight into a request body (an image as a `data:` URL,
//! a tool call's arguments as the model wrote them, texts joined only when there are several).

use std::borrow::Cow;
use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use super::ModelRequest;
use crate::history::view::{Compaction, Seen};
use crate::history::{Part, ToolImage, ToolPart, decoded_size};

/// A user message's content as every API can express it: text and images.
pub(crate) enum UserBlock<'a> {
    Text(std::borrow::Cow<'a, str>),
    Image { mime_type: &'a str, data: &'a str },
}

/// What an image becomes in a request to a model that takes none: one line saying what was
/// there and why it is not, so the request succeeds and the model knows something was shown.
pub(crate) fn omitted_image(mime_type: &str, data: &str, model: &str) -> String {
    let size = crate::visible::human_size(decoded_size(data) as u64);
    format!("[image omitted: {mime_type}, {size} — {model} does not take images]")
}

/// The blocks of a user message: resources become text the model can read, image blobs images
/// (or, for a model that takes none, their placeholders; for a message whose images the request
/// no longer carries, a line naming each).
pub(crate) fn user_blocks<'a>(seen: Seen<'a>, request: &ModelRequest<'_>) -> Vec<UserBlock<'a>> {
    let mut blocks = Vec::new();
    for part in &seen.message.parts {
        if let Some((mime_type, data)) = part.image() {
            blocks.push(if !request.images {
                UserBlock::Text(Cow::Owned(omitted_image(mime_type, data, request.model)))
            } else if !seen.images {
                UserBlock::Text(Cow::Owned(Compaction::pruned_image(mime_type, data)))
            } else {
                UserBlock::Image { mime_type, data }
            });
            continue;
        }
        let block = match part {
            Part::Text { text } => UserBlock::Text(Cow::Borrowed(text)),
            Part::ResourceLink { uri, name, title, description, .. } => {
                let mut text = format!("[@{name}]({uri})");
                for extra in [title, description].into_iter().flatten() {
                    text.push_str(&format!(" — {extra}"));
                }
                UserBlock::Text(Cow::Owned(text))
            }
            Part::Resource { uri, text, .. } => {
                UserBlock::Text(Cow::Owned(format!("<resource uri=\"{uri}\">\n{text}\n</resource>")))
            }
            Part::BlobResource { uri, mime_type, blob } => UserBlock::Text(Cow::Owned(format!(
                "<resource uri=\"{uri}\">binary content ({}, {} base64 bytes) not shown</resource>",
                mime_type.as_deref().unwrap_or("unknown type"),
                blob.len()
            ))),
            Part::Image { .. }
            | Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::Tool(_)
            | Part::Compaction(_) => continue,
        };
        blocks.push(block);
    }
    blocks
}

/// What the model is told of one tool call: the text of its result and the images sent with it.
/// A model that takes no images gets, instead of each, its placeholder on a line of the text.
pub(crate) fn tool_result<'a>(
    request: &ModelRequest<'_>,
    seen: Seen<'a>,
    tool: &'a ToolPart,
) -> (Cow<'a, str>, &'a [ToolImage]) {
    let (text, images) = (seen.tool_output(tool), seen.tool_images(tool));
    if request.images || images.is_empty() {
        return (text, images);
    }
    let mut text = text.into_owned();
    for image in images {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&omitted_image(&image.mime_type, &image.data, request.model));
    }
    (Cow::Owned(text), &[])
}

/// An image as a `data:` URL, written into the body without building the string first.
pub(crate) struct DataUrl<'a> {
    pub mime_type: &'a str,
    pub data: &'a str,
}

impl fmt::Display for DataUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "data:{};base64,{}", self.mime_type, self.data)
    }
}

impl Serialize for DataUrl<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A tool call's arguments as a JSON value: the model's text as it is when it is JSON, else `{}`.
pub(crate) enum Arguments<'a> {
    Raw(&'a RawValue),
    Empty,
}

impl<'a> Arguments<'a> {
    pub fn of(input: &'a str) -> Self {
        serde_json::from_str(input).map_or(Arguments::Empty, Arguments::Raw)
    }
}

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Arguments::Raw(raw) => raw.serialize(serializer),
            Arguments::Empty => serializer.serialize_map(Some(0))?.end(),
        }
    }
}

/// Texts joined into one, borrowed as long as there is only one.
#[derive(Debug, Default)]
pub(crate) struct Joined<'a>(Option<Cow<'a, str>>);

impl<'a> Joined<'a> {
    /// Adds `text`, after `separator` if something came before.
    pub fn push(&mut self, text: Cow<'a, str>, separator: &str) {
        match &mut self.0 {
            None => self.0 = Some(text),
            Some(joined) => {
                let joined = joined.to_mut();
                joined.push_str(separator);
                joined.push_str(&text);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.as_deref().is_none_or(str::is_empty)
    }

    /// The joined text, leaving this empty.
    pub fn take(&mut self) -> Cow<'a, str> {
        self.0.take().unwrap_or_default()
    }
}

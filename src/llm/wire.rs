//! What the three request writers share: user content as every API can express it, and small
//! serializers that write borrowed data straight into a request body (an image as a `data:` URL,
//! a tool call's arguments as the model wrote them, texts joined only when there are several).

use std::borrow::Cow;
use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

use crate::history::{Message, Part};

/// A user message's content as every API can express it: text and images.
pub(crate) enum UserBlock<'a> {
    Text(std::borrow::Cow<'a, str>),
    Image { mime_type: &'a str, data: &'a str },
}

/// The blocks of a user message: resources become text the model can read, image blobs images.
pub(crate) fn user_blocks(message: &Message) -> Vec<UserBlock<'_>> {
    let mut blocks = Vec::new();
    for part in &message.parts {
        let block = match part {
            Part::Text { text } => UserBlock::Text(Cow::Borrowed(text)),
            Part::Image { mime_type, data, .. } => UserBlock::Image { mime_type, data },
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
            Part::BlobResource { uri, mime_type, blob } => match mime_type.as_deref() {
                Some(mime) if mime.starts_with("image/") => UserBlock::Image { mime_type: mime, data: blob },
                other => UserBlock::Text(Cow::Owned(format!(
                    "<resource uri=\"{uri}\">binary content ({}, {} base64 bytes) not shown</resource>",
                    other.unwrap_or("unknown type"),
                    blob.len()
                ))),
            },
            Part::Reasoning { .. }
            | Part::RedactedReasoning { .. }
            | Part::Notice { .. }
            | Part::Tool(_)
            | Part::Compaction(_) => continue,
        };
        blocks.push(block);
    }
    blocks
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

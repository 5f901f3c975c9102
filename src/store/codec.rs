//! How the store keeps cairn's values as text, whichever database holds them: a part as its
//! kind and JSON (text and reasoning read without buffering), a session's settings in its
//! metadata, its rules, and the editor's instructions, and a message as an export carries it
//! (`StoredMessage`, its stored JSON texts unparsed). Both backends read and write through
//! these, so a session exported from one reads the same in the other.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::agent::prompt::ClientPrompt;
use crate::history::Part;
use crate::permissions::{Rule, Unreadable};
use crate::store::SessionRow;

/// A part's columns beside its JSON: the tool call's id and state, for a tool call.
pub fn tool_columns(part: &Part) -> (Option<&str>, Option<&'static str>) {
    match part {
        Part::Tool(tool) => (Some(tool.call_id.as_str()), Some(tool.state.as_str())),
        Part::Text { .. }
        | Part::Reasoning { .. }
        | Part::RedactedReasoning { .. }
        | Part::Notice { .. }
        | Part::Image { .. }
        | Part::ResourceLink { .. }
        | Part::Resource { .. }
        | Part::BlobResource { .. }
        | Part::Compaction(_) => (None, None),
    }
}

/// The editor's instructions as the metadata keeps them (a JSON text); a damaged one is left
/// out, with a warning, rather than making the session unreadable.
pub fn client_prompt(text: &str) -> Option<ClientPrompt> {
    serde_json::from_str(text)
        .inspect_err(|err| tracing::warn!(%err, "unreadable editor system prompt in a session's metadata; left out"))
        .ok()
}

/// A session's metadata as first stored: the settings its row holds.
pub fn metadata(row: &SessionRow) -> String {
    let mut metadata = serde_json::Map::new();
    let mut keep = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            metadata.insert(key.to_owned(), serde_json::Value::String(value));
        }
    };
    keep("thought_level", row.thought_level.clone());
    keep("busy_prompt", row.busy_prompt.clone());
    keep("system_prompt", row.system_prompt.as_ref().and_then(|prompt| serde_json::to_string(prompt).ok()));
    keep("title_by", row.title_by_client.then(|| "client".to_owned()));
    serde_json::Value::Object(metadata).to_string()
}

/// A stored part from its JSON and its `type` column. Text and reasoning, nearly every part a
/// long session holds, are read as plain structs: an internally tagged enum (`Part`) is read by
/// buffering every field first, which made loads several times slower.
pub fn read_part(kind: Option<&str>, data: &str) -> serde_json::Result<Part> {
    #[derive(serde::Deserialize)]
    struct Text<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        text: String,
        #[serde(default)]
        signature: Option<String>,
    }
    if let Some(kind @ ("text" | "reasoning")) = kind
        && let Ok(read) = serde_json::from_str::<Text<'_>>(data)
        && read.kind == kind
    {
        return Ok(if kind == "text" {
            Part::Text { text: read.text }
        } else {
            Part::Reasoning { text: read.text, signature: read.signature }
        });
    }
    serde_json::from_str(data)
}

/// A session's rules from their JSON; an entry (or a whole text) that cannot be read becomes
/// a stand-in that makes decisions ask until it is revoked.
pub fn session_rules(json: &str) -> Vec<Rule> {
    match serde_json::from_str::<Vec<serde_json::Value>>(json) {
        Ok(entries) => entries
            .into_iter()
            .map(|entry| {
                serde_json::from_value(entry.clone()).unwrap_or_else(|err| {
                    tracing::warn!(%err, "a session permission rule cannot be read");
                    Rule::unreadable(&entry.to_string(), Unreadable::SessionEntry)
                })
            })
            .collect(),
        Err(err) => {
            tracing::warn!(%err, "the session's permission rules cannot be read");
            vec![Rule::unreadable(json, Unreadable::SessionEntry)]
        }
    }
}

/// Appends `text`, a part's pieces as read, to the part.
pub fn append(part: &mut Part, text: &str) {
    match part {
        Part::Text { text: all } | Part::Reasoning { text: all, .. } => all.push_str(text),
        Part::RedactedReasoning { .. }
        | Part::Notice { .. }
        | Part::Image { .. }
        | Part::ResourceLink { .. }
        | Part::Resource { .. }
        | Part::BlobResource { .. }
        | Part::Tool(_)
        | Part::Compaction(_) => {}
    }
}

pub fn to_json<T: serde::Serialize>(value: &T) -> String {
    // Our own plain data types always serialize; an empty object is the safe fallback.
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}

/// One visible message as the database holds it: its metadata and parts are the stored JSON
/// texts, unparsed, so that nothing this version does not understand is lost on the way out.
#[derive(Debug, Serialize)]
pub struct StoredMessage {
    pub id: String,
    pub role: String,
    /// `messages.metadata_json`.
    pub meta: Box<RawValue>,
    /// Each part's `parts.data_json`, in order.
    pub parts: Vec<Box<RawValue>>,
}

/// A streaming part's stored JSON with the text of its pieces appended to its `text` (see
/// `stream`); `None` if it has no text to append to.
pub fn with_pieces(data: &str, pieces: &str) -> Option<String> {
    let mut part: serde_json::Map<String, serde_json::Value> = serde_json::from_str(data).ok()?;
    let Some(serde_json::Value::String(text)) = part.get_mut("text") else { return None };
    text.push_str(pieces);
    serde_json::to_string(&part).ok()
}

/// The stored text as JSON; a text that is not JSON (a damaged row) is kept as a JSON string.
pub fn raw(text: String) -> Box<RawValue> {
    let damaged = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err();
    match damaged.then(|| serde_json::value::to_raw_value(&text)) {
        Some(Ok(quoted)) => quoted,
        Some(Err(_)) | None => RawValue::from_string(text).unwrap_or_default(),
    }
}

//! Sessions out of and into the database whole: the stored rows of a session's messages read
//! verbatim (for `cairn sessions export --format jsonl`), and a session written in one
//! transaction with all its messages (`cairn sessions import`).

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::value::RawValue;

use super::rows::{self, ReadError, SessionRow};
use crate::history::Message;
use crate::ids::SessionId;

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

/// Every visible message of a session, oldest first, with its parts, as stored.
pub(super) fn stored_messages(conn: &Connection, id: &SessionId) -> Result<Vec<StoredMessage>, ReadError> {
    let mut stmt = conn.prepare_cached(super::rows::VISIBLE_MESSAGES)?;
    let mut rows = stmt.query([id.as_str()])?;
    let mut messages: Vec<StoredMessage> = Vec::new();
    while let Some(row) = rows.next()? {
        let message_id: String = row.get(0)?;
        if messages.last().is_none_or(|last| last.id != message_id) {
            let meta = raw(row.get(2)?);
            messages.push(StoredMessage { id: message_id, role: row.get(1)?, meta, parts: Vec::new() });
        }
        if let (Some(data), Some(message)) = (row.get::<_, Option<String>>(3)?, messages.last_mut()) {
            let pieces: Option<String> = row.get(4)?;
            let data = match pieces {
                Some(pieces) => with_pieces(&data, &pieces).unwrap_or(data),
                None => data,
            };
            message.parts.push(raw(data));
        }
    }
    Ok(messages)
}

/// A streaming part's stored JSON with the text of its pieces appended to its `text` (see
/// `stream`); `None` if it has no text to append to.
fn with_pieces(data: &str, pieces: &str) -> Option<String> {
    let mut part: serde_json::Map<String, serde_json::Value> = serde_json::from_str(data).ok()?;
    let Some(serde_json::Value::String(text)) = part.get_mut("text") else { return None };
    text.push_str(pieces);
    serde_json::to_string(&part).ok()
}

/// The stored text as JSON; a text that is not JSON (a damaged row) is kept as a JSON string.
fn raw(text: String) -> Box<RawValue> {
    let damaged = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err();
    match damaged.then(|| serde_json::value::to_raw_value(&text)) {
        Some(Ok(quoted)) => quoted,
        Some(Err(_)) | None => RawValue::from_string(text).unwrap_or_default(),
    }
}

/// Creates `row` with `messages` (ids and parts as given) and its rollups computed from them.
/// The caller's savepoint makes it all or nothing.
pub(super) fn import_session(conn: &Connection, row: &SessionRow, messages: &[Message]) -> rusqlite::Result<()> {
    rows::insert_session(conn, row)?;
    for message in messages {
        rows::insert_message(conn, &row.id, message, row.updated_at)?;
    }
    rows::recompute_rollups(conn, &row.id)?;
    // The conversation happened when it did: the session keeps its times.
    conn.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
        .execute(params![row.id.as_str(), row.updated_at])?;
    Ok(())
}

//! Sessions out of and into the database whole: the stored rows of a session's messages read
//! verbatim (for `cairn sessions export --format jsonl`), and a session written in one
//! transaction with all its messages (`cairn sessions import`).

use rusqlite::{Connection, params};

use super::rows::{self, ReadError, SessionRow};
use crate::history::Message;
use crate::ids::SessionId;
pub use crate::store::codec::StoredMessage;
use crate::store::codec::{raw, with_pieces};

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

/// Creates `row` with `messages` (ids and parts as given) and its rollups computed from them,
/// its cost the row's when that is more. The caller's savepoint makes it all or nothing.
pub(super) fn import_session(conn: &Connection, row: &SessionRow, messages: &[Message]) -> rusqlite::Result<()> {
    rows::insert_session(conn, row)?;
    for message in messages {
        rows::insert_message(conn, &row.id, message, row.updated_at)?;
    }
    rows::recompute_rollups(conn, &row.id)?;
    // The conversation happened when it did: the session keeps its times; and what it cost,
    // when the row says more than its messages (a copied session whose rewound ones stayed).
    conn.prepare_cached("UPDATE sessions SET updated_at = ?2, cost_usd = max(cost_usd, ?3) WHERE id = ?1")?
        .execute(params![row.id.as_str(), row.updated_at, row.cost_usd])?;
    Ok(())
}

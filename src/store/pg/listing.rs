//! Listing sessions on PostgreSQL: the pages `sqlite::listing` describes, with the same filters
//! (owner, directory, sub-agents, sessions never prompted, archived) in the query, so a page
//! holds `limit` rows whenever that many match, and the same cursor: the last row's
//! `updated_at.id`, opaque to clients, so a cursor reads the same whichever backend made it.
//! Ids are compared byte by byte (`COLLATE "C"`), as SQLite does, whatever the database's
//! collation: ties on the time page in the same order on either backend.

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::rows::{SESSION_COLUMNS, session_from_row};
use crate::store::{Archived, ListPage, Listing};

/// Why a page could not be read: the cursor, or the database.
pub enum PageError {
    InvalidCursor(String),
    Query(tokio_postgres::Error),
}

/// One page of the sessions `listing` shows, after `cursor`.
pub async fn page(
    client: &impl GenericClient,
    listing: &Listing,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ListPage, PageError> {
    let (after_at, after_id) = match cursor {
        None => (i64::MAX, String::new()),
        Some(cursor) => ListPage::parse_cursor(cursor).ok_or_else(|| PageError::InvalidCursor(cursor.to_owned()))?,
    };
    let Listing { owner, cwd, subagents, unprompted, archived } = listing;
    let archived: i32 = match archived {
        Archived::Exclude => 0,
        Archived::Include => 1,
        Archived::Only => 2,
    };
    // One more than asked, to know whether there is a next page.
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions
         WHERE ($8 = 1 OR (archived_at IS NOT NULL) = ($8 = 2))
           AND ($1::text IS NULL OR cwd = $1) AND ($5 OR subagent IS NULL)
           AND (updated_at < $2 OR (updated_at = $2 AND id COLLATE \"C\" < $3)) AND ($6::text IS NULL OR owner = $6)
           AND ($7 OR EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id))
         ORDER BY updated_at DESC, id COLLATE \"C\" DESC LIMIT $4"
    );
    let params: [&(dyn ToSql + Sync); 8] = [cwd, &after_at, &after_id, &fetch, subagents, owner, unprompted, &archived];
    let rows = client.query(&sql, &params).await.map_err(PageError::Query)?;
    let sessions: Vec<_> = rows.iter().map(session_from_row).collect();
    Ok(ListPage::of(sessions, limit))
}

//! Listing sessions: the pages of `session/list`, `cairn sessions list`, `exec --continue` and
//! `cairn sessions prune`, most recently updated first, each page ending with a cursor that
//! names its last row.
//!
//! A listing shows what its [`Listing`] asks for. By default it leaves out sub-agents' sessions,
//! archived sessions (`session/archive`: kept, loadable by id, listed only when asked for with
//! [`Archived`]; their `archived_at` column is read from the row the scan is on already) and
//! sessions that hold no message at all: those opened and never prompted, which a client
//! opening two sessions per chat, or a process killed before it could tidy up, leaves behind
//! (a process removes its own at a normal exit, see `Registry::shutdown`). `prune` asks for
//! them too. The filter is part of the query, so a page holds `limit` rows whenever that many
//! match, and the cursor (the last row's `updated_at.id`) is the same whatever is filtered.
//! Whether a session holds a message is one probe of the index `messages_by_session`.
//! Archiving changes no `updated_at`: a session unarchived is listed where it was.

use rusqlite::{Connection, params};

use crate::ids::SessionId;

use super::rows::{ReadError, SESSION_COLUMNS, SessionRow, session_from_row};

/// Which sessions a listing shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Only the sessions of this principal of `cairn serve --auth`.
    pub owner: Option<String>,
    /// Only the sessions created in this working directory.
    pub cwd: Option<String>,
    /// Sub-agents' sessions too.
    pub subagents: bool,
    /// Sessions holding no message too: never prompted (and never given a message otherwise).
    pub unprompted: bool,
    /// Which sessions by whether they are archived.
    pub archived: Archived,
}

/// Which sessions a listing shows by whether they are archived (ACP's `archived` filter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Archived {
    /// Only those not archived.
    #[default]
    Exclude,
    /// Both.
    Include,
    /// Only archived ones.
    Only,
}

impl Archived {
    /// The value of the page query's `?8`.
    fn code(self) -> i64 {
        match self {
            Archived::Exclude => 0,
            Archived::Include => 1,
            Archived::Only => 2,
        }
    }
}

/// One page of sessions.
#[derive(Debug, PartialEq)]
pub struct ListPage {
    pub sessions: Vec<SessionRow>,
    /// Pass back to get the next page; `None` at the end.
    pub next_cursor: Option<String>,
}

impl ListPage {
    /// The page of `sessions`, read one past `limit` so that whether more follow is known: the
    /// cursor names the last one shown, as `updated_at.id`.
    pub(in crate::store) fn of(mut sessions: Vec<SessionRow>, limit: usize) -> Self {
        let next_cursor = if sessions.len() > limit {
            sessions.truncate(limit);
            sessions.last().map(|last| format!("{}.{}", last.updated_at, last.id))
        } else {
            None
        };
        Self { sessions, next_cursor }
    }

    /// A cursor [`Self::of`] made: `updated_at.id`, the id a session's (`ses_…`); anything
    /// else is no cursor of ours.
    pub(in crate::store) fn parse_cursor(cursor: &str) -> Option<(i64, String)> {
        let (at, id) = cursor.split_once('.')?;
        Some((at.parse().ok()?, id.starts_with("ses_").then(|| id.to_owned())?))
    }
}

/// The page query: `?1` cwd, `?2`/`?3` the cursor's time and id, `?4` how many rows, `?5`
/// sub-agents too, `?6` owner, `?7` sessions without messages too, `?8` [`Archived`]'s code.
pub(super) fn page_query() -> String {
    format!(
        "SELECT {SESSION_COLUMNS} FROM sessions
         WHERE (?8 = 1 OR (archived_at IS NOT NULL) = (?8 = 2))
           AND (?1 IS NULL OR cwd = ?1) AND (?5 OR subagent IS NULL)
           AND (updated_at < ?2 OR (updated_at = ?2 AND id < ?3)) AND (?6 IS NULL OR owner = ?6)
           AND (?7 OR EXISTS (SELECT 1 FROM messages WHERE messages.session_id = sessions.id))
         ORDER BY updated_at DESC, id DESC LIMIT ?4"
    )
}

/// One page of the sessions `listing` shows, after `cursor`.
pub fn page(conn: &Connection, listing: &Listing, cursor: Option<&str>, limit: usize) -> Result<ListPage, ReadError> {
    let (after_at, after_id) = match cursor {
        None => (i64::MAX, String::new()),
        Some(cursor) => ListPage::parse_cursor(cursor).ok_or_else(|| ReadError::InvalidCursor(cursor.to_owned()))?,
    };
    let Listing { owner, cwd, subagents, unprompted, archived } = listing;
    // One more than asked, to know whether there is a next page.
    let fetch = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let mut stmt = conn.prepare_cached(&page_query())?;
    let sessions = stmt
        .query_map(
            params![cwd, after_at, after_id, fetch, subagents, owner, unprompted, archived.code()],
            session_from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(ListPage::of(sessions, limit))
}

/// Archives the session (keeping when it was first archived), or brings it back; its
/// `updated_at` stays.
pub fn set_archived(conn: &Connection, id: &SessionId, archived: bool, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET archived_at = CASE WHEN ?2 THEN coalesce(archived_at, ?3) END WHERE id = ?1",
    )?
    .execute(params![id.as_str(), archived, at])?;
    Ok(())
}

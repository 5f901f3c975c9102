//! Row ⇄ domain conversions: every SQL statement cairn runs, one function each, but for the
//! leases' (`lease`), streaming parts' pieces (`stream`), whole sessions in and out (`transfer`),
//! the pages of sessions listed and whether they are archived (`listing`), the health check (`health`), `cairn serve`'s
//! tokens (`tokens`) and the sessions' owners as loaded at open (`owners`).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::agent::prompt::ClientPrompt;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId, new_id};
use crate::permissions::{Action, Permission, Rule, Scope, Unreadable};
use crate::settings::Kept;
use crate::store::codec::{self, client_prompt, metadata, read_part, session_rules, to_json};

/// A session as `session/list` and the registry see it.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    pub id: SessionId,
    /// The absolute working directory the session was created in.
    pub cwd: String,
    /// A short title taken from the first prompt.
    pub title: Option<String>,
    /// Whether a client gave the title (`session/set_title`): a model's never replaces it.
    pub title_by_client: bool,
    /// The `provider/model` its next turn uses.
    pub model: String,
    /// The permission mode id (`ask`, `accept-edits`, …); `None` until one is set.
    pub mode: Option<String>,
    /// Permission rules remembered for this session.
    pub rules: Vec<Rule>,
    /// What the session has cost so far, in USD.
    pub cost_usd: f64,
    /// The chosen reasoning level (`thought_level` option), if any.
    pub thought_level: Option<String>,
    /// What a prompt sent while a turn runs does (`queue` or `steer`, the `steer` option), if
    /// the session chose; `None` follows `[session] busy_prompt`.
    pub busy_prompt: Option<String>,
    /// The session this one was forked from, or the one whose `task` call started it.
    pub parent_id: Option<SessionId>,
    /// For a sub-agent's session, the agent's name (`task` when unnamed); `None` for sessions a
    /// user opened, forks included.
    pub subagent: Option<String>,
    /// The principal of `cairn serve --auth` whose session this is; `None` for the local user's.
    /// A session stored with a parent and no owner takes its parent's.
    pub owner: Option<String>,
    /// The instructions the editor gave the session (ACP `systemPrompt`), part of every turn's
    /// system prompt; kept in the metadata.
    pub system_prompt: Option<ClientPrompt>,
    /// When the session was archived (`session/archive`); listings leave it out unless asked.
    pub archived_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl SessionRow {
    /// A session just created: untitled, default mode, no rules, nothing spent.
    pub fn new(id: SessionId, cwd: String, model: String, now: i64) -> Self {
        Self {
            id,
            cwd,
            title: None,
            title_by_client: false,
            model,
            mode: None,
            rules: Vec::new(),
            cost_usd: 0.0,
            thought_level: None,
            busy_prompt: None,
            parent_id: None,
            subagent: None,
            owner: None,
            system_prompt: None,
            archived_at: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// A read failure before it learns which file it happened in.
pub enum ReadError {
    Sqlite(rusqlite::Error),
    InvalidCursor(String),
}

impl From<rusqlite::Error> for ReadError {
    fn from(err: rusqlite::Error) -> Self {
        ReadError::Sqlite(err)
    }
}

impl ReadError {
    pub fn into_store_error(self, path: &Path) -> StoreError {
        match self {
            ReadError::Sqlite(err) => StoreError::from_sqlite(path, &err),
            ReadError::InvalidCursor(cursor) => StoreError::InvalidCursor(cursor),
        }
    }
}

pub(super) const SESSION_COLUMNS: &str = "id, cwd, title, model, created_at, updated_at, mode, permissions_json, cost_usd, json_extract(metadata_json, '$.thought_level'), parent_id, subagent, json_extract(metadata_json, '$.busy_prompt'), owner, json_extract(metadata_json, '$.system_prompt'), archived_at, json_extract(metadata_json, '$.title_by')";

pub(super) fn session_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        id: SessionId::from_string(row.get::<_, String>(0)?),
        cwd: row.get(1)?,
        title: row.get(2)?,
        title_by_client: row.get::<_, Option<String>>(16)?.is_some_and(|by| by == "client"),
        model: row.get(3)?,
        created_at: row.get(4)?,
        updated_at: row.get(5)?,
        mode: row.get(6)?,
        cost_usd: row.get(8)?,
        thought_level: row.get(9)?,
        busy_prompt: row.get(12)?,
        parent_id: row.get::<_, Option<String>>(10)?.map(SessionId::from_string),
        subagent: row.get(11)?,
        owner: row.get(13)?,
        system_prompt: row.get_ref(14)?.as_str().ok().and_then(client_prompt),
        rules: session_rules(row.get_ref(7)?.as_str().unwrap_or("[]")),
        archived_at: row.get(15)?,
    })
}

pub fn session(conn: &Connection, id: &SessionId) -> Result<Option<SessionRow>, ReadError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
    Ok(conn.prepare_cached(&sql)?.query_row([id.as_str()], session_from_row).optional()?)
}

/// A session's visible messages with their parts, oldest first, one row per part (a message
/// without parts has one row with a NULL part): `id, role, metadata_json, data_json, pieces,
/// type`, where `pieces` is the text a streaming part has in pieces beyond its row's (see
/// `stream`), NULL for almost every part.
pub(super) const VISIBLE_MESSAGES: &str = "SELECT m.id, m.role, m.metadata_json, p.data_json, t.text, p.type
     FROM messages m LEFT JOIN parts p ON p.message_id = m.id
       LEFT JOIN (SELECT message_id, idx, group_concat(text, '' ORDER BY id) AS text
                  FROM part_pieces WHERE session_id = ?1 GROUP BY message_id, idx) t
         ON t.message_id = p.message_id AND t.idx = p.idx
     WHERE m.session_id = ?1 AND m.hidden_at IS NULL
     ORDER BY m.id, p.idx";

pub fn messages(conn: &Connection, id: &SessionId) -> Result<Vec<Message>, ReadError> {
    let mut stmt = conn.prepare_cached(VISIBLE_MESSAGES)?;
    let mut rows = stmt.query([id.as_str()])?;
    let mut messages: Vec<Message> = Vec::new();
    while let Some(row) = rows.next()? {
        let message_id = text(row.get_ref(0)?)?.unwrap_or_default();
        if messages.last().is_none_or(|last| last.id.as_str() != message_id) {
            let role = match text(row.get_ref(1)?)? {
                Some("assistant") => Role::Assistant,
                _ => Role::User,
            };
            let meta = match text(row.get_ref(2)?)?.unwrap_or("{}") {
                "{}" => MessageMeta::default(),
                json => serde_json::from_str(json).unwrap_or_else(|err| {
                    tracing::warn!(message = %message_id, %err, "unreadable message metadata; using defaults");
                    MessageMeta::default()
                }),
            };
            let id = MessageId::from_string(message_id.to_owned());
            messages.push(Message { id, role, parts: Vec::new(), meta });
        }
        let Some(data) = text(row.get_ref(3)?)? else { continue };
        match read_part(text(row.get_ref(5)?)?, data) {
            Ok(mut part) => {
                if let Some(pieces) = text(row.get_ref(4)?)? {
                    codec::append(&mut part, pieces);
                }
                if let Some(message) = messages.last_mut() {
                    message.parts.push(part);
                }
            }
            Err(err) => tracing::warn!(session = %id, %err, "skipping a part this version cannot read"),
        }
    }
    Ok(messages)
}

/// A column's text, or `None` for NULL.
fn text(value: rusqlite::types::ValueRef<'_>) -> rusqlite::Result<Option<&str>> {
    value.as_str_or_null().map_err(rusqlite::Error::from)
}

/// A new session.
pub(super) const INSERT_SESSION: &str =
    "INSERT INTO sessions (id, cwd, title, model, mode, permissions_json, created_at, updated_at, parent_id, subagent, owner, metadata_json, archived_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, coalesce(?11, (SELECT owner FROM sessions WHERE id = ?9)), ?12, ?13)";

pub fn insert_session(conn: &Connection, row: &SessionRow) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_SESSION)?.execute(params![
        row.id.as_str(),
        row.cwd,
        row.title,
        row.model,
        row.mode,
        to_json(&row.rules),
        row.created_at,
        row.updated_at,
        row.parent_id.as_ref().map(SessionId::as_str),
        row.subagent,
        row.owner,
        metadata(row),
        row.archived_at
    ])?;
    Ok(())
}

/// A session's title: a client's, noted as such in the metadata, or a model's, written only
/// while no client has titled the session.
pub(super) const SET_TITLE: &str = "UPDATE sessions SET title = ?2, updated_at = ?3,
           metadata_json = CASE WHEN ?4 THEN json_set(metadata_json, '$.title_by', 'client') ELSE metadata_json END
         WHERE id = ?1 AND (?4 OR json_extract(metadata_json, '$.title_by') IS NULL)";

/// Sets the title (`by_client`: the client's); answers whether the row changed.
pub fn set_session_title(
    conn: &Connection,
    id: &SessionId,
    title: &str,
    by_client: bool,
    at: i64,
) -> rusqlite::Result<bool> {
    Ok(conn.prepare_cached(SET_TITLE)?.execute(params![id.as_str(), title, at, by_client])? > 0)
}

/// A title for a session that has none.
pub(super) const SET_FIRST_TITLE: &str =
    "UPDATE sessions SET title = ?2, updated_at = ?3 WHERE id = ?1 AND title IS NULL";

/// Sets the title of a session that has none (from its first prompt).
pub fn set_first_title(conn: &Connection, id: &SessionId, title: &str, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(SET_FIRST_TITLE)?.execute(params![id.as_str(), title, at])?;
    Ok(())
}

/// Stores one of the session's settings where it is kept: its own column, or a key of the
/// session's metadata.
pub fn set_session_setting(
    conn: &Connection,
    id: &SessionId,
    kept: Kept,
    value: &str,
    at: i64,
) -> rusqlite::Result<()> {
    match kept {
        // A `&'static str` of `crate::settings`: never a client's text.
        Kept::Column(column) => conn
            .prepare_cached(&format!("UPDATE sessions SET {column} = ?2, updated_at = ?3 WHERE id = ?1"))?
            .execute(params![id.as_str(), value, at])?,
        Kept::Metadata(key) => conn
            .prepare_cached(
                "UPDATE sessions SET metadata_json = json_set(metadata_json, '$.' || ?4, ?2), updated_at = ?3 WHERE id = ?1",
            )?
            .execute(params![id.as_str(), value, at, key])?,
    };
    Ok(())
}

pub fn add_session_rule(conn: &Connection, id: &SessionId, rule: &Rule) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET permissions_json = json_insert(permissions_json, '$[#]', json(?2)) WHERE id = ?1",
    )?
    .execute(params![id.as_str(), to_json(rule)])?;
    Ok(())
}

pub fn add_project_rule(conn: &Connection, project: &str, rule: &Rule, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (project, permission, pattern, action) DO NOTHING",
    )?
    .execute(params![project, rule.permission.as_str(), rule.pattern, rule.action.as_str(), at])?;
    Ok(())
}

pub fn project_rules(conn: &Connection, project: &str) -> Result<Vec<Rule>, ReadError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, permission, pattern, action FROM permission_rules WHERE project = ?1 ORDER BY id",
    )?;
    let rules = stmt
        .query_map([project], |row| Ok((row.get::<_, i64>(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?
        .collect::<rusqlite::Result<Vec<(i64, String, String, String)>>>()?
        .into_iter()
        .map(|(id, permission, pattern, action)| project_rule(id, &permission, &pattern, &action))
        .collect();
    Ok(rules)
}

/// Every project's rules, `(project, rule)`, oldest first.
pub fn all_project_rules(conn: &Connection) -> Result<Vec<(String, Rule)>, ReadError> {
    let mut stmt =
        conn.prepare_cached("SELECT id, permission, pattern, action, project FROM permission_rules ORDER BY id")?;
    let rows = stmt.query_map([], |row| {
        let (id, permission, pattern, action): (i64, String, String, String) =
            (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
        Ok((row.get(4)?, project_rule(id, &permission, &pattern, &action)))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A project rule from its row's columns.
fn project_rule(id: i64, permission: &str, pattern: &str, action: &str) -> Rule {
    match (Permission::parse(permission), Action::parse(action)) {
        (Some(permission), Some(action)) => Rule::new(permission, pattern, action, Scope::Project),
        // Never guess: an unreadable row may have been a rejection.
        _ => Rule::unreadable(&format!("{permission:?} {pattern} {action:?}"), Unreadable::ProjectRow(id)),
    }
}

/// A new message (its parts are written by [`UPSERT_PART`]).
pub(super) const INSERT_MESSAGE: &str = "INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5)";

/// When a session last changed.
pub(super) const TOUCH_SESSION: &str = "UPDATE sessions SET updated_at = ?2 WHERE id = ?1";

pub fn insert_message(conn: &Connection, session_id: &SessionId, message: &Message, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_MESSAGE)?.execute(params![
        message.id.as_str(),
        session_id.as_str(),
        message.role.as_str(),
        to_json(&message.meta),
        at
    ])?;
    conn.prepare_cached(TOUCH_SESSION)?.execute(params![session_id.as_str(), at])?;
    for (index, part) in message.parts.iter().enumerate() {
        upsert_part(conn, session_id, &message.id, u32::try_from(index).unwrap_or(u32::MAX), part, at)?;
    }
    Ok(())
}

/// A message's metadata.
pub(super) const SET_MESSAGE_META: &str = "UPDATE messages SET metadata_json = ?2, updated_at = ?3 WHERE id = ?1";

pub fn set_message_meta(conn: &Connection, id: &MessageId, meta: &MessageMeta, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(SET_MESSAGE_META)?.execute(params![id.as_str(), to_json(meta), at])?;
    Ok(())
}

/// Adds a step's usage and cost to a session and every session above a sub-agent.
pub(super) const ADD_USAGE: &str = "WITH RECURSIVE up(id, subagent, parent_id) AS (
           SELECT id, subagent, parent_id FROM sessions WHERE id = ?1
           UNION SELECT s.id, s.subagent, s.parent_id FROM sessions s JOIN up ON s.id = up.parent_id
             WHERE up.subagent IS NOT NULL
         )
         UPDATE sessions SET prompt_tokens = prompt_tokens + ?2, completion_tokens = completion_tokens + ?3,
           reasoning_tokens = reasoning_tokens + ?4, cache_read = cache_read + ?5, cache_write = cache_write + ?6,
           cost_usd = cost_usd + ?7, updated_at = ?8
         WHERE id IN (SELECT id FROM up)";

pub fn finish_message(
    conn: &Connection,
    session_id: &SessionId,
    id: &MessageId,
    meta: &MessageMeta,
    at: i64,
) -> rusqlite::Result<()> {
    set_message_meta(conn, id, meta, at)?;
    let Some(usage) = meta.usage else { return Ok(()) };
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    // The session and, for a sub-agent, every session above it up to the one a user opened.
    conn.prepare_cached(ADD_USAGE)?.execute(params![
        session_id.as_str(),
        tokens(usage.input),
        tokens(usage.output),
        tokens(usage.reasoning),
        tokens(usage.cache_read),
        tokens(usage.cache_write),
        meta.cost.unwrap_or(0.0),
        at
    ])?;
    Ok(())
}

/// A part, new or written whole again.
pub(super) const UPSERT_PART: &str = "INSERT INTO parts (id, message_id, session_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)
         ON CONFLICT (message_id, idx) DO UPDATE SET
           type = excluded.type, data_json = excluded.data_json, tool_call_id = excluded.tool_call_id,
           tool_state = excluded.tool_state, updated_at = excluded.updated_at";

pub fn upsert_part(
    conn: &Connection,
    session_id: &SessionId,
    message_id: &MessageId,
    index: u32,
    part: &Part,
    at: i64,
) -> rusqlite::Result<()> {
    let (tool_call_id, tool_state) = codec::tool_columns(part);
    super::stream::forget_pieces(conn, message_id, index)?;
    conn.prepare_cached(UPSERT_PART)?.execute(params![
        new_id("prt"),
        message_id.as_str(),
        session_id.as_str(),
        index,
        part.kind(),
        to_json(part),
        tool_call_id,
        tool_state,
        at
    ])?;
    Ok(())
}

/// Ends the session's tool calls that are unfinished as stored (see
/// `history::finalize_orphan`). Reads them inside the caller's transaction: a call its process
/// finished meanwhile is left as it is.
pub fn finalize_orphans(conn: &Connection, session_id: &SessionId, at: i64) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT p.message_id, p.idx, p.data_json FROM parts p JOIN messages m ON m.id = p.message_id
         WHERE p.session_id = ?1 AND p.tool_state IS NOT NULL AND m.hidden_at IS NULL",
    )?;
    let stored = stmt
        .query_map([session_id.as_str()], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, u32>(1)?, row.get::<_, String>(2)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (message_id, index, data) in stored {
        // A part this version cannot read is left as it is, as `messages` skips it.
        let Ok(mut part) = serde_json::from_str::<Part>(&data) else { continue };
        if crate::history::finalize_orphan(&mut part) {
            upsert_part(conn, session_id, &MessageId::from_string(message_id), index, &part, at)?;
        }
    }
    Ok(())
}

pub fn hide_from(conn: &Connection, session_id: &SessionId, from: &MessageId, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE messages SET hidden_at = ?3 WHERE session_id = ?1 AND id >= ?2 AND hidden_at IS NULL")?
        .execute(params![session_id.as_str(), from.as_str(), at])?;
    conn.prepare_cached(TOUCH_SESSION)?.execute(params![session_id.as_str(), at])?;
    Ok(())
}

pub fn set_session_rules(conn: &Connection, id: &SessionId, rules: &[Rule], at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE sessions SET permissions_json = ?2, updated_at = ?3 WHERE id = ?1")?
        .execute(params![id.as_str(), to_json(&rules), at])?;
    Ok(())
}

/// Forgets a project rule: the row a stand-in stands for, or the row that says what `rule` says.
pub fn remove_project_rule(conn: &Connection, project: &str, rule: &Rule) -> rusqlite::Result<()> {
    match rule.stands_for() {
        Some(Unreadable::ProjectRow(id)) => {
            conn.prepare_cached("DELETE FROM permission_rules WHERE project = ?1 AND id = ?2")?
                .execute(params![project, id])?;
        }
        Some(Unreadable::SessionEntry) | None => {
            conn.prepare_cached(
                "DELETE FROM permission_rules WHERE project = ?1 AND permission = ?2 AND pattern = ?3 AND action = ?4",
            )?
            .execute(params![project, rule.permission.as_str(), rule.pattern, rule.action.as_str()])?;
        }
    }
    Ok(())
}

/// See [`super::Write::ForkSession`].
pub fn fork_session(conn: &Connection, row: &SessionRow, parent: &SessionId, at: i64) -> rusqlite::Result<()> {
    let copied = messages(conn, parent).map_err(|err| match err {
        ReadError::Sqlite(err) => err,
        ReadError::InvalidCursor(_) => rusqlite::Error::InvalidQuery,
    })?;
    insert_session(conn, row)?;
    let point = copied.last().map(|m| m.id.as_str().to_owned());
    conn.prepare_cached(
        "UPDATE sessions SET parent_id = ?2, parent_message_id = ?3,
           metadata_json = (SELECT metadata_json FROM sessions WHERE id = ?2),
           owner = coalesce(owner, (SELECT owner FROM sessions WHERE id = ?2)) WHERE id = ?1",
    )?
    .execute(params![row.id.as_str(), parent.as_str(), point])?;
    let renamed = crate::history::with_new_ids(copied);
    for message in &renamed {
        insert_message(conn, &row.id, message, at)?;
    }
    recompute_rollups(conn, &row.id)
}

/// Sets a session's token and cost totals from its visible messages (`total_tokens` is the
/// schema's sum of the token columns).
pub(super) fn recompute_rollups(conn: &Connection, id: &SessionId) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE sessions SET
           prompt_tokens = t.input, completion_tokens = t.output, reasoning_tokens = t.reasoning,
           cache_read = t.cache_read, cache_write = t.cache_write, cost_usd = t.cost
         FROM (SELECT
                 coalesce(sum(json_extract(metadata_json, '$.usage.input')), 0) AS input,
                 coalesce(sum(json_extract(metadata_json, '$.usage.output')), 0) AS output,
                 coalesce(sum(json_extract(metadata_json, '$.usage.reasoning')), 0) AS reasoning,
                 coalesce(sum(json_extract(metadata_json, '$.usage.cache_read')), 0) AS cache_read,
                 coalesce(sum(json_extract(metadata_json, '$.usage.cache_write')), 0) AS cache_write,
                 coalesce(sum(json_extract(metadata_json, '$.cost')), 0.0) AS cost
               FROM messages WHERE session_id = ?1 AND hidden_at IS NULL) AS t
         WHERE sessions.id = ?1",
    )?
    .execute([id.as_str()])?;
    Ok(())
}

/// Deletes a session with the sub-agents it started (and theirs); forks stay.
pub fn delete_session(conn: &Connection, id: &SessionId) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "WITH RECURSIVE down(id) AS (
           SELECT ?1 UNION SELECT s.id FROM sessions s JOIN down ON s.parent_id = down.id WHERE s.subagent IS NOT NULL
         )
         DELETE FROM sessions WHERE id IN (SELECT id FROM down)",
    )?
    .execute([id.as_str()])?;
    super::checkpoints::drop_unused_blobs(conn)
}

/// Deletes a session as [`delete_session`] does if it is there and holds no message at all, a
/// hidden one included (it was never prompted); answers whether it did.
pub fn delete_unprompted_session(conn: &Connection, id: &SessionId) -> rusqlite::Result<bool> {
    let unprompted: bool = conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
               AND NOT EXISTS (SELECT 1 FROM messages WHERE session_id = ?1)",
        )?
        .query_row([id.as_str()], |row| row.get(0))?;
    if unprompted {
        delete_session(conn, id)?;
    }
    Ok(unprompted)
}

//! The file checkpoints' rows: contents stored once by hash (`file_blobs`), a session's captures
//! (`checkpoints`) and the files each lists (`checkpoint_files`). A capture's rows are written
//! only once every content they name is stored, so a stored capture can always be restored.
//! Contents no capture names any more (a session deleted, old captures dropped) are removed with
//! the rows that named them.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::ReadError;
use crate::ids::{MessageId, SessionId};
use crate::store::Captures;
use crate::tools::checkpoint::{Blob, By, Capture, Digest, Entry, State, Stored};

/// One capture as `/checkpoints` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointInfo {
    pub id: i64,
    pub prompt_id: Option<MessageId>,
    pub call_id: Option<String>,
    pub by: By,
    /// What a restore went back to.
    pub restore: Option<String>,
    /// A restore recorded and not applied to its end.
    pub pending: bool,
    pub files: u64,
    pub bytes: u64,
    pub created_at: i64,
}

/// A capture carried by an export, to store with its session on import.
#[derive(Debug)]
pub struct Carried {
    pub prompt: Option<MessageId>,
    pub capture: Capture,
    pub restore: Option<String>,
    pub created_at: i64,
}

/// Stores an imported session's captures and their contents (none of them pending).
pub(super) fn import(
    conn: &Connection,
    session: &SessionId,
    carried: &[Carried],
    blobs: &[Blob],
) -> rusqlite::Result<()> {
    put_blobs(conn, blobs)?;
    for checkpoint in carried {
        let captures = std::slice::from_ref(&checkpoint.capture);
        put_checkpoints(
            conn,
            session,
            checkpoint.prompt.as_ref(),
            captures,
            checkpoint.restore.as_deref(),
            checkpoint.created_at,
        )?;
    }
    finish_restore(conn, session)
}

impl CheckpointInfo {
    /// Whether this is the session's base: its oldest captures folded into one to keep within
    /// the size limits (`call_id` `base`).
    pub fn is_base(&self) -> bool {
        self.call_id.as_deref() == Some("base")
    }
}

/// Stores contents not stored yet.
pub(super) fn put_blobs(conn: &Connection, blobs: &[Blob]) -> rusqlite::Result<()> {
    let mut insert = conn.prepare_cached("INSERT OR IGNORE INTO file_blobs (hash, size, data) VALUES (?1, ?2, ?3)")?;
    for blob in blobs {
        insert.execute(params![&blob.hash.0[..], blob.data.len() as i64, &blob.data])?;
    }
    Ok(())
}

/// Stores captures of a session, in order; the last is a pending restore when `restore` names
/// one. Refused if a content they name is not stored.
pub(super) fn put_checkpoints(
    conn: &Connection,
    session: &SessionId,
    prompt: Option<&MessageId>,
    captures: &[Capture],
    restore: Option<&str>,
    now: i64,
) -> rusqlite::Result<()> {
    let mut stored = conn.prepare_cached("SELECT 1 FROM file_blobs WHERE hash = ?1")?;
    for entry in captures.iter().flat_map(|capture| &capture.entries) {
        if let Some(hash) = entry.state.hash()
            && stored.query_row([&hash.0[..]], |_| Ok(())).optional()?.is_none()
        {
            let why = format!("the content of {} for the checkpoint was not stored", entry.path.display());
            let constraint = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT);
            return Err(rusqlite::Error::SqliteFailure(constraint, Some(why)));
        }
    }
    let mut checkpoint = conn.prepare_cached(
        "INSERT INTO checkpoints (session_id, prompt_id, call_id, kind, restore, pending, bytes, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut file = conn.prepare_cached(
        "INSERT OR REPLACE INTO checkpoint_files (checkpoint_id, path, state, hash, size, executable, stamp)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (at, capture) in captures.iter().enumerate() {
        let pending = restore.is_some() && capture.by == By::Made && at + 1 == captures.len();
        let bytes: u64 = capture.entries.iter().map(|entry| entry.state.size()).sum();
        checkpoint.execute(params![
            session.as_str(),
            prompt.map(MessageId::as_str),
            capture.call_id,
            capture.by.as_str(),
            restore,
            pending,
            bytes as i64,
            now
        ])?;
        let id = conn.last_insert_rowid();
        for entry in &capture.entries {
            let (state, hash, size, executable) = entry.state.columns();
            file.execute(params![
                id,
                entry.path.as_os_str().as_bytes(),
                state,
                hash.as_ref().map(|hash| &hash.0[..]),
                size as i64,
                executable,
                entry.stamp as i64
            ])?;
        }
    }
    Ok(())
}

/// A restore of the session was applied to its end.
pub(super) fn finish_restore(conn: &Connection, session: &SessionId) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE checkpoints SET pending = 0 WHERE session_id = ?1 AND pending = 1")?
        .execute([session.as_str()])?;
    Ok(())
}

/// Removes contents no capture names.
pub(super) fn drop_unused_blobs(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM file_blobs WHERE NOT EXISTS (SELECT 1 FROM checkpoint_files f WHERE f.hash = file_blobs.hash)",
    )?
    .execute([])?;
    Ok(())
}

fn state_of(kind: &str, hash: Option<Vec<u8>>, size: i64, executable: bool) -> Option<State> {
    let hash = hash.as_deref().and_then(Digest::from_slice);
    State::from_columns(kind, hash, u64::try_from(size).unwrap_or(0), executable)
}

/// Every capture of a session with its files, oldest first.
pub(super) fn stored(conn: &Connection, session: &SessionId) -> rusqlite::Result<Vec<Stored>> {
    let mut query = conn.prepare_cached(
        "SELECT c.id, c.kind, f.path, f.state, f.hash, f.size, f.executable, f.stamp
         FROM checkpoints c JOIN checkpoint_files f ON f.checkpoint_id = c.id
         WHERE c.session_id = ?1 ORDER BY c.id",
    )?;
    let mut rows = query.query([session.as_str()])?;
    let mut out: Vec<Stored> = Vec::new();
    while let Some(row) = rows.next()? {
        let id: i64 = row.get(0)?;
        let by = By::parse(&row.get::<_, String>(1)?).unwrap_or(By::Seen);
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&row.get::<_, Vec<u8>>(2)?));
        let Some(state) = state_of(&row.get::<_, String>(3)?, row.get(4)?, row.get(5)?, row.get(6)?) else { continue };
        let stamp = u64::try_from(row.get::<_, i64>(7)?).unwrap_or(0);
        let entry = Entry { path, state, stamp };
        match out.last_mut() {
            Some(last) if last.id == id => last.entries.push(entry),
            _ => out.push(Stored { id, by, entries: vec![entry] }),
        }
    }
    Ok(out)
}

pub(super) fn list(conn: &Connection, session: &SessionId) -> rusqlite::Result<Vec<CheckpointInfo>> {
    let mut query = conn.prepare_cached(
        "SELECT c.id, c.prompt_id, c.call_id, c.kind, c.restore, c.pending, c.bytes, c.created_at,
                (SELECT count(*) FROM checkpoint_files f WHERE f.checkpoint_id = c.id)
         FROM checkpoints c WHERE c.session_id = ?1 ORDER BY c.id",
    )?;
    let rows = query.query_map([session.as_str()], |row| {
        Ok(CheckpointInfo {
            id: row.get(0)?,
            prompt_id: row.get::<_, Option<String>>(1)?.map(MessageId::from_string),
            call_id: row.get(2)?,
            by: By::parse(&row.get::<_, String>(3)?).unwrap_or(By::Seen),
            restore: row.get(4)?,
            pending: row.get(5)?,
            bytes: u64::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
            created_at: row.get(7)?,
            files: u64::try_from(row.get::<_, i64>(8)?).unwrap_or(0),
        })
    })?;
    rows.collect()
}

pub(super) fn blobs(conn: &Connection, hashes: &[Digest]) -> rusqlite::Result<HashMap<Digest, Vec<u8>>> {
    let mut query = conn.prepare_cached("SELECT data FROM file_blobs WHERE hash = ?1")?;
    let mut out = HashMap::new();
    for hash in hashes {
        if out.contains_key(hash) {
            continue;
        }
        if let Some(data) = query.query_row([&hash.0[..]], |row| row.get::<_, Vec<u8>>(0)).optional()? {
            out.insert(*hash, data);
        }
    }
    Ok(out)
}

/// A session's captures with their files, oldest first, and the contents they name, read
/// together.
pub(super) fn with_contents(conn: &Connection, id: &SessionId) -> Result<Captures, ReadError> {
    let tx = conn.unchecked_transaction()?;
    let mut files: HashMap<i64, Vec<Entry>> =
        stored(&tx, id)?.into_iter().map(|capture| (capture.id, capture.entries)).collect();
    let infos = list(&tx, id)?;
    let hashes: Vec<Digest> = files.values().flatten().filter_map(|entry| entry.state.hash()).collect();
    let contents = blobs(&tx, &hashes)?;
    tx.commit()?;
    let captures = infos
        .into_iter()
        .map(|info| {
            let entries = files.remove(&info.id).unwrap_or_default();
            (info, entries)
        })
        .collect();
    Ok((captures, contents))
}

/// Keeps a session's captures within `session_bytes`, and all sessions' within `total_bytes`,
/// dropping the oldest first, a prompt's captures together. What is dropped is folded into the
/// session's base capture: each file's last state before the first capture kept (so the
/// states of later captures stay known), the rest removed with the contents no capture names
/// any more. A rewind to before the first capture kept goes back to that base.
pub(super) fn trim(
    conn: &Connection,
    session: &SessionId,
    session_bytes: u64,
    total_bytes: u64,
) -> rusqlite::Result<()> {
    if let Some(from) = cut(conn, Some(session), session_bytes)? {
        fold(conn, session, from)?;
    }
    // Others' oldest first, as long as all of them are over the total.
    for _ in 0..64 {
        let Some(from) = cut(conn, None, total_bytes)? else { break };
        // The session whose captures are the oldest goes first.
        let owner: Option<String> = conn
            .prepare_cached("SELECT session_id FROM checkpoints WHERE id < ?1 AND (call_id IS NULL OR call_id != 'base') ORDER BY id LIMIT 1")?
            .query_row([from], |row| row.get(0))
            .optional()?;
        let Some(owner) = owner else { break };
        fold(conn, &SessionId::from_string(owner), from)?;
    }
    drop_unused_blobs(conn)
}

/// The first capture to keep so that the captures from it on (of `session`, or of all sessions)
/// hold at most `limit` bytes, moved to the start of its prompt's captures; `None` if all fit.
fn cut(conn: &Connection, session: Option<&SessionId>, limit: u64) -> rusqlite::Result<Option<i64>> {
    let mut query = conn.prepare_cached(
        "SELECT id, session_id, prompt_id, bytes FROM checkpoints
         WHERE (?1 IS NULL OR session_id = ?1) AND (call_id IS NULL OR call_id != 'base') ORDER BY id DESC",
    )?;
    let rows = query.query_map([session.map(SessionId::as_str)], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, row.get::<_, Option<String>>(2)?, row.get::<_, i64>(3)?))
    })?;
    let mut kept: u64 = 0;
    let mut newest_first: Vec<(i64, String, Option<String>)> = Vec::new();
    let mut over = None;
    for row in rows {
        let (id, owner, prompt, bytes) = row?;
        kept += u64::try_from(bytes).unwrap_or(0);
        if kept > limit {
            over = Some((owner, prompt));
            break;
        }
        newest_first.push((id, owner, prompt));
    }
    let Some((owner, prompt)) = over else { return Ok(None) };
    // The first capture kept must begin a prompt's captures: skip the rest of the cut prompt's.
    let first = newest_first
        .iter()
        .rev()
        .find(|(_, other, other_prompt)| *other != owner || other_prompt.is_none() || *other_prompt != prompt)
        .map(|(id, _, _)| *id);
    Ok(Some(first.unwrap_or(i64::MAX)))
}

/// Folds the session's captures before `from` into its base capture.
fn fold(conn: &Connection, session: &SessionId, from: i64) -> rusqlite::Result<()> {
    let older = "SELECT id FROM checkpoints WHERE session_id = ?1 AND id < ?2";
    // Each file's last state before `from` only.
    conn.prepare_cached(&format!(
        "DELETE FROM checkpoint_files WHERE checkpoint_id IN ({older}) AND EXISTS (
           SELECT 1 FROM checkpoint_files later WHERE later.path = checkpoint_files.path
             AND later.checkpoint_id > checkpoint_files.checkpoint_id AND later.checkpoint_id IN ({older}))"
    ))?
    .execute(params![session.as_str(), from])?;
    let base: Option<i64> = conn
        .prepare_cached("SELECT min(id) FROM checkpoints WHERE session_id = ?1 AND id < ?2")?
        .query_row(params![session.as_str(), from], |row| row.get(0))?;
    let Some(base) = base else { return Ok(()) };
    conn.prepare_cached(&format!("UPDATE checkpoint_files SET checkpoint_id = ?3 WHERE checkpoint_id IN ({older})"))?
        .execute(params![session.as_str(), from, base])?;
    conn.prepare_cached("DELETE FROM checkpoints WHERE session_id = ?1 AND id < ?2 AND id != ?3")?.execute(params![
        session.as_str(),
        from,
        base
    ])?;
    conn.prepare_cached(
        "UPDATE checkpoints SET kind = 'seen', call_id = 'base', restore = NULL, pending = 0,
           bytes = (SELECT total(size) FROM checkpoint_files WHERE checkpoint_id = ?1) WHERE id = ?1",
    )?
    .execute([base])?;
    Ok(())
}

#[cfg(test)]
#[path = "checkpoints_tests.rs"]
mod tests;

//! The file checkpoints' rows on PostgreSQL, as the SQLite store keeps them (`sqlite::checkpoints`
//! says what each means): contents once by hash (`file_blobs`), a session's captures
//! (`checkpoints`) and the files each lists (`checkpoint_files`). Every write carrying many rows
//! is one statement per table (`unnest` of arrays), never one per row.
//!
//! A capture's rows are written only once every content they name is stored: the writer asks
//! [`missing`] before a write runs anything, and the schema's foreign key from a file to its
//! content keeps it so against another replica dropping contents nobody named yet. Captures are
//! ordered by `id` across sessions and replicas (a sequence), the order trimming drops them in.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use crate::ids::{MessageId, SessionId};
use crate::store::{Captures, Carried, CheckpointInfo};
use crate::tools::checkpoint::{Blob, By, Capture, Digest, Entry, State, Stored};

type Result<T> = std::result::Result<T, tokio_postgres::Error>;

/// One capture to store, with where it belongs.
pub struct NewCapture<'a> {
    pub prompt: Option<&'a MessageId>,
    pub capture: &'a Capture,
    pub restore: Option<&'a str>,
    pub pending: bool,
    pub created_at: i64,
}

/// The captures of a `PutCheckpoints`: the last is a pending restore when `restore` names one.
pub fn of_write<'a>(
    prompt: Option<&'a MessageId>,
    captures: &'a [Capture],
    restore: Option<&'a str>,
    now: i64,
) -> Vec<NewCapture<'a>> {
    captures
        .iter()
        .enumerate()
        .map(|(at, capture)| NewCapture {
            prompt,
            capture,
            restore,
            pending: restore.is_some() && capture.by == By::Made && at + 1 == captures.len(),
            created_at: now,
        })
        .collect()
}

/// The captures an import carries (none of them pending).
pub fn of_import(carried: &[Carried]) -> Vec<NewCapture<'_>> {
    carried
        .iter()
        .map(|checkpoint| NewCapture {
            prompt: checkpoint.prompt.as_ref(),
            capture: &checkpoint.capture,
            restore: checkpoint.restore.as_deref(),
            pending: false,
            created_at: checkpoint.created_at,
        })
        .collect()
}

/// Why `captures` cannot be stored: the first file whose content is neither stored nor among
/// `coming` (stored by the same write); `None` when all are.
pub async fn missing(
    client: &impl GenericClient,
    captures: &[NewCapture<'_>],
    coming: &[Blob],
) -> Result<Option<String>> {
    let coming: HashSet<Digest> = coming.iter().map(|blob| blob.hash).collect();
    let entries = || captures.iter().flat_map(|new| &new.capture.entries);
    let owned: Vec<Vec<u8>> = entries()
        .filter_map(|entry| entry.state.hash())
        .filter(|hash| !coming.contains(hash))
        .collect::<HashSet<Digest>>()
        .into_iter()
        .map(|hash| hash.0.to_vec())
        .collect();
    if owned.is_empty() {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT h FROM unnest($1::bytea[]) AS h WHERE NOT EXISTS (SELECT 1 FROM file_blobs WHERE hash = h)",
            &[&owned],
        )
        .await?;
    let absent: HashSet<Digest> = rows.iter().filter_map(|row| Digest::from_slice(row.get::<_, &[u8]>(0))).collect();
    Ok(entries()
        .find(|entry| entry.state.hash().is_some_and(|hash| absent.contains(&hash)))
        .map(|entry| format!("the content of {} for the checkpoint was not stored", entry.path.display())))
}

/// Stores contents not stored yet, in one statement.
pub async fn put_blobs(client: &impl GenericClient, blobs: &[Blob]) -> Result<()> {
    if blobs.is_empty() {
        return Ok(());
    }
    let hashes: Vec<&[u8]> = blobs.iter().map(|blob| &blob.hash.0[..]).collect();
    let sizes: Vec<i64> = blobs.iter().map(|blob| i64::try_from(blob.data.len()).unwrap_or(i64::MAX)).collect();
    let data: Vec<&[u8]> = blobs.iter().map(|blob| blob.data.as_slice()).collect();
    client
        .execute(
            "INSERT INTO file_blobs (hash, size, data)
             SELECT * FROM unnest($1::bytea[], $2::int8[], $3::bytea[]) ON CONFLICT (hash) DO NOTHING",
            &[&hashes, &sizes, &data],
        )
        .await?;
    Ok(())
}

/// Stores captures of a session in order: one statement for their ids, one for their rows, one
/// for their files (a path listed twice in a capture keeps its last state, as in SQLite).
pub async fn put_captures(client: &impl GenericClient, session: &SessionId, captures: &[NewCapture<'_>]) -> Result<()> {
    if captures.is_empty() {
        return Ok(());
    }
    let count = i32::try_from(captures.len()).unwrap_or(i32::MAX);
    let mut ids: Vec<i64> = client
        .query("SELECT nextval(pg_get_serial_sequence('checkpoints', 'id')) FROM generate_series(1, $1)", &[&count])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    ids.sort_unstable();
    let prompts: Vec<Option<&str>> = captures.iter().map(|new| new.prompt.map(MessageId::as_str)).collect();
    let calls: Vec<Option<&str>> = captures.iter().map(|new| new.capture.call_id.as_deref()).collect();
    let kinds: Vec<&str> = captures.iter().map(|new| new.capture.by.as_str()).collect();
    let restores: Vec<Option<&str>> = captures.iter().map(|new| new.restore).collect();
    let pending: Vec<bool> = captures.iter().map(|new| new.pending).collect();
    let bytes: Vec<i64> = captures
        .iter()
        .map(|new| new.capture.entries.iter().map(|entry| entry.state.size()).sum::<u64>())
        .map(|sum| i64::try_from(sum).unwrap_or(i64::MAX))
        .collect();
    let created: Vec<i64> = captures.iter().map(|new| new.created_at).collect();
    let params: [&(dyn ToSql + Sync); 9] =
        [&session.as_str(), &ids, &prompts, &calls, &kinds, &restores, &pending, &bytes, &created];
    client
        .execute(
            "INSERT INTO checkpoints (session_id, id, prompt_id, call_id, kind, restore, pending, bytes, created_at)
             SELECT $1, * FROM unnest($2::int8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bool[],
                                      $8::int8[], $9::int8[])",
            &params,
        )
        .await?;
    // The last state of each path in each capture.
    let mut files: BTreeMap<(i64, &[u8]), &Entry> = BTreeMap::new();
    for (id, new) in ids.iter().zip(captures) {
        for entry in &new.capture.entries {
            files.insert((*id, entry.path.as_os_str().as_bytes()), entry);
        }
    }
    let owners: Vec<i64> = files.keys().map(|(id, _)| *id).collect();
    let paths: Vec<&[u8]> = files.keys().map(|(_, path)| *path).collect();
    let columns: Vec<(&str, Option<Digest>, u64, bool)> = files.values().map(|entry| entry.state.columns()).collect();
    let states: Vec<&str> = columns.iter().map(|column| column.0).collect();
    let hashes: Vec<Option<&[u8]>> = columns.iter().map(|column| column.1.as_ref().map(|hash| &hash.0[..])).collect();
    let sizes: Vec<i64> = columns.iter().map(|column| i64::try_from(column.2).unwrap_or(i64::MAX)).collect();
    let executable: Vec<bool> = columns.iter().map(|column| column.3).collect();
    let stamps: Vec<i64> = files.values().map(|entry| i64::try_from(entry.stamp).unwrap_or(i64::MAX)).collect();
    let params: [&(dyn ToSql + Sync); 7] = [&owners, &paths, &states, &hashes, &sizes, &executable, &stamps];
    client
        .execute(
            "INSERT INTO checkpoint_files (checkpoint_id, path, state, hash, size, executable, stamp)
             SELECT * FROM unnest($1::int8[], $2::bytea[], $3::text[], $4::bytea[], $5::int8[], $6::bool[], $7::int8[])",
            &params,
        )
        .await?;
    Ok(())
}

/// A restore of the session was applied to its end.
pub async fn finish_restore(client: &impl GenericClient, session: &SessionId) -> Result<()> {
    client
        .execute("UPDATE checkpoints SET pending = false WHERE session_id = $1 AND pending", &[&session.as_str()])
        .await?;
    Ok(())
}

/// Removes contents no capture names.
pub async fn drop_unused_blobs(client: &impl GenericClient) -> Result<()> {
    client
        .execute(
            "DELETE FROM file_blobs b WHERE NOT EXISTS (SELECT 1 FROM checkpoint_files f WHERE f.hash = b.hash)",
            &[],
        )
        .await?;
    Ok(())
}

fn state_of(row: &tokio_postgres::Row, at: usize) -> Option<State> {
    let hash = row.get::<_, Option<&[u8]>>(at + 1).and_then(Digest::from_slice);
    State::from_columns(row.get(at), hash, u64::try_from(row.get::<_, i64>(at + 2)).unwrap_or(0), row.get(at + 3))
}

/// The file of a row whose columns from `at` are path, state, hash, size, executable, stamp.
fn entry_of(row: &tokio_postgres::Row, at: usize) -> Option<Entry> {
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(row.get::<_, Option<&[u8]>>(at)?));
    let state = state_of(row, at + 1)?;
    let stamp = u64::try_from(row.get::<_, i64>(at + 5)).unwrap_or(0);
    Some(Entry { path, state, stamp })
}

/// Every capture of a session with its files, oldest first.
pub async fn stored(client: &impl GenericClient, session: &SessionId) -> Result<Vec<Stored>> {
    let rows = client
        .query(
            "SELECT c.id, c.kind, f.path, f.state, f.hash, f.size, f.executable, f.stamp
             FROM checkpoints c JOIN checkpoint_files f ON f.checkpoint_id = c.id
             WHERE c.session_id = $1 ORDER BY c.id, f.path",
            &[&session.as_str()],
        )
        .await?;
    let mut out: Vec<Stored> = Vec::new();
    for row in &rows {
        let id: i64 = row.get(0);
        let Some(entry) = entry_of(row, 2) else { continue };
        match out.last_mut() {
            Some(last) if last.id == id => last.entries.push(entry),
            _ => out.push(Stored { id, by: By::parse(row.get(1)).unwrap_or(By::Seen), entries: vec![entry] }),
        }
    }
    Ok(out)
}

const INFO_COLUMNS: &str = "c.id, c.prompt_id, c.call_id, c.kind, c.restore, c.pending, c.bytes, c.created_at,
     (SELECT count(*) FROM checkpoint_files x WHERE x.checkpoint_id = c.id)";

fn info_of(row: &tokio_postgres::Row) -> CheckpointInfo {
    CheckpointInfo {
        id: row.get(0),
        prompt_id: row.get::<_, Option<String>>(1).map(MessageId::from_string),
        call_id: row.get(2),
        by: By::parse(row.get(3)).unwrap_or(By::Seen),
        restore: row.get(4),
        pending: row.get(5),
        bytes: u64::try_from(row.get::<_, i64>(6)).unwrap_or(0),
        created_at: row.get(7),
        files: u64::try_from(row.get::<_, i64>(8)).unwrap_or(0),
    }
}

/// The captures of a session, oldest first, as `/checkpoints` lists them.
pub async fn list(client: &impl GenericClient, session: &SessionId) -> Result<Vec<CheckpointInfo>> {
    let sql = format!("SELECT {INFO_COLUMNS} FROM checkpoints c WHERE c.session_id = $1 ORDER BY c.id");
    Ok(client.query(&sql, &[&session.as_str()]).await?.iter().map(info_of).collect())
}

/// The stored contents of `hashes` (those stored).
pub async fn blobs(client: &impl GenericClient, hashes: &[Digest]) -> Result<HashMap<Digest, Vec<u8>>> {
    let wanted: Vec<&[u8]> = hashes.iter().map(|hash| &hash.0[..]).collect();
    let rows = client.query("SELECT hash, data FROM file_blobs WHERE hash = ANY($1::bytea[])", &[&wanted]).await?;
    Ok(rows.iter().filter_map(|row| Some((Digest::from_slice(row.get::<_, &[u8]>(0))?, row.get(1)))).collect())
}

/// A session's captures with their files and the contents they name, read by one statement (so
/// together, with no transaction on the shared read connection); each content comes once.
pub async fn with_contents(client: &impl GenericClient, session: &SessionId) -> Result<Captures> {
    let sql = format!(
        "SELECT {INFO_COLUMNS}, f.path, f.state, f.hash, f.size, f.executable, f.stamp,
                CASE WHEN f.hash IS NOT NULL AND row_number() OVER (PARTITION BY f.hash ORDER BY c.id, f.path) = 1
                     THEN b.data END
         FROM checkpoints c LEFT JOIN checkpoint_files f ON f.checkpoint_id = c.id
           LEFT JOIN file_blobs b ON b.hash = f.hash
         WHERE c.session_id = $1 ORDER BY c.id, f.path"
    );
    let rows = client.query(&sql, &[&session.as_str()]).await?;
    let mut captures: Vec<(CheckpointInfo, Vec<Entry>)> = Vec::new();
    let mut contents = HashMap::new();
    for row in &rows {
        let id: i64 = row.get(0);
        if captures.last().is_none_or(|(last, _)| last.id != id) {
            captures.push((info_of(row), Vec::new()));
        }
        let Some(entry) = entry_of(row, 9) else { continue };
        if let (Some(hash), Some(data)) = (entry.state.hash(), row.get::<_, Option<Vec<u8>>>(15)) {
            contents.insert(hash, data);
        }
        if let Some((_, entries)) = captures.last_mut() {
            entries.push(entry);
        }
    }
    Ok((captures, contents))
}

/// Keeps a session's captures within `session_bytes`, and all sessions' within `total_bytes`,
/// as `sqlite::checkpoints::trim` does: the oldest prompts' captures folded into the session's
/// base capture, then the contents no capture names removed.
pub async fn trim(
    client: &impl GenericClient,
    session: &SessionId,
    session_bytes: u64,
    total_bytes: u64,
) -> Result<()> {
    if let Some(from) = cut(client, Some(session), session_bytes).await? {
        fold(client, session, from).await?;
    }
    for _ in 0..64 {
        let Some(from) = cut(client, None, total_bytes).await? else { break };
        let owner = client
            .query_opt(
                "SELECT session_id FROM checkpoints WHERE id < $1 AND (call_id IS NULL OR call_id <> 'base')
                 ORDER BY id LIMIT 1",
                &[&from],
            )
            .await?;
        let Some(owner) = owner else { break };
        fold(client, &SessionId::from_string(owner.get::<_, String>(0)), from).await?;
    }
    drop_unused_blobs(client).await
}

/// The first capture to keep so that the captures from it on (of `session`, or of all) hold at
/// most `limit` bytes, moved to the start of its prompt's captures; `None` if all fit.
async fn cut(client: &impl GenericClient, session: Option<&SessionId>, limit: u64) -> Result<Option<i64>> {
    let session = session.map(SessionId::as_str);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    // The newest capture that goes over the limit, counting from the newest.
    let over = client
        .query_opt(
            "SELECT id, session_id, prompt_id FROM (
               SELECT id, session_id, prompt_id, sum(bytes) OVER (ORDER BY id DESC) AS kept FROM checkpoints
               WHERE ($1::text IS NULL OR session_id = $1) AND (call_id IS NULL OR call_id <> 'base')
             ) AS newest WHERE kept > $2::int8 ORDER BY id DESC LIMIT 1",
            &[&session, &limit],
        )
        .await?;
    let Some(over) = over else { return Ok(None) };
    let (over_id, owner, prompt): (i64, &str, Option<&str>) = (over.get(0), over.get(1), over.get(2));
    // The first capture kept must begin a prompt's captures: skip the rest of the cut prompt's.
    let first: Option<i64> = client
        .query_one(
            "SELECT min(id) FROM checkpoints
             WHERE ($1::text IS NULL OR session_id = $1) AND (call_id IS NULL OR call_id <> 'base') AND id > $2
               AND NOT (session_id = $3 AND prompt_id IS NOT NULL AND prompt_id IS NOT DISTINCT FROM $4)",
            &[&session, &over_id, &owner, &prompt],
        )
        .await?
        .get(0);
    Ok(Some(first.unwrap_or(i64::MAX)))
}

/// Folds the session's captures before `from` into its base capture.
async fn fold(client: &impl GenericClient, session: &SessionId, from: i64) -> Result<()> {
    let older = "SELECT id FROM checkpoints WHERE session_id = $1 AND id < $2";
    let params: [&(dyn ToSql + Sync); 2] = [&session.as_str(), &from];
    // Each file's last state before `from` only.
    client
        .execute(
            &format!(
                "DELETE FROM checkpoint_files f WHERE f.checkpoint_id IN ({older}) AND EXISTS (
                   SELECT 1 FROM checkpoint_files later WHERE later.path = f.path
                     AND later.checkpoint_id > f.checkpoint_id AND later.checkpoint_id IN ({older}))"
            ),
            &params,
        )
        .await?;
    let base: Option<i64> =
        client.query_one("SELECT min(id) FROM checkpoints WHERE session_id = $1 AND id < $2", &params).await?.get(0);
    let Some(base) = base else { return Ok(()) };
    let with_base: [&(dyn ToSql + Sync); 3] = [&session.as_str(), &from, &base];
    client
        .execute(
            &format!("UPDATE checkpoint_files SET checkpoint_id = $3 WHERE checkpoint_id IN ({older})"),
            &with_base,
        )
        .await?;
    client.execute("DELETE FROM checkpoints WHERE session_id = $1 AND id < $2 AND id <> $3", &with_base).await?;
    client
        .execute(
            "UPDATE checkpoints SET kind = 'seen', call_id = 'base', restore = NULL, pending = false,
               bytes = (SELECT coalesce(sum(size), 0) FROM checkpoint_files WHERE checkpoint_id = $1)::bigint
             WHERE id = $1",
            &[&base],
        )
        .await?;
    Ok(())
}

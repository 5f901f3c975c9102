//! The SQLite backend of the store: one database file (WAL), one writer thread, one read
//! connection; the default, for the editor's case and for `cairn serve` on one machine.
//!
//! Writes are committed in batches by the writer thread (`writer`, group commit), each in its own
//! savepoint (`writes`), and their callbacks run in queue order once the batch is committed.
//! Reads run on a second connection under `spawn_blocking`, so WAL readers never wait for the
//! writer; a snapshot reads on the writer thread, in the writer's order. A session's history is
//! written by one process at a time: the process running a turn holds the session's lease
//! (`lease`), taken by the turn's first write.
//!
//! Conversations are private: a data directory cairn creates is 0700, and the database with its
//! `-wal` and `-shm` files is 0600 whatever the umask (SQLite gives those the database's mode).

mod checkpoints;
mod fold;
pub mod health;
mod held;
pub mod lease;
mod listing;
mod migrate;
mod rows;
mod stream;
pub(super) mod tokens;
mod transfer;
mod tx;
mod writer;
mod writes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};

// The specs below see what the store module sees.
#[cfg(test)]
use super::*;
use super::{AfterCommit, Captures, Snapshot, StoreError, TitleBy, Write};
use crate::history::Message;
use crate::ids::SessionId;
use crate::permissions::Rule;
use crate::tools::checkpoint::{Digest, Stored};

pub use checkpoints::{Carried, CheckpointInfo};
pub use lease::{Holder, LastTurn, LeaseHolder};
pub use listing::{Archived, ListPage, Listing};
pub use rows::SessionRow;
pub use tokens::TokenRow;
pub use transfer::StoredMessage;

impl StoreError {
    fn from_sqlite(path: &Path, err: &rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let path = path.to_owned();
        let detail = err.to_string();
        match err.sqlite_error_code() {
            Some(ErrorCode::DiskFull) => StoreError::DiskFull { path },
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt { path, detail },
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
                StoreError::Open { path, detail }
            }
            _ => StoreError::Sqlite { path, detail },
        }
    }
}

/// The open database: its path, this process as a lease holder, the writer thread, the read
/// connection and the sessions' owners.
pub struct Sqlite {
    path: PathBuf,
    /// This process as a lease holder.
    me: Holder,
    writer: writer::Handle,
    reader: Arc<Reader>,
    /// Whose each session is (`cairn serve --auth`).
    owners: super::owners::Owners,
}

impl Sqlite {
    /// Opens (creating if needed) and migrates the database, holding leases as `me` and
    /// refreshing them every `beat`. Refuses a newer or corrupt file without changing it.
    pub fn open(path: &Path, me: Holder, beat: std::time::Duration) -> Result<Self, StoreError> {
        let io = |err: std::io::Error| StoreError::Open { path: path.to_owned(), detail: err.to_string() };
        if let Some(dir) = path.parent() {
            private_dir(dir).map_err(io)?;
        }
        private_file(path).map_err(io)?;
        let sqlite = |err: rusqlite::Error| StoreError::from_sqlite(path, &err);
        let mut conn = Connection::open(path).map_err(sqlite)?;
        // Refuse a file we must not touch before any pragma writes to it.
        migrate::check_version(&conn, path)?;
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.as_os_str().to_owned();
            file.push(suffix);
            if let Err(err) = tighten(Path::new(&file)) {
                tracing::warn!(file = %Path::new(&file).display(), %err, "cannot make the file private (0600)");
            }
        }
        configure(&conn).map_err(sqlite)?;
        migrate::to_latest(&mut conn, path)?;
        let owners = super::owners::Owners::new(load_owners(&conn).map_err(sqlite)?);
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(sqlite)?;
        reader.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
        reader.set_prepared_statement_cache_capacity(STATEMENTS);
        let writer = writer::spawn(conn, path.to_owned(), me.clone(), beat).map_err(|err| StoreError::Open {
            path: path.to_owned(),
            detail: format!("cannot start the writer thread: {err}"),
        })?;
        let reader = Arc::new(Reader { path: path.to_owned(), conn: Mutex::new(reader) });
        Ok(Self { path: path.to_owned(), me, writer, reader, owners })
    }

    pub fn submit(&self, mut write: Write, after: Option<AfterCommit>) {
        self.owners.note(&mut write);
        self.writer.submit(write, after);
    }

    pub fn snapshot(&self, id: &SessionId, then: Snapshot) {
        let (id, path) = (id.clone(), self.path.clone());
        self.writer.read(Box::new(move |conn| {
            then(conn.and_then(|conn| {
                rows::messages(conn, &id).map(|messages| (messages, 0)).map_err(|err| err.into_store_error(&path))
            }));
        }));
    }

    pub async fn shutdown(&self) {
        self.writer.shutdown().await;
    }

    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        let id = id.clone();
        self.read(move |conn| rows::session(conn, &id)).await
    }

    pub async fn messages(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        let id = id.clone();
        self.read(move |conn| rows::messages(conn, &id)).await
    }

    pub async fn stored_messages(&self, id: &SessionId) -> Result<Vec<StoredMessage>, StoreError> {
        let id = id.clone();
        self.read(move |conn| transfer::stored_messages(conn, &id)).await
    }

    pub async fn held_elsewhere(&self, id: &SessionId) -> Result<Option<LeaseHolder>, StoreError> {
        let (id, me) = (id.clone(), self.me.clone());
        self.read(move |conn| Ok(lease::held_elsewhere(conn, &me, &id, crate::ids::now_ms())?)).await
    }

    pub async fn messages_and_last_turn(&self, id: &SessionId) -> Result<(Vec<Message>, Option<String>), StoreError> {
        let id = id.clone();
        self.read(move |conn| {
            let tx = conn.unchecked_transaction()?;
            let messages = rows::messages(&tx, &id)?;
            let last = lease::last_turn(&tx, &id)?;
            tx.commit()?;
            Ok((messages, last))
        })
        .await
    }

    pub async fn project_rules(&self, project: &str) -> Result<Vec<Rule>, StoreError> {
        let project = project.to_owned();
        self.read(move |conn| rows::project_rules(conn, &project)).await
    }

    pub async fn list_sessions(
        &self,
        listing: Listing,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.read(move |conn| listing::page(conn, &listing, cursor.as_deref(), limit)).await
    }

    pub fn owner(&self, id: &SessionId) -> Option<Arc<str>> {
        self.owners.of(id)
    }

    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        self.read(|conn| Ok(tokens::list(conn)?)).await
    }

    pub async fn tokens_with_hashes(&self) -> Result<Vec<(TokenRow, [u8; 32])>, StoreError> {
        self.read(|conn| Ok(tokens::list_with_hashes(conn)?)).await
    }

    pub async fn all_project_rules(&self) -> Result<Vec<(String, Rule)>, StoreError> {
        self.read(rows::all_project_rules).await
    }

    pub fn token_check(&self) -> Result<super::TokenCheck, StoreError> {
        Ok(super::TokenCheck::Sqlite(tokens::SqliteTokenCheck::open(&self.path)?))
    }

    pub async fn checkpoint_captures(&self, id: &SessionId) -> Result<Vec<Stored>, StoreError> {
        let id = id.clone();
        self.read(move |conn| checkpoints::stored(conn, &id).map_err(rows::ReadError::from)).await
    }

    pub async fn checkpoints(&self, id: &SessionId) -> Result<Vec<CheckpointInfo>, StoreError> {
        let id = id.clone();
        self.read(move |conn| checkpoints::list(conn, &id).map_err(rows::ReadError::from)).await
    }

    pub async fn checkpoints_with_contents(&self, id: &SessionId) -> Result<Captures, StoreError> {
        let id = id.clone();
        self.read(move |conn| checkpoints::with_contents(conn, &id)).await
    }

    pub async fn file_blobs(&self, hashes: Vec<Digest>) -> Result<HashMap<Digest, Vec<u8>>, StoreError> {
        self.read(move |conn| checkpoints::blobs(conn, &hashes).map_err(rows::ReadError::from)).await
    }

    async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rows::ReadError> + Send + 'static,
    {
        let reader = Arc::clone(&self.reader);
        let joined = tokio::task::spawn_blocking(move || {
            let conn = reader.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            query(&conn).map_err(|err| err.into_store_error(&reader.path))
        })
        .await;
        joined.unwrap_or(Err(StoreError::Closed))
    }
}

/// Whose each session is, as stored (see `store::owners`).
fn load_owners(conn: &Connection) -> rusqlite::Result<HashMap<SessionId, Arc<str>>> {
    let mut stmt = conn.prepare("SELECT id, owner FROM sessions WHERE owner IS NOT NULL")?;
    stmt.query_map([], |row| {
        let (id, owner): (String, String) = (row.get(0)?, row.get(1)?);
        Ok((SessionId::from_string(id), Arc::from(owner)))
    })?
    .collect()
}

/// The read connection, shared with the blocking thread each read runs on.
struct Reader {
    path: PathBuf,
    conn: Mutex<Connection>,
}

/// Creates the data directory 0700 if it is missing (its parents as usual). An existing one is
/// left as it is: it may be a directory the user shares on purpose, and the files in it are
/// 0600 anyway.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        // The umask may have taken more than asked; set exactly 0700.
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

/// Creates the database file 0600 before SQLite does (which would use 0644 less the umask).
fn private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => tighten(path),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

/// Sets a file that exists to 0600 (only its owner reads or writes it).
fn tighten(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() && metadata.permissions().mode() & 0o777 != 0o600 => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        }
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// How many prepared statements each connection keeps: more than either uses, so none is
/// parsed again (rusqlite keeps 16 by default; the writer alone uses more).
pub(super) const STATEMENTS: usize = 64;

/// How long a connection waits for another process's write or checkpoint before giving up.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENTS);
    let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

//! The durable store: one SQLite file (WAL), one writer thread, one read connection.
//!
//! Writes are queued as [`Write`]s and committed in batches by the writer thread (group commit);
//! each write may carry an [`AfterCommit`] callback that runs, in queue order, once its rows are
//! committed or have failed. The session recorder uses that to emit a `session/update` only after
//! the row it shows is on disk. Reads run on a second connection under `spawn_blocking`, so WAL
//! readers never wait for the writer. A [`Store::snapshot`] is the exception: it reads on the
//! writer thread, in the writer's order, for a `session/load` that must join a live stream. This
//! module and its children hold all of cairn's SQL.
//!
//! A session's history is written by one process at a time: the process running a turn holds
//! the session's lease (`lease`), taken by the turn's first write ([`Write::TakeLease`]).
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
mod owners;
pub mod pg;
mod rows;
mod stream;
mod tokens;
mod transfer;
mod tx;
mod writer;
mod writes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::history::{Message, MessageMeta, Part};
use crate::ids::{MessageId, SessionId};
use crate::permissions::Rule;

pub use checkpoints::{Carried, CheckpointInfo};
pub use lease::{Holder, LastTurn, LeaseHolder};
pub use listing::{Archived, ListPage, Listing};
pub use rows::SessionRow;
pub use tokens::{TokenCheck, TokenRow};
pub use transfer::StoredMessage;

/// A callback run on the writer thread once a write is committed (`Ok`) or rolled back (`Err`).
/// It must be quick: it runs between batches.
pub type AfterCommit = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// What a [`Store::snapshot`] hands over, on the writer thread.
pub type Snapshot = Box<dyn FnOnce(Result<Vec<Message>, StoreError>) + Send>;

/// Why the store could not do what was asked. Cloneable: one failed batch fails many writes.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the database {path}: {detail}; check that the directory exists and is writable, or set CAIRN_HOME"
    )]
    Open { path: PathBuf, detail: String },
    #[error(
        "the database {path} has schema version {found}, newer than this cairn supports ({supported}); upgrade cairn, or set CAIRN_HOME to use another database"
    )]
    TooNew { path: PathBuf, found: i64, supported: i64 },
    #[error(
        "the database {path} is corrupt or not a cairn database ({detail}); it was left untouched: move it aside (or set CAIRN_HOME) to start a new one"
    )]
    Corrupt { path: PathBuf, detail: String },
    #[error("the disk holding {path} is full; nothing more can be saved until space is freed")]
    DiskFull { path: PathBuf },
    #[error("database error in {path}: {detail}")]
    Sqlite { path: PathBuf, detail: String },
    #[error("invalid cursor `{0}`: pass back the nextCursor of an earlier session/list page")]
    InvalidCursor(String),
    #[error("the store has shut down")]
    Closed,
    #[error("no token {0}; `cairn serve token list` shows the tokens")]
    UnknownToken(String),
    /// Another live process is running a turn in the session.
    #[error("{0}")]
    Leased(Box<LeaseHolder>),
    /// Another process's turn came after the history the caller holds; read it again.
    #[error(
        "session {session} was changed by another cairn process while this one was starting a turn in it; send the prompt again"
    )]
    LeaseMoved { session: SessionId, last: Option<String> },
    /// A model's title came after a client titled the session (or the session is gone).
    #[error("session {0} keeps the title its client gave it; the model's title was not stored")]
    TitleKept(SessionId),
}

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

/// One queued change. Streaming text goes through `OpenPart`/`AppendPart`/`ClosePart` so a chunk
/// costs an append in memory; a batch appends each part's new text to it once, never rewriting
/// what is stored.
#[derive(Debug)]
pub enum Write {
    InsertSession(Box<SessionRow>),
    /// A client's title, noted as the client's in the session's metadata (`title_by`), or a
    /// model's, refused with [`StoreError::TitleKept`] once a client has titled the session.
    SetSessionTitle {
        id: SessionId,
        title: String,
        by: TitleBy,
    },
    /// One of the session's settings (`crate::settings`), where the setting says it is kept.
    SetSessionSetting {
        id: SessionId,
        kept: crate::settings::Kept,
        value: String,
    },
    /// Remembers a rule for this session only.
    AddSessionRule {
        id: SessionId,
        rule: Rule,
    },
    /// Remembers a rule for every session in `project` (a working directory).
    AddProjectRule {
        project: String,
        rule: Rule,
    },
    /// The first write of a turn (or of a command that changes the history): takes the session's
    /// lease for this process and inserts `prompt`, setting `title` if the session has none, in
    /// one savepoint. Refused, writing nothing, with [`StoreError::Leased`] while another live
    /// process holds the lease, and with [`StoreError::LeaseMoved`] if the session's last turn is
    /// not the one `last` names (the caller's copy of the history is out of date).
    TakeLease {
        session_id: SessionId,
        last: LastTurn,
        prompt: Option<Message>,
        title: Option<String>,
    },
    /// Gives the session's lease back if this process holds it (the turn ended). A release that
    /// fails (the database busy, a failed commit) is tried again with every later batch until it
    /// is committed; the lease is refreshed meanwhile, as it is still held.
    ReleaseLease {
        session_id: SessionId,
    },
    /// Ends the session's tool calls that a crash left unfinished, as they are stored when this
    /// write runs (a call finished meanwhile stays as it is), unless a live process holds the
    /// session's lease, this one included: then they are its running calls, and nothing changes.
    FinalizeOrphans {
        session_id: SessionId,
    },
    /// Inserts a message with the parts it already has.
    InsertMessage {
        session_id: SessionId,
        message: Message,
    },
    SetMessageMeta {
        message_id: MessageId,
        meta: MessageMeta,
    },
    /// Sets a finished message's metadata and adds its usage and cost to the session's totals,
    /// in one transaction.
    FinishMessage {
        session_id: SessionId,
        message_id: MessageId,
        meta: MessageMeta,
    },
    /// Inserts or replaces one part of a message.
    PutPart {
        session_id: SessionId,
        message_id: MessageId,
        index: u32,
        part: Part,
    },
    /// Starts a text or reasoning part that will grow by `AppendPart`.
    OpenPart {
        session_id: SessionId,
        message_id: MessageId,
        index: u32,
        part: Part,
    },
    AppendPart {
        message_id: MessageId,
        index: u32,
        delta: String,
    },
    /// Writes the part's last text and ends it.
    ClosePart {
        message_id: MessageId,
        index: u32,
    },
    /// Removes a session's rows, and those of the sub-agents it started; forks stay. Refused with
    /// [`StoreError::Leased`] while another live process holds one of their leases.
    DeleteSession {
        id: SessionId,
    },
    /// [`Write::DeleteSession`] of a session that holds no message (one never prompted),
    /// checked in the same transaction: a session that holds one by then stays, and so does one
    /// whose lease another live process holds (neither is an error), or one that is gone.
    DeleteUnprompted {
        id: SessionId,
    },
    /// Stores file contents for checkpoints (those not stored yet).
    PutBlobs(Vec<crate::tools::checkpoint::Blob>),
    /// Stores captures of a session's files, taken in `prompt`'s turn (none for a restore), in
    /// one savepoint; with `restore`, the last is a restore recorded before it is applied
    /// (pending until [`Write::FinishRestore`]). Refused if a content they name is not stored.
    PutCheckpoints {
        session_id: SessionId,
        prompt: Option<MessageId>,
        captures: Vec<crate::tools::checkpoint::Capture>,
        restore: Option<String>,
    },
    /// The session's pending restore was applied to its end.
    FinishRestore {
        session_id: SessionId,
    },
    /// Keeps checkpoints within their size limits, the oldest dropped first: the session's,
    /// then everyone's.
    TrimCheckpoints {
        session_id: SessionId,
        session_bytes: u64,
        total_bytes: u64,
    },
    /// Hides `from` and every later message of the session (rewind); nothing is deleted. Refused
    /// with [`StoreError::Leased`] while another live process holds the session's lease.
    HideFrom {
        session_id: SessionId,
        from: MessageId,
    },
    /// Archives a session (`session/archive`) or brings it back: listings leave an archived one
    /// out unless asked for it; nothing else changes. A session that is gone changes nothing.
    SetArchived {
        id: SessionId,
        archived: bool,
    },
    /// Replaces the session's remembered rules (a revoke).
    SetSessionRules {
        id: SessionId,
        rules: Vec<Rule>,
    },
    /// Forgets a project-scope rule.
    RemoveProjectRule {
        project: String,
        rule: Rule,
    },
    /// Creates `row` as a copy of `parent`'s visible messages (new ids, parts verbatim), records
    /// the parent and the fork point, and recomputes the rollups from the copied messages.
    ForkSession {
        row: Box<SessionRow>,
        parent: SessionId,
    },
    /// Creates `row` with `messages` (ids and parts as given) in one savepoint, its rollups
    /// computed from them (`cairn sessions import`).
    ImportSession {
        row: Box<SessionRow>,
        messages: Vec<Message>,
        /// Its file checkpoints, and the contents they name.
        checkpoints: Vec<Carried>,
        blobs: Vec<crate::tools::checkpoint::Blob>,
    },
    /// Stores a bearer token of `cairn serve --auth`: its public id, its principal and the
    /// SHA-256 of its secret (never the secret).
    AddToken {
        id: String,
        principal: String,
        hash: [u8; 32],
    },
    /// Revokes a token (it stays listed); refused with [`StoreError::UnknownToken`] if there is
    /// no such token. Revoking one already revoked changes nothing.
    RevokeToken {
        id: String,
    },
    /// Changes nothing; its callback runs once everything queued before it is committed.
    Barrier,
}

/// Who wrote a session's title: a client's stands; a model's replaces only one no client gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TitleBy {
    Client,
    Model,
}

/// A cloneable handle to the database.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    /// This process as a lease holder.
    me: Holder,
    writer: writer::Handle,
    reader: Mutex<Connection>,
    /// Whose each session is (`cairn serve --auth`).
    owners: owners::Owners,
}

impl Store {
    /// Opens (creating if needed) and migrates the database. Refuses a newer or corrupt file
    /// without changing it.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_as(path, Holder::this_process(), lease::HEARTBEAT_EVERY)
    }

    /// [`Self::open`], holding leases as `me` and refreshing them every `beat`.
    fn open_as(path: &Path, me: Holder, beat: std::time::Duration) -> Result<Self, StoreError> {
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
        let owners = owners::Owners::load(&conn).map_err(sqlite)?;
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
        Ok(Self { inner: Arc::new(Inner { path: path.to_owned(), me, writer, reader: Mutex::new(reader), owners }) })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Queues a write; `after` runs once it is committed or has failed. Never blocks.
    pub fn submit(&self, mut write: Write, after: Option<AfterCommit>) {
        self.inner.owners.note(&mut write);
        self.inner.writer.submit(write, after);
    }

    /// Queues a write and waits until it is committed.
    pub async fn commit(&self, write: Write) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.submit(
            write,
            Some(Box::new(move |result| {
                let _ = tx.send(result);
            })),
        );
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Reads a session's visible messages at a point in the writer's order and hands them to
    /// `then` on the writer thread: after every write queued before this call is committed and
    /// its callback has run, before any write queued after it is applied. So the messages show
    /// exactly what the callbacks so far have emitted, and whatever `then` emits (through the same
    /// sink) comes before every later callback's. `then` holds up the writer: keep it to the
    /// sending.
    pub fn snapshot(&self, id: &SessionId, then: Snapshot) {
        let (id, path) = (id.clone(), self.inner.path.clone());
        self.inner.writer.read(Box::new(move |conn| {
            then(conn.and_then(|conn| rows::messages(conn, &id).map_err(|err| err.into_store_error(&path))));
        }));
    }

    /// A guard that gives `session`'s lease back when dropped, however the work that holds the
    /// lease ends: it returns, its future is dropped mid-await, or it panics.
    pub fn release_on_drop(&self, session: SessionId) -> ReleaseOnDrop {
        ReleaseOnDrop { store: self.clone(), session }
    }

    /// Waits until everything queued so far is committed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.commit(Write::Barrier).await
    }

    /// Commits what is queued, releases this process's leases, then stops the writer thread and
    /// closes its connection.
    pub async fn shutdown(&self) {
        let _ = self.flush().await;
        self.inner.writer.shutdown().await;
    }

    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        let id = id.clone();
        self.read(move |conn| rows::session(conn, &id)).await
    }

    /// Every visible message of a session, oldest first, with its parts.
    pub async fn messages(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        let id = id.clone();
        self.read(move |conn| rows::messages(conn, &id)).await
    }

    /// Every visible message of a session as stored: metadata and parts as their JSON texts.
    pub async fn stored_messages(&self, id: &SessionId) -> Result<Vec<StoredMessage>, StoreError> {
        let id = id.clone();
        self.read(move |conn| transfer::stored_messages(conn, &id)).await
    }

    /// The live process other than this one that holds the session's lease, if any.
    pub async fn held_elsewhere(&self, id: &SessionId) -> Result<Option<LeaseHolder>, StoreError> {
        let (id, me) = (id.clone(), self.inner.me.clone());
        self.read(move |conn| Ok(lease::held_elsewhere(conn, &me, &id, crate::ids::now_ms())?)).await
    }

    /// Every visible message of a session and the mark of its lease's last take, read together
    /// (for [`LastTurn::By`]).
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

    /// The rules remembered for every session in `project`.
    pub async fn project_rules(&self, project: &str) -> Result<Vec<Rule>, StoreError> {
        let project = project.to_owned();
        self.read(move |conn| rows::project_rules(conn, &project)).await
    }

    /// One page of the sessions `listing` shows, most recently updated first, after `cursor`
    /// (a page's `next_cursor`).
    pub async fn list_sessions(
        &self,
        listing: Listing,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.read(move |conn| listing::page(conn, &listing, cursor.as_deref(), limit)).await
    }

    /// The principal owning session `id` as this process knows it, without reading the
    /// database: one set when it was stored, or by the time this process opened the store
    /// (`owners`). `None` for the local user's sessions, and for those unknown here.
    pub fn owner(&self, id: &SessionId) -> Option<Arc<str>> {
        self.inner.owners.of(id)
    }

    /// Every bearer token of `cairn serve`, oldest first.
    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        self.read(|conn| Ok(tokens::list(conn)?)).await
    }

    /// A connection of its own for checking tokens at each handshake ([`TokenCheck`]).
    pub fn token_check(&self) -> Result<TokenCheck, StoreError> {
        TokenCheck::open(&self.inner.path)
    }

    async fn read<T, F>(&self, query: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, rows::ReadError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let joined = tokio::task::spawn_blocking(move || {
            let conn = inner.reader.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            query(&conn).map_err(|err| err.into_store_error(&inner.path))
        })
        .await;
        joined.unwrap_or(Err(StoreError::Closed))
    }
}

/// Gives a session's lease back when dropped (see [`Store::release_on_drop`]).
pub struct ReleaseOnDrop {
    store: Store,
    session: SessionId,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        // Queueing never blocks, so this is safe in any drop, an unwinding one included.
        self.store.submit(Write::ReleaseLease { session_id: self.session.clone() }, None);
    }
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
#[cfg(test)]
mod tokens_tests;

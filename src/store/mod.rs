//! The durable store, behind one interface with two backends.
//!
//! Writes are queued as [`Write`]s and committed in batches (group commit); each write may
//! carry an [`AfterCommit`] callback that runs, in queue order, once its rows are committed or
//! have failed. The session recorder uses that to emit a `session/update` only after the row it
//! shows is stored. Reads never wait for the writer. A [`Store::snapshot`] is the exception: it
//! reads in the writer's order, for a `session/load` that must join a live stream.
//!
//! [`Store`] is what the rest of cairn holds; which database it talks to is a [`Backend`]:
//! `sqlite` (one file, a writer thread; the default) or `pg` (PostgreSQL, shared by several
//! `cairn serve` replicas). This module and its children hold all of cairn's SQL.
//!
//! A session's history is written by one process at a time: the process running a turn holds
//! the session's lease, taken by the turn's first write ([`Write::TakeLease`]).

mod codec;
mod owners;
pub mod pg;
mod sqlite;
mod tokens;
mod write;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::history::Message;
use crate::ids::SessionId;
use crate::permissions::Rule;
use crate::tools::checkpoint::{Digest, Entry, Stored};

pub use sqlite::TokenRow;
pub use sqlite::health;
pub use sqlite::lease;
pub use sqlite::{Archived, ListPage, Listing};
pub use sqlite::{Carried, CheckpointInfo};
pub use sqlite::{Holder, LastTurn, LeaseHolder};
pub use sqlite::{SessionRow, StoredMessage};
pub use tokens::TokenCheck;
pub use write::{TitleBy, Write};

/// A callback run on the writer thread once a write is committed (`Ok`) or rolled back (`Err`).
/// It must be quick: it runs between batches.
pub type AfterCommit = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// An [`AfterCommit`] told, once committed, the `seq` the event log gave the first update the
/// write shows (`None` when none was logged: see [`Store::submit_logged`]).
pub type AfterLogged = Box<dyn FnOnce(Result<Option<i64>, StoreError>) + Send>;

/// What a [`Store::snapshot`] hands over, on the writer thread: the session's visible messages
/// and the `seq` of its event log they reach (0 with SQLite, which keeps no log).
pub type Snapshot = Box<dyn FnOnce(Result<(Vec<Message>, i64), StoreError>) + Send>;

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
    /// PostgreSQL could not do what was asked (the database is named without its password),
    /// or a session's lease was taken over by another replica.
    #[error(transparent)]
    Postgres(pg::PgError),
    /// The handed command a turn was to run was answered meanwhile (another replica's sweeper
    /// answered it `cancelled` while this one's heart had stopped): the turn does not run.
    #[error(
        "the command {0} another replica handed was answered before its turn could start here (this replica stalled); it was not run"
    )]
    CommandAnswered(i64),
    /// A model's title came after a client titled the session (or the session is gone).
    #[error("session {0} keeps the title its client gave it; the model's title was not stored")]
    TitleKept(SessionId),
}

/// A session's file captures with their files, oldest first, and the contents they name.
pub type Captures = (Vec<(CheckpointInfo, Vec<Entry>)>, HashMap<Digest, Vec<u8>>);

/// A cloneable handle to the database.
#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
}

/// The database a [`Store`] talks to. One per process, behind the store's `Arc`: its size
/// costs nothing.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(pg::Postgres),
}

impl Store {
    /// Opens (creating if needed) and migrates the SQLite database at `path`. Refuses a newer or
    /// corrupt file without changing it.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_as(path, Holder::this_process(), lease::HEARTBEAT_EVERY)
    }

    /// Connects to the PostgreSQL database `url` names and migrates it (once, however many
    /// replicas start together); this replica holds leases for `ttl` unrenewed and prunes the
    /// event log's rows older than `events_kept` (`[store] events_kept_secs`).
    pub async fn open_postgres(
        url: &str,
        ttl: std::time::Duration,
        events_kept: std::time::Duration,
    ) -> Result<Self, StoreError> {
        let target = pg::PgTarget::parse(url).map_err(StoreError::Postgres)?;
        let tuning = pg::Tuning { lease_ttl: ttl, events_kept, regain_within: pg::REGAIN_WITHIN };
        let backend = pg::Postgres::open(target, pg::Postgres::replica_name(), tuning).await?;
        Ok(Self { backend: Arc::new(Backend::Postgres(backend)) })
    }

    /// [`Self::open_postgres`] as replica `me`, holding leases for `ttl`.
    #[cfg(test)]
    async fn open_postgres_as(url: &str, me: &str, ttl: std::time::Duration) -> Result<Self, StoreError> {
        let target = pg::PgTarget::parse(url).map_err(StoreError::Postgres)?;
        let backend = pg::Postgres::open(target, me.to_owned(), pg::Tuning::for_tests(ttl)).await?;
        Ok(Self { backend: Arc::new(Backend::Postgres(backend)) })
    }

    /// [`Self::open`], holding leases as `me` and refreshing them every `beat`.
    fn open_as(path: &Path, me: Holder, beat: std::time::Duration) -> Result<Self, StoreError> {
        let backend = Backend::Sqlite(sqlite::Sqlite::open(path, me, beat)?);
        Ok(Self { backend: Arc::new(backend) })
    }

    /// The PostgreSQL database the sessions are kept in, as `user@host:port/database` (never
    /// with its password); `None` for the SQLite file.
    pub fn shared_database(&self) -> Option<String> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.target().to_string()),
        }
    }

    /// Queues a write; `after` runs once it is committed or has failed. Never blocks.
    pub fn submit(&self, write: Write, after: Option<AfterCommit>) {
        self.submit_shown(write, Vec::new(), after);
    }

    /// [`Self::submit`] of a write that shows the client something: `shown`, the updates as
    /// the event log keeps them, goes into its session's log in the write's own transaction
    /// when the store keeps one ([`Self::logs_events`]) and this process holds the session's
    /// lease, for other replicas' clients to follow.
    pub fn submit_shown(&self, write: Write, shown: Vec<String>, after: Option<AfterCommit>) {
        match &*self.backend {
            Backend::Sqlite(db) => db.submit(write, after),
            Backend::Postgres(db) => db.submit(write, shown, after.map(pg::Then::Committed)),
        }
    }

    /// [`Self::submit_shown`], and `after` is told the `seq` the first of `shown` got in the
    /// session's event log, the rest following one by one: `None` when they were not logged
    /// (SQLite, which keeps no log; a session whose lease this process does not hold; a write
    /// that names no session). The writer knows the numbers as it appends them: this costs it
    /// nothing.
    pub fn submit_logged(&self, write: Write, shown: Vec<String>, after: AfterLogged) {
        match &*self.backend {
            Backend::Sqlite(db) => db.submit(write, Some(Box::new(move |result| after(result.map(|()| None))))),
            Backend::Postgres(db) => db.submit(write, shown, Some(pg::Then::Logged(after))),
        }
    }

    /// What a client that saw the session's event log up to `after` missed: the rows after it,
    /// in order, or why they cannot all be given (pruned, or `after` beyond the log's end).
    /// `None` with SQLite, which keeps no log.
    pub async fn missed(&self, id: &SessionId, after: i64) -> Result<Option<pg::events::Missed>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(None),
            Backend::Postgres(db) => db.missed(id, after).await.map(Some),
        }
    }

    /// Whether sessions' updates are logged for other processes to follow (a PostgreSQL store,
    /// shared by replicas); with SQLite, one process shows what it writes.
    pub fn logs_events(&self) -> bool {
        match &*self.backend {
            Backend::Sqlite(_) => false,
            Backend::Postgres(_) => true,
        }
    }

    /// A session's visible messages with the `seq` of its event log they reach, read together:
    /// following from that `seq` ([`Self::follow`]) gives exactly what came after them. 0 with
    /// SQLite, which keeps no log.
    pub async fn messages_at_seq(&self, id: &SessionId) -> Result<(Vec<Message>, i64), StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => Ok((db.messages(id).await?, 0)),
            Backend::Postgres(db) => db.load_at_seq(id).await,
        }
    }

    /// The session's logged updates after `after`, in order and each once, as they commit on
    /// any replica; `None` with SQLite.
    pub fn follow(&self, id: &SessionId, after: i64) -> Option<tokio::sync::mpsc::Receiver<pg::events::Event>> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.follow(id, after)),
        }
    }

    /// This process's name in a store shared by replicas, as the events it showed name it
    /// ([`pg::events::Event::origin`]); `None` with SQLite.
    pub fn replica(&self) -> Option<&str> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.me()),
        }
    }

    /// The commands other replicas handed this one and the answers to those it handed them
    /// (see [`pg::inbox`]), for the session layer to carry out and deliver; `None` with SQLite,
    /// or once taken.
    pub fn inbound(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<pg::inbox::Inbound>> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => db.inbound(),
        }
    }

    /// Hands a command (the session layer's JSON) to the replica holding `session`'s lease; its
    /// id, which its answer names. `None` with SQLite: one process holds every lease it can see.
    pub async fn send_command(&self, session: &SessionId, body: String) -> Option<Result<i64, StoreError>> {
        match &*self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(db.send_command(session, body).await),
        }
    }

    /// Answers command `id` another replica handed this one, once everything it caused is
    /// committed.
    pub async fn answer_command(&self, id: i64, body: String) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(()),
            Backend::Postgres(db) => db.answer_command(id, body).await,
        }
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
    /// `then` in the writer's order: after every write queued before this call is committed and
    /// its callback has run, before any write queued after it is applied. So the messages show
    /// exactly what the callbacks so far have emitted, and whatever `then` emits (through the same
    /// sink) comes before every later callback's. `then` holds up the writer: keep it to the
    /// sending. With PostgreSQL, the event log's `seq` the messages reach comes with them.
    pub fn snapshot(&self, id: &SessionId, then: Snapshot) {
        match &*self.backend {
            Backend::Sqlite(db) => db.snapshot(id, then),
            Backend::Postgres(db) => db.snapshot(id, then),
        }
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

    /// Commits what is queued, releases this process's leases, then stops the writer and closes
    /// its connection.
    pub async fn shutdown(&self) {
        let _ = self.flush().await;
        match &*self.backend {
            Backend::Sqlite(db) => db.shutdown().await,
            Backend::Postgres(db) => db.shutdown().await,
        }
    }

    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.session(id).await,
            Backend::Postgres(db) => db.session(id).await,
        }
    }

    /// Every visible message of a session, oldest first, with its parts.
    pub async fn messages(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.messages(id).await,
            Backend::Postgres(db) => db.messages(id).await,
        }
    }

    /// Every visible message of a session as stored: metadata and parts as their JSON texts.
    pub async fn stored_messages(&self, id: &SessionId) -> Result<Vec<StoredMessage>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.stored_messages(id).await,
            Backend::Postgres(db) => db.stored_messages(id).await,
        }
    }

    /// The last `seq` of the session's event log as committed now (0 with SQLite, which keeps
    /// none): a replica about to run a turn shows its clients everything up to there first.
    pub async fn last_logged(&self, id: &SessionId) -> Result<i64, StoreError> {
        match &*self.backend {
            Backend::Sqlite(_) => Ok(0),
            Backend::Postgres(db) => db.last_logged(id).await,
        }
    }

    /// The live process other than this one that holds the session's lease, if any.
    pub async fn held_elsewhere(&self, id: &SessionId) -> Result<Option<LeaseHolder>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.held_elsewhere(id).await,
            Backend::Postgres(db) => db.held_elsewhere(id).await,
        }
    }

    /// Every visible message of a session and the mark of its lease's last take, read together
    /// (for [`LastTurn::By`]).
    pub async fn messages_and_last_turn(&self, id: &SessionId) -> Result<(Vec<Message>, Option<String>), StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.messages_and_last_turn(id).await,
            Backend::Postgres(db) => db.messages_and_last_turn(id).await,
        }
    }

    /// The rules remembered for every session in `project`.
    pub async fn project_rules(&self, project: &str) -> Result<Vec<Rule>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.project_rules(project).await,
            Backend::Postgres(db) => db.project_rules(project).await,
        }
    }

    /// One page of the sessions `listing` shows, most recently updated first, after `cursor`
    /// (a page's `next_cursor`).
    pub async fn list_sessions(
        &self,
        listing: Listing,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.list_sessions(listing, cursor, limit).await,
            Backend::Postgres(db) => db.list_sessions(listing, cursor, limit).await,
        }
    }

    /// The principal owning session `id` as this process knows it, without reading the
    /// database: one set when it was stored, or by the time this process opened the store.
    /// `None` for the local user's sessions, and for those unknown here.
    pub fn owner(&self, id: &SessionId) -> Option<Arc<str>> {
        match &*self.backend {
            Backend::Sqlite(db) => db.owner(id),
            Backend::Postgres(db) => db.owner(id),
        }
    }

    /// Every bearer token of `cairn serve`, oldest first.
    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.tokens().await,
            Backend::Postgres(db) => db.tokens().await,
        }
    }

    /// Every bearer token with the SHA-256 its secret hashes to, oldest first (to copy them).
    pub async fn tokens_with_hashes(&self) -> Result<Vec<(TokenRow, [u8; 32])>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.tokens_with_hashes().await,
            Backend::Postgres(db) => db.tokens_with_hashes().await,
        }
    }

    /// Every project's rules, `(project, rule)`, oldest first.
    pub async fn all_project_rules(&self) -> Result<Vec<(String, Rule)>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.all_project_rules().await,
            Backend::Postgres(db) => db.all_project_rules().await,
        }
    }

    /// A connection of its own for checking tokens at each handshake ([`TokenCheck`]).
    pub fn token_check(&self) -> Result<TokenCheck, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.token_check(),
            Backend::Postgres(db) => db.token_check(),
        }
    }

    /// Every capture of a session with its files, oldest first.
    pub async fn checkpoint_captures(&self, id: &SessionId) -> Result<Vec<Stored>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.checkpoint_captures(id).await,
            Backend::Postgres(db) => db.checkpoint_captures(id).await,
        }
    }

    /// The captures of a session, oldest first, as `/checkpoints` lists them.
    pub async fn checkpoints(&self, id: &SessionId) -> Result<Vec<CheckpointInfo>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.checkpoints(id).await,
            Backend::Postgres(db) => db.checkpoints(id).await,
        }
    }

    /// A session's captures with their files, oldest first, and the contents they name.
    pub async fn checkpoints_with_contents(&self, id: &SessionId) -> Result<Captures, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.checkpoints_with_contents(id).await,
            Backend::Postgres(db) => db.checkpoints_with_contents(id).await,
        }
    }

    /// The stored contents of `hashes` (those stored).
    pub async fn file_blobs(&self, hashes: Vec<Digest>) -> Result<HashMap<Digest, Vec<u8>>, StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.file_blobs(hashes).await,
            Backend::Postgres(db) => db.file_blobs(hashes).await,
        }
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

#[cfg(test)]
mod both_tests;

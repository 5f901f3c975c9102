//! The PostgreSQL backend of the store, as `Store` holds it: the writer task (`writer`) behind a
//! queue that never blocks, and a connection of its own for reads, so reads never wait for a
//! batch. A snapshot runs on the writer's connection between batches, in the writer's order, as
//! with SQLite.
//!
//! It carries all of the store: sessions, their settings, rules, titles and archiving, messages
//! and streaming parts, leases with their fencing, rewinds and deletes, file checkpoints,
//! project rules, forks, imports and exports, bearer tokens and listings. Whose each session is
//! is kept in memory (`store::owners`): loaded at open, noted as writes are queued and as rows
//! are read, since a session another replica created since is otherwise unknown here.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use std::sync::Arc;

use super::listing::{self, PageError};
use super::regain::{self, Reader};
use super::tokens::{self, PgTokenCheck};
use super::writer::{Job, Then, Writer};
use super::{PgTarget, checkpoints, events, inbox, lease, migrate, prune, rows, rules, sweeper, transfer};
use crate::history::Message;
use crate::ids::{LeaseHolder, SessionId};
use crate::permissions::Rule;
use crate::store::owners::Owners;
use crate::store::{
    Captures, CheckpointInfo, ListPage, Listing, SessionRow, Snapshot, StoreError, StoredMessage, TokenCheck, TokenRow,
    Write,
};
use crate::tools::checkpoint::{Digest, Stored};

/// How often a follower reads the logs it follows besides its wake-ups.
const FOLLOW_POLL: Duration = Duration::from_millis(250);

pub struct Postgres {
    target: PgTarget,
    me: String,
    /// How long this replica's leases live unrenewed.
    ttl: Duration,
    jobs: mpsc::UnboundedSender<Job>,
    /// Reads, on a connection of their own, made again at the next read once it was lost.
    reader: Reader,
    /// Tests: tells the writer its next commit's answer was lost.
    #[cfg(test)]
    lose_commit: Arc<std::sync::atomic::AtomicBool>,
    /// Whose each session is (`cairn serve --auth`).
    owners: Owners,
    /// Stops the sweeper of dead replicas' turns and the pruner of the event log.
    sweeping: CancellationToken,
    /// Follows sessions' event logs for this replica's clients.
    follower: events::Follower,
    /// Hands commands to the replicas holding their sessions, and takes theirs for this one.
    inbox: inbox::Inbox,
    /// What the inbox takes and reads, until the session layer takes it ([`Self::inbound`]).
    inbound: std::sync::Mutex<Option<mpsc::UnboundedReceiver<inbox::Inbound>>>,
}

/// How a replica holds its leases and uses the shared database.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long a lease lives unrenewed (`[store] lease_ttl_secs`).
    pub lease_ttl: Duration,
    /// How old a row of the event log grows before it is pruned (`[store] events_kept_secs`).
    pub events_kept: Duration,
    /// How long a batch whose connection was lost waits for a new one before its writes fail.
    pub regain_within: Duration,
}

impl Tuning {
    /// Leases of `lease_ttl`, the defaults otherwise.
    #[cfg(test)]
    pub fn for_tests(lease_ttl: Duration) -> Self {
        Self { lease_ttl, events_kept: Duration::from_secs(900), regain_within: super::REGAIN_WITHIN }
    }
}

impl Postgres {
    /// Connects to `target`, migrates it (once, whatever other replicas start with it) and
    /// starts the writer, holding leases as `me` as `tuning` says, and the pruner of old event
    /// rows.
    pub async fn open(mut target: PgTarget, me: String, tuning: Tuning) -> Result<Self, StoreError> {
        let Tuning { lease_ttl: ttl, events_kept, regain_within } = tuning;
        target.limit_idle_transactions(ttl);
        let mut client = target.connect().await.map_err(StoreError::Postgres)?;
        migrate::to_latest(&mut client, &target).await.map_err(StoreError::Postgres)?;
        let batch = regain::recorded(&client, &me).await.map_err(|err| StoreError::Postgres(target.failed(&err)))?;
        // Alive before it takes any command: a sweeper answers those of replicas whose beat lapsed.
        sweeper::beat(&client, &target, &me, ttl).await.map_err(StoreError::Postgres)?;
        let reader = Reader::connect(&target).await?;
        let owned = reader
            .get()
            .await?
            .query("SELECT id, owner FROM sessions WHERE owner IS NOT NULL", &[])
            .await
            .map_err(|err| StoreError::Postgres(target.failed(&err)))?
            .iter()
            .map(|row| (SessionId::from_string(row.get::<_, String>(0)), Arc::from(row.get::<_, &str>(1))))
            .collect();
        let (jobs, queue) = mpsc::unbounded_channel();
        #[cfg(test)]
        let lose_commit = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let follower =
            events::Follower::start(target.clone(), me.clone(), FOLLOW_POLL).await.map_err(StoreError::Postgres)?;
        let writer = Writer {
            client,
            prepared: super::Prepared::default(),
            own: follower.own_rows(),
            own_unshown: Vec::new(),
            target: target.clone(),
            me: me.clone(),
            ttl,
            held: HashMap::new(),
            lost: HashSet::new(),
            open: HashMap::new(),
            seqs: HashMap::new(),
            unreleased: HashSet::new(),
            unshown: HashSet::new(),
            opening: HashMap::new(),
            streams: super::streams::Streams::default(),
            catch_up: false,
            regain_within,
            batch: batch.unwrap_or(0),
            down: false,
            unsure: None,
            #[cfg(test)]
            lose_commit: lose_commit.clone(),
        };
        let (inbox, inbound) =
            inbox::Inbox::start(target.clone(), me.clone(), FOLLOW_POLL).await.map_err(StoreError::Postgres)?;
        tokio::spawn(writer.run(queue));
        let sweeping = CancellationToken::new();
        let every = (ttl / 4).max(Duration::from_millis(50));
        tokio::spawn(sweeper::run(target.clone(), me.clone(), ttl, every, sweeping.clone()));
        tokio::spawn(prune::run(target.clone(), events_kept, prune::EVERY, sweeping.clone()));
        let inbound = std::sync::Mutex::new(Some(inbound));
        Ok(Self {
            target,
            me,
            ttl,
            jobs,
            reader,
            #[cfg(test)]
            lose_commit,
            owners: Owners::new(owned),
            sweeping,
            follower,
            inbox,
            inbound,
        })
    }

    /// Tests: the next batch that commits is told its connection was lost before the answer
    /// to its COMMIT came, as a network cut at that moment would.
    #[cfg(test)]
    pub(in crate::store) fn lose_next_commit(&self) {
        self.lose_commit.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// This replica's name as a lease holder: `host:pid:random`.
    pub fn replica_name() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname");
        let host = host.as_deref().map_or("unknown", str::trim);
        let random = crate::ids::random_hex::<4>().unwrap_or_default();
        format!("{host}:{}:{random}", std::process::id())
    }

    /// This replica's name, as its leases and the events it showed name it.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// What the inbox takes for this replica and the answers to its commands; `None` once taken.
    pub fn inbound(&self) -> Option<mpsc::UnboundedReceiver<inbox::Inbound>> {
        self.inbound.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    pub async fn send_command(&self, session: &SessionId, body: String) -> Result<i64, StoreError> {
        self.inbox.send(session, body).await.map_err(StoreError::Postgres)
    }

    pub async fn answer_command(&self, id: i64, body: String) -> Result<(), StoreError> {
        self.inbox.answer(id, body).await.map_err(StoreError::Postgres)
    }

    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    pub fn submit(&self, mut write: Write, shown: Vec<String>, after: Option<Then>) {
        self.owners.note(&mut write);
        if let Err(mpsc::error::SendError(Job::Write(_, _, Some(after)))) =
            self.jobs.send(Job::Write(write, shown, after))
        {
            after.run(Err(StoreError::Closed));
        }
    }

    /// The session's visible messages and its event log's last `seq`, read together on the
    /// writer's connection.
    pub async fn load_at_seq(&self, id: &SessionId) -> Result<(Vec<Message>, i64), StoreError> {
        let (answer, answered) = oneshot::channel();
        if self.jobs.send(Job::Load(id.clone(), answer)).is_err() {
            return Err(StoreError::Closed);
        }
        answered.await.unwrap_or(Err(StoreError::Closed))
    }

    /// The session's events after `after`, as other replicas (or this one) commit them.
    pub fn follow(&self, id: &SessionId, after: i64) -> mpsc::Receiver<events::Event> {
        self.follower.follow(id, after)
    }

    pub fn snapshot(&self, id: &SessionId, then: Snapshot) {
        if let Err(mpsc::error::SendError(Job::Snapshot(_, then))) = self.jobs.send(Job::Snapshot(id.clone(), then)) {
            then(Err(StoreError::Closed));
        }
    }

    pub async fn shutdown(&self) {
        self.sweeping.cancel();
        let (ack, done) = oneshot::channel();
        if self.jobs.send(Job::Shutdown(ack)).is_ok() {
            let _ = done.await;
        }
    }

    fn error(&self, err: &tokio_postgres::Error) -> StoreError {
        StoreError::Postgres(self.target.failed(err))
    }

    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        let (reader, prepared) = self.reader.prepared().await?;
        let row = rows::session(&*reader, &prepared, id).await.map_err(|err| self.error(&err))?;
        if let Some(row) = &row {
            self.owners.learn(&row.id, row.owner.as_deref());
        }
        Ok(row)
    }

    pub async fn messages(&self, id: &SessionId) -> Result<Vec<Message>, StoreError> {
        rows::messages(&*self.reader.get().await?, id).await.map_err(|err| self.error(&err))
    }

    /// The messages and the mark of the lease's last take. The mark is read first: a take
    /// between the two reads then shows as a history newer than its mark, which makes the next
    /// take read it again; never an older history under a newer mark.
    pub async fn messages_and_last_turn(&self, id: &SessionId) -> Result<(Vec<Message>, Option<String>), StoreError> {
        let epoch = self
            .reader
            .get()
            .await?
            .query_opt("SELECT epoch FROM session_leases WHERE session_id = $1", &[&id.as_str()])
            .await
            .map_err(|err| self.error(&err))?
            .map(|row| lease::mark_of(row.get(0)));
        Ok((self.messages(id).await?, epoch))
    }

    /// What a client that saw the session's log up to `after` missed (`events::missed`).
    pub async fn missed(&self, id: &SessionId, after: i64) -> Result<events::Missed, StoreError> {
        let reader = self.reader.get().await?;
        events::missed(&*reader, &self.target, id, after, super::late::RESUME_MOST).await.map_err(StoreError::Postgres)
    }

    /// The session's event log's last `seq` as committed now (every turn's start reads it).
    pub async fn last_logged(&self, id: &SessionId) -> Result<i64, StoreError> {
        let (reader, prepared) = self.reader.prepared().await?;
        events::last_seq_prepared(&*reader, &prepared, &self.target, id).await.map_err(StoreError::Postgres)
    }

    /// Another replica that holds the session's lease now, if any.
    pub async fn held_elsewhere(&self, id: &SessionId) -> Result<Option<LeaseHolder>, StoreError> {
        let row = self
            .reader
            .get()
            .await?
            .query_opt(
                "SELECT holder, (extract(epoch FROM taken_at) * 1000)::bigint,
                        (extract(epoch FROM expires_at) * 1000)::bigint
                 FROM session_leases
                 WHERE session_id = $1 AND holder <> $2 AND released_at IS NULL AND expires_at > now()",
                &[&id.as_str(), &self.me],
            )
            .await
            .map_err(|err| self.error(&err))?;
        // The heartbeat as this replica's leases are renewed: other replicas may differ a little.
        let ttl = i64::try_from(self.ttl.as_millis()).unwrap_or(0);
        Ok(row.map(|row| lease::holder_of(id, row.get(0), row.get(1), row.get::<_, i64>(2) - ttl)))
    }

    pub async fn stored_messages(&self, id: &SessionId) -> Result<Vec<StoredMessage>, StoreError> {
        transfer::stored_messages(&*self.reader.get().await?, id).await.map_err(|err| self.error(&err))
    }

    pub async fn project_rules(&self, project: &str) -> Result<Vec<Rule>, StoreError> {
        rules::of_project(&*self.reader.get().await?, project).await.map_err(|err| self.error(&err))
    }

    /// A page of sessions; the owners its rows name are noted.
    pub async fn list_sessions(
        &self,
        listing: Listing,
        cursor: Option<String>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let page = listing::page(&*self.reader.get().await?, &listing, cursor.as_deref(), limit).await.map_err(
            |err| match err {
                PageError::InvalidCursor(cursor) => StoreError::InvalidCursor(cursor),
                PageError::Query(err) => self.error(&err),
            },
        )?;
        for row in &page.sessions {
            self.owners.learn(&row.id, row.owner.as_deref());
        }
        Ok(page)
    }

    pub fn owner(&self, id: &SessionId) -> Option<Arc<str>> {
        self.owners.of(id)
    }

    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        tokens::list(&*self.reader.get().await?).await.map_err(|err| self.error(&err))
    }

    pub async fn tokens_with_hashes(&self) -> Result<Vec<(TokenRow, [u8; 32])>, StoreError> {
        tokens::list_with_hashes(&*self.reader.get().await?).await.map_err(|err| self.error(&err))
    }

    pub async fn all_project_rules(&self) -> Result<Vec<(String, Rule)>, StoreError> {
        rules::all(&*self.reader.get().await?).await.map_err(|err| self.error(&err))
    }

    pub fn token_check(&self) -> Result<TokenCheck, StoreError> {
        Ok(TokenCheck::Postgres(PgTokenCheck::open(&self.target)?))
    }

    pub async fn checkpoint_captures(&self, id: &SessionId) -> Result<Vec<Stored>, StoreError> {
        checkpoints::stored(&*self.reader.get().await?, id).await.map_err(|err| self.error(&err))
    }

    pub async fn checkpoints(&self, id: &SessionId) -> Result<Vec<CheckpointInfo>, StoreError> {
        checkpoints::list(&*self.reader.get().await?, id).await.map_err(|err| self.error(&err))
    }

    pub async fn checkpoints_with_contents(&self, id: &SessionId) -> Result<Captures, StoreError> {
        checkpoints::with_contents(&*self.reader.get().await?, id).await.map_err(|err| self.error(&err))
    }

    pub async fn file_blobs(&self, hashes: Vec<Digest>) -> Result<HashMap<Digest, Vec<u8>>, StoreError> {
        checkpoints::blobs(&*self.reader.get().await?, &hashes).await.map_err(|err| self.error(&err))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.sweeping.cancel();
    }
}

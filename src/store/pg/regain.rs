//! Connections to PostgreSQL made again after a loss (a restart, a failover, a network blip):
//! the writer's, within a bound, and the reader's, at its next use.
//!
//! The writer tells a lost connection from a failed statement by asking the connection itself
//! once a batch failed (`alive`). It then connects again with a short backoff until
//! [`REGAIN_WITHIN`] (or the bound `Postgres::open` was given) has passed, and runs the batch
//! again. A batch lost before its COMMIT was sent was rolled back by the server: running it
//! again writes everything once. A batch lost while its COMMIT was on its way may have gone in
//! or not; running it again could append streamed text twice. So each batch also stamps its
//! number in this replica's row of `cairn_writers`, in its own transaction, and on the new
//! connection the writer reads that row (`recorded`): the batch committed exactly when the row
//! has reached its number (`went_in`). Past the bound, the batch's writes fail with
//! [`PgError::Lost`]; a batch whose commit was in doubt then is looked up at the next
//! connection, so what the writer keeps in memory (open parts, next `seq`s) follows what the
//! database holds.
//!
//! The writer's state needs nothing else: its leases are fenced by the next batch as always (a
//! lease another replica swept meanwhile fails the session's writes as fenced), and a
//! renewal that fails during the outage is tried again at the next beat.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::{Client, GenericClient};

use super::writer::{Done, Failed, Writer};
use super::{PgError, PgTarget, Prepared, events, rows};
use crate::history::Message;
use crate::ids::SessionId;
use crate::store::{StoreError, Write};

/// How long a batch waits for a lost connection to come back before its writes fail.
pub const REGAIN_WITHIN: Duration = Duration::from_secs(10);

/// The first pause between two connection attempts; each next one doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A batch whose COMMIT was sent on a connection that was then lost: it may have gone in.
pub(super) struct Unsure {
    pub batch: i64,
    pub done: Done,
}

/// Whether batch `batch` committed, given the number this replica's `cairn_writers` row holds
/// (`None`: no batch of this replica ever committed). Batches are numbered upwards and each
/// stamps its own number, so the row reaches `batch` only if that batch, or a later one run
/// after it was settled, committed.
pub(super) fn went_in(batch: i64, recorded: Option<i64>) -> bool {
    recorded.is_some_and(|number| number >= batch)
}

/// Stamps `batch` as this replica's last committed batch, in the batch's transaction.
pub(super) async fn stamp(
    tx: &impl GenericClient,
    prepared: &Prepared,
    me: &str,
    batch: i64,
) -> Result<(), tokio_postgres::Error> {
    let statement = prepared
        .get(
            tx,
            "INSERT INTO cairn_writers (replica, batch) VALUES ($1, $2)
             ON CONFLICT (replica) DO UPDATE SET batch = excluded.batch, committed_at = now()",
        )
        .await?;
    tx.execute(&statement, &[&me, &batch]).await?;
    Ok(())
}

/// The number of this replica's last committed batch: where its writer numbers on from at
/// open (a name used again must never find a new batch "committed" by an old one's stamp).
pub(super) async fn recorded(client: &Client, me: &str) -> Result<Option<i64>, tokio_postgres::Error> {
    Ok(client.query_opt("SELECT batch FROM cairn_writers WHERE replica = $1", &[&me]).await?.map(|row| row.get(0)))
}

impl Writer {
    /// Whether the writer's connection still answers: after a failed batch, tells a lost
    /// connection (run it again) from a failed statement (its error is the answer).
    pub(super) async fn alive(&self) -> bool {
        !self.down && !self.client.is_closed() && self.client.simple_query("").await.is_ok()
    }

    /// Runs the batch once; a failure on a connection that no longer answers is [`Failed::Lost`],
    /// a COMMIT lost so leaving the batch [`Unsure`].
    pub(super) async fn attempt(
        &mut self,
        writes: &[Write],
        shown: &[Vec<String>],
        isolated: bool,
        number: i64,
    ) -> Result<Done, Failed> {
        match self.attempt_once(writes, shown, isolated, number).await {
            Ok(done) => Ok(done),
            Err(Failed::Commit(err, done)) => {
                if self.alive().await {
                    // The server answered the COMMIT with an error: nothing went in.
                    Err(Failed::Batch(err))
                } else {
                    self.unsure = Some(Unsure { batch: number, done: *done });
                    Err(Failed::Lost(err))
                }
            }
            Err(Failed::Write(err) | Failed::Batch(err)) if !self.alive().await => Err(Failed::Lost(err)),
            Err(failed) => Err(failed),
        }
    }

    /// The session's visible messages and its log's last `seq` (`load_once`); a connection
    /// lost on the way is made again within the bound, as for a batch.
    pub(super) async fn load(&mut self, id: &SessionId) -> Result<(Vec<Message>, i64), StoreError> {
        let deadline = Instant::now() + self.regain_within;
        loop {
            self.regain(deadline, None).await?;
            match self.load_once(id).await {
                Err(_) if !self.alive().await => self.down = true,
                read => return read,
            }
        }
    }

    /// The session's visible messages and its log's last `seq`, from one snapshot of the
    /// database: a follower starting from that `seq` gets exactly what came after them.
    pub(super) async fn load_once(&mut self, id: &SessionId) -> Result<(Vec<Message>, i64), StoreError> {
        let target = self.target.clone();
        let failed = |err: tokio_postgres::Error| StoreError::Postgres(target.failed(&err));
        let tx = self
            .client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(failed)?;
        let messages = rows::messages(&tx, id).await.map_err(failed)?;
        let seq = events::last_seq(&tx, &target, id).await.map_err(StoreError::Postgres)?;
        tx.commit().await.map_err(failed)?;
        Ok((messages, seq))
    }

    /// Makes sure the writer has a working connection, connecting again until `deadline` when
    /// it was lost, and settles the batch whose commit was in doubt. Answers that batch's run
    /// when it committed and is `current` (the batch being run); an older one's changes are
    /// kept here, its writes having failed already.
    pub(super) async fn regain(&mut self, deadline: Instant, current: Option<i64>) -> Result<Option<Done>, StoreError> {
        if !self.down && !self.client.is_closed() && self.unsure.is_none() {
            return Ok(None);
        }
        let mut pause = FIRST_PAUSE;
        let mut detail = String::from("the connection was closed");
        loop {
            if self.down || self.client.is_closed() {
                match tokio::time::timeout_at(deadline, self.target.connect()).await {
                    Ok(Ok(client)) => {
                        tracing::info!("PostgreSQL at {}: the writer's connection is back", self.target);
                        self.client = client;
                        self.prepared = Prepared::default();
                        self.down = false;
                    }
                    Ok(Err(PgError::Connect { detail: why, .. })) => detail = why,
                    Ok(Err(err)) => detail = err.to_string(),
                    Err(_) => detail = "connecting took too long".into(),
                }
            }
            if !self.down && !self.client.is_closed() {
                let Some(unsure) = self.unsure.take() else { return Ok(None) };
                match recorded(&self.client, &self.me).await {
                    Ok(number) if went_in(unsure.batch, number) => {
                        tracing::info!(
                            "PostgreSQL at {}: batch {} did commit before the loss",
                            self.target,
                            unsure.batch
                        );
                        if current == Some(unsure.batch) {
                            return Ok(Some(unsure.done));
                        }
                        let _ = self.committed(unsure.done);
                        return Ok(None);
                    }
                    Ok(_) => return Ok(None),
                    Err(err) => {
                        detail = self.target.failed(&err).to_string();
                        self.unsure = Some(unsure);
                        self.down = true;
                    }
                }
            }
            let now = Instant::now();
            if now + pause >= deadline {
                return Err(self.lost(detail));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// The error of a batch whose connection could not be made again in time.
    pub(super) fn lost(&self, detail: String) -> StoreError {
        let outcome = if self.unsure.is_some() {
            "the connection was lost as these writes committed, so they may have gone in; the session shows what did once the database is back"
        } else {
            "nothing of these writes was stored"
        };
        StoreError::Postgres(PgError::Lost {
            at: self.target.to_string(),
            within_s: self.regain_within.as_secs().max(1),
            detail,
            outcome: outcome.into(),
        })
    }
}

/// The reader's connection, made again at its next use once it was lost, with the statements
/// prepared on it (the reads every turn's start makes; a new connection starts a new set).
pub(super) struct Reader {
    target: PgTarget,
    client: RwLock<(Arc<Client>, Arc<Prepared>)>,
}

impl Reader {
    pub async fn connect(target: &PgTarget) -> Result<Self, StoreError> {
        let client = target.connect().await.map_err(StoreError::Postgres)?;
        Ok(Self { target: target.clone(), client: RwLock::new((Arc::new(client), Arc::default())) })
    }

    /// The connection, made again if the last one was lost.
    pub async fn get(&self) -> Result<Arc<Client>, StoreError> {
        Ok(self.prepared().await?.0)
    }

    /// The connection, made again if the last one was lost, and its prepared statements.
    pub async fn prepared(&self) -> Result<(Arc<Client>, Arc<Prepared>), StoreError> {
        let current = self.client.read().unwrap_or_else(PoisonError::into_inner).clone();
        if !current.0.is_closed() {
            return Ok(current);
        }
        let fresh = Arc::new(self.target.connect().await.map_err(StoreError::Postgres)?);
        tracing::info!("PostgreSQL at {}: the reader's connection is back", self.target);
        let mut slot = self.client.write().unwrap_or_else(PoisonError::into_inner);
        // Another read may have made one meanwhile: either will do.
        if slot.0.is_closed() {
            *slot = (fresh, Arc::default());
        }
        Ok(slot.clone())
    }
}

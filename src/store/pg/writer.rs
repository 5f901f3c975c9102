//! The PostgreSQL store's writer: one task owning one connection, committing queued writes in
//! batches, as the SQLite writer thread does, and holding this replica's session leases.
//!
//! A batch is one transaction. It starts by fencing every session it writes whose lease this
//! replica holds (`lease::fence_all`, `FOR SHARE`): a session whose lease another replica took
//! over meanwhile gets nothing written, and its writes fail as fenced. Each write then runs its
//! statements; the text streaming parts gained in the batch goes in at the end as one piece per
//! part, in one statement. Callbacks run in queue order after the commit. A batch that fails
//! on a write's error is run again with each write in a savepoint of its own, so one bad write
//! fails alone, as in the SQLite store.
//!
//! Leases are taken with the turn's first write (`Write::TakeLease`), renewed every third of
//! their time to live while held, and released at the turn's end and at shutdown.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, GenericClient, Transaction};

use super::lease::{self, Lease, Taken};
use super::rows;
use super::{PgError, PgTarget};
use crate::ids::{LeaseHolder, MessageId, SessionId, now_ms};
use crate::store::{AfterCommit, LastTurn, Snapshot, StoreError, TitleBy, Write};

const MAX_BATCH: usize = 4096;

// `Shutdown` is sent once per process; boxing every write instead would cost an allocation per chunk.
#[allow(clippy::large_enum_variant)]
pub enum Job {
    Write(Write, Option<AfterCommit>),
    Snapshot(SessionId, Snapshot),
    Shutdown(oneshot::Sender<()>),
}

/// A streaming part: its message and index.
type PartKey = (MessageId, u32);

pub struct Writer {
    pub(super) client: Client,
    pub(super) target: PgTarget,
    /// This replica as a lease holder.
    pub(super) me: String,
    pub(super) ttl: Duration,
    pub(super) held: HashMap<SessionId, Lease>,
    /// Sessions whose lease another replica took from this one: their writes are refused until
    /// this replica takes the lease again.
    pub(super) lost: HashSet<SessionId>,
    /// The streaming parts open, with their session.
    pub(super) open: HashMap<PartKey, SessionId>,
}

/// What one run of a batch did, kept only if it commits.
#[derive(Default)]
struct Done {
    results: Vec<Result<(), StoreError>>,
    taken: Vec<Lease>,
    released: Vec<SessionId>,
    lost: Vec<SessionId>,
    opened: Vec<(PartKey, SessionId)>,
    closed: Vec<PartKey>,
    /// The text each part gained, and the chunks that wait for it.
    pieces: Vec<(SessionId, PartKey, String, Vec<usize>)>,
}

impl Writer {
    pub async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let beat = self.ttl / 3;
        loop {
            let first = if self.held.is_empty() {
                jobs.recv().await
            } else {
                match tokio::time::timeout(beat, jobs.recv()).await {
                    Ok(job) => job,
                    Err(_) => {
                        self.renew().await;
                        continue;
                    }
                }
            };
            let Some(first) = first else {
                self.release_all().await;
                return;
            };
            let mut writes = Vec::new();
            let mut last = None;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write(write, after) => writes.push((write, after)),
                    job @ (Job::Snapshot(..) | Job::Shutdown(_)) => {
                        last = Some(job);
                        break;
                    }
                }
                if writes.len() < MAX_BATCH {
                    next = jobs.try_recv().ok();
                }
            }
            if !writes.is_empty() {
                // The callbacks stay out of the batch's future: they need not be `Sync`.
                let (writes, afters): (Vec<Write>, Vec<Option<AfterCommit>>) = writes.into_iter().unzip();
                let results = self.apply(&writes).await;
                for (after, result) in afters.into_iter().zip(results) {
                    if let Some(after) = after {
                        after(result);
                    }
                }
            }
            match last {
                Some(Job::Snapshot(id, then)) => {
                    then(rows::messages(&self.client, &id).await.map_err(|err| self.error(&err)));
                }
                Some(Job::Shutdown(ack)) => {
                    self.release_all().await;
                    let _ = ack.send(());
                    return;
                }
                Some(Job::Write(..)) | None => {}
            }
        }
    }

    fn error(&self, err: &tokio_postgres::Error) -> StoreError {
        StoreError::Postgres(self.target.failed(err))
    }

    /// Applies `writes` in one transaction; on a write's error, again with a savepoint each.
    async fn apply(&mut self, writes: &[Write]) -> Vec<Result<(), StoreError>> {
        let done = match self.attempt(writes, false).await {
            Err(Failed::Write(_)) => self.attempt(writes, true).await,
            done => done,
        };
        match done {
            Ok(done) => self.committed(done),
            Err(Failed::Write(err) | Failed::Batch(err)) => vec![Err(err); writes.len()],
        }
    }

    /// Keeps what a committed batch changed, and answers its chunks with their parts' results.
    fn committed(&mut self, done: Done) -> Vec<Result<(), StoreError>> {
        for lease in done.taken {
            self.lost.remove(&lease.session);
            self.held.insert(lease.session.clone(), lease);
        }
        for session in done.released {
            self.held.remove(&session);
        }
        for session in done.lost {
            self.held.remove(&session);
            self.lost.insert(session);
        }
        for (key, session) in done.opened {
            self.open.insert(key, session);
        }
        for key in done.closed {
            self.open.remove(&key);
        }
        done.results
    }

    async fn attempt(&mut self, writes: &[Write], isolated: bool) -> Result<Done, Failed> {
        let batch = |err: tokio_postgres::Error| Failed::Batch(StoreError::Postgres(self.target.failed(&err)));
        let target = self.target.clone();
        let mut tx = self.client.transaction().await.map_err(batch)?;
        let mut done = Done { results: vec![Ok(()); writes.len()], ..Done::default() };
        let fenced = fence(&tx, &target, &self.held, writes, &self.open).await.map_err(Failed::Batch)?;
        done.lost.extend(fenced.iter().cloned());
        let state = State { me: &self.me, ttl: self.ttl, held: &self.held, open: &self.open };
        let mut opened: HashMap<PartKey, SessionId> = HashMap::new();
        for (job, write) in writes.iter().enumerate() {
            if let Some(session) = session_of(write, &self.open, &opened)
                && (fenced.contains(session)
                    || (self.lost.contains(session) && !matches!(write, Write::TakeLease { .. })))
            {
                let epoch = self.held.get(session).map_or(0, |lease| lease.epoch);
                done.results[job] = Err(StoreError::Postgres(PgError::Fenced { session: session.to_string(), epoch }));
                continue;
            }
            let result = if isolated {
                let point = tx.savepoint("write").await.map_err(batch)?;
                match one(&point, &target, &state, write, job, &mut done, &mut opened).await {
                    Ok(result) => {
                        point.commit().await.map_err(batch)?;
                        result
                    }
                    Err(err) => {
                        point.rollback().await.map_err(batch)?;
                        Err(StoreError::Postgres(target.failed(&err)))
                    }
                }
            } else {
                match one(&tx, &target, &state, write, job, &mut done, &mut opened).await {
                    Ok(result) => result,
                    Err(err) => return Err(Failed::Write(StoreError::Postgres(target.failed(&err)))),
                }
            };
            done.results[job] = result;
        }
        let pieces: Vec<(&SessionId, &MessageId, u32, &str)> = done
            .pieces
            .iter()
            .map(|(session, (message, index), text, _)| (session, message, *index, text.as_str()))
            .collect();
        if let Err(err) = rows::add_pieces(&tx, &pieces).await {
            // The transaction is aborted: nothing of this batch can commit.
            return Err(Failed::Batch(StoreError::Postgres(target.failed(&err))));
        }
        done.opened.extend(opened);
        tx.commit().await.map_err(batch)?;
        Ok(done)
    }

    /// Renews every lease held; one another replica took is lost.
    async fn renew(&mut self) {
        let mut lost = Vec::new();
        for lease in self.held.values() {
            match lease::renew(&self.client, &self.target, lease, self.ttl).await {
                Ok(true) => {}
                Ok(false) => lost.push(lease.session.clone()),
                Err(err) => tracing::warn!(session = %lease.session, "cannot renew the session's lease: {err}"),
            }
        }
        for session in lost {
            tracing::warn!(%session, "another replica took over the session's lease");
            self.held.remove(&session);
            self.lost.insert(session);
        }
    }

    async fn release_all(&mut self) {
        for (_, lease) in self.held.drain() {
            if let Err(err) = lease::release(&self.client, &self.target, &lease).await {
                tracing::warn!(session = %lease.session, "cannot release the session's lease: {err}");
            }
        }
    }
}

/// Why a run of a batch stopped: a write's statement failed (run it again isolated; an
/// isolated run answers each write's failure itself), or the batch itself did.
enum Failed {
    Write(StoreError),
    Batch(StoreError),
}

/// What a write sees of the writer while the batch runs.
struct State<'a> {
    me: &'a str,
    ttl: Duration,
    held: &'a HashMap<SessionId, Lease>,
    open: &'a HashMap<PartKey, SessionId>,
}

/// The session a write changes, when it names one or writes a part open in it.
fn session_of<'a>(
    write: &'a Write,
    open: &'a HashMap<PartKey, SessionId>,
    opened: &'a HashMap<PartKey, SessionId>,
) -> Option<&'a SessionId> {
    let part = |message: &MessageId, index: u32| {
        let key = (message.clone(), index);
        opened.get(&key).or_else(|| open.get(&key))
    };
    match write {
        Write::SetSessionTitle { id, .. }
        | Write::SetSessionSetting { id, .. }
        | Write::AddSessionRule { id, .. }
        | Write::SetSessionRules { id, .. }
        | Write::SetArchived { id, .. } => Some(id),
        Write::TakeLease { session_id, .. }
        | Write::InsertMessage { session_id, .. }
        | Write::FinishMessage { session_id, .. }
        | Write::PutPart { session_id, .. }
        | Write::OpenPart { session_id, .. }
        | Write::HideFrom { session_id, .. }
        | Write::PutCheckpoints { session_id, .. }
        | Write::FinishRestore { session_id }
        | Write::TrimCheckpoints { session_id, .. } => Some(session_id),
        Write::AppendPart { message_id, index, .. } | Write::ClosePart { message_id, index } => {
            part(message_id, *index)
        }
        Write::InsertSession(_)
        | Write::ReleaseLease { .. }
        | Write::FinalizeOrphans { .. }
        | Write::SetMessageMeta { .. }
        | Write::DeleteSession { .. }
        | Write::DeleteUnprompted { .. }
        | Write::PutBlobs(_)
        | Write::AddProjectRule { .. }
        | Write::RemoveProjectRule { .. }
        | Write::ForkSession { .. }
        | Write::ImportSession { .. }
        | Write::AddToken { .. }
        | Write::RevokeToken { .. }
        | Write::Barrier => None,
    }
}

/// Fences the sessions of `writes` whose lease this replica holds: the set of those another
/// replica took over.
async fn fence(
    tx: &Transaction<'_>,
    target: &PgTarget,
    held: &HashMap<SessionId, Lease>,
    writes: &[Write],
    open: &HashMap<PartKey, SessionId>,
) -> Result<HashSet<SessionId>, StoreError> {
    let none = HashMap::new();
    let mut mine: Vec<&Lease> =
        writes.iter().filter_map(|write| session_of(write, open, &none)).filter_map(|id| held.get(id)).collect();
    mine.sort_by(|a, b| a.session.as_str().cmp(b.session.as_str()));
    mine.dedup_by(|a, b| a.session == b.session);
    let mut lost = HashSet::new();
    while let Some(gone) = lease::fence_all(tx, target, &mine).await.map_err(StoreError::Postgres)? {
        lost.insert(gone.session.clone());
        mine.retain(|lease| !lost.contains(&lease.session));
    }
    Ok(lost)
}

/// Runs one write's statements: `Err` is a statement's failure (the transaction is aborted);
/// `Ok(Err)` a write refused without one.
async fn one(
    tx: &impl GenericClient,
    target: &PgTarget,
    state: &State<'_>,
    write: &Write,
    job: usize,
    done: &mut Done,
    opened: &mut HashMap<PartKey, SessionId>,
) -> Result<Result<(), StoreError>, tokio_postgres::Error> {
    let now = now_ms();
    let unsupported = |what: &'static str| Ok(Err(StoreError::NotOnPostgres(what)));
    match write {
        Write::InsertSession(row) => rows::insert_session(tx, row).await?,
        Write::SetSessionTitle { id, title, by } => {
            let client = *by == TitleBy::Client;
            if !rows::set_title(tx, id, title, client, now).await? && !client {
                return Ok(Err(StoreError::TitleKept(id.clone())));
            }
        }
        Write::SetSessionSetting { id, kept, value } => rows::set_setting(tx, id, *kept, value, now).await?,
        Write::AddSessionRule { id, rule } => rows::add_session_rule(tx, id, rule).await?,
        Write::SetSessionRules { id, rules } => rows::set_session_rules(tx, id, rules, now).await?,
        Write::SetArchived { id, archived } => rows::set_archived(tx, id, *archived, now).await?,
        Write::TakeLease { session_id, last, prompt, title } => {
            if let Some(refused) = check_last(tx, state, session_id, last).await? {
                return Ok(Err(refused));
            }
            match lease::take(tx, target, session_id, state.me, state.ttl).await {
                Ok(Taken::Took(lease)) => done.taken.push(lease),
                Ok(Taken::Held { holder, taken_ms, expires_ms }) => {
                    let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
                    return Ok(Err(StoreError::Leased(Box::new(holder_of(
                        session_id,
                        &holder,
                        taken_ms,
                        expires_ms - ttl,
                    )))));
                }
                Err(err) => return Ok(Err(StoreError::Postgres(err))),
            }
            if let Some(prompt) = prompt {
                rows::insert_message(tx, session_id, prompt, now).await?;
            }
            if let Some(title) = title {
                rows::set_first_title(tx, session_id, title, now).await?;
            }
        }
        Write::ReleaseLease { session_id } => {
            if let Some(lease) = state.held.get(session_id) {
                if let Err(err) = lease::release(tx, target, lease).await {
                    return Ok(Err(StoreError::Postgres(err)));
                }
                done.released.push(session_id.clone());
            }
        }
        Write::FinalizeOrphans { session_id } => {
            let live: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND released_at IS NULL AND expires_at > now())",
                    &[&session_id.as_str()],
                )
                .await?
                .get(0);
            if !live {
                rows::finalize_orphans(tx, session_id, now).await?;
            }
        }
        Write::InsertMessage { session_id, message } => rows::insert_message(tx, session_id, message, now).await?,
        Write::SetMessageMeta { message_id, meta } => rows::set_message_meta(tx, message_id, meta, now).await?,
        Write::FinishMessage { session_id, message_id, meta } => {
            rows::finish_message(tx, session_id, message_id, meta, now).await?;
        }
        Write::PutPart { session_id, message_id, index, part } => {
            done.pieces.retain(|piece| piece.1 != (message_id.clone(), *index));
            rows::put_parts(tx, session_id, message_id, &[(*index, part)], now).await?;
        }
        Write::OpenPart { session_id, message_id, index, part } => {
            let key = (message_id.clone(), *index);
            done.pieces.retain(|piece| piece.1 != key);
            rows::put_parts(tx, session_id, message_id, &[(*index, part)], now).await?;
            opened.insert(key, session_id.clone());
        }
        Write::AppendPart { message_id, index, delta } => {
            let key = (message_id.clone(), *index);
            let Some(session) = opened.get(&key).or_else(|| state.open.get(&key)) else {
                let detail = format!("chunk for part {index} of {message_id}, which is not open");
                return Ok(Err(StoreError::Postgres(PgError::Query { at: target.to_string(), detail })));
            };
            match done.pieces.iter_mut().find(|piece| piece.1 == key) {
                Some(piece) => {
                    piece.2.push_str(delta);
                    piece.3.push(job);
                }
                None => done.pieces.push((session.clone(), key, delta.clone(), vec![job])),
            }
        }
        Write::ClosePart { message_id, index } => {
            let key = (message_id.clone(), *index);
            opened.remove(&key);
            done.closed.push(key);
        }
        Write::HideFrom { session_id, from } => rows::hide_from(tx, session_id, from, now).await?,
        Write::DeleteSession { id } => {
            rows::delete_session(tx, id, false).await?;
        }
        Write::DeleteUnprompted { id } => {
            rows::delete_session(tx, id, true).await?;
        }
        Write::PutBlobs(_)
        | Write::PutCheckpoints { .. }
        | Write::FinishRestore { .. }
        | Write::TrimCheckpoints { .. } => {
            return unsupported("file checkpoints");
        }
        Write::AddProjectRule { .. } | Write::RemoveProjectRule { .. } => return unsupported("project rules"),
        Write::ForkSession { .. } => return unsupported("forking a session"),
        Write::ImportSession { .. } => return unsupported("importing a session"),
        Write::AddToken { .. } | Write::RevokeToken { .. } => return unsupported("bearer tokens"),
        Write::Barrier => {}
    }
    Ok(Ok(()))
}

/// Refuses a take while another replica's lease runs, or whose caller's history is older than
/// the session's last turn.
async fn check_last(
    tx: &impl GenericClient,
    state: &State<'_>,
    session: &SessionId,
    last: &LastTurn,
) -> Result<Option<StoreError>, tokio_postgres::Error> {
    let row = tx
        .query_opt(
            "SELECT holder, epoch, released_at IS NULL AND expires_at > now(),
                    (extract(epoch FROM taken_at) * 1000)::bigint, (extract(epoch FROM expires_at) * 1000)::bigint
             FROM session_leases WHERE session_id = $1",
            &[&session.as_str()],
        )
        .await?;
    let Some(row) = row else {
        return Ok(matches!(last, LastTurn::By(Some(_)))
            .then(|| StoreError::LeaseMoved { session: session.clone(), last: None }));
    };
    let (holder, epoch, live): (String, i64, bool) = (row.get(0), row.get(1), row.get(2));
    if live && holder != state.me {
        let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
        let heartbeat = row.get::<_, i64>(4) - ttl;
        return Ok(Some(StoreError::Leased(Box::new(holder_of(session, &holder, row.get(3), heartbeat)))));
    }
    let current = match last {
        LastTurn::Ours => holder == state.me,
        LastTurn::By(mark) => mark.as_deref() == Some(mark_of(epoch).as_str()),
    };
    Ok((!current).then(|| StoreError::LeaseMoved { session: session.clone(), last: Some(mark_of(epoch)) }))
}

/// The mark of a lease's take that [`LastTurn::By`] names: its epoch.
pub fn mark_of(epoch: i64) -> String {
    format!("epoch {epoch}")
}

/// Another replica's lease as the error names it: a replica is named `host:pid:…`.
pub(super) fn holder_of(session: &SessionId, holder: &str, since: i64, heartbeat: i64) -> LeaseHolder {
    let mut fields = holder.splitn(3, ':');
    let host = fields.next().unwrap_or(holder).to_owned();
    let pid = fields.next().and_then(|pid| pid.parse().ok()).unwrap_or(0);
    LeaseHolder { session: session.clone(), pid, host, since, heartbeat }
}

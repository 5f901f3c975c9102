//! The PostgreSQL store's writer: one task owning one connection, committing queued writes in
//! batches, as the SQLite writer thread does, and holding this replica's session leases.
//!
//! A batch is one transaction, begun no sooner than [`GAP`] after the last while writes keep
//! coming (fewer, fuller statements), unless a write someone waits for comes meanwhile
//! ([`Writer::waited_for`]: a turn's claim, its first shown update, its end, a barrier that
//! shows nothing): then it goes at once with what is queued. It starts by fencing every session
//! it writes whose lease this replica holds (`lease::fence_all`, `FOR SHARE`): a session whose
//! lease another replica took over meanwhile gets nothing written, and its writes fail as
//! fenced; and by locking the leases of its takes that do not go first as claims
//! (`lease::lock_for_takes`), so no write holds a session's row while it waits for a lease. The
//! batch's lease takes (the turns' claims) that can go first run next, all together in one
//! round trip (`claims`); each other write then runs its statements, the message and part
//! inserts of each run of writes together (`grouped`); the text streaming parts gained rides
//! on their chunks' event log rows, and goes in as one piece per part about once a second and at
//! the part's end (`streams`), in one statement sent together with the event log's rows and
//! the batch's stamp (the leases of parts whose due text a batch writes without writing to them
//! are fenced with the rest). The
//! statements of every batch are prepared once per connection (`Prepared`): each is one round
//! trip, and PostgreSQL parses none of them again. Callbacks run in queue order after the commit. A batch that fails
//! on a write's error is run again with each write in a savepoint of its own, so one bad write
//! fails alone, as in the SQLite store.
//!
//! What the batch's writes show their clients (`Job::Write`'s bodies, the updates as JSON) goes
//! into their sessions' event logs in the same transaction, numbered on from the log's last
//! `seq`, for the sessions whose lease this replica holds (the holder is a session's only
//! writer, so its numbering is commit order), and a settings change where nobody holds the
//! lease (`events::append_unheld`); after the commit this replica's follower is told
//! of them (it does not read them back) and one NOTIFY wakes the replicas that follow them. A load for a follower reads the session's messages and the log's last
//! `seq` in one snapshot (`Job::Load`), so following from that `seq` repeats and misses nothing.
//! The `seq` a write's first shown update got goes to its callback when it asks for it
//! ([`Then::Logged`]): the recorder of the turn numbers what it shows its own clients with it,
//! so the clients of every replica see the same number for the same update. It is worked out
//! from the numbers the batch gives each session anyway, with no statement more.
//!
//! Leases are taken with the turn's first write (`Write::TakeLease`), renewed every third of
//! their time to live while held, and released at the turn's end and at shutdown.
//!
//! A connection lost mid-batch is made again within a bound and the batch run again unless it
//! committed, which each batch's stamp in `cairn_writers` tells (`regain`); past the bound its
//! writes fail with [`PgError::Lost`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_postgres::Client;

use super::grouped::Group;
use super::lease::{self, Lease};
use super::regain::{self, Unsure};
use super::streams::{self, Holding, Streams};
use super::writes::{self, session_of};
use super::{PgError, PgTarget, Prepared};
use super::{claims, events, held, logged, rows};
use crate::history::Message;
use crate::ids::{MessageId, SessionId};
use crate::store::{AfterCommit, AfterLogged, Snapshot, StoreError, Write};

const MAX_BATCH: usize = 4096;
/// A busy writer starts a batch no sooner than this after the last one began, so each of a
/// batch's statements carries more rows: at a thousand streaming sessions, PostgreSQL's time
/// goes mostly to each statement's own cost, not to its rows. A write queued after a pause goes
/// at once.
const GAP: Duration = Duration::from_millis(10);
/// The writer's sleep with neither a lease to renew nor streamed text to catch up.
const IDLE: Duration = Duration::from_secs(3600);

// `Shutdown` is sent once per process; boxing every write instead would cost an allocation per chunk.
#[allow(clippy::large_enum_variant)]
pub enum Job {
    /// A write, the updates it shows as the event log keeps them, and its callback.
    Write(Write, Vec<String>, Option<Then>),
    Snapshot(SessionId, Snapshot),
    /// The session's visible messages and its event log's last `seq`, read together.
    Load(SessionId, oneshot::Sender<Result<(Vec<Message>, i64), StoreError>>),
    Shutdown(oneshot::Sender<()>),
}

/// What runs once a write is committed or has failed.
pub enum Then {
    /// Told whether it committed.
    Committed(AfterCommit),
    /// Told also the `seq` its first shown update got in the session's event log (`None`: it
    /// was not logged: nothing shown, no session named, or a lease this replica does not hold).
    Logged(AfterLogged),
}

impl Then {
    pub fn run(self, result: Result<Option<i64>, StoreError>) {
        match self {
            Then::Committed(after) => after(result.map(|_| ())),
            Then::Logged(after) => after(result),
        }
    }
}

/// A streaming part: its message and index.
pub(super) type PartKey = (MessageId, u32);

pub struct Writer {
    pub(super) client: Client,
    /// The per-batch statements, prepared on `client` (a new connection gets a new set).
    pub(super) prepared: Prepared,
    /// This replica's follower, told of the rows each batch appended once it commits and this
    /// replica's clients were shown them.
    pub(super) own: events::OwnRows,
    /// The rows the batch being settled appended, told to the follower once its callbacks
    /// showed them: told before, the follower could forward a later row another replica
    /// appended ahead of this one's own (a mode set here shown after one set there since).
    pub(super) own_unshown: Vec<events::Appended>,
    pub(super) target: PgTarget,
    /// This replica as a lease holder.
    pub(super) me: String,
    pub(super) ttl: Duration,
    pub(super) held: HashMap<SessionId, Lease>,
    /// Sessions whose lease another replica took from this one: their writes are refused until
    /// the turn that lost it ends (its release) or this replica takes the lease again.
    pub(super) lost: HashSet<SessionId>,
    /// The streaming parts open, with their session.
    pub(super) open: HashMap<PartKey, SessionId>,
    /// Their text as far as pieces hold it, and their chunks' numbers (`streams.rs`).
    pub(super) streams: Streams,
    /// The next batch writes every streaming part's text as pieces (at shutdown).
    pub(super) catch_up: bool,
    /// The next `seq` of each session's event log whose lease this replica holds, once known.
    pub(super) seqs: HashMap<SessionId, i64>,
    /// Leases whose release failed: tried again after every later batch until it commits
    /// (renewed meanwhile, as they are still held).
    pub(super) unreleased: HashSet<SessionId>,
    /// Sessions whose lease this replica took and which have shown nothing since: the first
    /// update one shows is what its client waits for after its prompt.
    pub(super) unshown: HashSet<SessionId>,
    /// The parts such sessions open in the jobs waiting out the gap, for the first chunk's
    /// session to be known before the part is stored.
    pub(super) opening: HashMap<PartKey, SessionId>,
    /// How long a batch waits for a lost connection to come back.
    pub(super) regain_within: Duration,
    /// The number of the last batch run: each stamps it in `cairn_writers` as it commits.
    pub(super) batch: i64,
    /// The connection is known lost (it may not know yet): make a new one before using it.
    pub(super) down: bool,
    /// A batch whose COMMIT was sent as the connection was lost, until the next connection
    /// tells whether it went in.
    pub(super) unsure: Option<Unsure>,
    /// Tests: the next batch that commits is told its connection was lost as it did.
    #[cfg(test)]
    pub(super) lose_commit: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What one run of a batch did, kept only if it commits.
#[derive(Default)]
pub(super) struct Done {
    pub results: Vec<Result<(), StoreError>>,
    /// The `seq` of each write's first logged update, by write (none when nothing was logged).
    pub firsts: Vec<Option<i64>>,
    pub taken: Vec<Lease>,
    pub released: Vec<SessionId>,
    /// The sessions whose turn ended (a release asked for, held or not).
    pub ended: Vec<SessionId>,
    pub lost: Vec<SessionId>,
    pub opened: Vec<(PartKey, SessionId)>,
    pub closed: Vec<PartKey>,
    /// Parts both opened and closed in this batch, with their session: what their chunks show
    /// is logged under it all the same.
    pub shut: Vec<(PartKey, SessionId)>,
    /// What the batch does to the streaming parts: its pieces, the streams it leaves.
    pub streamed: streams::Batch,
    /// The rows the batch appended to each session's event log.
    pub seqs: Vec<events::Appended>,
}

impl Writer {
    pub async fn run(mut self, mut jobs: mpsc::UnboundedReceiver<Job>) {
        let beat = self.ttl / 3;
        // When the leases held are next renewed: between batches once due, however busy the
        // queue is, or else a turn streaming without pause would let its lease lapse.
        let mut renew_at = Instant::now() + beat;
        // When the last batch of writes began; the earliest a batch of none may catch up streams.
        let (mut begun, mut retry_at): (Option<Instant>, Instant) = (None, Instant::now());
        // Jobs received while waiting out the gap, before the queue's.
        let mut early: VecDeque<Job> = VecDeque::new();
        loop {
            if !self.held.is_empty() && Instant::now() >= renew_at {
                self.renew().await;
                renew_at = Instant::now() + beat;
            }
            // Woken to renew the leases held, and to write as pieces streamed text that only
            // the log holds once it is due (`streams.rs`), when no batch comes to take it.
            let due = self.streams.due().map(|due| due.max(retry_at));
            let wake = if self.held.is_empty() { due } else { Some(due.map_or(renew_at, |due| due.min(renew_at))) };
            let first = if let Some(job) = early.pop_front() {
                Some(job)
            } else {
                match tokio::time::timeout_at(wake.unwrap_or(Instant::now() + IDLE), jobs.recv()).await {
                    Ok(job) => {
                        if self.held.is_empty() {
                            renew_at = Instant::now() + beat;
                        }
                        job
                    }
                    Err(_) => {
                        if due.is_some_and(|due| Instant::now() >= due) {
                            self.catch_up(false).await;
                            // Skipped or failed (the connection lost), it waits before the next.
                            retry_at = Instant::now() + streams::LAG;
                        }
                        continue;
                    }
                }
            };
            let Some(first) = first else {
                self.catch_up(true).await;
                self.release_all().await;
                return;
            };
            if matches!(first, Job::Write(..)) {
                if let Some(begun) = begun
                    && Instant::now() < begun + GAP
                    && !self.waited_for(&first)
                {
                    self.wait_out(begun + GAP, &mut jobs, &mut early).await;
                }
                begun = Some(Instant::now());
            }
            let mut writes = Vec::new();
            let mut last = None;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                // Each write is seen once more, whether or not it came in the gap: the first
                // update a session shows marks it shown, wherever it comes.
                if !self.unshown.is_empty() {
                    self.waited_for(&job);
                }
                match job {
                    Job::Write(write, shown, after) => {
                        if let Write::TakeLease { session_id, .. } = &write {
                            tracing::trace!(target: "cairn::timing", session = %session_id, "lease claim in a batch");
                        }
                        writes.push((write, shown, after));
                    }
                    job @ (Job::Snapshot(..) | Job::Load(..) | Job::Shutdown(_)) => {
                        last = Some(job);
                        break;
                    }
                }
                if writes.len() < MAX_BATCH {
                    next = early.pop_front().or_else(|| jobs.try_recv().ok());
                }
            }
            self.opening.clear();
            if !writes.is_empty() {
                // The callbacks stay out of the batch's future: they need not be `Sync`.
                let mut afters = Vec::with_capacity(writes.len());
                let (writes, shown): (Vec<Write>, Vec<Vec<String>>) = writes
                    .into_iter()
                    .map(|(write, shown, after)| {
                        afters.push(after);
                        (write, shown)
                    })
                    .unzip();
                let timed = Instant::now();
                let results = self.apply(&writes, &shown).await;
                let us = u64::try_from(timed.elapsed().as_micros()).unwrap_or(u64::MAX);
                for (write, result) in writes.iter().zip(&results) {
                    if let (Write::ReleaseLease { session_id }, Err(_)) = (write, result)
                        && self.held.contains_key(session_id)
                    {
                        self.unreleased.insert(session_id.clone());
                    }
                }
                self.release_again().await;
                let count = writes.len();
                let showing = Instant::now();
                for (after, result) in afters.into_iter().zip(results) {
                    if let Some(after) = after {
                        after.run(result);
                    }
                }
                self.own.committed(std::mem::take(&mut self.own_unshown));
                let shown_us = u64::try_from(showing.elapsed().as_micros()).unwrap_or(u64::MAX);
                tracing::trace!(target: "cairn::timing", writes = count, us, shown_us, "batch run");
            }
            match last {
                Some(Job::Snapshot(id, then)) => then(self.load(&id).await),
                Some(Job::Load(id, answer)) => {
                    let _ = answer.send(self.load(&id).await);
                }
                Some(Job::Shutdown(ack)) => {
                    self.catch_up(true).await;
                    self.release_all().await;
                    let _ = ack.send(());
                    return;
                }
                Some(Job::Write(..)) | None => {}
            }
        }
    }

    /// Waits until `until` (the gap after the last batch), keeping in `early` what comes
    /// meanwhile, but no longer once a job comes that someone waits for: a write
    /// ([`Self::waited_for`]), a snapshot or load, the shutdown.
    async fn wait_out(&mut self, until: Instant, jobs: &mut mpsc::UnboundedReceiver<Job>, early: &mut VecDeque<Job>) {
        while early.len() < MAX_BATCH {
            let Ok(Some(job)) = tokio::time::timeout_at(until, jobs.recv()).await else { return };
            let now = !matches!(job, Job::Write(..)) || self.waited_for(&job);
            early.push_back(job);
            if now {
                return;
            }
        }
    }

    /// Whether a client waits for `job`'s commit, so it goes without waiting out the gap: a
    /// turn's claim or end, a barrier that shows nothing (a flush), or the first update a turn started here shows (its
    /// client's first text after the prompt; the session counts as shown from then on).
    /// Streaming chunks after it wait, and fill the batches.
    fn waited_for(&mut self, job: &Job) -> bool {
        let Job::Write(write, shown, _) = job else { return true };
        match write {
            Write::TakeLease { .. } | Write::ReleaseLease { .. } => true,
            // One that shows something (a step's usage) only keeps the session's order.
            Write::Barrier => shown.is_empty(),
            _ if self.unshown.is_empty() => false,
            Write::OpenPart { session_id, message_id, index, .. } => {
                if self.unshown.contains(session_id) {
                    self.opening.insert((message_id.clone(), *index), session_id.clone());
                }
                false
            }
            _ if shown.is_empty() => false,
            _ => match writes::session_of(write, &self.open, &self.opening) {
                Some(session) => self.unshown.remove(session),
                None => false,
            },
        }
    }

    /// Applies `writes` in one transaction, with the events of what they show; on a write's
    /// error, again with a savepoint each. Once committed, wakes the replicas following the
    /// sessions whose logs grew.
    ///
    /// A connection lost on the way is made again and the batch run again (unless it turns out
    /// to have committed) until the bound has passed; then its writes fail as lost.
    pub(super) async fn apply(
        &mut self,
        writes: &[Write],
        shown: &[Vec<String>],
    ) -> Vec<Result<Option<i64>, StoreError>> {
        let deadline = Instant::now() + self.regain_within;
        self.batch += 1;
        let batch = self.batch;
        loop {
            match self.regain(deadline, Some(batch)).await {
                Ok(Some(done)) => return self.settle(done).await,
                Ok(None) => {}
                Err(err) => return vec![Err(err); writes.len()],
            }
            let done = match self.attempt(writes, shown, false, batch).await {
                Err(Failed::Write(_)) => self.attempt(writes, shown, true, batch).await,
                done => done,
            };
            match done {
                Ok(done) => return self.settle(done).await,
                Err(Failed::Write(err) | Failed::Batch(err)) => return vec![Err(err); writes.len()],
                Err(Failed::Lost(err) | Failed::Commit(err, _)) => {
                    tracing::warn!(
                        "PostgreSQL at {}: the connection was lost mid-batch ({err}); connecting again",
                        self.target
                    );
                    self.down = true;
                }
            }
        }
    }

    /// Keeps a committed batch's changes, wakes the replicas following the sessions whose logs
    /// grew, and answers the batch's writes.
    async fn settle(&mut self, done: Done) -> Vec<Result<Option<i64>, StoreError>> {
        let grew: Vec<SessionId> = done.seqs.iter().map(|rows| rows.session.clone()).collect();
        // This replica's follower moves past its own rows without reading them back, once they
        // are shown here (after the batch's callbacks).
        self.own_unshown.extend(done.seqs.iter().cloned());
        let results = self.committed(done);
        if !grew.is_empty()
            && let Err(err) =
                events::notify_from(&self.client, &self.prepared, &self.target, Some(&self.me), &grew).await
        {
            // The followers' poll reads the rows all the same.
            tracing::debug!("cannot wake the replicas following a session: {err}");
        }
        results
    }

    /// Keeps what a committed batch changed, and answers its chunks with their parts' results
    /// and the `seq` their first logged update got.
    pub(super) fn committed(&mut self, done: Done) -> Vec<Result<Option<i64>, StoreError>> {
        for lease in done.taken {
            self.lost.remove(&lease.session);
            self.unreleased.remove(&lease.session);
            self.unshown.insert(lease.session.clone());
            self.held.insert(lease.session.clone(), lease);
        }
        for session in done.released {
            self.unshown.remove(&session);
            self.held.remove(&session);
            self.seqs.remove(&session);
            self.unreleased.remove(&session);
        }
        self.streams.commit(done.streamed);
        for session in done.lost {
            self.unshown.remove(&session);
            self.held.remove(&session);
            self.seqs.remove(&session);
            self.streams.forget(&session);
            self.lost.insert(session);
        }
        for session in done.ended {
            self.lost.remove(&session);
        }
        for (key, session) in done.opened {
            self.open.insert(key, session);
        }
        // Numbered on only where this replica holds the lease (not after a row of `log_unheld`).
        for rows in done.seqs.into_iter().filter(|rows| self.held.contains_key(&rows.session)) {
            self.seqs.insert(rows.session, rows.seqs.end);
        }
        for key in done.closed {
            self.open.remove(&key);
        }
        let firsts = done.firsts;
        let first = |at: usize| firsts.get(at).copied().flatten();
        done.results.into_iter().enumerate().map(|(at, result)| result.map(|()| first(at))).collect()
    }

    pub(super) async fn attempt_once(
        &mut self,
        writes: &[Write],
        shown: &[Vec<String>],
        isolated: bool,
        number: i64,
    ) -> Result<Done, Failed> {
        let batch = |err: tokio_postgres::Error| Failed::Batch(StoreError::Postgres(self.target.failed(&err)));
        let target = self.target.clone();
        let mut tx = self.client.transaction().await.map_err(batch)?;
        let mut done = Done { results: vec![Ok(()); writes.len()], ..Done::default() };
        // One instant for the batch: the streams it fences as due are those it finds due.
        let now = Instant::now();
        let fenced = held::fence(
            &tx,
            &self.prepared,
            &target,
            &self.held,
            writes,
            &self.open,
            self.streams.due_at(now, self.catch_up, writes),
        )
        .await
        .map_err(Failed::Batch)?;
        done.lost.extend(fenced.iter().cloned());
        let failed = |err: tokio_postgres::Error| Failed::Write(StoreError::Postgres(target.failed(&err)));
        // The claims that can go first go together; an isolated run takes each in its place.
        let claimed = if isolated { Vec::new() } else { claims::first(writes, &self.open) };
        // The leases of the other takes are locked next, before any write locks a session's
        // row (`lease::lock_for_takes`); a claim going first locks its lease before its prompt
        // touches the session's row anyway, so most batches need no statement for this.
        // Failing (a lock timeout the operator set), it fails the run, which goes again
        // isolated: each take then locks its own lease in its savepoint, failing alone.
        if !isolated {
            let alone = writes.iter().enumerate().filter(|(job, _)| claimed.binary_search(job).is_err());
            let taken = held::takes(alone.map(|(_, write)| write));
            if !taken.is_empty() {
                lease::lock_for_takes(&tx, &self.prepared, &self.me, &taken).await.map_err(failed)?;
            }
        }
        let state = State { me: &self.me, prepared: &self.prepared, ttl: self.ttl, held: &self.held, open: &self.open };
        let mut opened: HashMap<PartKey, SessionId> = HashMap::new();
        if !claimed.is_empty() {
            claims::take_all(&tx, &state, writes, &claimed, &fenced, &mut done).await.map_err(failed)?;
        }
        // The messages and parts of each run of writes go together (`grouped.rs`).
        let mut group = Group::default();
        for (job, write) in writes.iter().enumerate() {
            if claimed.binary_search(&job).is_ok() {
                continue;
            }
            if let Some(session) = session_of(write, &self.open, &opened)
                && (fenced.contains(session)
                    || (self.lost.contains(session) && !matches!(write, Write::TakeLease { .. })))
            {
                let epoch = self.held.get(session).map_or(0, |lease| lease.epoch);
                done.results[job] = Err(StoreError::Postgres(PgError::Fenced { session: session.to_string(), epoch }));
                continue;
            }
            if !isolated && Group::fits(write) {
                if group.clashes(write) {
                    group.send(&tx, &self.prepared).await.map_err(failed)?;
                }
                group.take(write, &mut opened);
                continue;
            }
            if !isolated && !Group::passes(write) {
                group.send(&tx, &self.prepared).await.map_err(failed)?;
            }
            let result = if isolated {
                let point = tx.savepoint("write").await.map_err(batch)?;
                let run = async {
                    if let Write::TakeLease { .. } = write {
                        lease::lock_for_takes(&point, &self.prepared, &self.me, &held::takes([write])).await?;
                    }
                    writes::one(&point, &target, &state, write, &mut done, &mut opened).await
                };
                match run.await {
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
                writes::one(&tx, &target, &state, write, &mut done, &mut opened).await.map_err(failed)?
            };
            done.results[job] = result;
        }
        group.send(&tx, &self.prepared).await.map_err(failed)?;
        let known = logged::Known {
            target: &target,
            prepared: &self.prepared,
            open: &self.open,
            held: &self.held,
            seqs: &self.seqs,
        };
        // Every part open at some point of the batch: one opened, streamed and closed within it
        // (a fast answer) still names its session for the chunks it showed.
        let mut parts = opened.clone();
        parts.extend(done.shut.iter().cloned());
        let mut plan = logged::Plan::of(&known, writes, shown, &done, &parts);
        // Which chunks' text goes into pieces now, and which rides on their log rows.
        let holding = |session: &SessionId| Holding::of(session, &self.held, &self.lost, &done);
        let streamed = {
            let sessions = (&self.open, &parts);
            self.streams.batch(writes, &done.results, &mut plan, sessions, &holding, self.catch_up, now)
        };
        // The batch's last statements, sent together (the connection pipelines them): the
        // streamed text, the event log's rows and the batch's stamp. One failing aborts the
        // transaction, and the batch with it.
        let (added, logged, stamped) = tokio::join!(
            rows::add_pieces(&tx, &self.prepared, &streamed.pieces, &streamed.ended),
            logged::log(&tx, &known, &self.me, writes.len(), &plan, &done),
            regain::stamp(&tx, &self.prepared, &self.me, number),
        );
        drop(plan);
        done.streamed = streamed;
        added.map_err(batch)?;
        let logged = logged.map_err(Failed::Batch)?;
        (done.seqs, done.firsts) = (logged.seqs, logged.firsts);
        stamped.map_err(batch)?;
        done.opened.extend(opened);
        if let Err(err) = tx.commit().await {
            return Err(Failed::Commit(StoreError::Postgres(target.failed(&err)), Box::new(done)));
        }
        #[cfg(test)]
        if self.lose_commit.swap(false, std::sync::atomic::Ordering::SeqCst) {
            // As if the connection broke before the server's answer to the COMMIT arrived.
            self.down = true;
            let detail = "connection closed (as the test asked)".to_owned();
            return Err(Failed::Commit(
                StoreError::Postgres(PgError::Query { at: target.to_string(), detail }),
                Box::new(done),
            ));
        }
        Ok(done)
    }
}

/// Why a run of a batch stopped: a write's statement failed (run it again isolated; an
/// isolated run answers each write's failure itself), or the batch itself did, or the
/// connection was lost (connect again and run it again unless it committed); its COMMIT failed
/// (a lost connection or the server's refusal: [`Writer::attempt`] tells which).
pub(super) enum Failed {
    Write(StoreError),
    Batch(StoreError),
    Lost(StoreError),
    Commit(StoreError, Box<Done>),
}

/// What a write sees of the writer while the batch runs.
pub(super) struct State<'a> {
    pub me: &'a str,
    /// The writer's prepared statements.
    pub prepared: &'a Prepared,
    pub ttl: Duration,
    pub held: &'a HashMap<SessionId, Lease>,
    pub open: &'a HashMap<PartKey, SessionId>,
}

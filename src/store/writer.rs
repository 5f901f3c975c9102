//! The writer thread: owns the write connection and commits queued writes in batches.
//!
//! It blocks on its queue, drains whatever else is waiting (up to `MAX_BATCH`), applies the lot in
//! one `BEGIN IMMEDIATE` transaction with a savepoint per SQL write (so one bad write fails alone),
//! commits, and only then runs the writes' callbacks in queue order. Streaming parts live in memory
//! between `OpenPart` and `ClosePart`; a batch rewrites each part it touched once, whatever the
//! number of chunks appended to it.
//!
//! It also keeps this process's session leases: a lease is checked and taken inside the batch
//! that holds the turn's first write (`BEGIN IMMEDIATE` makes check and take one step for every
//! process sharing the file), refreshed every `lease::HEARTBEAT_EVERY` while any is held (waking
//! for it when idle), and released when asked and at shutdown. What it holds is what is
//! committed: a take counts once its batch commits, and a release that failed is held still and
//! tried again with the next batch (or heartbeat) until it commits. Crash-orphaned tool calls
//! are finished here too, under the write transaction, so they are judged as stored.
//!
//! A read can be queued too ([`Handle::read`]): it ends the batch it falls in, so it runs on the
//! writer's connection once everything queued before it is committed and called back, and before
//! anything queued after it is applied. What it sees is exactly what the callbacks so far have
//! been told, which is how a `session/load` joins a live stream without a gap or a repeat.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::lease::{self, Holder};
use super::{AfterCommit, StoreError, Write, rows, transfer};
use crate::history::Part;
use crate::ids::{MessageId, SessionId, now_ms};

const MAX_BATCH: usize = 4096;

// `Shutdown` is sent once per process; boxing every write instead would cost an allocation per chunk.
#[allow(clippy::large_enum_variant)]
enum Job {
    Write(Write, Option<AfterCommit>),
    Read(ReadJob),
    Shutdown(oneshot::Sender<()>),
}

/// A read run between two batches on the writer's connection (`Err` if the writer is gone).
pub type ReadJob = Box<dyn FnOnce(Result<&Connection, StoreError>) + Send>;

/// The queue into the writer thread.
pub struct Handle {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
}

/// Starts the writer thread on `conn`; it holds leases as `me` and refreshes them every `beat_every`.
pub fn spawn(conn: Connection, path: PathBuf, me: Holder, beat_every: Duration) -> std::io::Result<Handle> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("cairn-store".into()).spawn(move || {
        let (held, unreleased) = (HashSet::new(), HashSet::new());
        Writer { conn, path, open: HashMap::new(), me, held, unreleased, beat: Instant::now(), beat_every }.run(&rx);
    })?;
    Ok(Handle { tx: Mutex::new(Some(tx)) })
}

impl Handle {
    pub fn submit(&self, write: Write, after: Option<AfterCommit>) {
        if let Some(Job::Write(_, Some(after))) = self.send(Job::Write(write, after)) {
            after(Err(StoreError::Closed));
        }
    }

    /// Queues `read`, to run on the writer's connection between the batch of what was queued
    /// before it and the batch of what comes after.
    pub fn read(&self, read: ReadJob) {
        if let Some(Job::Read(read)) = self.send(Job::Read(read)) {
            read(Err(StoreError::Closed));
        }
    }

    /// Queues a job; gives it back if the thread is gone.
    fn send(&self, job: Job) -> Option<Job> {
        match self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
            Some(tx) => tx.send(job).err().map(|mpsc::SendError(job)| job),
            None => Some(job),
        }
    }

    /// Lets the thread finish what is queued, close the connection and exit.
    pub async fn shutdown(&self) {
        let (ack_tx, ack_rx) = oneshot::channel();
        let tx = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(tx) = tx
            && tx.send(Job::Shutdown(ack_tx)).is_ok()
        {
            let _ = ack_rx.await;
        }
    }
}

type PartKey = (MessageId, u32);

/// A text or reasoning part still receiving chunks.
struct OpenPart {
    session_id: SessionId,
    part: Part,
}

struct Writer {
    conn: Connection,
    path: PathBuf,
    open: HashMap<PartKey, OpenPart>,
    /// This process as a lease holder.
    me: Holder,
    /// The sessions whose lease this process took and has not released, as committed.
    held: HashSet<SessionId>,
    /// The sessions whose release was asked for and has not been committed yet.
    unreleased: HashSet<SessionId>,
    /// When the held leases were last refreshed.
    beat: Instant,
    /// How often they are (`lease::HEARTBEAT_EVERY` but in tests).
    beat_every: Duration,
}

impl Writer {
    fn run(mut self, rx: &mpsc::Receiver<Job>) {
        loop {
            // Idle with leases held, wake up for their heartbeat (and to retry their releases).
            let first = if self.held.is_empty() && self.unreleased.is_empty() {
                rx.recv().ok()
            } else {
                match rx.recv_timeout(self.beat_every.saturating_sub(self.beat.elapsed())) {
                    Ok(job) => Some(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.apply(&[]);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                }
            };
            let Some(first) = first else {
                // Every handle is gone without a shutdown: give the leases back all the same.
                self.release_all();
                return;
            };
            let mut writes = Vec::new();
            // A read or a shutdown ends the batch: it comes after the writes before it.
            let mut last = None;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write(write, after) => writes.push((write, after)),
                    job @ (Job::Read(_) | Job::Shutdown(_)) => {
                        last = Some(job);
                        break;
                    }
                }
                if writes.len() < MAX_BATCH {
                    next = rx.try_recv().ok();
                }
            }
            if !writes.is_empty() {
                let results = self.apply(&writes);
                for ((_, after), result) in writes.into_iter().zip(results) {
                    if let Some(after) = after {
                        after(result);
                    }
                }
            }
            match last {
                Some(Job::Read(read)) => read(Ok(&self.conn)),
                Some(Job::Shutdown(ack)) => {
                    self.release_all();
                    drop(self.conn);
                    let _ = ack.send(());
                    return;
                }
                Some(Job::Write(..)) | None => {}
            }
        }
    }

    fn error(&self, err: &rusqlite::Error) -> StoreError {
        StoreError::from_sqlite(&self.path, err)
    }

    fn release_all(&mut self) {
        if let Err(err) = lease::release_all(&self.conn, &self.me, now_ms()) {
            tracing::warn!(%err, "this process's session leases could not be released; they lapse when it exits");
        }
        self.held.clear();
        self.unreleased.clear();
    }

    /// Gives back the lease of `session`, in a savepoint of the batch's transaction.
    fn release(&self, session: &SessionId, now: i64) -> Result<(), StoreError> {
        let result = self.savepoint(|conn| lease::release(conn, &self.me, session, now));
        if let Err(err) = &result {
            tracing::warn!(%session, %err, "a session lease could not be released; it is tried again with the next write");
        }
        result
    }

    /// Refreshes the held leases if their heartbeat is due; inside the batch's transaction.
    fn heartbeat(&mut self, now: i64) {
        if self.held.is_empty() || self.beat.elapsed() < self.beat_every {
            return;
        }
        self.beat = Instant::now();
        if let Err(err) = lease::beat(&self.conn, &self.me, now) {
            tracing::warn!(%err, "the session leases' heartbeat could not be written");
        }
    }

    /// Takes the lease with the turn's first write (see [`Write::TakeLease`]).
    fn take_lease(
        &mut self,
        session_id: &SessionId,
        last: &lease::LastTurn,
        prompt: Option<&crate::history::Message>,
        title: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        match lease::check(&self.conn, &self.me, session_id, last, now) {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => return Err(refused),
            Err(err) => return Err(self.error(&err)),
        }
        let me = &self.me;
        self.savepoint(|conn| {
            lease::take(conn, me, session_id, now)?;
            if let Some(prompt) = prompt {
                rows::insert_message(conn, session_id, prompt, now)?;
            }
            if let Some(title) = title {
                rows::set_first_title(conn, session_id, title, now)?;
            }
            Ok(())
        })
    }

    /// Runs `write` unless another live process holds the lease of `session` or of a sub-agent
    /// session below it.
    fn unless_leased(
        &self,
        session: &SessionId,
        now: i64,
        write: impl FnOnce(&Connection) -> rusqlite::Result<()>,
    ) -> Result<(), StoreError> {
        match lease::held_below(&self.conn, &self.me, session, now) {
            Ok(Some(holder)) => Err(StoreError::Leased(Box::new(holder))),
            Ok(None) => self.savepoint(write),
            Err(err) => Err(self.error(&err)),
        }
    }

    fn apply(&mut self, writes: &[(Write, Option<AfterCommit>)]) -> Vec<Result<(), StoreError>> {
        let mut results: Vec<Result<(), StoreError>> = vec![Ok(()); writes.len()];
        // What the leases were before the batch, and the releases it asks for: if it is not
        // committed, the leases are as they were, and those releases are still wanted.
        let (held_before, unreleased_before) = (self.held.clone(), self.unreleased.clone());
        let asked = writes.iter().filter_map(|(write, _)| match write {
            Write::ReleaseLease { session_id } => Some(session_id.clone()),
            _ => None,
        });
        if let Err(err) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            let err = self.error(&err);
            self.unreleased.extend(asked);
            return vec![Err(err); writes.len()];
        }
        let now = now_ms();
        self.heartbeat(now);
        // Releases that failed before go first; those that succeed count once committed.
        let mut released: HashSet<SessionId> = HashSet::new();
        for session in self.unreleased.clone() {
            if self.release(&session, now).is_ok() {
                released.insert(session);
            }
        }
        // Which writes each touched streaming part answers for, until it is written.
        let mut dirty: HashMap<PartKey, Vec<usize>> = HashMap::new();
        for (i, (write, _)) in writes.iter().enumerate() {
            match write {
                Write::OpenPart { session_id, message_id, index, part } => {
                    let key = (message_id.clone(), *index);
                    self.open.insert(key.clone(), OpenPart { session_id: session_id.clone(), part: part.clone() });
                    dirty.entry(key).or_default().push(i);
                }
                Write::AppendPart { message_id, index, delta } => {
                    let key = (message_id.clone(), *index);
                    match self.open.get_mut(&key) {
                        Some(open) => {
                            append(&mut open.part, delta);
                            dirty.entry(key).or_default().push(i);
                        }
                        None => {
                            results[i] = Err(StoreError::Sqlite {
                                path: self.path.clone(),
                                detail: format!("chunk for part {index} of {message_id}, which is not open"),
                            });
                        }
                    }
                }
                Write::ClosePart { message_id, index } => {
                    let key = (message_id.clone(), *index);
                    let mut answered = dirty.remove(&key).unwrap_or_default();
                    answered.push(i);
                    if let Some(open) = self.open.remove(&key) {
                        let result = self.savepoint(|conn| {
                            rows::upsert_part(conn, &open.session_id, message_id, *index, &open.part, now)
                        });
                        for job in answered {
                            results[job] = result.clone();
                        }
                    }
                }
                Write::DeleteSession { id } => {
                    results[i] = self.unless_leased(id, now, |conn| rows::delete_session(conn, id));
                    if results[i].is_ok() {
                        self.open.retain(|_, open| open.session_id != *id);
                        self.held.remove(id);
                        self.unreleased.remove(id);
                        released.remove(id);
                    }
                }
                Write::InsertSession(row) => results[i] = self.savepoint(|conn| rows::insert_session(conn, row)),
                Write::HideFrom { session_id, from } => {
                    results[i] =
                        self.unless_leased(session_id, now, |conn| rows::hide_from(conn, session_id, from, now));
                }
                Write::TakeLease { session_id, last, prompt, title } => {
                    results[i] = self.take_lease(session_id, last, prompt.as_ref(), title.as_deref(), now);
                    if results[i].is_ok() {
                        // A new take: an earlier release still pending must not give it back.
                        self.held.insert(session_id.clone());
                        self.unreleased.remove(session_id);
                        released.remove(session_id);
                    }
                }
                Write::ReleaseLease { session_id } => {
                    self.unreleased.insert(session_id.clone());
                    results[i] = self.release(session_id, now);
                    if results[i].is_ok() {
                        released.insert(session_id.clone());
                    }
                }
                Write::FinalizeOrphans { session_id } => {
                    results[i] = self.finalize_orphans(session_id, now);
                }
                Write::SetSessionRules { id, rules } => {
                    results[i] = self.savepoint(|conn| rows::set_session_rules(conn, id, rules, now));
                }
                Write::RemoveProjectRule { project, rule } => {
                    results[i] = self.savepoint(|conn| rows::remove_project_rule(conn, project, rule));
                }
                Write::ForkSession { row, parent } => {
                    results[i] = self.savepoint(|conn| rows::fork_session(conn, row, parent, now));
                }
                Write::ImportSession { row, messages } => {
                    results[i] = self.savepoint(|conn| transfer::import_session(conn, row, messages));
                }
                Write::SetSessionTitle { id, title } => {
                    results[i] = self.savepoint(|conn| rows::set_session_title(conn, id, title, now));
                }
                Write::SetSessionSetting { id, kept, value } => {
                    results[i] = self.savepoint(|conn| rows::set_session_setting(conn, id, *kept, value, now));
                }
                Write::AddSessionRule { id, rule } => {
                    results[i] = self.savepoint(|conn| rows::add_session_rule(conn, id, rule));
                }
                Write::AddProjectRule { project, rule } => {
                    results[i] = self.savepoint(|conn| rows::add_project_rule(conn, project, rule, now));
                }
                Write::InsertMessage { session_id, message } => {
                    results[i] = self.savepoint(|conn| rows::insert_message(conn, session_id, message, now));
                }
                Write::FinishMessage { session_id, message_id, meta } => {
                    results[i] = self.savepoint(|conn| rows::finish_message(conn, session_id, message_id, meta, now));
                }
                Write::SetMessageMeta { message_id, meta } => {
                    results[i] = self.savepoint(|conn| rows::set_message_meta(conn, message_id, meta, now));
                }
                Write::PutPart { session_id, message_id, index, part } => {
                    results[i] =
                        self.savepoint(|conn| rows::upsert_part(conn, session_id, message_id, *index, part, now));
                }
                Write::Barrier => {}
            }
        }
        for (key, jobs) in dirty {
            let Some(open) = self.open.get(&key) else { continue };
            let result =
                self.savepoint(|conn| rows::upsert_part(conn, &open.session_id, &key.0, key.1, &open.part, now));
            for job in jobs {
                if results[job].is_ok() {
                    results[job] = result.clone();
                }
            }
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            let err = self.error(&err);
            let _ = self.conn.execute_batch("ROLLBACK");
            self.held = held_before;
            self.unreleased = unreleased_before;
            self.unreleased.extend(asked);
            return vec![Err(err); writes.len()];
        }
        for session in released {
            self.held.remove(&session);
            self.unreleased.remove(&session);
        }
        results
    }

    /// See [`Write::FinalizeOrphans`]: nothing changes while a live process holds the lease.
    fn finalize_orphans(&self, session: &SessionId, now: i64) -> Result<(), StoreError> {
        if self.held.contains(session) {
            return Ok(());
        }
        match lease::held_elsewhere(&self.conn, &self.me, session, now) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => self.savepoint(|conn| rows::finalize_orphans(conn, session, now)),
            Err(err) => Err(self.error(&err)),
        }
    }

    /// Runs one write inside a savepoint, so its failure rolls back only its own rows.
    fn savepoint(&self, write: impl FnOnce(&Connection) -> rusqlite::Result<()>) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<()> {
            self.conn.prepare_cached("SAVEPOINT w")?.execute([])?;
            match write(&self.conn) {
                Ok(()) => {
                    self.conn.prepare_cached("RELEASE w")?.execute([])?;
                    Ok(())
                }
                Err(err) => {
                    self.conn.execute_batch("ROLLBACK TO w; RELEASE w")?;
                    Err(err)
                }
            }
        };
        run().map_err(|err| self.error(&err))
    }
}

fn append(part: &mut Part, delta: &str) {
    match part {
        Part::Text { text } | Part::Reasoning { text, .. } => text.push_str(delta),
        Part::RedactedReasoning { .. }
        | Part::Notice { .. }
        | Part::Image { .. }
        | Part::ResourceLink { .. }
        | Part::Resource { .. }
        | Part::BlobResource { .. }
        | Part::Tool(_)
        | Part::Compaction(_) => {}
    }
}

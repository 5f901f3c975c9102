//! The writer thread: owns the write connection and commits queued writes in batches.
//!
//! It blocks on its queue, drains whatever else is waiting (up to `MAX_BATCH`), applies the lot in
//! one `BEGIN IMMEDIATE` transaction with a savepoint per SQL write (so one bad write fails alone),
//! commits, and only then runs the writes' callbacks in queue order. Streaming parts live in memory
//! between `OpenPart` and `ClosePart`; a batch rewrites each part it touched once, whatever the
//! number of chunks appended to it.
//!
//! A read can be queued too ([`Handle::read`]): it ends the batch it falls in, so it runs on the
//! writer's connection once everything queued before it is committed and called back, and before
//! anything queued after it is applied. What it sees is exactly what the callbacks so far have
//! been told, which is how a `session/load` joins a live stream without a gap or a repeat.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::{AfterCommit, StoreError, Write, rows};
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

pub fn spawn(conn: Connection, path: PathBuf) -> std::io::Result<Handle> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new().name("cairn-store".into()).spawn(move || {
        Writer { conn, path, open: HashMap::new() }.run(&rx);
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
}

impl Writer {
    fn run(mut self, rx: &mpsc::Receiver<Job>) {
        while let Ok(first) = rx.recv() {
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

    fn apply(&mut self, writes: &[(Write, Option<AfterCommit>)]) -> Vec<Result<(), StoreError>> {
        let mut results: Vec<Result<(), StoreError>> = vec![Ok(()); writes.len()];
        if let Err(err) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            let err = self.error(&err);
            return vec![Err(err); writes.len()];
        }
        let now = now_ms();
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
                    self.open.retain(|_, open| open.session_id != *id);
                    results[i] = self.savepoint(|conn| rows::delete_session(conn, id));
                }
                Write::InsertSession(row) => results[i] = self.savepoint(|conn| rows::insert_session(conn, row)),
                Write::HideFrom { session_id, from } => {
                    results[i] = self.savepoint(|conn| rows::hide_from(conn, session_id, from, now));
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
                Write::SetSessionModel { id, model } => {
                    results[i] = self.savepoint(|conn| rows::set_session_model(conn, id, model, now));
                }
                Write::SetSessionTitle { id, title } => {
                    results[i] = self.savepoint(|conn| rows::set_session_title(conn, id, title, now));
                }
                Write::SetSessionThought { id, level } => {
                    results[i] = self.savepoint(|conn| rows::set_session_thought(conn, id, level, now));
                }
                Write::SetSessionMode { id, mode } => {
                    results[i] = self.savepoint(|conn| rows::set_session_mode(conn, id, mode, now));
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
            return vec![Err(err); writes.len()];
        }
        results
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

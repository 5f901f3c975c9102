//! The writer thread: owns the write connection and commits queued writes in batches.
//!
//! It blocks on its queue, drains whatever else is waiting (up to `MAX_BATCH`), applies the lot in
//! one transaction (`tx`), each write in its own savepoint by its own function (`writes`), then
//! writes the text the batch appended to streaming parts once per part (`stream`, the part
//! coalescer), commits, and only then runs the writes' callbacks in queue order. So a chunk is
//! on disk before it is shown, and costs a batch only the bytes it adds.
//!
//! It also keeps this process's session leases (`held`): a lease is checked and taken inside the
//! batch that holds the turn's first write (`BEGIN IMMEDIATE` makes check and take one step for
//! every process sharing the file), refreshed every `lease::HEARTBEAT_EVERY` while any is held
//! (waking for it when idle), and released when asked and at shutdown. Crash-orphaned tool calls
//! are finished here too, under the write transaction, so they are judged as stored.
//!
//! No commit checkpoints the log: the writer tells `fold` each commit's log size and its
//! pauses, `fold` folds the log on a thread of its own, and the writer empties the log at
//! shutdown.
//!
//! A read can be queued too ([`Handle::read`]): it ends the batch it falls in, so it runs on the
//! writer's connection once everything queued before it is committed and called back, and before
//! anything queued after it is applied. What it sees is exactly what the callbacks so far have
//! been told, which is how a `session/load` joins a live stream without a gap or a repeat.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::fold::{self, Folder};
use super::held::Held;
use super::lease::{self, Holder};
use super::rows;
use super::stream::{self, Streams};
use super::tx::{self, Db};
use super::writes::Batch;
use super::{AfterCommit, StoreError, Write};
use crate::ids::now_ms;

const MAX_BATCH: usize = 4096;

/// What a session and its turns write, compiled when the writer starts (see [`Db::prepare`]).
const TURN: &[&str] = &[
    tx::BEGIN,
    tx::COMMIT,
    tx::SAVEPOINT,
    tx::RELEASE,
    lease::READ,
    lease::HELD_BELOW,
    lease::TAKE,
    lease::BEAT,
    lease::RELEASE,
    rows::INSERT_SESSION,
    rows::SET_TITLE,
    rows::SET_FIRST_TITLE,
    rows::INSERT_MESSAGE,
    rows::TOUCH_SESSION,
    rows::SET_MESSAGE_META,
    rows::ADD_USAGE,
    rows::UPSERT_PART,
    stream::GROW_PIECE,
    stream::ADD_PIECE,
    stream::FOLD_PIECES,
    stream::FORGET_PIECES,
];

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
        fold::watch(&conn);
        let folder = Folder::new(path.clone());
        let writer =
            Writer { db: Db { conn, path }, held: Held::new(me, beat_every), streams: Streams::default(), folder };
        writer.db.prepare(TURN);
        writer.run(&rx);
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

struct Writer {
    db: Db,
    held: Held,
    streams: Streams,
    folder: Folder,
}

impl Writer {
    fn run(mut self, rx: &mpsc::Receiver<Job>) {
        loop {
            let first = match rx.try_recv() {
                Ok(job) => Some(job),
                Err(mpsc::TryRecvError::Disconnected) => None,
                Err(mpsc::TryRecvError::Empty) => self.wait(rx),
            };
            let Some(first) = first else {
                // Every handle is gone without a shutdown: give the leases back all the same.
                self.held.release_all(&self.db, now_ms());
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
                Some(Job::Read(read)) => read(Ok(&self.db.conn)),
                Some(Job::Shutdown(ack)) => {
                    self.held.release_all(&self.db, now_ms());
                    // The next process then starts on an empty log instead of reading it back: SQLite
                    // empties it only when the last connection closes, and this process's read
                    // connection, which cannot, often closes last or not at all.
                    self.folder.finish();
                    fold::fold_here(&self.db.conn, &self.db.path, true);
                    drop(self.db);
                    let _ = ack.send(());
                    return;
                }
                Some(Job::Write(..)) | None => {}
            }
        }
    }

    /// Waits for a job while none is queued: starts the fold of the log owed once nothing came
    /// for [`fold::PAUSE`], and wakes up for the leases' heartbeat (and to retry their releases)
    /// while any is held.
    fn wait(&mut self, rx: &mpsc::Receiver<Job>) -> Option<Job> {
        let mut fold_at = self.folder.owed().then(|| Instant::now() + fold::PAUSE);
        loop {
            let now = Instant::now();
            let fold_in = fold_at.map(|at| at.saturating_duration_since(now));
            let heartbeat = self.held.idle_for();
            let Some(wait) = [fold_in, heartbeat].into_iter().flatten().min() else { return rx.recv().ok() };
            match rx.recv_timeout(wait) {
                Ok(job) => return Some(job),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if heartbeat.is_some_and(|beat| beat <= wait) {
                        self.apply(&[]);
                    }
                    if fold_in.is_some_and(|fold| fold <= wait) {
                        fold_at = self.folder.paused().map(|again| Instant::now() + again);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Applies `writes` in one transaction and answers each one's result: its own savepoint's,
    /// or the commit's failure for all.
    fn apply(&mut self, writes: &[(Write, Option<AfterCommit>)]) -> Vec<Result<(), StoreError>> {
        self.held.begin(writes.iter().map(|(write, _)| write));
        if let Err(err) = self.db.begin() {
            self.held.rolled_back();
            return vec![Err(err); writes.len()];
        }
        let now = now_ms();
        self.held.start(&self.db, now);
        let mut batch = Batch {
            db: &self.db,
            held: &mut self.held,
            streams: &mut self.streams,
            now,
            results: vec![Ok(()); writes.len()],
        };
        for (job, (write, _)) in writes.iter().enumerate() {
            batch.apply(job, write);
        }
        batch.write_streams();
        let results = batch.results;
        match self.db.commit() {
            Ok(()) => {
                self.held.committed();
                self.streams.committed();
                if let Some(pages) = fold::log_pages_after_commit()
                    && self.folder.committed(pages)
                {
                    fold::fold_here(&self.db.conn, &self.db.path, false);
                }
                results
            }
            Err(err) => {
                self.held.rolled_back();
                self.streams.rolled_back();
                vec![Err(err); writes.len()]
            }
        }
    }
}

// Each statement compiled ahead stays in the connection's cache beside the others it uses.
const _: () = assert!(TURN.len() * 2 <= super::STATEMENTS);

#[cfg(test)]
mod tests {
    #[test]
    fn every_statement_compiled_ahead_compiles_against_the_latest_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.db");
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        super::super::migrate::to_latest(&mut conn, &path).unwrap();
        for sql in super::TURN {
            assert!(conn.prepare(sql).is_ok(), "{sql}");
        }
    }
}

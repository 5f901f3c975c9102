//! Folding the write-ahead log into the database, off the writer's thread.
//!
//! SQLite's own automatic checkpoint runs inside the commit that takes the log past 1,000
//! pages, so a chunk waits behind it: copying the pages and two fsyncs, 5–10 ms on a small
//! disk. Here the writer's connection reports each commit's log size (`watch`) instead of
//! checkpointing, and [`Folder`] starts a passive checkpoint on a connection of its own, on a
//! short-lived thread, once the log is past [`FOLD_AT`] pages. A passive checkpoint never
//! blocks the writer, which goes on appending meanwhile. The log starts over at the writer's
//! first transaction after a fold has taken all of it. So a fold that fell behind (the writer
//! appended meanwhile) is followed by another: when the writer pauses ([`PAUSE`]), or once
//! [`FOLD_AGAIN_AFTER`] more pages have come.
//!
//! A fold that could not take the whole log because a reader in another process still needs
//! part of it is not repeated at every pause, only after more pages. At shutdown the writer
//! waits for a fold still running ([`Folder::finish`]) and then empties the log itself
//! ([`fold_here`]), so the next process starts on an empty log.

use std::cell::Cell;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// Log pages past which a fold starts: SQLite's own default for its checkpoint.
pub const FOLD_AT: i32 = 1000;

/// Log pages past which the writer folds the log itself, after its commit, as SQLite would:
/// folds on their own thread kept failing, or a reader elsewhere keeps the log from starting
/// over (then no fold can take it all, but each copies what it can).
const FOLD_HERE_AT: i32 = 10 * FOLD_AT;

/// Log pages written since the last fold before the next one starts, while the log has not
/// started over: the writer appended while that fold ran, or a reader elsewhere still needs
/// the older pages.
const FOLD_AGAIN_AFTER: i32 = 100;

thread_local! {
    /// Pages in the log after the newest commit on this thread's writer connection.
    static LOG_PAGES: Cell<i32> = const { Cell::new(0) };
}

/// Makes `conn` (the writer's) report its log size after each commit, for
/// [`log_pages_after_commit`] on the same thread, instead of checkpointing in the commit.
pub fn watch(conn: &Connection) {
    conn.wal_hook(Some(|_, pages| {
        LOG_PAGES.set(pages);
        Ok(())
    }));
}

/// The log's size after the newest commit on this thread, or `None` if nothing was committed
/// since the last call.
pub fn log_pages_after_commit() -> Option<i32> {
    let pages = LOG_PAGES.replace(0);
    (pages > 0).then_some(pages)
}

/// Starts folds on their own thread when the log has grown enough, one at a time.
pub struct Folder {
    path: PathBuf,
    /// The log's size after the newest commit.
    pages: i32,
    /// The log's size when the last fold started (0: none since it started over).
    last: i32,
    /// Whether the last fold that ended left pages behind that a reader still needed (or
    /// failed): another one at the next pause would copy nothing more.
    stuck: bool,
    running: Option<JoinHandle<Folded>>,
}

/// How a fold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Folded {
    /// Every page the log held when it started is in the database.
    All,
    /// A reader still needed some, or the fold failed.
    Partly,
}

/// How long the writer has nothing to do before it counts as a pause and the fold it owes
/// starts: between a stream's chunks the next write comes before such a fold could end.
pub const PAUSE: Duration = Duration::from_millis(20);

/// How soon a paused writer asks again while the fold it owes waits for the running one.
pub const ASK_AGAIN: Duration = Duration::from_millis(5);

impl Folder {
    pub fn new(path: PathBuf) -> Self {
        Self { path, pages: 0, last: 0, stuck: false, running: None }
    }

    /// Told the log's size after a commit: starts a fold if the log is past [`FOLD_AT`] pages,
    /// none is running, and [`FOLD_AGAIN_AFTER`] pages came since the last one. Says whether
    /// the writer must fold the log itself: past [`FOLD_HERE_AT`], as SQLite would have.
    #[must_use]
    pub fn committed(&mut self, pages: i32) -> bool {
        if pages < self.last {
            // The log started over: a fold took all of it while the writer paused.
            self.last = 0;
            self.stuck = false;
        }
        self.pages = pages;
        if pages >= FOLD_HERE_AT {
            // The writer folds, after the running fold (which would hold it off) has ended.
            self.finish();
            return true;
        }
        if pages >= FOLD_AT.max(self.last + FOLD_AGAIN_AFTER) {
            self.start();
        }
        false
    }

    /// Whether a fold is owed at the writer's next pause: pages came since the last fold began,
    /// the log is past [`FOLD_AT`], and the last fold was not held back by a reader.
    pub fn owed(&mut self) -> bool {
        self.reap();
        self.pages >= FOLD_AT && self.pages > self.last && !self.stuck
    }

    /// Told the writer has had nothing to do for [`PAUSE`]: starts the fold owed, so that the
    /// log can start over at the next write, or, while the last one still runs, says how soon
    /// to ask again.
    pub fn paused(&mut self) -> Option<Duration> {
        if !self.owed() {
            return None;
        }
        if self.running.is_some() {
            return Some(ASK_AGAIN);
        }
        self.start();
        None
    }

    /// Notes how a fold that ended went.
    fn reap(&mut self) {
        if self.running.as_ref().is_some_and(JoinHandle::is_finished) {
            self.finish();
        }
    }

    /// Starts a fold unless one is running.
    fn start(&mut self) {
        self.reap();
        if self.running.is_some() {
            return;
        }
        self.last = self.pages;
        let path = self.path.clone();
        match std::thread::Builder::new().name("cairn-fold".into()).spawn(move || fold(&path)) {
            Ok(running) => self.running = Some(running),
            Err(err) => tracing::warn!(%err, "cannot start a thread to fold the log; it grows until the next one"),
        }
    }

    /// Waits for a fold still running.
    pub fn finish(&mut self) {
        if let Some(running) = self.running.take() {
            self.stuck = running.join().map_or(true, |folded| folded == Folded::Partly);
        }
    }
}

/// One passive checkpoint on a connection of its own: copies what no reader still needs.
fn fold(path: &std::path::Path) -> Folded {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let folded = Connection::open_with_flags(path, flags).and_then(|conn| {
        // Another process's fold holds the checkpoint: this one is not needed, and waiting would
        // hold up a shutdown.
        conn.busy_timeout(Duration::ZERO)?;
        checkpoint(&conn, "PASSIVE")
    });
    match folded {
        Ok(folded) => folded,
        Err(err) => {
            tracing::warn!(%err, file = %path.display(), "folding the log into the database failed");
            Folded::Partly
        }
    }
}

/// Runs `PRAGMA wal_checkpoint(mode)` on `conn`: whether it took the whole log. A checkpoint
/// another connection holds off is reported in the result, not as an error.
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<Folded> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        let (busy, log, copied): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        Ok(if busy == 0 && copied >= log { Folded::All } else { Folded::Partly })
    })
}

/// The writer's own fold, in its thread: `TRUNCATE` at shutdown (the log emptied, for the next
/// process to start on), `PASSIVE` past [`FOLD_HERE_AT`]. Never waits for another connection.
pub fn fold_here(conn: &Connection, path: &std::path::Path, at_shutdown: bool) {
    let mode = if at_shutdown { "TRUNCATE" } else { "PASSIVE" };
    match conn.busy_timeout(Duration::ZERO).and_then(|()| checkpoint(conn, mode)) {
        Ok(Folded::All) => {}
        Ok(Folded::Partly) => tracing::debug!(mode, "a reader elsewhere still needs the log: it is folded later"),
        Err(err) => tracing::warn!(%err, file = %path.display(), "folding the log into the database failed"),
    }
    if !at_shutdown {
        // Back to the writer's own wait for other processes' writes.
        if let Err(err) = conn.busy_timeout(super::BUSY_TIMEOUT) {
            tracing::warn!(%err, "cannot restore the writer's busy timeout");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fold_starts_past_the_threshold_and_again_after_more_pages_or_at_a_pause() {
        let dir = tempfile::tempdir().unwrap();
        let mut folder = Folder::new(dir.path().join("cairn.db"));
        assert!(!folder.committed(FOLD_AT - 1));
        assert!(folder.running.is_none(), "a small log is left alone");
        assert!(!folder.committed(FOLD_AT));
        assert!(folder.running.is_some(), "a fold started at the threshold");
        folder.finish();
        // No database there: the fold failed, and failing again at every pause helps nobody.
        assert!(folder.stuck);
        folder.stuck = false;

        assert!(!folder.committed(FOLD_AT + FOLD_AGAIN_AFTER - 1));
        assert!(folder.running.is_none(), "too few pages since the last fold");
        assert!(folder.owed());
        assert_eq!(folder.paused(), None);
        assert!(folder.running.is_some(), "a pause folds what came since");
        folder.finish();
        folder.stuck = false;
        assert!(!folder.owed(), "nothing came since the last fold");

        // A fold still running when more came and the writer pauses.
        let (end, ended) = std::sync::mpsc::channel::<()>();
        folder.running = Some(std::thread::spawn(move || {
            let _ = ended.recv();
            Folded::All
        }));
        assert!(!folder.committed(folder.pages + 1));
        assert_eq!(folder.paused(), Some(ASK_AGAIN), "the fold owed waits for the running one and is asked for again");
        end.send(()).unwrap();
        while folder.running.as_ref().is_some_and(|fold| !fold.is_finished()) {
            std::thread::yield_now();
        }
        assert_eq!(folder.paused(), None);
        assert!(folder.running.is_some(), "then it starts");
        folder.finish();

        assert!(!folder.committed(5));
        assert!(folder.running.is_none(), "the log started over");
        assert!(folder.committed(FOLD_HERE_AT), "a log this long is folded by the writer itself");
        assert!(folder.running.is_none(), "and not on a thread beside it");
    }

    #[test]
    fn a_fold_that_a_reader_holds_back_says_so_and_is_not_repeated_at_the_next_pause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.db");
        let writer = Connection::open(&path).unwrap();
        writer.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);").unwrap();
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM t;").unwrap();
        writer.execute_batch("INSERT INTO t VALUES (2);").unwrap();
        assert_eq!(fold(&path), Folded::Partly, "the reader's snapshot keeps the newest page in the log");

        let mut folder = Folder::new(path.clone());
        folder.pages = FOLD_AT;
        assert_eq!(folder.paused(), None);
        folder.finish();
        assert!(folder.stuck);
        folder.pages += 1;
        assert!(!folder.owed(), "no fold at a pause while the last one was held back");

        reader.execute_batch("COMMIT").unwrap();
        assert_eq!(fold(&path), Folded::All);
    }
}

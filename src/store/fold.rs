//! Folding the write-ahead log into the database, off the writer's thread.
//!
//! SQLite's own automatic checkpoint runs inside the commit that takes the log past 1,000
//! pages, so a chunk waits behind it: copying the pages and two fsyncs, 5–10 ms on a small
//! disk. Here the writer's connection reports each commit's log size (`watch`) instead of
//! checkpointing, and [`Folder`] starts a passive checkpoint on a connection of its own, on a
//! short-lived thread, once the log is past [`FOLD_AT`] pages. A passive checkpoint never
//! blocks the writer, which goes on appending meanwhile. The log starts over at the writer's
//! first transaction after a fold has taken all of it. So a fold that fell behind (the writer
//! appended meanwhile, or a reader elsewhere still needed old pages) is followed by another:
//! when the writer has nothing queued, or once [`FOLD_AGAIN_AFTER`] more pages have come.
//!
//! At shutdown the writer waits for a fold still running ([`Folder::finish`]) and then empties
//! the log itself (`Db::fold_log`), so the next process starts on an empty log.

use std::cell::Cell;
use std::path::PathBuf;
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

/// Log pages past which a fold starts: SQLite's own default for its checkpoint.
pub const FOLD_AT: i32 = 1000;

/// Log pages past which the writer folds the log itself, in its commit, as SQLite would: only
/// if folds on their own thread keep failing.
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
    running: Option<JoinHandle<()>>,
}

impl Folder {
    pub fn new(path: PathBuf) -> Self {
        Self { path, pages: 0, last: 0, running: None }
    }

    /// Told the log's size after a commit: starts a fold if the log is past [`FOLD_AT`] pages,
    /// none is running, and [`FOLD_AGAIN_AFTER`] pages came since the last one. Says whether
    /// the writer must fold the log itself, the folds here having failed to keep it small.
    #[must_use]
    pub fn committed(&mut self, pages: i32) -> bool {
        if pages < self.last {
            // The log started over: a fold took all of it while the writer paused.
            self.last = 0;
        }
        self.pages = pages;
        if pages >= FOLD_AT.max(self.last + FOLD_AGAIN_AFTER) {
            self.start();
        }
        pages >= FOLD_HERE_AT
    }

    /// Told the writer has nothing queued: folds what came since the last fold, if the log is
    /// past [`FOLD_AT`], so that the log can start over at the next write.
    pub fn idle(&mut self) {
        if self.pages >= FOLD_AT && self.pages > self.last {
            self.start();
        }
    }

    /// Starts a fold unless one is running.
    fn start(&mut self) {
        if self.running.as_ref().is_some_and(|fold| !fold.is_finished()) {
            return;
        }
        self.last = self.pages;
        if let Some(done) = self.running.take() {
            let _ = done.join();
        }
        let path = self.path.clone();
        match std::thread::Builder::new().name("cairn-fold".into()).spawn(move || fold(&path)) {
            Ok(running) => self.running = Some(running),
            Err(err) => tracing::warn!(%err, "cannot start a thread to fold the log; it grows until the next one"),
        }
    }

    /// Waits for a fold still running.
    pub fn finish(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.join();
        }
    }
}

/// One passive checkpoint on a connection of its own: copies what no reader still needs.
fn fold(path: &std::path::Path) {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let folded =
        Connection::open_with_flags(path, flags).and_then(|conn| conn.execute_batch("PRAGMA wal_checkpoint(PASSIVE)"));
    if let Err(err) = folded {
        tracing::warn!(%err, file = %path.display(), "folding the log into the database failed");
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

        assert!(!folder.committed(FOLD_AT + FOLD_AGAIN_AFTER - 1));
        assert!(folder.running.is_none(), "too few pages since the last fold");
        folder.idle();
        assert!(folder.running.is_some(), "a pause folds what came since");
        folder.finish();
        folder.idle();
        assert!(folder.running.is_none(), "nothing came since the last fold");

        assert!(!folder.committed(5));
        assert!(folder.running.is_none(), "the log started over");
        assert!(folder.committed(FOLD_HERE_AT), "a log this long is folded by the writer itself");
        folder.finish();
    }
}

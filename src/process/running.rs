//! Whether a process cairn started may be running, for the tools that would hand a path to the
//! editor.
//!
//! The editor resolves a path it is given again, following links, after cairn judged it: a
//! process that outlives one call (a background job, an MCP or language server, a command
//! beside the tool) could swap a directory of that path for a link in between and send the
//! editor's read or write elsewhere. So the editor's file methods are used only while nothing
//! cairn started runs, and nothing starts while one of them is under way. Two process-wide
//! counts keep this: [`Running`], one for every process (local or in an editor's terminal) from
//! before it starts until it and all it started are gone, and [`Quiet`], one for every editor
//! file call in flight. A start counts itself first, then waits until no editor call is in
//! flight ([`admit`]); an editor call counts itself first, then goes ahead only if nothing runs
//! ([`quiet`]). Both orders are sequentially consistent, so of a start and a call that overlap
//! at least one sees the other: the call then works on the disk itself, or the start waits for
//! the call's answer. A call dropped before its answer (a tool's time limit) keeps its count a
//! while longer ([`Quiet::over`]): the editor may still act on the request.
//!
//! Other cairn processes of the same data directory (a second editor panel, `cairn exec` in a
//! terminal beside the editor) run commands in the same projects: each command's supervisor
//! holds a shared lock on `running.lock` in the data directory for its whole life ([`hold`]),
//! and an editor call goes ahead only with that lock taken exclusively, without waiting
//! ([`quiet`]); a supervisor starting while one is held waits for it (at most [`HOLD_WAIT`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Processes (and editor terminals) that may be running.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Editor file calls in flight.
static EDITING: AtomicUsize = AtomicUsize::new(0);
/// Told when the last editor file call in flight ends.
static DRAINED: LazyLock<Notify> = LazyLock::new(Notify::new);
/// The lock every supervisor of this data directory holds shared while its command runs.
static SHARED: OnceLock<PathBuf> = OnceLock::new();
/// The lock's name in the data directory.
const LOCK: &str = "running.lock";
/// How long a supervisor waits for an editor call in flight (another cairn's) before it goes on.
const HOLD_WAIT: Duration = Duration::from_secs(5);
/// How long an editor call dropped before its answer (a tool's time limit, a cancelled turn)
/// still keeps processes from starting: the editor may act on the request after cairn stopped
/// waiting for it.
const LATE: Duration = if cfg!(test) { Duration::from_millis(200) } else { Duration::from_secs(10) };

/// Makes the editor calls of this process wait for the commands of every cairn process of
/// `data_dir` (set once, when the configuration is read).
pub fn share_in(data_dir: &Path) {
    let _ = SHARED.set(data_dir.join(LOCK));
}

/// The lock a supervisor holds while its command runs, from `data_dir`: shared, so commands of
/// every cairn run together, and taken once no editor call of any cairn holds it (at most
/// [`HOLD_WAIT`]: an editor that never answers does not hold every command back).
pub fn hold(data_dir: &Path) -> Option<File> {
    let file = lock_file(&data_dir.join(LOCK)).ok()?;
    let started = Instant::now();
    while let Err(std::fs::TryLockError::WouldBlock) = file.try_lock_shared() {
        if started.elapsed() > HOLD_WAIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(file)
}

fn lock_file(at: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(at)
}

/// One process cairn started (or is about to start), counted until this drops: drop it only
/// once the process and everything it started are gone.
#[derive(Debug)]
pub struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a process about to start, once no editor file call is in flight: the call that was
/// going on when the process was counted gets its answer before the process can touch a path.
pub async fn admit() -> Running {
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let running = Running(());
    loop {
        let drained = DRAINED.notified();
        tokio::pin!(drained);
        // Registered before the count is looked at: an end between the two still wakes it.
        drained.as_mut().enable();
        if EDITING.load(Ordering::SeqCst) == 0 {
            return running;
        }
        drained.await;
    }
}

/// One editor file call in flight while nothing cairn started runs; no process starts until it
/// drops. `locked`: it counts in [`LOCKED`].
#[derive(Debug)]
pub struct Quiet {
    locked: bool,
    /// No editor call of [`Quiet::over`] is waiting for its answer; dropped while one is, the
    /// hold stays for [`LATE`].
    answered: bool,
}

impl Quiet {
    /// Makes the editor's `call` under this hold. Dropped before the editor answers, the hold
    /// outlives it by [`LATE`].
    pub async fn over<T>(mut self, call: impl std::future::Future<Output = T>) -> T {
        self.answered = false;
        let answer = call.await;
        self.answered = true;
        answer
    }
}

/// The data directory's lock as this process holds it for its editor calls in flight: taken
/// exclusively by the first, kept while any is in flight (calls of one process go together;
/// another lock of the same file from this process would shut them out of each other), let go
/// by the last. The count and the file, under one mutex, so a call starting as the last ends
/// never finds the lock let go under it.
static LOCKED: Mutex<(usize, Option<File>)> = Mutex::new((0, None));

impl Drop for Quiet {
    fn drop(&mut self) {
        if !self.answered
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // The hold moves to a task that lets it go later; this one lets nothing go.
            let late = Quiet { locked: self.locked, answered: true };
            self.answered = true;
            self.locked = false;
            runtime.spawn(async move {
                tokio::time::sleep(LATE).await;
                drop(late);
            });
            return;
        }
        if self.locked {
            let mut locked = LOCKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            locked.0 = locked.0.saturating_sub(1);
            if locked.0 == 0 {
                // Closing the file lets the lock go.
                locked.1 = None;
            }
        }
        if EDITING.fetch_sub(1, Ordering::SeqCst) == 1 {
            DRAINED.notify_waiters();
        }
    }
}

/// Leave to hand a path to the editor: `None` while a process cairn started may be running,
/// and the path must then be read or written on the disk, without following links.
pub fn quiet() -> Option<Quiet> {
    EDITING.fetch_add(1, Ordering::SeqCst);
    let mut quiet = Quiet { locked: false, answered: true };
    if RUNNING.load(Ordering::SeqCst) != 0 {
        return None;
    }
    // Another cairn's commands: none may hold the lock. With no data directory there is no lock
    // to hold; a lock that cannot be opened otherwise says nothing, and the disk is used.
    let Some(at) = SHARED.get() else { return Some(quiet) };
    let mut locked = LOCKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if locked.0 == 0 {
        match lock_file(at) {
            Ok(file) => {
                file.try_lock().ok()?;
                locked.1 = Some(file);
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(quiet),
            Err(_) => return None,
        }
    }
    locked.0 += 1;
    quiet.locked = true;
    Some(quiet)
}

/// How many processes cairn started may be running.
pub fn count() -> usize {
    RUNNING.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leave for an editor call, once no process of another test runs.
    async fn quiet_once_idle() -> Quiet {
        loop {
            match quiet() {
                Some(call) => return call,
                None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        }
    }

    #[tokio::test]
    async fn no_editor_file_call_goes_ahead_while_a_process_is_counted() {
        let running = admit().await;
        assert!(count() >= 1);
        assert!(quiet().is_none(), "a counted process keeps the editor's file calls off");
        drop(running);
    }

    /// A supervisor of another cairn process holds the lock while its command runs.
    #[tokio::test]
    async fn no_editor_file_call_goes_ahead_while_another_cairns_command_runs() {
        // The data directory the process knows: this test's, or one a configuration read first.
        share_in(&tempfile::tempdir().unwrap().keep());
        let Some(data) = SHARED.get().and_then(|at| at.parent()) else { return };
        std::fs::create_dir_all(data).unwrap();
        let held = hold(data).unwrap();
        assert!(quiet().is_none(), "another process's command keeps the editor's file calls off");
        drop(held);
        let call = quiet_once_idle().await;
        assert!(call.locked, "the call holds the lock while the editor answers");
        let second = quiet().expect("calls of one process go together");
        drop((call, second));
    }

    /// A tool's time limit dropped the editor's call before its answer, and the hold with it:
    /// a process started while the editor could still act on the path.
    #[tokio::test]
    async fn an_editor_call_dropped_before_its_answer_keeps_starts_waiting_a_while() {
        let call = quiet_once_idle().await;
        let mut asked = Box::pin(call.over(std::future::pending::<()>()));
        assert!(futures::poll!(asked.as_mut()).is_pending());
        drop(asked);
        let mut start = Box::pin(admit());
        assert!(futures::poll!(start.as_mut()).is_pending(), "started while the editor may still act");
        let running = tokio::time::timeout(LATE * 20, start).await.expect("the hold is let go after a while");
        drop(running);
    }

    #[tokio::test]
    async fn a_start_waits_until_the_editor_file_call_in_flight_is_answered() {
        // Other tests start processes of their own; an editor call goes ahead once none runs.
        let call = quiet_once_idle().await;
        let mut start = Box::pin(admit());
        assert!(futures::poll!(start.as_mut()).is_pending(), "started while the editor resolves a path");
        drop(call);
        let running = start.await;
        assert!(quiet().is_none());
        drop(running);
    }
}

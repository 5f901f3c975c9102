//! The other cairn processes of one data directory, for the editor's file calls: their
//! commands run in the same projects (a second editor panel, `cairn exec` in a terminal beside
//! the editor), and this process cannot see where they write.
//!
//! Each cairn process that starts commands has a lock file of its own in the data directory,
//! `running/PID-NANOS.lock`, made once under the gate (`running.lock`, held shared meanwhile);
//! each of its commands' supervisors holds that file shared for its whole life ([`hold`]). A
//! supervisor started without one (by another tool) makes one of its own the same way and
//! removes it when it ends. An editor call of this process goes ahead only with the gate and
//! every other process's file taken exclusively, without waiting ([`enter`]): so no command of
//! another cairn runs while it is under way, and none starts (a supervisor waits for the file,
//! a new cairn for the gate, at most [`HOLD_WAIT`]: an editor that never answers does not hold
//! every command back). This process's own file is left out: its own processes are judged by
//! where they may write (`running.rs`), so a command of another of its workspaces does not keep
//! the editor off. A file whose process is gone and which nobody holds is removed on the way.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The data directory whose cairn processes are this one's peers (set once, when the
/// configuration is read).
static SHARED: OnceLock<PathBuf> = OnceLock::new();
/// This process's own lock file, once made (a failed try leaves it to the next).
static OWN: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
/// The gate's name in the data directory.
const GATE: &str = "running.lock";
/// The directory of each process's lock, in the data directory.
const LOCKS: &str = "running";
/// How long a supervisor (or a new cairn) waits for another cairn's editor call in flight before
/// it goes on.
const HOLD_WAIT: Duration = Duration::from_secs(5);

/// Makes the editor calls of this process wait for the commands of every cairn process of
/// `data_dir`.
pub fn share_in(data_dir: &Path) {
    let _ = SHARED.set(data_dir.to_owned());
}

/// The data directory shared with the other cairn processes, once the configuration said it.
pub(super) fn data_dir() -> Option<&'static Path> {
    SHARED.get().map(PathBuf::as_path)
}

/// This process's own lock file, made the first time it is asked for (off the runtime's
/// threads: it may wait for another cairn's editor call); asked again, one that could not be
/// made is tried again.
pub async fn own() -> Option<PathBuf> {
    let made = OWN.get_or_try_init(|| async {
        let data = SHARED.get().ok_or(())?.clone();
        tokio::task::spawn_blocking(move || make_own(&data).ok()).await.ok().flatten().ok_or(())
    });
    made.await.ok().cloned()
}

/// This process's own lock file if it was made already.
pub fn own_now() -> Option<PathBuf> {
    OWN.get().cloned()
}

/// Makes a lock file of this process's in `data`'s lock directory, under the gate.
fn make_own(data: &Path) -> std::io::Result<PathBuf> {
    let gate = lock_file(&data.join(GATE))?;
    let _ = wait_for(|| gate.try_lock_shared(), HOLD_WAIT);
    let dir = data.join(LOCKS);
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos());
    let path = dir.join(format!("{}-{nanos}.lock", std::process::id()));
    lock_file(&path)?;
    Ok(path)
}

/// Tries `lock` until it stops saying another holds the lock, for at most `patience`; what it
/// said last.
pub(super) fn wait_for(
    lock: impl Fn() -> Result<(), std::fs::TryLockError>,
    patience: Duration,
) -> Result<(), std::fs::TryLockError> {
    let started = Instant::now();
    loop {
        match lock() {
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() <= patience => {
                std::thread::sleep(Duration::from_millis(10));
            }
            said => return said,
        }
    }
}

/// What a supervisor holds while its command runs: its cairn's lock file shared, or one it made
/// itself (removed when this drops).
pub struct Held {
    _file: File,
    made: Option<PathBuf>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(made) = &self.made {
            let _ = std::fs::remove_file(made);
        }
    }
}

/// Takes `lock` (its cairn's file, in `data_dir`'s lock directory) shared, or with none a file
/// of its own, once no editor call of another cairn holds it (at most [`HOLD_WAIT`]).
pub fn hold(data_dir: &Path, lock: Option<&Path>) -> Option<Held> {
    let (path, made) = match lock.filter(|lock| lock.parent() == Some(&data_dir.join(LOCKS))) {
        Some(lock) => (lock.to_owned(), None),
        None => {
            let path = make_own(data_dir).ok()?;
            (path.clone(), Some(path))
        }
    };
    let file = lock_file(&path).ok()?;
    let _ = wait_for(|| file.try_lock_shared(), HOLD_WAIT);
    Some(Held { _file: file, made })
}

/// The lock file at `at`, made if missing (its content is never read).
pub(super) fn lock_file(at: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(at)
}

/// The gate and the other processes' files as this process holds them for its editor calls in
/// flight: taken exclusively by the first, kept while any is in flight (calls of one process go
/// together; another lock of the same files from this process would shut them out of each
/// other), let go by the last. The count and the files, under one mutex, so a call starting as
/// the last ends never finds them let go under it.
static LOCKED: Mutex<(usize, Vec<File>)> = Mutex::new((0, Vec::new()));

/// Leave from the other cairn processes for one editor call: `None` while one of them runs a
/// command (the disk must be used); `Some(true)` counted, so [`leave`] must follow;
/// `Some(false)` with no data directory to share, nothing to leave.
pub fn enter() -> Option<bool> {
    let Some(data) = SHARED.get() else { return Some(false) };
    let mut locked = LOCKED.lock().unwrap_or_else(PoisonError::into_inner);
    if locked.0 == 0 {
        match take(data) {
            Ok(Some(files)) => locked.1 = files,
            // No data directory: nobody can hold a lock there.
            Ok(None) => return Some(false),
            Err(()) => return None,
        }
    }
    locked.0 += 1;
    Some(true)
}

/// Ends what [`enter`] counted.
pub fn leave() {
    let mut locked = LOCKED.lock().unwrap_or_else(PoisonError::into_inner);
    locked.0 = locked.0.saturating_sub(1);
    if locked.0 == 0 {
        // Closing the files lets the locks go.
        locked.1.clear();
    }
}

/// The gate and every other process's file in `data`, each taken exclusively without waiting:
/// `Err` when one is held (a lock that cannot be opened says nothing either, and counts as
/// held); `Ok(None)` when the data directory is gone.
fn take(data: &Path) -> Result<Option<Vec<File>>, ()> {
    let gate = match lock_file(&data.join(GATE)) {
        Ok(gate) => gate,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(()),
    };
    gate.try_lock().map_err(|_| ())?;
    let mut held = vec![gate];
    let entries = match std::fs::read_dir(data.join(LOCKS)) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Some(held)),
        Err(_) => return Err(()),
    };
    let own = own_now();
    for entry in entries {
        let path = entry.map_err(|_| ())?.path();
        if own.as_ref() == Some(&path) || path.extension().is_none_or(|ext| ext != "lock") {
            continue;
        }
        let file = match std::fs::OpenOptions::new().write(true).open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return Err(()),
        };
        file.try_lock().map_err(|_| ())?;
        if gone(&path) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        held.push(file);
    }
    Ok(Some(held))
}

/// Whether the process a file is named after (`PID-…`) no longer exists.
pub(super) fn gone(path: &Path) -> bool {
    let pid = path.file_stem().and_then(|stem| stem.to_str()).and_then(|stem| stem.split('-').next());
    pid.and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| matches!(std::fs::metadata(format!("/proc/{pid}")), Err(err) if err.kind() == std::io::ErrorKind::NotFound))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data directory the test process shares: this test's, or one a configuration read
    /// first (made again if a test removed it).
    fn data() -> PathBuf {
        share_in(&tempfile::tempdir().unwrap().keep());
        let data = SHARED.get().unwrap().clone();
        std::fs::create_dir_all(data.join(LOCKS)).unwrap();
        data
    }

    /// Leave once no other test's supervisor holds a file, then let go.
    async fn entered_once_free() -> bool {
        for _ in 0..1000 {
            match enter() {
                Some(counted) => return counted,
                None => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
        panic!("the other processes' locks stayed held");
    }

    #[tokio::test]
    async fn no_editor_call_goes_ahead_while_another_cairns_command_runs() {
        let data = data();
        let held = hold(&data, None).expect("a supervisor without its cairn's file makes one");
        let made = held.made.clone().unwrap();
        assert!(made.starts_with(data.join(LOCKS)));
        assert!(enter().is_none(), "another process's command keeps the editor's file calls off");
        drop(held);
        assert!(!made.exists(), "a supervisor's own file goes with it");
        assert!(entered_once_free().await, "the call holds the locks while the editor answers");
        assert_eq!(enter(), Some(true), "calls of one process go together");
        leave();
        leave();
    }

    #[tokio::test]
    async fn this_processs_own_commands_are_left_to_where_they_write() {
        let data = data();
        let own = own().await.expect("this process's lock file");
        assert_eq!(own.parent(), Some(data.join(LOCKS).as_path()));
        let held = hold(&data, Some(&own)).unwrap();
        assert!(held.made.is_none());
        assert!(entered_once_free().await, "this process's own supervisor does not keep its editor off");
        leave();
        drop(held);
        assert!(own.exists(), "the process's file outlives its commands");
    }

    #[tokio::test]
    async fn a_file_outside_the_lock_directory_is_not_taken_for_the_cairns() {
        let data = data();
        let elsewhere = tempfile::tempdir().unwrap();
        let held = hold(&data, Some(&elsewhere.path().join("x.lock"))).unwrap();
        assert!(held.made.is_some(), "a lock file anywhere else is not its cairn's: it makes one");
        assert!(!elsewhere.path().join("x.lock").exists());
    }

    #[tokio::test]
    async fn a_file_left_by_a_process_that_is_gone_is_removed_on_the_way() {
        let data = data();
        std::fs::create_dir_all(data.join(LOCKS)).unwrap();
        let stale = data.join(LOCKS).join("4294967295-1.lock");
        std::fs::write(&stale, "").unwrap();
        // The files are walked by the call that takes them: while another test's call is in
        // flight in this process, a call joins it without a walk, so call until one walks.
        for _ in 0..1000 {
            assert!(entered_once_free().await);
            leave();
            if !stale.exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("a lock file of a process that is gone was never removed");
    }

    #[tokio::test]
    async fn a_cairn_making_its_file_waits_for_an_editor_call_in_flight() {
        let data = data();
        assert!(entered_once_free().await);
        let (made, wait) = std::sync::mpsc::channel();
        let dir = data.clone();
        std::thread::spawn(move || made.send(make_own(&dir).map(std::fs::remove_file)).unwrap());
        assert!(wait.recv_timeout(Duration::from_millis(300)).is_err(), "made while an editor call was in flight");
        leave();
        wait.recv_timeout(Duration::from_secs(10)).expect("made once the call ended").unwrap().unwrap();
    }
}

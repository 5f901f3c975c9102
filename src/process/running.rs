//! Whether a process cairn started may be changing a path, for the tools that would hand that
//! path to the editor.
//!
//! The editor resolves a path it is given again, following links, after cairn judged it: a
//! process that outlives one call (a background job, an MCP or language server, a command
//! beside the tool) could swap a directory of that path for a link in between and send the
//! editor's read or write elsewhere. It can do that only where it may change a directory's
//! entries: its [`Reach`], the sandbox's writable places (the session's roots, the temp
//! directories, `[sandbox] writable`), or anywhere with the sandbox off or without Landlock. So
//! an editor file call goes ahead only while no process whose reach holds one of the path's
//! directories runs, and no such process starts while the call is under way. One registry,
//! under one lock, keeps both: every process (local or in an editor's terminal) from before it
//! starts until it and all it started are gone, with its reach, and every editor file call in
//! flight, with the path's directories. A start registers first, then waits until no call in
//! flight lies in its reach ([`admit`]), so calls that come later cannot hold it back for ever;
//! a call goes ahead only if no registered process reaches its path ([`quiet`]), and otherwise
//! works on the disk itself, beneath the root, following no link. A process of another
//! workspace (another session of `cairn serve`, whose client may be slow to answer) neither
//! keeps this session's editor calls off nor waits for them. A call dropped before its answer
//! (a tool's time limit) keeps its place a while longer ([`Quiet::over`]): the editor may
//! still act on the request.
//!
//! Other cairn processes of the same data directory (a second editor panel, `cairn exec` in a
//! terminal beside the editor) run commands in the same projects, where this process cannot see
//! their reach: while any of them runs one, the editor's file calls use the disk (`peers.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use super::SandboxMode;
use super::peers;

/// Where a process may make, remove or replace a directory's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Only in these directories and below them.
    Beneath(Vec<PathBuf>),
    /// Wherever the user may write: no sandbox, or a kernel without Landlock.
    Anywhere,
}

impl Reach {
    /// Beneath `places`, each as given and as it resolves (a place named through a link).
    pub fn beneath(places: impl IntoIterator<Item = PathBuf>) -> Reach {
        let mut all = Vec::new();
        for place in places {
            if let Ok(resolved) = std::fs::canonicalize(&place)
                && resolved != place
            {
                all.push(resolved);
            }
            all.push(place);
        }
        Reach::Beneath(all)
    }

    /// Whether a process of this reach could change what one of `dirs` holds.
    fn touches(&self, dirs: &[PathBuf]) -> bool {
        match self {
            Reach::Anywhere => true,
            Reach::Beneath(places) => dirs.iter().any(|dir| places.iter().any(|place| dir.starts_with(place))),
        }
    }
}

impl super::ProcessPolicy {
    /// Where a process started under this policy with the session's `roots` may make, remove or
    /// replace a directory's entries: the writable places Landlock keeps it to, or anywhere with
    /// the sandbox off, the direct launcher, or a kernel without Landlock.
    pub fn reach(&self, roots: &[PathBuf]) -> Reach {
        if self.writes_unconfined() {
            return Reach::Anywhere;
        }
        match self.sandbox {
            SandboxMode::Off => Reach::Anywhere,
            SandboxMode::ReadOnly => Reach::beneath(super::sandbox::writable_places(&[])),
            SandboxMode::WorkspaceWrite => {
                let writable: Vec<PathBuf> = roots.iter().chain(&self.writable).cloned().collect();
                Reach::beneath(super::sandbox::writable_places(&writable))
            }
        }
    }
}

/// The processes that may be running and the editor calls in flight, by a number of their own.
struct Registry {
    next: u64,
    running: BTreeMap<u64, Reach>,
    /// Each call's path's directories: its parent as given and as it resolves.
    editing: BTreeMap<u64, Vec<PathBuf>>,
}

impl Registry {
    /// A number no process or call was given before.
    fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { next: 0, running: BTreeMap::new(), editing: BTreeMap::new() });
/// Told whenever an editor file call in flight ends.
static DRAINED: LazyLock<Notify> = LazyLock::new(Notify::new);
/// How long an editor call dropped before its answer (a tool's time limit, a cancelled turn)
/// still keeps processes from starting: the editor may act on the request after cairn stopped
/// waiting for it.
const LATE: Duration = if cfg!(test) { Duration::from_millis(200) } else { Duration::from_secs(10) };

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes the editor calls of this process wait for the commands of every cairn process of
/// `data_dir` (set once, when the configuration is read).
pub fn share_in(data_dir: &Path) {
    peers::share_in(data_dir);
}

/// Makes the lock file this process's supervisors are told to hold (`peers.rs`), before the
/// command line of one is written for an editor's terminal; [`admit`] makes it too.
pub async fn prepare() {
    peers::own().await;
}

/// One process cairn started (or is about to start), registered until this drops: drop it only
/// once the process and everything it started are gone.
#[derive(Debug)]
pub struct Running(u64);

impl Drop for Running {
    fn drop(&mut self) {
        registry().running.remove(&self.0);
    }
}

/// Registers a process about to start that may change entries within `reach`, once no editor
/// file call in flight lies there: the call that was going on when the process registered gets
/// its answer before the process can touch its path.
pub async fn admit(reach: Reach) -> Running {
    // The lock file this process's supervisors hold, made before the first of them starts.
    peers::own().await;
    let running = {
        let mut registry = registry();
        let id = registry.number();
        registry.running.insert(id, reach.clone());
        Running(id)
    };
    loop {
        let drained = DRAINED.notified();
        tokio::pin!(drained);
        // Registered before the calls are looked at: an end between the two still wakes it.
        drained.as_mut().enable();
        if !registry().editing.values().any(|dirs| reach.touches(dirs)) {
            return running;
        }
        drained.await;
    }
}

/// One editor file call in flight while no process that could change its path runs; no such
/// process starts until it drops. `locked`: it counts in `peers`' locks.
#[derive(Debug)]
pub struct Quiet {
    id: u64,
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

impl Drop for Quiet {
    fn drop(&mut self) {
        if !self.answered
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // The hold moves to a task that lets it go later; this one lets nothing go.
            let late = Quiet { id: self.id, locked: self.locked, answered: true };
            self.answered = true;
            self.locked = false;
            runtime.spawn(async move {
                tokio::time::sleep(LATE).await;
                drop(late);
            });
            return;
        }
        if self.locked {
            peers::leave();
        }
        if registry().editing.remove(&self.id).is_some() {
            DRAINED.notify_waiters();
        }
    }
}

/// Leave to hand `path` (absolute, as judged) to the editor: `None` while a process cairn
/// started that could change one of its directories may be running, and the path must then be
/// read or written on the disk, without following links.
pub fn quiet(path: &Path) -> Option<Quiet> {
    let parent = path.parent().filter(|_| path.is_absolute())?;
    let mut dirs = vec![parent.to_path_buf()];
    if let Ok(resolved) = std::fs::canonicalize(parent)
        && resolved != parent
    {
        dirs.push(resolved);
    }
    // Another cairn's commands: while one runs, the disk.
    let locked = peers::enter()?;
    let mut registry = registry();
    if registry.running.values().any(|reach| reach.touches(&dirs)) {
        drop(registry);
        if locked {
            peers::leave();
        }
        return None;
    }
    let id = registry.number();
    registry.editing.insert(id, dirs);
    Some(Quiet { id, locked, answered: true })
}

/// How many processes cairn started may be running.
pub fn count() -> usize {
    registry().running.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leave for an editor call on `path`, once no process of another test that reaches it runs.
    async fn quiet_once_idle(path: &Path) -> Quiet {
        loop {
            match quiet(path) {
                Some(call) => return call,
                None => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// A directory of its own for a test, and a file path in it.
    fn place() -> (PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap().keep().canonicalize().unwrap();
        let file = dir.join("a.txt");
        (dir, file)
    }

    #[tokio::test]
    async fn no_editor_file_call_goes_ahead_while_a_process_that_can_change_its_path_is_registered() {
        let (dir, file) = place();
        let running = admit(Reach::beneath([dir.clone()])).await;
        assert!(count() >= 1);
        assert!(quiet(&file).is_none(), "a process writing the file's directory keeps the editor off");
        assert!(quiet(&dir.join("deep/down/b.txt")).is_none(), "and below it");
        drop(running);
        let anywhere = admit(Reach::Anywhere).await;
        assert!(quiet(&file).is_none(), "a process without the sandbox keeps the editor off everywhere");
        drop(anywhere);
        drop(quiet_once_idle(&file).await);
    }

    #[tokio::test]
    async fn a_process_that_cannot_change_the_paths_directories_leaves_the_editor_in_use() {
        let (dir, file) = place();
        let (elsewhere, _) = place();
        let running = admit(Reach::beneath([elsewhere.clone()])).await;
        let call = tokio::time::timeout(Duration::from_secs(30), quiet_once_idle(&file)).await;
        assert!(call.is_ok(), "another workspace's process kept the editor's calls off");
        // Nor does a process that may write only the file's own subdirectories.
        let below = admit(Reach::beneath([dir.join("sub")])).await;
        drop((call, running, below));
    }

    #[tokio::test]
    async fn a_place_named_through_a_link_reaches_where_it_leads() {
        let (dir, file) = place();
        let (links, _) = place();
        std::os::unix::fs::symlink(&dir, links.join("ws")).unwrap();
        let running = admit(Reach::beneath([links.join("ws")])).await;
        assert!(quiet(&file).is_none());
        // The path given through a link to the process's place is judged where it leads too.
        let (other, _) = place();
        std::os::unix::fs::symlink(&other, dir.join("out")).unwrap();
        drop(running);
        let running = admit(Reach::beneath([other])).await;
        assert!(quiet(&dir.join("out/a.txt")).is_none());
        drop(running);
    }

    #[test]
    fn a_relative_path_never_goes_to_the_editor() {
        assert!(quiet(Path::new("a.txt")).is_none());
        assert!(quiet(Path::new("src/a.txt")).is_none());
    }

    /// A tool's time limit dropped the editor's call before its answer, and the hold with it:
    /// a process started while the editor could still act on the path.
    #[tokio::test]
    async fn an_editor_call_dropped_before_its_answer_keeps_starts_waiting_a_while() {
        let (dir, file) = place();
        let call = quiet_once_idle(&file).await;
        let mut asked = Box::pin(call.over(std::future::pending::<()>()));
        assert!(futures::poll!(asked.as_mut()).is_pending());
        drop(asked);
        let mut start = Box::pin(admit(Reach::beneath([dir])));
        assert!(futures::poll!(start.as_mut()).is_pending(), "started while the editor may still act");
        let running = tokio::time::timeout(LATE * 20, start).await.expect("the hold is let go after a while");
        drop(running);
    }

    #[tokio::test]
    async fn a_start_waits_until_an_editor_file_call_in_its_reach_is_answered() {
        let (dir, file) = place();
        let (elsewhere, _) = place();
        // Other tests start processes of their own; an editor call goes ahead once none reaches it.
        let call = quiet_once_idle(&file).await;
        let other = tokio::time::timeout(Duration::from_secs(5), admit(Reach::beneath([elsewhere])))
            .await
            .expect("a process of another place does not wait for the call");
        let mut start = Box::pin(admit(Reach::beneath([dir])));
        assert!(futures::poll!(start.as_mut()).is_pending(), "started while the editor resolves a path");
        let mut anywhere = Box::pin(admit(Reach::Anywhere));
        assert!(futures::poll!(anywhere.as_mut()).is_pending(), "an unsandboxed start waits too");
        assert!(quiet(&file).is_none(), "a start waiting keeps later calls off, so calls cannot starve it");
        drop(call);
        let running = start.await;
        let anywhere = anywhere.await;
        drop((running, anywhere, other));
    }
}

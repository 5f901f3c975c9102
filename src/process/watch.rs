//! While a command runs, the supervisor watches (inotify) the directories that hold what the
//! namespace guards and what the sweep would take, and acts at once instead of at the end:
//! - a read-only or hidden place replaced from outside the namespace — git saving `config`
//!   through `config.lock`, an editor saving `.env` through a temporary file — loses its bind
//!   (the kernel drops a mount whose file was renamed over), so it is bound or covered again;
//! - a guarded place the command makes at the top of a root, or a redirect (`commondir`) in a
//!   git directory, is taken away as soon as it appears, so that an editor's background
//!   `git status` or a tool watching the folder has no time to use it.
//!
//! A replaced place is unguarded from the rename until the watcher wakes for its event: a
//! command that tries in that instant gets through. No mount survives a rename over its file
//! from another namespace, so this is the boundary's one window, and it needs the user (or
//! their editor) to save the place while the command runs.
//!
//! A directory to take leaves its place in one rename (to a name nobody reads beside it) and is
//! removed on a thread of its own, and places to guard again go before places to take: a command
//! that renames huge directories into guarded places cannot keep the watcher from what it
//! writes next.
//!
//! The end-of-command sweep still runs; this only closes the time in between. Before it, the
//! supervisor waits for what the watcher is doing ([`Watcher::settle`]), so that a place it is
//! taking away is gone, and said to be, before the supervisor exits.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use super::namespace::Keeper;
use super::places::Places;
use super::places::sweep::{self, Before};
use crate::beneath::Parent;

const EVENTS: u32 = libc::IN_CREATE | libc::IN_MOVED_TO;

/// What to do when a name appears in a watched directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Act {
    BindReadOnly,
    Hide,
    Take,
}

/// A running watcher: held while it acts on what it read.
#[derive(Clone, Debug, Default)]
pub struct Watcher {
    busy: Arc<Mutex<()>>,
    /// Directories moved aside and still being removed, counted until they are gone.
    removing: Arc<(Mutex<usize>, Condvar)>,
}

impl Watcher {
    /// Returns once the watcher is not in the middle of acting and every directory it moved
    /// aside is removed (a poisoned lock means a thread died, which is as good).
    pub fn settle(&self) {
        drop(self.busy.lock());
        let (count, done) = &*self.removing;
        if let Ok(mut left) = count.lock() {
            while *left > 0 {
                match done.wait(left) {
                    Ok(next) => left = next,
                    Err(_) => return,
                }
            }
        }
    }
}

/// A new inotify instance, close-on-exec.
///
/// cairn makes the instance of each supervisor it starts and keeps a copy until the supervisor
/// has ended (`Local`): the last close of an instance that had watches waits out an SRCU grace
/// period in the kernel (8–16 ms here), and made by the supervisor's exit it delayed every
/// command's end by that much; made by cairn later, on a thread nobody waits for, it costs
/// nothing on the way.
pub fn instance() -> io::Result<OwnedFd> {
    // SAFETY: inotify_init1 takes flags and returns a new descriptor, owned from here on.
    #[allow(unsafe_code)]
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Starts the watcher thread for one command, on `given` (an instance cairn made and keeps) or
/// on one of its own; nothing is watched when there is nothing to do.
pub fn start(places: &Places, before: Option<&Before>, keeper: Keeper, given: Option<OwnedFd>) -> io::Result<Watcher> {
    let mut acts: HashMap<PathBuf, Act> = HashMap::new();
    acts.extend(places.read_only.iter().map(|path| (path.clone(), Act::BindReadOnly)));
    acts.extend(places.hidden.iter().map(|path| (path.clone(), Act::Hide)));
    if let Some(before) = before {
        acts.extend(before.takeable().map(|path| (path.clone(), Act::Take)));
    }
    let watcher = Watcher::default();
    if acts.is_empty() {
        return Ok(watcher);
    }
    let fd = match given {
        Some(fd) => fd,
        None => instance()?,
    };
    let mut watched: HashMap<i32, PathBuf> = HashMap::new();
    let dirs: std::collections::HashSet<&Path> = acts.keys().filter_map(|path| path.parent()).collect();
    for dir in dirs {
        if let Ok(wd) = add_watch(&fd, dir) {
            watched.insert(wd, dir.to_path_buf());
        }
    }
    let running = watcher.clone();
    let roots = before.map(|before| before.roots().to_vec()).unwrap_or_default();
    std::thread::spawn(move || run(&fd, &watched, &acts, &keeper, &running, &roots));
    Ok(watcher)
}

fn add_watch(fd: &OwnedFd, dir: &Path) -> io::Result<i32> {
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: inotify_add_watch reads the NUL-terminated path we own.
    #[allow(unsafe_code)]
    let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), EVENTS | libc::IN_ONLYDIR) };
    if wd < 0 { Err(io::Error::last_os_error()) } else { Ok(wd) }
}

fn run(
    fd: &OwnedFd,
    watched: &HashMap<i32, PathBuf>,
    acts: &HashMap<PathBuf, Act>,
    keeper: &Keeper,
    watcher: &Watcher,
    roots: &[PathBuf],
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: read fills at most `buf.len()` bytes of the buffer we own.
        #[allow(unsafe_code)]
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(n) = usize::try_from(n) else {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        };
        let _acting = watcher.busy.lock();
        let mut due: Vec<(PathBuf, Act)> = events(&buf[..n])
            .into_iter()
            .filter_map(|(wd, name)| watched.get(&wd).map(|dir| dir.join(name)))
            .filter_map(|path| acts.get(&path).map(|act| (path, *act)))
            .collect();
        // A place to guard again first (one mount each), then what to take: a command that
        // renames a huge directory into one place must not delay the next.
        due.sort_by_key(|(_, act)| *act == Act::Take);
        for (path, act) in due {
            match act {
                Act::BindReadOnly => say(keeper.read_only(&path).err().map(|err| err.to_string())),
                Act::Hide => say(keeper.hide(&path).err().map(|err| err.to_string())),
                Act::Take => say(move_aside(roots, &path, &watcher.removing).or_else(|| sweep::take_now(roots, &path))),
            }
        }
    }
}

/// Takes a directory the command made in a guarded place out of it at once: renamed to a name
/// nobody reads beside it (one system call, however much it holds), then removed on a thread
/// of its own, which [`Watcher::settle`] waits for; both from its directory opened beneath its
/// root with no link followed. `None` where it is not a directory so reached, or the rename
/// fails: then it is removed where it is.
fn move_aside(roots: &[PathBuf], path: &Path, removing: &Arc<(Mutex<usize>, Condvar)>) -> Option<String> {
    let parent = Parent::existing(roots, path).ok()?;
    if parent.kind().ok()?? != libc::S_IFDIR {
        return None;
    }
    let aside = sweep::move_aside(&parent).ok()?;
    if let Ok(mut count) = removing.0.lock() {
        *count += 1;
    }
    let removing = Arc::clone(removing);
    std::thread::spawn(move || {
        // The command may still be writing into it: tried again a few times.
        let mut removed = aside.remove_tree();
        for _ in 0..20 {
            if removed.is_ok() || aside.kind().is_ok_and(|kind| kind.is_none()) {
                break;
            }
            removed = aside.remove_tree();
        }
        if let Err(err) = removed {
            super::tell(&format!("a directory the command made could not be removed: {err}"));
        }
        let (count, done) = &*removing;
        if let Ok(mut count) = count.lock() {
            *count = count.saturating_sub(1);
        }
        done.notify_all();
    });
    Some(format!(
        "removed {}, which the command made: guarded places are read-only to commands; write them with the edit tools, which ask",
        path.display()
    ))
}

fn say(line: Option<String>) {
    if let Some(line) = line {
        super::tell(&line);
    }
}

/// The `(watch, name)` of each event in a buffer `read` filled.
fn events(buf: &[u8]) -> Vec<(i32, std::ffi::OsString)> {
    let header = std::mem::size_of::<libc::inotify_event>();
    let mut out = Vec::new();
    let mut at = 0;
    while at + header <= buf.len() {
        let wd = i32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let len = u32::from_ne_bytes([buf[at + 12], buf[at + 13], buf[at + 14], buf[at + 15]]) as usize;
        let start = at + header;
        let Some(raw) = buf.get(start..start + len) else { break };
        let name: Vec<u8> = raw.iter().copied().take_while(|b| *b != 0).collect();
        out.push((wd, std::ffi::OsString::from_vec(name)));
        at = start + len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory the command made in a guarded place leaves that place in one rename, however
    /// much it holds (a command renamed huge ones in to keep the watcher busy while a redirect
    /// it wrote stood), and is gone once the watcher is settled; a link is not moved.
    #[test]
    fn a_directory_taken_leaves_its_place_at_once_and_is_gone_once_settled() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let place = root.join(".vscode");
        std::fs::create_dir_all(place.join("deep/er")).unwrap();
        for n in 0..2000 {
            std::fs::write(place.join(format!("deep/f{n}")), "x").unwrap();
        }
        let watcher = Watcher::default();
        let roots = [root.clone()];
        let said = move_aside(&roots, &place, &watcher.removing);
        assert!(said.is_some_and(|line| line.contains("removed")));
        assert!(std::fs::symlink_metadata(&place).is_err(), "the place is empty as soon as it is said");
        watcher.settle();
        let left: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().map(|entry| entry.file_name()).collect();
        assert!(left.is_empty(), "nothing is left beside it: {left:?}");

        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real", &place).unwrap();
        assert_eq!(move_aside(&roots, &place, &watcher.removing), None, "a link is taken where it is, itself");
    }
}

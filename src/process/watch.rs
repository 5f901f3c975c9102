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
//! The end-of-command sweep still runs; this only closes the time in between. Before it, the
//! supervisor waits for what the watcher is doing ([`Watcher::settle`]), so that a place it is
//! taking away is gone, and said to be, before the supervisor exits.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::namespace::Keeper;
use super::places::Places;
use super::places::sweep::{self, Before};

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
}

impl Watcher {
    /// Returns once the watcher is not in the middle of acting (a poisoned lock means its
    /// thread died, which is as good).
    pub fn settle(&self) {
        drop(self.busy.lock());
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
    for dir in acts.keys().filter_map(|path| path.parent()) {
        if watched.values().any(|known| known == dir) {
            continue;
        }
        if let Ok(wd) = add_watch(&fd, dir) {
            watched.insert(wd, dir.to_path_buf());
        }
    }
    let busy = Arc::clone(&watcher.busy);
    std::thread::spawn(move || run(&fd, &watched, &acts, &keeper, &busy));
    Ok(watcher)
}

fn add_watch(fd: &OwnedFd, dir: &Path) -> io::Result<i32> {
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: inotify_add_watch reads the NUL-terminated path we own.
    #[allow(unsafe_code)]
    let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), EVENTS | libc::IN_ONLYDIR) };
    if wd < 0 { Err(io::Error::last_os_error()) } else { Ok(wd) }
}

fn run(fd: &OwnedFd, watched: &HashMap<i32, PathBuf>, acts: &HashMap<PathBuf, Act>, keeper: &Keeper, busy: &Mutex<()>) {
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
        let _acting = busy.lock();
        for (wd, name) in events(&buf[..n]) {
            let Some(dir) = watched.get(&wd) else { continue };
            let path = dir.join(&name);
            match acts.get(&path) {
                Some(Act::BindReadOnly) => say(keeper.read_only(&path).err().map(|err| err.to_string())),
                Some(Act::Hide) => say(keeper.hide(&path).err().map(|err| err.to_string())),
                Some(Act::Take) => say(sweep::take_now(&path)),
                None => {}
            }
        }
    }
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

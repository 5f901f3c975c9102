//! The supervisor's private mount namespace: what a sandboxed command sees of the filesystem.
//!
//! [`enter`] moves the (still single-threaded) supervisor into a mount namespace of its own —
//! inside a new user namespace when it is not root, mapping its own user and group to
//! themselves — and makes every mount private, so nothing done here reaches the rest of the
//! system and nothing mounted there later (a disk, a container's layers) reaches the command,
//! with flags this namespace did not set. [`apply`] then makes every mount read-only but the
//! places the command may write (so that no mode, owner, time or ACL changes outside them),
//! binds the anchors onto themselves, binds the read-only places read-only (recursively,
//! through `open_tree`/`mount_setattr`, Linux ≥ 5.12) and covers the hidden places and the
//! rejected programs with an empty file or directory of mode 0 from a small read-only tmpfs
//! that no path leads to. The command inherits the namespace; once it is
//! inside Landlock it cannot mount or unmount anything, and a mount point cannot be renamed or
//! removed, so none of this can be undone from inside. [`enter_pids`] gives the command a PID
//! namespace too, with a `/proc` of its own ([`fresh_proc`]): when its first process ends, the
//! kernel kills every other process of it, however it forked. Every `unsafe` block is a system
//! call with arguments owned here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::places::Places;

/// Which namespaces a supervisor creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A mount namespace only (the supervisor may mount: root with `CAP_SYS_ADMIN`). Files keep
    /// their owners, and root keeps its rights over other users' files.
    Mount,
    /// A user namespace and a mount namespace owned by it (any user where the kernel allows it).
    User,
}

impl Kind {
    pub fn id(self) -> &'static str {
        match self {
            Kind::Mount => "mount",
            Kind::User => "user",
        }
    }

    pub fn parse(id: &str) -> Option<Kind> {
        [Kind::Mount, Kind::User].into_iter().find(|kind| kind.id() == id)
    }

    /// The kind this process should ask for: a mount namespace alone when it runs as root, a
    /// user namespace otherwise (or when root lacks `CAP_SYS_ADMIN`, as in many containers).
    pub fn candidates() -> &'static [Kind] {
        if current_uid() == 0 { &[Kind::Mount, Kind::User] } else { &[Kind::User] }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("cannot create a {0} namespace: {1}")]
    Unshare(&'static str, io::Error),
    #[error("cannot map the user into the namespace ({0}): {1}")]
    Map(&'static str, io::Error),
    #[error("cannot set up the mounts: {0} ({1})")]
    Mount(String, io::Error),
}

/// Moves this process into a new mount namespace (and user namespace, for [`Kind::User`]).
/// Must be called while the process has one thread.
pub fn enter(kind: Kind) -> Result<(), NamespaceError> {
    let (uid, gid) = (current_uid(), current_gid());
    let flags = match kind {
        Kind::Mount => libc::CLONE_NEWNS,
        Kind::User => libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
    };
    check(unshare(flags)).map_err(|err| NamespaceError::Unshare(kind.id(), err))?;
    if kind == Kind::User {
        std::fs::write("/proc/self/setgroups", "deny").map_err(|err| NamespaceError::Map("setgroups", err))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(|err| NamespaceError::Map("uid_map", err))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(|err| NamespaceError::Map("gid_map", err))?;
    }
    let root = c_path(Path::new("/"))?;
    // SAFETY: mount with a NUL-terminated path we own and null pointers where the call allows them.
    #[allow(unsafe_code)]
    let private = unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(private).map_err(|err| NamespaceError::Mount("cannot make the mounts private".into(), err))
}

/// Gives the command a PID namespace of its own (the supervisor's next child is its first
/// process): when that process ends, or is killed, the kernel kills every process of the
/// namespace, however it forked, `setsid`'d or hopped from pid to pid. Mounts made here later
/// (a place bound again, see `watch.rs`) reach the command's own mount namespace
/// ([`fresh_proc`]). `false` when the kernel refuses, and the command then shares the
/// supervisor's.
pub fn enter_pids() -> bool {
    let root = c"/";
    // SAFETY: mount with a NUL-terminated path we own and null pointers where the call allows them.
    #[allow(unsafe_code)]
    let shared = unsafe {
        libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SHARED, std::ptr::null())
    };
    shared == 0 && unshare(libc::CLONE_NEWPID) == 0
}

/// In the command's first process, between fork and exec, when it has a PID namespace of its
/// own: a mount namespace of its own too (a slave of the supervisor's, so the supervisor's
/// later binds reach it and nothing flows back), with a `/proc` that shows its own processes
/// by the ids they know themselves by. Where the kernel refuses the new `/proc` (a container
/// whose `/proc` has parts covered), the command sees the supervisor's. `read_only` when the
/// rest is: a mode set on a `/proc` file holds for the whole machine (`chmod 222
/// /proc/sysrq-trigger` as root would let anyone reboot it). Raw system calls on static
/// strings: nothing allocates.
#[allow(unsafe_code)]
pub fn fresh_proc(read_only: bool) {
    let (root, proc) = (c"/", c"/proc");
    // SAFETY: unshare and mount take flags and static NUL-terminated strings.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return;
        }
        let slave = libc::MS_REC | libc::MS_SLAVE;
        if libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), slave, std::ptr::null()) != 0 {
            return;
        }
        let mut flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        if read_only {
            flags |= libc::MS_RDONLY;
        }
        libc::mount(c"proc".as_ptr(), proc.as_ptr(), c"proc".as_ptr(), flags, std::ptr::null());
    }
}

/// Applies `places` in the namespace [`enter`] made, and covers each of `stubs` (the files of
/// rejected programs) with an empty file. A place that vanished meanwhile is skipped. What is
/// returned guards a place again ([`Keeper`]).
pub fn apply(places: &Places, stubs: &[PathBuf], writable: Option<&[PathBuf]>) -> Result<Keeper, NamespaceError> {
    if let Some(writable) = writable {
        read_only_but(writable)?;
    }
    for anchor in &places.anchors {
        skip_vanished(bind(anchor, anchor, false), anchor)?;
    }
    let keeper = Keeper { blank: Blank::new()? };
    for path in &places.read_only {
        skip_vanished(keeper.read_only(path), path)?;
    }
    for path in places.hidden.iter().chain(stubs) {
        skip_vanished(keeper.hide(path), path)?;
    }
    Ok(keeper)
}

/// Makes every mount read-only but the `writable` places (each bound onto itself as it was,
/// submounts included). Landlock confines what a command writes into files and directories,
/// but a file's mode, owner, times and extended attributes (its ACL) are not among its rights:
/// without this, a command could `chmod 777 ~`, or as root open any root-only file to everyone
/// with `chmod` or an ACL. On a read-only mount the kernel refuses all of these (`EROFS`);
/// devices, sockets and pipes work on one as before.
fn read_only_but(writable: &[PathBuf]) -> Result<(), NamespaceError> {
    let mut places: Vec<PathBuf> = writable.iter().filter_map(|place| std::fs::canonicalize(place).ok()).collect();
    places.sort();
    // A place inside another comes with the outer one's copy.
    places.dedup_by(|inner, outer| inner.starts_with(outer));
    let what = |path: &Path| format!("binding {} writable", path.display());
    // Copied before the rest turns read-only, so each copy keeps the flags its mounts had.
    let mut copies = Vec::with_capacity(places.len());
    for place in &places {
        match open_tree(libc::AT_FDCWD, place) {
            Ok(tree) => copies.push((place, tree)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(NamespaceError::Mount(what(place), err)),
        }
    }
    all_read_only(libc::AT_FDCWD, c"/", 0)
        .map_err(|err| NamespaceError::Mount("making the file system read-only".into(), err))?;
    for (place, tree) in copies {
        move_mount(&tree, place).map_err(|err| NamespaceError::Mount(what(place), err))?;
    }
    Ok(())
}

/// Binds and covers places of this namespace, again when they were replaced from outside it.
pub struct Keeper {
    blank: Blank,
}

impl Keeper {
    /// Binds `path` onto itself, read-only.
    pub fn read_only(&self, path: &Path) -> Result<(), NamespaceError> {
        bind(path, path, true)
    }

    /// Covers `path` with the empty file or directory.
    pub fn hide(&self, path: &Path) -> Result<(), NamespaceError> {
        self.blank.cover(path)
    }
}

fn skip_vanished(result: Result<(), NamespaceError>, path: &Path) -> Result<(), NamespaceError> {
    match result {
        Err(NamespaceError::Mount(_, err)) if err.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(path = %path.display(), "a place to bind vanished before the command started");
            Ok(())
        }
        other => other,
    }
}

/// Binds `source` (recursively) onto `target`, read-only when asked.
fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), NamespaceError> {
    let what = || format!("binding {}", target.display());
    let tree = open_tree(libc::AT_FDCWD, source).map_err(|err| NamespaceError::Mount(what(), err))?;
    if read_only {
        set_read_only(&tree).map_err(|err| NamespaceError::Mount(what(), err))?;
    }
    move_mount(&tree, target).map_err(|err| NamespaceError::Mount(what(), err))
}

/// A small read-only tmpfs, mounted nowhere, holding an empty file and an empty directory of
/// mode 0 to cover hidden places with.
struct Blank {
    mount: OwnedFd,
}

const BLANK_FILE: &str = "file";
const BLANK_DIR: &str = "dir";

impl Blank {
    fn new() -> Result<Self, NamespaceError> {
        let fail = |err| NamespaceError::Mount("creating the empty tmpfs".into(), err);
        let fs = fsopen("tmpfs").map_err(fail)?;
        fsconfig(&fs, Some(("size", "16k"))).map_err(fail)?;
        fsconfig(&fs, Some(("mode", "0"))).map_err(fail)?;
        fsconfig(&fs, None).map_err(fail)?;
        let mount = fsmount(&fs).map_err(fail)?;
        let name = CString::new(BLANK_FILE).map_err(|err| fail(err.into()))?;
        // SAFETY: openat and mkdirat on a descriptor we own with NUL-terminated names we own.
        #[allow(unsafe_code)]
        let file = unsafe {
            libc::openat(mount.as_raw_fd(), name.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0)
        };
        check(file).map_err(fail)?;
        // SAFETY: `file` is a descriptor just opened and owned by nobody else.
        #[allow(unsafe_code)]
        drop(unsafe { OwnedFd::from_raw_fd(file) });
        let dir = CString::new(BLANK_DIR).map_err(|err| fail(err.into()))?;
        // SAFETY: as above.
        #[allow(unsafe_code)]
        check(unsafe { libc::mkdirat(mount.as_raw_fd(), dir.as_ptr(), 0) }).map_err(fail)?;
        set_read_only(&mount).map_err(fail)?;
        Ok(Self { mount })
    }

    /// Covers `path` with the empty file or directory, whichever it is.
    fn cover(&self, path: &Path) -> Result<(), NamespaceError> {
        let what = || format!("hiding {}", path.display());
        let is_dir = std::fs::metadata(path).map_err(|err| NamespaceError::Mount(what(), err))?.is_dir();
        let name = if is_dir { BLANK_DIR } else { BLANK_FILE };
        let tree =
            open_tree(self.mount.as_raw_fd(), Path::new(name)).map_err(|err| NamespaceError::Mount(what(), err))?;
        move_mount(&tree, path).map_err(|err| NamespaceError::Mount(what(), err))
    }
}

fn c_path(path: &Path) -> Result<CString, NamespaceError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        NamespaceError::Mount(format!("{} holds a NUL byte", path.display()), io::ErrorKind::InvalidInput.into())
    })
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn owned(result: libc::c_long) -> io::Result<OwnedFd> {
    let fd = libc::c_int::try_from(result).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    check(fd)?;
    // SAFETY: the system call just returned this descriptor, and nothing else owns it.
    #[allow(unsafe_code)]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn cstring(text: &str) -> io::Result<CString> {
    CString::new(text).map_err(|_| io::ErrorKind::InvalidInput.into())
}

#[allow(unsafe_code)]
fn unshare(flags: libc::c_int) -> libc::c_int {
    // SAFETY: unshare takes plain flags and touches no memory of ours.
    unsafe { libc::unshare(flags) }
}

#[allow(unsafe_code)]
pub(super) fn current_uid() -> libc::uid_t {
    // SAFETY: getuid takes nothing and cannot fail.
    unsafe { libc::getuid() }
}

#[allow(unsafe_code)]
pub(super) fn current_gid() -> libc::gid_t {
    // SAFETY: getgid takes nothing and cannot fail.
    unsafe { libc::getgid() }
}

/// A detached copy of the mount tree at `path` (relative to `dir`), submounts included.
#[allow(unsafe_code)]
fn open_tree(dir: libc::c_int, path: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: open_tree reads the NUL-terminated path we own; the result is a new descriptor.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, dir, path.as_ptr(), flags) })
}

/// Makes a detached mount tree read-only, submounts included.
fn set_read_only(tree: &OwnedFd) -> io::Result<()> {
    all_read_only(tree.as_raw_fd(), c"", libc::AT_EMPTY_PATH)
}

/// Makes the mount at `path` (relative to `dir`) read-only, and every mount below it.
#[allow(unsafe_code)]
fn all_read_only(dir: libc::c_int, path: &std::ffi::CStr, flags: libc::c_int) -> io::Result<()> {
    let attr = libc::mount_attr { attr_set: libc::MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let flags = flags | libc::AT_RECURSIVE;
    // SAFETY: mount_setattr reads `attr` (its size given) and the NUL-terminated path; both
    // outlive the call.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            flags,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    check(libc::c_int::try_from(result).unwrap_or(-1))
}

/// Attaches a detached tree at `target` (which is not followed if it is a symlink).
#[allow(unsafe_code)]
fn move_mount(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let target =
        CString::new(target.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let empty = c"";
    // SAFETY: move_mount reads two NUL-terminated paths we own.
    let result = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(libc::c_int::try_from(result).unwrap_or(-1))
}

#[allow(unsafe_code)]
fn fsopen(name: &str) -> io::Result<OwnedFd> {
    let name = cstring(name)?;
    // SAFETY: fsopen reads the NUL-terminated file system name we own.
    owned(unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), libc::FSOPEN_CLOEXEC) })
}

/// Sets a string option of a file system context, or (with `None`) creates the file system.
#[allow(unsafe_code)]
fn fsconfig(fs: &OwnedFd, option: Option<(&str, &str)>) -> io::Result<()> {
    let result = match option {
        Some((key, value)) => {
            let (key, value) = (cstring(key)?, cstring(value)?);
            // SAFETY: fsconfig reads the two NUL-terminated strings we own.
            unsafe {
                libc::syscall(
                    libc::SYS_fsconfig,
                    fs.as_raw_fd(),
                    libc::FSCONFIG_SET_STRING,
                    key.as_ptr(),
                    value.as_ptr(),
                    0,
                )
            }
        }
        // SAFETY: the create command takes no pointers.
        None => unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                libc::FSCONFIG_CMD_CREATE,
                std::ptr::null::<libc::c_char>(),
                std::ptr::null::<libc::c_char>(),
                0,
            )
        },
    };
    check(libc::c_int::try_from(result).unwrap_or(-1))
}

#[allow(unsafe_code)]
fn fsmount(fs: &OwnedFd) -> io::Result<OwnedFd> {
    // Read-only comes later, once the file and the directory are made.
    let attrs = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;
    // SAFETY: fsmount takes a descriptor we own and plain flags.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), libc::FSMOUNT_CLOEXEC, attrs) })
}

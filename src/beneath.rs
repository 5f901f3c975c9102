//! Opening exactly the file a permission judged. A tool's path is judged at its final target
//! (every symlink followed: an absolute path with no symlink and no `..` on it); the tool then
//! opens that target from the workspace root that holds it, or from `/` outside every root,
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`. A symlink met
//! on the way means the path changed since it was judged (one swapped in to send the access out
//! of the workspace): the open fails with a message saying so, and nothing is read or written
//! there. A save creates its temporary file in the directory opened that way, then renames it
//! with `renameat` within that same directory, so every step names the directory judged.
//!
//! Kernels before 5.6 have no `openat2` (`ENOSYS`, or `EPERM` from a container's older seccomp
//! filter): there the path is walked one component at a time with `openat(O_NOFOLLOW)`, which
//! refuses a symlink at every step the same way. Every `unsafe` call of the tools is here, one
//! per function. The tools' reads and saves use it, and so do the supervisor's sweep and
//! watcher (`process::places`, `process::watch`) to remove and rewrite what a command made.

use std::ffi::{CString, OsStr, OsString};
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

/// Where a judged target is opened from.
const RESOLVE: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
/// How often an `openat2` that a concurrent rename made give up (`EAGAIN`) is tried again.
const RETRIES: usize = 8;

/// Opens `target` (a final target) to read, without blocking on a FIFO or taking a terminal.
pub(crate) fn open_read(roots: &[PathBuf], target: &Path) -> io::Result<File> {
    let (anchor, rest) = anchor(roots, target)?;
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    open_beneath(anchor.as_fd(), &rest, flags, 0).map(File::from).map_err(|err| told(err, target))
}

/// The directory a final target is in, opened beneath its anchor (its missing directories
/// created on the way), and the target's name in it.
pub(crate) struct Parent {
    dir: OwnedFd,
    pub name: OsString,
    target: PathBuf,
}

impl Parent {
    /// Opens the directory of `target`, creating the directories missing on the way.
    pub fn open(roots: &[PathBuf], target: &Path) -> io::Result<Self> {
        let (mut dir, rest) = anchor(roots, target)?;
        let Some(name) = rest.file_name().map(OsStr::to_owned) else {
            return Err(io::Error::other("it names no file"));
        };
        for part in rest.parent().map(Path::components).into_iter().flatten() {
            let part = Path::new(part.as_os_str());
            let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
            dir = match open_beneath(dir.as_fd(), part, flags, 0) {
                Err(err) if err.kind() == io::ErrorKind::NotFound => {
                    match mkdirat(dir.as_fd(), part.as_os_str(), 0o777) {
                        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => return Err(told(err, target)),
                        _ => {}
                    }
                    open_beneath(dir.as_fd(), part, flags, 0)
                }
                opened => opened,
            }
            .map_err(|err| told(err, target))?;
        }
        Ok(Self { dir, name, target: target.to_path_buf() })
    }

    /// What is at the target now, if anything; a symlink there is refused.
    pub fn metadata(&self) -> io::Result<Option<Metadata>> {
        let flags = libc::O_PATH | libc::O_CLOEXEC;
        match open_beneath(self.dir.as_fd(), Path::new(&self.name), flags, 0) {
            Ok(fd) => File::from(fd).metadata().map(Some),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(told(err, &self.target)),
        }
    }

    /// Creates `name` in the directory exclusively (nothing that exists there, a symlink
    /// included, is opened), to write.
    pub fn create(&self, name: &OsStr, mode: libc::mode_t) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        open_beneath(self.dir.as_fd(), Path::new(name), flags, mode).map(File::from)
    }

    /// Renames `from` over the target, within the directory.
    pub fn replace_with(&self, from: &OsStr) -> io::Result<()> {
        renameat(self.dir.as_fd(), from, &self.name)
    }

    /// Writes `bytes` to a new file `temp` in the directory (0644, removed first if there), then
    /// renames it over the target: a link put in the target's place is replaced, not followed.
    /// The new file is removed again if any step fails.
    pub fn rewrite(&self, temp: &OsStr, bytes: &[u8]) -> io::Result<()> {
        let _ = self.remove(temp);
        let written = self
            .create(temp, 0o644)
            .and_then(|mut file| io::Write::write_all(&mut file, bytes))
            .and_then(|()| self.replace_with(temp));
        if written.is_err() {
            let _ = self.remove(temp);
        }
        written
    }

    /// Removes `name` from the directory.
    pub fn remove(&self, name: &OsStr) -> io::Result<()> {
        unlinkat(self.dir.as_fd(), name)
    }

    /// The file type (`S_IFREG`, `S_IFLNK`, `S_IFDIR`, …) at the target, a symlink itself
    /// rather than what it points to; `None` if nothing is there.
    pub fn kind(&self) -> io::Result<Option<libc::mode_t>> {
        match lstatat(self.dir.as_fd(), &self.name) {
            Ok(mode) => Ok(Some(mode & libc::S_IFMT)),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Creates `name` in the directory as a symlink to `to` (which is not followed).
    pub fn symlink(&self, to: &OsStr, name: &OsStr) -> io::Result<()> {
        symlinkat(to, self.dir.as_fd(), name)
    }

    /// Opens the directory of `target`, which must be there: nothing is made on the way.
    pub fn existing(roots: &[PathBuf], target: &Path) -> io::Result<Self> {
        let (dir, rest) = anchor(roots, target)?;
        let Some(name) = rest.file_name().map(OsStr::to_owned) else {
            return Err(io::Error::other("it names no file"));
        };
        let dir = match rest.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            Some(parent) => {
                let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
                open_beneath(dir.as_fd(), parent, flags, 0).map_err(|err| told(err, target))?
            }
            None => dir,
        };
        Ok(Self { dir, name, target: target.to_path_buf() })
    }

    /// Renames the target to `to` in the same directory, never over anything there; the
    /// directory's handle then names it.
    pub fn rename_aside(&self, to: OsString) -> io::Result<Self> {
        renameat_noreplace(self.dir.as_fd(), &self.name, &to)?;
        let target = self.target.with_file_name(&to);
        Ok(Self { dir: self.dir.try_clone()?, name: to, target })
    }

    /// The target's path, as it was given.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Reads the target, a regular file (a symlink there is refused), if it holds at most
    /// `most` bytes; `None` if it holds more.
    pub fn read(&self, most: u64) -> io::Result<Option<Vec<u8>>> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
        let file = File::from(open_beneath(self.dir.as_fd(), Path::new(&self.name), flags, 0)?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("it is not a regular file"));
        }
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(file, most + 1), &mut bytes)?;
        Ok((bytes.len() as u64 <= most).then_some(bytes))
    }

    /// Removes the target, a symlink itself, and a directory with everything in it: each
    /// directory is opened from the one above it and never through a link, so a link swapped
    /// in anywhere meanwhile is removed itself and what it points to is left alone.
    pub fn remove_tree(&self) -> io::Result<()> {
        match self.kind()? {
            None => Ok(()),
            Some(libc::S_IFDIR) => {
                empty(self.dir.as_fd(), &self.name, 0)?;
                gone_is_fine(unlinkat_with(self.dir.as_fd(), &self.name, libc::AT_REMOVEDIR))
            }
            Some(_) => gone_is_fine(unlinkat(self.dir.as_fd(), &self.name)),
        }
    }
}

/// How deep [`Parent::remove_tree`] goes into nested directories.
const MAX_TREE_DEPTH: usize = 256;

/// Removes everything in the directory `name` of `parent`, opened without following a link.
fn empty(parent: BorrowedFd<'_>, name: &OsStr, depth: usize) -> io::Result<()> {
    if depth > MAX_TREE_DEPTH {
        return Err(io::Error::other(format!("directories nest deeper than {MAX_TREE_DEPTH}")));
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let dir = openat(parent, &c_path(name)?, flags, 0)?;
    for entry in names(&dir)? {
        let kind = match lstatat(dir.as_fd(), &entry) {
            Ok(mode) => mode & libc::S_IFMT,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        if kind == libc::S_IFDIR {
            empty(dir.as_fd(), &entry, depth + 1)?;
            gone_is_fine(unlinkat_with(dir.as_fd(), &entry, libc::AT_REMOVEDIR))?;
        } else {
            gone_is_fine(unlinkat(dir.as_fd(), &entry))?;
        }
    }
    Ok(())
}

fn gone_is_fine(done: io::Result<()>) -> io::Result<()> {
    match done {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        done => done,
    }
}

/// The directory `target` is opened from (the innermost root holding it, else `/`) and the
/// rest of it. A target that is not a final target (relative, or with `..`) is refused.
fn anchor(roots: &[PathBuf], target: &Path) -> io::Result<(OwnedFd, PathBuf)> {
    let root = roots.iter().filter(|root| target.starts_with(root)).max_by_key(|root| root.as_os_str().len());
    let root = root.map_or(Path::new("/"), PathBuf::as_path);
    let rest = target.strip_prefix(root).map_err(|_| io::Error::other("it is not an absolute path"))?;
    if !rest.components().all(|part| matches!(part, Component::Normal(_))) {
        return Err(io::Error::other(format!(
            "{} holds `..` or `.`; cairn opens only final targets",
            target.display()
        )));
    }
    let slash = File::options().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY).open("/")?;
    let inside = root.strip_prefix("/").map_err(|_| io::Error::other("its root is not an absolute path"))?;
    if inside.as_os_str().is_empty() {
        return Ok((slash.into(), rest.to_path_buf()));
    }
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let dir = open_beneath(slash.as_fd(), inside, flags, 0).map_err(|err| told(err, root))?;
    Ok((dir, rest.to_path_buf()))
}

/// An error of an open, said for the user: a symlink met is a change since the judgment.
fn told(err: io::Error, path: &Path) -> io::Error {
    match err.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV) => io::Error::other(format!(
            "{} has a symlink on its way now: it changed since it was judged, and cairn does not follow it",
            path.display()
        )),
        _ => err,
    }
}

/// Opens `relative` (plain components) beneath `dir`, following no symlink.
fn open_beneath(dir: BorrowedFd<'_>, relative: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let path = c_path(relative.as_os_str())?;
    for _ in 0..RETRIES {
        match openat2(dir, &path, flags, mode) {
            Err(err) if err.raw_os_error() == Some(libc::EAGAIN) => continue,
            // No openat2 in this kernel; or a seccomp filter that predates it (older container
            // runtimes answer EPERM): the walk is as strict, one component at a time.
            Err(err) if matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                return walk(dir, relative, flags, mode);
            }
            opened => return opened,
        }
    }
    Err(io::Error::other("the directory kept changing while it was opened"))
}

/// [`open_beneath`] without `openat2`: one component at a time, none followed if a symlink.
fn walk(dir: BorrowedFd<'_>, relative: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let parts: Vec<&OsStr> = relative.components().map(|part| part.as_os_str()).collect();
    let Some((last, before)) = parts.split_last() else { return Err(io::Error::from_raw_os_error(libc::ENOENT)) };
    let mut held: Option<OwnedFd> = None;
    for part in before {
        let from = held.as_ref().map_or(dir, AsFd::as_fd);
        // O_PATH with O_NOFOLLOW opens a symlink itself, which is then refused.
        let next = openat(from, &c_path(part)?, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC, 0)?;
        let kind = File::from(next.try_clone()?).metadata()?.file_type();
        if kind.is_symlink() {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        if !kind.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        held = Some(next);
    }
    let from = held.as_ref().map_or(dir, AsFd::as_fd);
    if flags & libc::O_PATH == 0 {
        // O_NOFOLLOW refuses a symlink (ELOOP).
        return openat(from, &c_path(last)?, flags | libc::O_NOFOLLOW, mode);
    }
    // With O_PATH the link itself is opened (O_DIRECTORY would call it not a directory): it is
    // refused here, then the kind asked for checked.
    let opened = openat(from, &c_path(last)?, (flags & !libc::O_DIRECTORY) | libc::O_NOFOLLOW, mode)?;
    let kind = File::from(opened.try_clone()?).metadata()?.file_type();
    if kind.is_symlink() {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    if flags & libc::O_DIRECTORY != 0 && !kind.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(opened)
}

fn c_path(path: &OsStr) -> io::Result<CString> {
    CString::new(path.as_bytes()).map_err(|_| io::Error::other("the path holds a NUL byte"))
}

/// `openat2(dir, path, {flags, mode, RESOLVE})`.
#[allow(unsafe_code)]
fn openat2(dir: BorrowedFd<'_>, path: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: open_how is a plain struct of three integers, for which all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = u64::try_from(flags).map_err(|_| io::Error::other("negative open flags"))?;
    how.mode = u64::from(mode);
    how.resolve = RESOLVE;
    // SAFETY: `path` is a NUL-terminated string and `how` a valid open_how whose size is passed
    // with it; both outlive the call, which only reads them. `dir` is an open descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &raw const how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    owned(fd)
}

#[allow(unsafe_code)]
fn openat(dir: BorrowedFd<'_>, path: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call; `dir` is an open descriptor.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), path.as_ptr(), flags, libc::c_uint::from(mode)) };
    owned(fd.into())
}

/// The descriptor a call returned, now owned, or the error it set.
#[allow(unsafe_code)]
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("a descriptor out of range"))?;
    // SAFETY: `fd` was just returned by a successful open and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[allow(unsafe_code)]
fn mkdirat(dir: BorrowedFd<'_>, name: &OsStr, mode: libc::mode_t) -> io::Result<()> {
    let name = c_path(name)?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call; `dir` is an open descriptor.
    let done = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[allow(unsafe_code)]
fn renameat(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (from, to) = (c_path(from)?, c_path(to)?);
    // SAFETY: both names are NUL-terminated strings that outlive the call; `dir` is an open
    // descriptor.
    let done = unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[allow(unsafe_code)]
fn renameat_noreplace(dir: BorrowedFd<'_>, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (from, to) = (c_path(from)?, c_path(to)?);
    let fd = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated strings that outlive the call; `dir` is an open
    // descriptor.
    let done = unsafe { libc::renameat2(fd, from.as_ptr(), fd, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn unlinkat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    unlinkat_with(dir, name, 0)
}

#[allow(unsafe_code)]
fn unlinkat_with(dir: BorrowedFd<'_>, name: &OsStr, flags: libc::c_int) -> io::Result<()> {
    let name = c_path(name)?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call; `dir` is an open descriptor.
    let done = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The names in the directory open at `dir`, but `.` and `..`.
#[allow(unsafe_code)]
fn names(dir: &OwnedFd) -> io::Result<Vec<OsString>> {
    let own = dir.try_clone()?;
    // SAFETY: fdopendir takes the descriptor `own` gives up (closed by closedir below, also on
    // every path after a success); readdir's entries are read before the next call, and their
    // names are NUL-terminated arrays inside them.
    unsafe {
        let stream = libc::fdopendir(std::os::fd::IntoRawFd::into_raw_fd(own));
        if stream.is_null() {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        loop {
            let entry = libc::readdir(stream);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
            if name != b"." && name != b".." {
                out.push(OsStr::from_bytes(name).to_owned());
            }
        }
        libc::closedir(stream);
        Ok(out)
    }
}

fn lstatat(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<libc::mode_t> {
    Ok(lstat_in(dir, &c_path(name)?)?.st_mode)
}

/// What `name` in `dir` is, itself and not what a link there leads to.
#[allow(unsafe_code)]
pub(crate) fn lstat_in(dir: BorrowedFd<'_>, name: &std::ffi::CStr) -> io::Result<libc::stat> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is a NUL-terminated string that outlives the call; `dir` is an open
    // descriptor; `stat` is written by the call before it is read, and only on success.
    let done = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), stat.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so it filled `stat`.
    Ok(unsafe { stat.assume_init() })
}

#[allow(unsafe_code)]
fn symlinkat(to: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let (to, name) = (c_path(to)?, c_path(name)?);
    // SAFETY: both are NUL-terminated strings that outlive the call; `dir` is an open descriptor.
    let done = unsafe { libc::symlinkat(to.as_ptr(), dir.as_raw_fd(), name.as_ptr()) };
    if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
#[path = "beneath_tests.rs"]
mod tests;

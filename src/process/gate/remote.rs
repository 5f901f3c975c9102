//! The process an exec comes from, seen by the gate: its memory (the path and argument vector
//! the exec was given, read with `process_vm_readv`, whole up to the kernel's own limits) and
//! its view of the filesystem. A path is resolved the way the kernel will resolve it for that
//! process, from its root, working directory or directory descriptor: absolute symlinks start
//! again from its root, `..` stops there, `/proc/self` and `/proc/thread-self` name it (not the
//! supervisor; its directory is taken from the supervisor's `/proc`, whose numbers are the ones
//! the notification gives, where the caller's own `/proc` may count in a PID namespace of its
//! own), and `/proc`'s other links (`fd/3`, `exe`, `cwd`) are followed to the file they
//! hold, as the kernel follows them. One `openat2` answers most paths; the rest are walked one
//! component at a time. Everything is bytes: a name that is not UTF-8 is still the name. What
//! was reached is a [`Reached`]: the file, its metadata, and the name the kernel gives it,
//! asked for only when needed.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ffi::CString;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Longest path the kernel takes (`PATH_MAX`, its NUL included).
const MAX_PATH: usize = 4096;
/// Longest single argument or variable the kernel takes (`MAX_ARG_STRLEN`).
const MAX_ARG: usize = 128 * 1024;
/// Most bytes of strings and pointers in one vector: the kernel's own ceiling (three quarters of
/// an 8 MiB stack), so no exec it would accept is cut short here.
const MAX_VECTOR: usize = 6 * 1024 * 1024;
/// Symlinks followed in one resolution, as the kernel's limit.
const MAX_SYMLINKS: usize = 40;
/// `statfs.f_type` of procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const PAGE: u64 = 4096;
/// Strings read at once per call (`IOV_MAX`).
const IOV_MAX: usize = 1024;
/// What is read of each string's start in that one call.
const START: usize = 256;

/// Why a vector could not be read whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Past [`MAX_ARG`] or [`MAX_VECTOR`].
    TooLong,
    /// The memory is not there to read (or the process is gone).
    Unreadable,
}

/// Where a relative path starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// The caller's working directory (`AT_FDCWD`, and a `#!` interpreter's path).
    Cwd,
    /// A directory descriptor of the caller (`execveat`).
    Dir(i32),
}

/// The file an exec names, as reached for the caller (opened `O_PATH`).
pub struct Reached {
    pub file: File,
    pub meta: std::fs::Metadata,
    /// Whether the path's last name is the file's own (no symlink was followed at the end), so
    /// the file is called what the path calls it.
    pub direct: bool,
    /// Where it lies, read from the descriptor when first needed (`None` if the kernel cannot
    /// say: a path longer than a page, a file no longer linked).
    real: OnceCell<Option<PathBuf>>,
}

impl Reached {
    /// `file`, described by `meta`.
    pub fn new(file: File, meta: std::fs::Metadata, direct: bool) -> Self {
        Self { file, meta, direct, real: OnceCell::new() }
    }

    /// Where the file lies (as the supervisor sees it); `given` should the kernel not say.
    pub fn real<'a>(&'a self, given: &'a [u8]) -> &'a Path {
        self.named().unwrap_or_else(|| Path::new(OsStr::from_bytes(given)))
    }

    /// Where the kernel says the file lies, as the supervisor sees it; `None` if it cannot say.
    pub fn named(&self) -> Option<&Path> {
        self.real
            .get_or_init(|| {
                std::fs::read_link(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
                    .ok()
                    .filter(|path| path.is_absolute())
            })
            .as_deref()
    }
}

/// The calling thread of one exec.
pub struct Caller {
    /// Its thread id, as the supervisor sees it.
    pub pid: u32,
}

impl Caller {
    /// The NUL-terminated path at `address`; `None` if it cannot be read or is too long for the
    /// kernel.
    pub fn path(&self, address: u64) -> Option<Vec<u8>> {
        self.string(address, MAX_PATH - 1).ok()
    }

    /// The NULL-terminated vector of strings at `address` (`argv`, `envp`), whole or not at all.
    /// The pointers are read a page at a time, then the strings' starts all in one read: most
    /// end there, and only a longer one is read on by itself.
    pub fn vector(&self, address: u64) -> Result<Vec<Vec<u8>>, Unread> {
        if address == 0 {
            // The kernel takes a NULL vector as an empty one.
            return Ok(Vec::new());
        }
        let mut budget = MAX_VECTOR;
        let mut pointers = Vec::new();
        let mut at = address;
        'pointers: loop {
            // Pointers up to the end of the page (at least one), so an unmapped page after the
            // terminating NULL does not fail the read.
            let left = (PAGE - at % PAGE) as usize;
            let mut raw = vec![0u8; (left / 8).clamp(1, 512) * 8];
            let n = self.read(at, &mut raw).ok_or(Unread::Unreadable)?;
            if n < 8 {
                return Err(Unread::Unreadable);
            }
            for word in raw[..n - n % 8].chunks_exact(8) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(word);
                let pointer = u64::from_ne_bytes(bytes);
                if pointer == 0 {
                    break 'pointers;
                }
                // Each string takes its pointer and at least its NUL.
                budget = budget.checked_sub(9).ok_or(Unread::TooLong)?;
                pointers.push(pointer);
            }
            at += (n - n % 8) as u64;
        }
        let mut out = Vec::with_capacity(pointers.len());
        for batch in pointers.chunks(IOV_MAX) {
            // Each start up to the end of its page, so no read crosses into a page that may
            // not be there.
            let spans: Vec<usize> = batch.iter().map(|p| ((PAGE - p % PAGE) as usize).min(START)).collect();
            let mut starts = vec![0u8; spans.iter().sum()];
            let read = self.read_many(batch, &spans, &mut starts);
            let mut offset = 0;
            for (pointer, span) in batch.iter().zip(&spans) {
                let start = &starts[offset..offset + span];
                offset += span;
                let whole = if offset <= read { start.iter().position(|b| *b == 0) } else { None };
                let text = match whole {
                    Some(end) => start[..end].to_vec(),
                    None => self.string(*pointer, MAX_ARG.min(budget + 1).saturating_sub(1))?,
                };
                budget = budget.checked_sub(text.len()).ok_or(Unread::TooLong)?;
                out.push(text);
            }
        }
        Ok(out)
    }

    /// Reads `spans[i]` bytes at each of `addresses` into `buf`, one after the other, in one
    /// call; the count read (the kernel stops at the first address it cannot read).
    #[allow(unsafe_code)]
    fn read_many(&self, addresses: &[u64], spans: &[usize], buf: &mut [u8]) -> usize {
        let remote: Vec<libc::iovec> = addresses
            .iter()
            .zip(spans)
            .map(|(address, span)| libc::iovec { iov_base: *address as usize as *mut libc::c_void, iov_len: *span })
            .collect();
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let (Ok(pid), Ok(count)) = (libc::pid_t::try_from(self.pid), libc::c_ulong::try_from(remote.len())) else {
            return 0;
        };
        // SAFETY: the local iovec covers `buf`, which we own, and the remote spans add up to its
        // length, so at most `buf.len()` bytes are written; remote addresses are only read by the
        // kernel, which checks them.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), count, 0) };
        usize::try_from(n).unwrap_or(0)
    }

    /// A NUL-terminated string at `address`, at most `max` bytes before the NUL.
    fn string(&self, address: u64, max: usize) -> Result<Vec<u8>, Unread> {
        let mut out = Vec::new();
        let mut at = address;
        loop {
            // Up to the end of the page, so a string that ends before an unmapped page is read.
            let left = (PAGE - at % PAGE) as usize;
            let mut chunk = vec![0u8; left.min(max + 1 - out.len())];
            let n = self.read(at, &mut chunk).ok_or(Unread::Unreadable)?;
            if let Some(end) = chunk[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
            if out.len() > max {
                return Err(Unread::TooLong);
            }
            at += n as u64;
        }
    }

    /// Reads the caller's memory at `address` into `buf`; the count read, `None` if nothing.
    #[allow(unsafe_code)]
    fn read(&self, address: u64, buf: &mut [u8]) -> Option<usize> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: address as usize as *mut libc::c_void, iov_len: buf.len() };
        let pid = libc::pid_t::try_from(self.pid).ok()?;
        // SAFETY: process_vm_readv writes at most `buf.len()` bytes into `buf`, which we own; the
        // remote address is only read by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        usize::try_from(n).ok().filter(|n| *n > 0)
    }

    /// The file `path` names for the caller, opened `O_PATH`; the kernel's `errno` when it
    /// names none.
    pub fn resolve(&self, start: Start, path: &[u8]) -> Result<File, i32> {
        let root = open(&CString::new(format!("/proc/{}/root", self.pid)).map_err(|_| libc::EINVAL)?, None, true)?;
        let start = if path.starts_with(b"/") {
            None
        } else {
            let dir = match start {
                Start::Cwd => format!("/proc/{}/cwd", self.pid),
                Start::Dir(fd) => format!("/proc/{}/fd/{fd}", self.pid),
            };
            Some(open(&CString::new(dir).map_err(|_| libc::EINVAL)?, None, true)?)
        };
        // The kernel resolves most paths in one call: an absolute one inside the caller's root
        // as if it were `/`, a relative one when it stays below its start. Anything else (a
        // `..` or an absolute symlink out of the start, `/proc`'s links, an older kernel) is
        // walked here one name at a time.
        let c_path = CString::new(path).map_err(|_| libc::ENOENT)?;
        let quick = match &start {
            None => open_in(&root, &c_path, libc::RESOLVE_IN_ROOT, true),
            Some(dir) => open_in(dir, &c_path, libc::RESOLVE_BENEATH, true),
        };
        if let Ok(file) = quick {
            return Ok(file);
        }
        let root_id = id(&root)?;
        let mut current = match start {
            Some(dir) => dir,
            None => root.try_clone().map_err(errno)?,
        };
        let mut pending: VecDeque<Vec<u8>> = components(path).collect();
        let mut links = 0;
        while let Some(name) = pending.pop_front() {
            if name == b".." {
                if id(&current)? != root_id {
                    current = open(c"..", Some(&current), false)?;
                }
                continue;
            }
            let at_proc_root = |dir: &File| is_procfs(dir) && dir.metadata().is_ok_and(|meta| meta.ino() == 1);
            if (name == b"self" || name == b"thread-self") && at_proc_root(&current) {
                // The caller's `/proc` may number processes otherwise (its PID namespace): the
                // caller's own directory is taken from the supervisor's `/proc`, where its
                // numbers are the ones the notification gave. A caller gone meanwhile fails.
                let tgid = self.tgid().ok_or(libc::ESRCH)?;
                let named =
                    if name == b"self" { format!("/proc/{tgid}") } else { format!("/proc/{tgid}/task/{}", self.pid) };
                current = open(&CString::new(named).map_err(|_| libc::EINVAL)?, None, false)?;
                continue;
            }
            let c_name = CString::new(name).map_err(|_| libc::ENOENT)?;
            let next = open(&c_name, Some(&current), false)?;
            if !next.metadata().map_err(errno)?.file_type().is_symlink() {
                current = next;
                continue;
            }
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(libc::ELOOP);
            }
            if is_procfs(&current) && !at_proc_root(&current) {
                // `fd/3`, `exe`, `cwd`, `root`: the kernel goes to the file they hold, which
                // their text only describes.
                current = open(&c_name, Some(&current), true)?;
                continue;
            }
            let target = read_link(&current, &c_name)?;
            if target.starts_with(b"/") {
                current = root.try_clone().map_err(errno)?;
            }
            for part in components(&target).collect::<Vec<_>>().into_iter().rev() {
                pending.push_front(part);
            }
        }
        Ok(current)
    }

    /// The caller's thread group (its process id), for `/proc/self`.
    fn tgid(&self) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status.lines().find_map(|line| line.strip_prefix("Tgid:")).and_then(|tgid| tgid.trim().parse().ok())
    }
}

/// The names of a path, without empty and `.` ones.
fn components(path: &[u8]) -> impl DoubleEndedIterator<Item = Vec<u8>> + '_ {
    path.split(|b| *b == b'/').filter(|part| !part.is_empty() && *part != b".").map(<[u8]>::to_vec)
}

fn errno(err: io::Error) -> i32 {
    err.raw_os_error().unwrap_or(libc::EIO)
}

fn id(file: &File) -> Result<(u64, u64), i32> {
    let meta = file.metadata().map_err(errno)?;
    Ok((meta.dev(), meta.ino()))
}

/// `openat(dir, name, O_PATH)`, following a final symlink only if `follow`.
#[allow(unsafe_code)]
fn open(name: &std::ffi::CStr, dir: Option<&File>, follow: bool) -> Result<File, i32> {
    let flags = libc::O_PATH | libc::O_CLOEXEC | if follow { 0 } else { libc::O_NOFOLLOW };
    let dir = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is a descriptor we own or
    // AT_FDCWD.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(errno(io::Error::last_os_error()));
    }
    // SAFETY: openat just returned this descriptor, which nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The file the absolute `path` names from `root`, opened `O_PATH` in one `openat2`: a final
/// symlink is followed only if `follow` (else the link itself is opened), `..` stops at `root`,
/// and a `/proc` magic link fails the call (`ELOOP`), as does anything `openat2` cannot do.
pub fn open_from(root: &File, path: &[u8], follow: bool) -> Result<File, i32> {
    let path = CString::new(path).map_err(|_| libc::ENOENT)?;
    open_in(root, &path, libc::RESOLVE_IN_ROOT, follow)
}

/// `openat2(dir, path, O_PATH)` with `resolve` and no `/proc` magic link followed; a final
/// symlink is followed only if `follow`.
#[allow(unsafe_code)]
fn open_in(dir: &File, path: &std::ffi::CStr, resolve: u64, follow: bool) -> Result<File, i32> {
    /// The kernel's `struct open_how`.
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC | if follow { 0 } else { libc::O_NOFOLLOW }) as u64,
        mode: 0,
        resolve: resolve | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is NUL-terminated and `how` a valid `open_how`, both outliving the call,
    // whose size is passed with it; `dir` is an open descriptor.
    let fd = unsafe {
        libc::syscall(libc::SYS_openat2, dir.as_raw_fd(), path.as_ptr(), &raw const how, std::mem::size_of::<OpenHow>())
    };
    let fd = i32::try_from(fd).map_err(|_| libc::EBADF)?;
    if fd < 0 {
        return Err(errno(io::Error::last_os_error()));
    }
    // SAFETY: openat2 just returned this descriptor, which nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The text of the symlink `name` in `dir`.
#[allow(unsafe_code)]
fn read_link(dir: &File, name: &std::ffi::CStr) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; MAX_PATH];
    // SAFETY: readlinkat writes at most `buf.len()` bytes into `buf`, which we own; `name` is
    // NUL-terminated and `dir` an open descriptor.
    let n = unsafe { libc::readlinkat(dir.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).map_err(|_| errno(io::Error::last_os_error()))?;
    if n >= buf.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buf.truncate(n);
    Ok(buf)
}

/// Whether `dir` is on a procfs, whose links the kernel treats apart.
#[allow(unsafe_code)]
fn is_procfs(dir: &File) -> bool {
    // SAFETY: the kernel requires a zeroed struct; it is plain data.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs fills `stat`, which we own, for a descriptor we own.
    let done = unsafe { libc::fstatfs(dir.as_raw_fd(), &mut stat) };
    // `f_type`'s width is the target's (`__fsword_t`).
    #[allow(clippy::useless_conversion)]
    let kind = i64::from(stat.f_type);
    done == 0 && kind == PROC_SUPER_MAGIC
}

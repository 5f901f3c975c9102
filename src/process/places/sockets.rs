//! Sockets of programs outside the sandbox that the policy's list of the user's services does
//! not name: a database's (`/tmp/.s.PGSQL.5432`, `/run/postgresql`), an editor's, an agent's
//! in a directory of its own (`/tmp/ssh-XXXX/agent.N`). Whoever connects to one acts through a
//! program that runs outside, so each is covered like a secret. Found before each command:
//! every socket bound to a path that the kernel lists for this network namespace
//! (`/proc/net/unix`), wherever it lies, and every socket directly in the temp directories and
//! `/run` (one bound in another namespace and reached through the file), that is older than
//! cairn's start, which no command of cairn's made, and that belongs to the user or to root:
//! another user's socket serves that user, with the rights the socket's mode gives anyone, and
//! covering each one would let any user of the machine flood `/tmp` with sockets until no
//! command of this user's starts. A socket a command made (its own database
//! in a background job) is newer and stays reachable for the commands after it. And the
//! directories the user's multiplexers and editors keep their sockets in are made before a
//! command when missing, so that the cover reaches a server the user starts meanwhile. A
//! socket the kernel does not list (bound in another network namespace, or, mostly, left by a
//! program that ended) is covered only when a connection to it is not refused ([`listened`]),
//! and at most [`MOST_UNLISTED`] of them: thousands of stale ones would take more mounts than
//! a namespace holds, and every command would be refused. A live socket the kernel lists by a
//! name that no longer leads to it (bound by a relative path, its directory renamed since),
//! below the directories looked into, is not found.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Entries read in one directory at most: a temp directory flooded with entries costs a
/// bounded time, and what a flood holds is newer than cairn anyway.
const MOST: usize = 100_000;

/// Sockets covered at most that the kernel does not list as bound here (see [`outside`]).
const MOST_UNLISTED: usize = 256;
/// Where the kernel lists this network namespace's Unix sockets.
const LISTED: &str = "/proc/net/unix";
/// More than the list of any machine's sockets.
const MOST_LISTED: u64 = 64 << 20;

/// Makes each of `dirs` (`/tmp/tmux-UID`, …) that is missing, private to the user as the
/// servers that use them require (mode 0700, owned by the user). An existing entry is left as
/// it is, a link included (`mkdir` follows none). A directory that cannot be made is left to
/// the server: the command is not held up for it.
pub fn make_service_dirs(dirs: &[PathBuf]) {
    use std::os::unix::fs::DirBuilderExt as _;
    for dir in dirs {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => tracing::debug!(dir = %dir.display(), "made a service's socket directory to cover it"),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => tracing::debug!(dir = %dir.display(), "cannot make a service's socket directory: {err}"),
        }
    }
}

/// The sockets older than `before` bound to a path anywhere, or lying directly in `dirs`,
/// except those `shown` names (`[sandbox] visible`).
pub fn outside(dirs: &[PathBuf], before: SystemTime, shown: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = dirs.iter().filter_map(|dir| std::fs::canonicalize(dir).ok()).collect();
    seen.sort();
    seen.dedup();
    let user = super::super::namespace::current_uid();
    let covered = |path: &PathBuf| {
        let old_socket = std::fs::symlink_metadata(path).is_ok_and(|meta| {
            meta.file_type().is_socket() && older(&meta, before) && (meta.uid() == user || meta.uid() == 0)
        });
        old_socket && !shown.iter().any(|shown| shown == path)
    };
    let mut found: Vec<PathBuf> = bound();
    found.sort();
    found.dedup();
    // Sockets the kernel does not list for this network namespace: one bound in another, or,
    // far more often, one nobody listens on any more, which commands may leave by thousands.
    let mut unlisted: Vec<PathBuf> = Vec::new();
    for dir in &seen {
        let sockets = entries(dir).filter(|(_, kind)| kind.is_socket()).map(|(path, _)| path);
        unlisted.extend(sockets.filter(|path| found.binary_search(path).is_err()));
    }
    found.retain(covered);
    unlisted.sort();
    unlisted.dedup();
    unlisted.retain(covered);
    // One nobody listens on refuses a connection, and is left alone; a live one is covered.
    unlisted.retain(|path| listened(path));
    unlisted.truncate(MOST_UNLISTED);
    found.extend(unlisted);
    found.sort();
    found
}

/// The paths of the sockets [`LISTED`] shows (abstract ones, `@…`, are Landlock's). Read as
/// bytes, each line on its own: any user may bind a socket whose name is not UTF-8, and as
/// text the whole list would be lost to it.
fn bound() -> Vec<PathBuf> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    if let Ok(file) = std::fs::File::open(LISTED) {
        let _ = file.take(MOST_LISTED).read_to_end(&mut bytes);
    }
    bytes.split(|byte| *byte == b'\n').skip(1).filter_map(listed_path).collect()
}

/// The path of one line of [`LISTED`] (`Num RefCount Protocol Flags Type St Inode Path`), if
/// it names one.
fn listed_path(line: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut rest = line;
    for _ in 0..7 {
        let start = rest.iter().position(|byte| *byte != b' ')?;
        rest = &rest[start..];
        rest = &rest[rest.iter().position(|byte| *byte == b' ')?..];
    }
    let path = rest.strip_prefix(b" ")?;
    path.starts_with(b"/").then(|| PathBuf::from(std::ffi::OsStr::from_bytes(path)))
}

/// Whether something may listen on the socket at `path`: a connection to it, made without
/// waiting, is not refused. A stale socket (its program ended) refuses; one someone listens on
/// (in this network namespace or another) accepts or has its queue full, and a datagram socket
/// answers with another error: all of them count as live.
#[allow(unsafe_code)]
fn listened(path: &Path) -> bool {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: a zeroed `sockaddr_un` is a valid value of the plain-data struct.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= address.sun_path.len() {
        return true;
    }
    address.sun_family = libc::sa_family_t::try_from(libc::AF_UNIX).unwrap_or_default();
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = libc::c_char::from_ne_bytes([*byte]);
    }
    // SAFETY: socket takes plain flags and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return true;
    }
    // SAFETY: the descriptor was just made and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let length = libc::socklen_t::try_from(std::mem::size_of::<libc::sa_family_t>() + bytes.len()).unwrap_or(0);
    // SAFETY: connect reads `length` bytes of the address, which lives on this frame.
    let connected = unsafe { libc::connect(socket.as_raw_fd(), (&raw const address).cast::<libc::sockaddr>(), length) };
    connected == 0 || !matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOENT))
}

/// `dir`'s entries and their kinds (not following links), at most [`MOST`].
fn entries(dir: &Path) -> impl Iterator<Item = (PathBuf, std::fs::FileType)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .take(MOST)
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.path(), entry.file_type().ok()?)))
}

/// Whether the status of what `meta` describes last changed before `before`.
fn older(meta: &std::fs::Metadata, before: SystemTime) -> bool {
    let changed = SystemTime::UNIX_EPOCH
        + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0))
        + Duration::from_nanos(u64::try_from(meta.ctime_nsec()).unwrap_or(0));
    changed < before
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn sockets_older_than_cairn_bound_anywhere_or_lying_in_a_temp_dir_are_found_and_newer_or_shown_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join("agent-dir/deeper")).unwrap();
        let _old = [
            UnixListener::bind(top.join(".s.PGSQL.5432")).unwrap(),
            UnixListener::bind(top.join("agent-dir/agent.1")).unwrap(),
            UnixListener::bind(top.join("agent-dir/deeper/too-deep")).unwrap(),
            UnixListener::bind(top.join("shown.sock")).unwrap(),
        ];
        std::fs::write(top.join("plain-file"), "").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let started = SystemTime::now();
        std::thread::sleep(Duration::from_millis(20));
        let _new = UnixListener::bind(top.join("commands-own.sock")).unwrap();
        let mut found = outside(&[top.clone(), top.join("missing")], started, &[top.join("shown.sock")]);
        found.retain(|path| path.starts_with(&top));
        assert_eq!(
            found,
            [top.join(".s.PGSQL.5432"), top.join("agent-dir/agent.1"), top.join("agent-dir/deeper/too-deep")]
        );
    }

    /// The eighth pass's B6: any user could leave thousands of sockets in `/tmp`, each covered,
    /// until no command of another user's started. Another user's socket serves that user.
    #[test]
    fn another_users_socket_is_not_this_users_to_cover() {
        if crate::process::namespace::current_uid() != 0 {
            return; // Only root can give a socket away.
        }
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        let _listening =
            [UnixListener::bind(top.join("theirs.sock")).unwrap(), UnixListener::bind(top.join("mine.sock")).unwrap()];
        std::os::unix::fs::lchown(top.join("theirs.sock"), Some(4242), None).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut found = outside(std::slice::from_ref(&top), SystemTime::now(), &[]);
        found.retain(|path| path.starts_with(&top));
        assert_eq!(found, [top.join("mine.sock")]);
    }

    /// The ninth pass's B3: 4,000 sockets a command left in `/tmp` were each covered in the
    /// next session, and every command was refused for too many mounts. The tenth pass's B3:
    /// kept by name, the first 256 stale ones pushed out a live one the kernel does not list
    /// here (a container's). Stale ones, which refuse a connection, are not covered at all.
    #[test]
    fn stale_sockets_nobody_listens_on_are_not_covered() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        for i in 0..MOST_UNLISTED + 50 {
            // Bound, then closed: the file stays, nobody listens.
            drop(UnixListener::bind(top.join(format!("aa-stale-{i}.sock"))).unwrap());
        }
        let _live = UnixListener::bind(top.join("zz-live.sock")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut found = outside(std::slice::from_ref(&top), SystemTime::now(), &[]);
        found.retain(|path| path.starts_with(&top));
        assert_eq!(found, [top.join("zz-live.sock")]);
        assert!(listened(&top.join("zz-live.sock")) && !listened(&top.join("aa-stale-0.sock")));
    }

    #[test]
    fn a_listed_line_gives_its_path_and_an_abstract_or_unbound_one_none() {
        let line = b"00000000f58fca8e: 00000002 00000000 00010000 0001 01  1159 /run/user/1000/a b.sock";
        assert_eq!(listed_path(line), Some(PathBuf::from("/run/user/1000/a b.sock")));
        assert_eq!(listed_path(b"00000000c9f59a43: 00000003 00000000 00000000 0001 03  1158"), None);
        assert_eq!(listed_path(b"00000000c9f59a43: 00000002 00000000 00010000 0001 01 71 @/tmp/.X11-unix/X0"), None);
        // The tenth pass's B1: a name that is not UTF-8 cost the whole list when read as text.
        let odd = b"00000000f58fca8e: 00000002 00000000 00010000 0001 01  1160 /tmp/odd-\xff";
        assert!(listed_path(odd).is_some());
    }

    /// The tenth pass's B1: one socket named with a byte that is not UTF-8, which any user may
    /// bind, made the kernel's whole list unreadable, and no listed socket was covered.
    #[test]
    fn a_socket_with_a_name_that_is_not_utf8_costs_no_other_its_cover() {
        use std::os::unix::ffi::OsStrExt as _;
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        std::fs::create_dir(top.join("deeper")).unwrap();
        let odd = top.join(std::ffi::OsStr::from_bytes(b"odd-\xff.sock"));
        let _listening = [
            std::os::unix::net::UnixListener::bind(&odd).unwrap(),
            std::os::unix::net::UnixListener::bind(top.join("deeper/live.sock")).unwrap(),
        ];
        std::thread::sleep(Duration::from_millis(20));
        // Only the kernel's list finds a socket below the directories looked into.
        let found = outside(&[], SystemTime::now(), &[]);
        assert!(found.contains(&top.join("deeper/live.sock")), "the list was lost");
        assert!(found.contains(&odd));
    }
}

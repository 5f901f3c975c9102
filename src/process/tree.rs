//! Process trees: killing a process group, finding and killing every descendant of a process
//! (through `/proc`), the few `prctl`s and signals the supervisor and MCP servers need, and the
//! pipe a supervisor watches. Its `unsafe` blocks, like every other of `process/`, are listed
//! in the `process` module's doc with what makes them sound; each has its SAFETY comment.

use std::collections::HashMap;
use std::time::Duration;

/// How often the descendants are looked for again while some are still dying.
const KILL_ROUNDS: usize = 200;
const KILL_PAUSE: Duration = Duration::from_millis(1);

#[allow(unsafe_code)]
pub fn kill_group(group: u32) {
    let Ok(group) = libc::pid_t::try_from(group) else { return };
    // SAFETY: killpg takes plain integers and touches no memory of ours; a group that is gone makes it fail with ESRCH, which is fine.
    unsafe { libc::killpg(group, libc::SIGKILL) };
}

#[allow(unsafe_code)]
fn kill_pid(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill takes plain integers and touches no memory of ours; a process that is gone makes it fail with ESRCH.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Makes orphaned descendants of this process its children instead of init's, so that a
/// process that `setsid`s and double-forks away from its group can still be found and killed.
#[allow(unsafe_code)]
pub fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory of ours.
    unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
}

/// Makes the program `command` starts die (SIGKILL) when the thread that started it ends, which
/// for a Tokio worker is when cairn ends, `kill -9` included: a program that outlives the end of
/// its stdin (an MCP server) does not run on forever. If cairn is already gone by the time the
/// program is set up, the program does not start.
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = std::process::id();
    let set_up = move || {
        die_with_this_parent()?;
        child_of(parent)
    };
    // SAFETY: between fork and exec the closure makes two system calls (prctl, getppid), both
    // async-signal-safe, on integers copied before the fork; it allocates nothing, its errors
    // included (raw OS errors), as a child forked from a multi-threaded process must not.
    unsafe { command.pre_exec(set_up) };
}

/// Between fork and exec: whether this process is still the child of `parent`; `ESRCH` when
/// `parent` ended while the program was starting. A raw OS error, the only kind that is made
/// without allocating (and the only kind the parent's `spawn` gets back).
#[allow(unsafe_code)]
fn child_of(parent: u32) -> std::io::Result<()> {
    // SAFETY: getppid takes nothing, touches no memory and is async-signal-safe.
    let now = unsafe { libc::getppid() };
    if u32::try_from(now).ok() == Some(parent) { Ok(()) } else { Err(std::io::Error::from_raw_os_error(libc::ESRCH)) }
}

/// Between fork and exec: this process gets SIGKILL when the thread that forked it ends.
#[allow(unsafe_code)]
pub fn die_with_this_parent() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes integers and touches no memory; it is
    // async-signal-safe, as a forked child of a multi-threaded process requires.
    let set = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if set < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// The signals an editor ends its terminal's program with (SIGTERM, SIGHUP, SIGINT), blocked in
/// the supervisor so that one thread waits for them and ends the command as cairn would.
#[derive(Clone, Copy)]
pub struct Endings(libc::sigset_t);

#[allow(unsafe_code)]
impl Endings {
    /// Blocks them in this thread and the threads it starts from now on.
    pub fn block() -> Self {
        // SAFETY: the set is ours and plain data; sigemptyset/sigaddset only write it, and
        // pthread_sigmask reads it.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Self(set)
        }
    }

    /// Waits for one of them; its number.
    pub fn wait(&self) -> i32 {
        let mut signal = 0;
        // SAFETY: sigwait reads our set and writes the int we own.
        while unsafe { libc::sigwait(&self.0, &mut signal) } != 0 {}
        signal
    }

    /// Between fork and exec: lets them reach the program again (the mask survives exec).
    pub fn unblock(&self) -> std::io::Result<()> {
        // SAFETY: sigprocmask is async-signal-safe and reads a set made before the fork.
        let done = unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &self.0, std::ptr::null_mut()) };
        if done < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
    }
}

/// A pipe for a supervisor to watch: both ends close on exec; [`pass_on`] keeps the read end
/// open in the one child that needs it.
#[allow(unsafe_code)]
pub fn watch_pipe() -> std::io::Result<(std::os::fd::RawFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made; the write end is ours to own, and the read end is
    // owned by a guard that closes it once the child has its copy (see `pass_on`).
    let write = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
    Ok((fds[0], write))
}

/// Keeps `fd` open across the exec of `command`'s child only (clearing close-on-exec between
/// fork and exec), and closes cairn's copy when `command` is dropped.
#[allow(unsafe_code)]
pub fn pass_on(command: &mut tokio::process::Command, fd: std::os::fd::RawFd) {
    use std::os::fd::FromRawFd as _;
    // SAFETY: `fd` is the read end `watch_pipe` made and nothing else owns; the guard closes it.
    let guard = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let keep = move || {
        use std::os::fd::AsRawFd as _;
        // SAFETY: fcntl on a descriptor of this (forked) process; async-signal-safe.
        if unsafe { libc::fcntl(guard.as_raw_fd(), libc::F_SETFD, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the closure makes one async-signal-safe call and allocates nothing.
    unsafe { command.pre_exec(keep) };
}

/// Takes ownership of descriptor `fd`, which this process inherited, after checking it is open;
/// it is made close-on-exec so the program does not inherit it in turn.
#[allow(unsafe_code)]
pub fn adopt_fd(fd: i32) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd as _;
    if fd <= 2 {
        return Err(std::io::Error::other("not one of stdin, stdout or stderr"));
    }
    // SAFETY: fcntl on a plain integer; a descriptor that is not open makes it fail with EBADF.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above), inherited for this use alone, and owned
    // by nothing else in this process.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Starts a new session for this (just forked) process: it loses the controlling terminal it
/// shared with cairn, so it cannot open `/dev/tty` and push keystrokes into the user's shell
/// (`TIOCSTI`) to run something outside the sandbox. The supervisor still finds and kills it.
#[allow(unsafe_code)]
pub fn detach() -> std::io::Result<()> {
    // SAFETY: setsid takes no arguments and touches no memory; after fork it is async-signal-safe.
    let session = unsafe { libc::setsid() };
    if session < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Between fork and exec: every descriptor but stdin, stdout and stderr is closed at the exec,
/// whatever this process inherited. An editor may leak descriptors of its own to cairn (a pipe,
/// a socket), and through cairn to the supervisor; the program gets none of them. A kernel
/// without `close_range`'s close-on-exec flag (before Linux 5.11) leaves them as they are.
#[allow(unsafe_code)]
pub fn close_inherited() {
    // SAFETY: close_range takes integers and touches no memory; a raw system call, it is
    // async-signal-safe, and it only marks descriptors (the ones used until the exec stay open).
    unsafe { libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC) };
}

/// Makes this process undumpable: its `/proc/<pid>/environ` and memory become unreadable to
/// other processes of the same user (a command cannot read the keys out of cairn), and it
/// never dumps core.
#[allow(unsafe_code)]
pub fn deny_inspection() {
    // SAFETY: prctl with PR_SET_DUMPABLE takes an integer flag and touches no memory of ours.
    unsafe {
        libc::prctl(
            libc::PR_SET_DUMPABLE,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
}

/// Ends this process the way `signal` ended its child, so the parent sees the same.
pub fn die_by(signal: i32) -> ! {
    deny_inspection();
    reset_signal(signal);
    raise(signal);
    std::process::exit(128 + signal)
}

#[allow(unsafe_code)]
fn reset_signal(signal: i32) {
    // SAFETY: restores the default action of a signal; no handler of ours is involved.
    unsafe { libc::signal(signal, libc::SIG_DFL) };
}

#[allow(unsafe_code)]
fn raise(signal: i32) {
    // SAFETY: sends a signal to this process; with its default action it ends the process.
    unsafe { libc::raise(signal) };
}

/// Kills every live descendant of `root` (not `root` itself), again and again until none is
/// left: a parent killed first hands its children to the nearest subreaper, found next round.
pub fn kill_descendants(root: u32) {
    for _ in 0..KILL_ROUNDS {
        let found = descendants(root);
        if found.is_empty() {
            return;
        }
        for pid in found {
            kill_pid(pid);
        }
        std::thread::sleep(KILL_PAUSE);
    }
}

/// The live (not zombie) descendants of `root`, from one pass over `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if let Some((state, parent)) = stat(pid)
            && !matches!(state, 'Z' | 'X')
        {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        if let Some(kids) = children.get(&pid) {
            found.extend(kids);
            pending.extend(kids);
        }
    }
    found
}

/// State and parent of a process, from `/proc/<pid>/stat` ([`stat_fields`]).
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = read_stat(pid)?;
    let mut fields = stat_fields(&text)?;
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`'s 22nd field): with
/// its id, what tells one process from a later one given the same id.
pub fn started(pid: u32) -> Option<u64> {
    let text = read_stat(pid)?;
    stat_fields(&text)?.nth(19)?.parse().ok()
}

fn read_stat(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// The fields of a `/proc/<pid>/stat` text from the state on (`pid (comm) S ppid …`): the
/// command name may itself hold spaces and parentheses, so they are read after the last `)`.
fn stat_fields(text: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(text.get(text.rfind(')')? + 1..)?.split_whitespace())
}

/// The PID namespace this process sees processes in (the inode of `/proc/self/ns/pid`).
pub fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|meta| meta.ino())
}

/// Waits for the end of the cairn that is process `pid` in the PID namespace `namespace`,
/// started at `at` ([`started`]); `true` once it has ended (`kill -9` included, or before the
/// wait began: gone, or its id taken by a later process), `false` at once when it cannot be
/// watched from here (another PID namespace), and then the command is left as it would be
/// without the watch. A pidfd is waited on where the kernel has them (Linux 5.3), else the
/// process is looked at every second.
#[allow(unsafe_code)]
pub fn wait_for_cairn(pid: u32, at: u64, namespace: u64) -> bool {
    use std::os::fd::FromRawFd as _;
    if pid_namespace() != Some(namespace) {
        return false;
    }
    let Ok(id) = libc::pid_t::try_from(pid) else { return true };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, id, 0) };
    let same = || started(pid) == Some(at);
    // Checked after the pidfd is open: from then on the id cannot pass to another process.
    if !same() {
        return true;
    }
    if let Ok(fd) = i32::try_from(fd)
        && fd >= 0
    {
        // SAFETY: the descriptor was just opened here and is owned by nothing else.
        let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&pidfd);
        let mut poll = libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
        loop {
            // SAFETY: one pollfd we own, waited on without a time limit.
            if unsafe { libc::poll(&mut poll, 1, -1) } >= 0 {
                return true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }
    while same() {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    true
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_through_every_generation_and_killed() {
        let mut child = std::process::Command::new("bash").args(["-c", "(sleep 60; true) & sleep 60"]).spawn().unwrap();
        let root = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while descendants(root).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The subshell, its sleep (a grandchild) and the other sleep.
        assert_eq!(descendants(root).len(), 3);
        kill_descendants(root);
        assert!(descendants(root).is_empty());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The check runs between fork and exec, where building an error with a message would
    /// allocate: the parent's end is a bare errno.
    #[test]
    fn a_program_whose_parent_ended_fails_with_a_raw_os_error() {
        let parent = stat(std::process::id()).unwrap().1;
        assert!(child_of(parent).is_ok());
        let err = child_of(u32::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err:?}");
    }

    #[test]
    fn stat_reads_past_a_command_name_with_spaces_and_parentheses() {
        let (state, parent) = stat(std::process::id()).unwrap();
        assert!(state.is_ascii_alphabetic());
        assert!(parent > 0);
    }
}

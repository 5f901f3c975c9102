//! The seccomp filter of every sandboxed command, installed and served: its program
//! (`filter.rs`) refuses what changes or looks behind the command's mounts, what sets a setuid or
//! setgid bit or gives a file to another owner, and more; and when rules reject programs, it
//! sends every `execve`/`execveat` of the command tree to its supervisor (user notification) for
//! a verdict before the kernel runs it.
//!
//! The filter is built before the fork ([`Filter::new`]) together with a socket pair. Between
//! fork and exec the child ([`Handoff::install`]) installs it, which gives it a listener
//! descriptor, and sends that descriptor over the socket (`SCM_RIGHTS`); it does this with raw
//! system calls only, on memory prepared before the fork, since the supervisor may have another
//! thread by then. The supervisor's notifier thread ([`Listener::receive`], [`serve`]) takes each
//! notification, asks a judge, and answers: continue the call as asked, or fail it with an
//! error. Every later process of the tree inherits the filter and cannot remove it; should the
//! supervisor die, the kernel fails their execs (`ENOSYS`), so the gate fails closed.
//!
//! A verdict of "continue" lets the kernel read the call's arguments again: a process that
//! rewrites the path from a second thread at that instant can run something else than what was
//! judged. This is the known limit of user notification; what must hold without exception is
//! kept by the mount namespace and Landlock instead.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::filter::arch;
pub use super::filter::{Filter, Ids};

/// Whether a notified call is an exec, and of which shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `execve(path, argv, envp)`.
    Execve,
    /// `execveat(dirfd, path, argv, envp, flags)`.
    Execveat,
    /// Anything else the filter sends (none today): answered "continue".
    Other,
}

/// One call waiting for a verdict.
#[derive(Clone, Copy, Debug)]
pub struct Notice {
    pub pid: u32,
    pub call: Call,
    pub args: [u64; 6],
}

/// What the supervisor answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Continue,
    /// Fail the call with this `errno`.
    Refuse(i32),
}

/// The child's half: the filter, and the socket end it sends its listener through when the
/// filter notifies.
pub struct Handoff {
    filter: Filter,
    socket: Option<OwnedFd>,
}

/// The supervisor's half: where the listener arrives.
pub struct Listener {
    socket: OwnedFd,
}

/// A connected pair for one command.
pub fn pair(filter: Filter) -> io::Result<(Handoff, Listener)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two descriptors into the array we own.
    #[allow(unsafe_code)]
    let result =
        unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and belong to nobody else.
    #[allow(unsafe_code)]
    let (child, parent) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((Handoff { filter, socket: Some(child) }, Listener { socket: parent }))
}

/// Room for one `SCM_RIGHTS` descriptor, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 32]);

impl Handoff {
    /// A filter that notifies nobody: installed as it is.
    pub fn plain(filter: Filter) -> Self {
        Self { filter, socket: None }
    }

    /// In the child, between fork and exec: sets `no_new_privs`, installs the filter and, for a
    /// notifying one, sends its listener to the supervisor. Raw system calls on memory the
    /// parent prepared: nothing here allocates.
    pub fn install(&self) -> io::Result<()> {
        let program = self.filter.program();
        // SAFETY: prctl and seccomp take plain values and a pointer to `program`, which points
        // to the filter's instructions; both outlive the calls. The kernel copies the program.
        #[allow(unsafe_code)]
        let listener = unsafe {
            if libc::prctl(
                libc::PR_SET_NO_NEW_PRIVS,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ) < 0
            {
                return Err(io::Error::last_os_error());
            }
            let flags = if self.socket.is_some() { libc::SECCOMP_FILTER_FLAG_NEW_LISTENER } else { 0 };
            libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &program as *const libc::sock_fprog)
        };
        let listener = libc::c_int::try_from(listener).unwrap_or(-1);
        if listener < 0 {
            return Err(io::Error::last_os_error());
        }
        let Some(socket) = &self.socket else { return Ok(()) };
        let sent = send_fd(socket.as_raw_fd(), listener);
        // SAFETY: closes the listener this process no longer needs; the supervisor has a copy.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(listener)
        };
        sent
    }
}

/// Sends `fd` over the socket `socket` with `SCM_RIGHTS`, using only the stack.
#[allow(unsafe_code)]
fn send_fd(socket: libc::c_int, fd: libc::c_int) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = Control([0; 32]);
    // SAFETY: msghdr is plain data; every pointer set below points into this stack frame, and
    // the CMSG helpers only compute addresses inside `control`, which has room for one header and
    // one descriptor (CMSG_SPACE of 4 bytes is at most 24).
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.0.as_mut_ptr().cast();
        message.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null() {
            // A raw OS error: this runs between fork and exec, and only the errno reaches the
            // supervisor's `spawn`.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), fd);
        if libc::sendmsg(socket, &message, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Listener {
    /// Waits for the child's listener. `None` when the child closed its end without sending one
    /// (it failed before the exec); the caller must have closed its copy of the child's end.
    pub fn receive(self) -> io::Result<Option<OwnedFd>> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
        let mut control = Control([0; 32]);
        // SAFETY: as in `send_fd`: every pointer points into this frame, and the CMSG helpers stay
        // inside `control`; a received descriptor is owned by us from here on.
        #[allow(unsafe_code)]
        unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = &mut iov;
            message.msg_iovlen = 1;
            message.msg_control = control.0.as_mut_ptr().cast();
            message.msg_controllen = control.0.len() as _;
            let got = libc::recvmsg(self.socket.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC);
            if got < 0 {
                return Err(io::Error::last_os_error());
            }
            let header = libc::CMSG_FIRSTHDR(&message);
            if got == 0 || header.is_null() || (*header).cmsg_type != libc::SCM_RIGHTS {
                return Ok(None);
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>());
            Ok(Some(OwnedFd::from_raw_fd(fd)))
        }
    }
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, which the libc crate does not name.
const SYNC_WAKE_UP: libc::c_ulong = 1;

/// Answers the notifications of `listener` with `judge`'s verdicts until no process is left
/// that could send one (Linux 6.6 on; before, a receive with nobody left waits for good, and the
/// thread ends with the supervisor).
pub fn serve(listener: &OwnedFd, mut judge: impl FnMut(&Notice) -> Verdict) {
    // The process that made an exec waits for the answer: with a synchronous wake-up (Linux
    // 6.6) the kernel switches straight to this thread and back on the same CPU, instead of
    // waking it wherever and waiting to be scheduled. Older kernels refuse the flag; it is a
    // speed-up only.
    // SAFETY: the ioctl takes the flag by value on the listener we own.
    #[allow(unsafe_code)]
    unsafe {
        libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP)
    };
    loop {
        // SAFETY: the kernel requires a zeroed struct; it is plain data.
        #[allow(unsafe_code)]
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: the ioctl fills `notif`, which we own, for the listener we own.
        #[allow(unsafe_code)]
        let got = unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notif) };
        if got < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // The caller died before we read it, or no process uses the filter any more:
                // then every receive fails at once, and only the hang-up tells the two apart.
                Some(libc::ENOENT) if !hung_up(listener) => continue,
                _ => return,
            }
        }
        let nr = i64::from(notif.data.nr);
        let call = match nr {
            _ if notif.data.arch != arch::NATIVE => Call::Other,
            n if n == libc::SYS_execve => Call::Execve,
            n if n == libc::SYS_execveat => Call::Execveat,
            _ => Call::Other,
        };
        let notice = Notice { pid: notif.pid, call, args: notif.data.args };
        let verdict = match call {
            Call::Other => Verdict::Continue,
            Call::Execve | Call::Execveat => judge(&notice),
        };
        respond(listener, notif.id, verdict);
    }
}

/// Whether every process that used the filter is gone (the listener polls as hung up).
fn hung_up(listener: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, for the listener we own; no waiting.
    #[allow(unsafe_code)]
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & libc::POLLHUP != 0
}

fn respond(listener: &OwnedFd, id: u64, verdict: Verdict) {
    let (error, flags) = match verdict {
        Verdict::Continue => (0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
        Verdict::Refuse(errno) => (-errno, 0),
    };
    let mut response = libc::seccomp_notif_resp { id, val: 0, error, flags };
    // SAFETY: the ioctl reads `response`, which we own. A caller that died meanwhile makes it
    // fail with ENOENT, which needs nothing done.
    #[allow(unsafe_code)]
    unsafe {
        libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &mut response)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::print_stderr)] // says why it skips
    fn serving_ends_once_no_process_uses_the_filter() {
        use std::os::unix::process::CommandExt as _;
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        if version < (6, 6) {
            // Before 6.6 a receive waits even with nobody left: the supervisor's exit ends it.
            eprintln!("skipped: Linux {release} ends serving only with the process");
            return;
        }
        let (handoff, listener) = pair(Filter::new(true, Ids { uid: 0, gid: 0 })).unwrap();
        // The child's exec waits for a verdict, and spawning waits for the exec: serve aside.
        let serving = std::thread::spawn(move || {
            let listener = listener.receive().unwrap().expect("the child sent its listener");
            let mut execs = 0;
            serve(&listener, |notice| {
                assert_eq!(notice.call, Call::Execve);
                execs += 1;
                Verdict::Continue
            });
            execs
        });
        let mut command = std::process::Command::new("/bin/true");
        // SAFETY: install makes raw system calls only, on memory prepared before the fork.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || handoff.install())
        };
        assert!(command.status().unwrap().success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !serving.is_finished() {
            assert!(std::time::Instant::now() < deadline, "serving went on after the last process was gone");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(serving.join().unwrap(), 1, "the one exec was judged");
    }
}

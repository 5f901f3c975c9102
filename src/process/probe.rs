//! What the running kernel lets the supervisor do beyond Landlock, asked once per process: a
//! namespace of its own ([`super::namespace::Kind`]) with the mount API it uses, and the seccomp
//! user notification of the exec check. Some kernels refuse unprivileged user namespaces
//! (a sysctl, an AppArmor policy, a container's seccomp profile); the answer decides how much of
//! the sandbox a command gets and whether accept-edits may let commands through unasked.
//!
//! The probe forks (cairn has many threads by then, so the child makes raw system calls only, on
//! memory prepared before the fork), tries each step in the child, and reads the answer from its
//! exit status. It costs well under a millisecond, once.

use std::ffi::CString;
use std::sync::OnceLock;

use super::namespace::Kind;

/// What the kernel allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The namespace kind that works here, if one does.
    pub namespace: Option<Kind>,
    /// Whether seccomp user notification works (Linux ≥ 5.5).
    pub exec_check: bool,
}

/// The answer for this process, found on first use.
pub fn probe() -> Probe {
    static FOUND: OnceLock<Probe> = OnceLock::new();
    *FOUND.get_or_init(|| Probe {
        namespace: Kind::candidates().iter().copied().find(|kind| child_succeeds(Step::Namespace(*kind))),
        exec_check: child_succeeds(Step::Notify),
    })
}

#[derive(Clone, Copy)]
enum Step {
    Namespace(Kind),
    Notify,
}

/// Runs `step` in a forked child; whether it exited 0.
#[allow(unsafe_code)]
fn child_succeeds(step: Step) -> bool {
    // Everything the child touches is made here, before the fork.
    let (uid, gid) = (current(libc::getuid), current(libc::getgid));
    let Ok(uid_map) = CString::new(format!("{uid} {uid} 1")) else { return false };
    let Ok(gid_map) = CString::new(format!("{gid} {gid} 1")) else { return false };
    let filter = super::seccomp::Filter::new(true, super::seccomp::Ids { uid, gid });
    let program = filter.program();
    // SAFETY: the child makes only async-signal-safe system calls on memory made before the
    // fork (the strings above, the filter), then `_exit`s; the parent only waits for it.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            let ok = match step {
                Step::Namespace(kind) => try_namespace(kind, &uid_map, &gid_map),
                Step::Notify => {
                    let zero = 0 as libc::c_ulong;
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, zero, zero, zero) == 0
                        && libc::syscall(
                            libc::SYS_seccomp,
                            libc::SECCOMP_SET_MODE_FILTER,
                            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                            &program as *const libc::sock_fprog,
                        ) >= 0
                }
            };
            libc::_exit(if ok { 0 } else { 1 });
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

fn current(id: unsafe extern "C" fn() -> u32) -> u32 {
    // SAFETY: getuid and getgid take nothing and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        id()
    }
}

/// In the forked child: the namespace, the user mapping, a private mount tree and a tmpfs made
/// with the new mount API, as the supervisor will.
#[allow(unsafe_code)]
unsafe fn try_namespace(kind: Kind, uid_map: &CString, gid_map: &CString) -> bool {
    let flags = match kind {
        Kind::Mount => libc::CLONE_NEWNS,
        Kind::User => libc::CLONE_NEWUSER | libc::CLONE_NEWNS,
    };
    // SAFETY: raw system calls on NUL-terminated strings made before the fork.
    unsafe {
        // cairn makes itself undumpable (`deny_inspection`), and an undumpable process's
        // `/proc/self` files belong to root: writing its own `setgroups` and maps would fail
        // with EACCES for any user but root, and the probe would answer that the kernel allows
        // no namespace. The supervisor, a fresh exec, is dumpable; so is this child for the
        // microseconds it lives, in a PID namespace no command can see into.
        let zero = 0 as libc::c_ulong;
        if kind == Kind::User && libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong, zero, zero, zero) != 0 {
            return false;
        }
        if libc::unshare(flags) != 0 {
            return false;
        }
        if kind == Kind::User
            && !(write_file(c"/proc/self/setgroups", c"deny")
                && write_file(c"/proc/self/uid_map", uid_map)
                && write_file(c"/proc/self/gid_map", gid_map))
        {
            return false;
        }
        let slave = libc::MS_REC | libc::MS_SLAVE;
        if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), slave, std::ptr::null()) != 0 {
            return false;
        }
        libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), libc::FSOPEN_CLOEXEC) >= 0
    }
}

#[allow(unsafe_code)]
unsafe fn write_file(path: &std::ffi::CStr, text: &std::ffi::CStr) -> bool {
    // SAFETY: open, write and close on NUL-terminated strings owned by the caller.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let bytes = text.to_bytes();
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        usize::try_from(written).is_ok_and(|n| n == bytes.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_answers_and_keeps_its_answer() {
        let first = probe();
        assert_eq!(probe(), first);
        if let Some(kind) = first.namespace {
            assert!(Kind::candidates().contains(&kind));
        }
    }
}

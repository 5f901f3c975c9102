//! The BPF program of every sandboxed command's seccomp filter ([`Filter`]): what it refuses by
//! the call's number and plain arguments alone, and what it sends to the supervisor.
//!
//! It refuses what changes or looks behind the mounts the command sees or the root its paths
//! start from ([`MOUNTS`]), a death signal other than `SIGKILL`, every call of a foreign
//! architecture (32-bit, x32), and what Landlock does not cover about a file's mode and owner:
//! setting the setuid or setgid bit (by `chmod` and its kin, or on a file as it is made), and
//! giving a file to another owner or group than the command's own ([`Ids`]). `seccomp.rs`
//! installs the program and serves what it sends.
//!
//! The program is a list of checks; each jumps to one of a few returns at its end, which
//! [`Filter::new`] places and counts the jumps to.

/// `struct seccomp_data` offsets: the number, the architecture, and the low half of argument
/// `n` at `ARGS + 8 n` (little-endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARGS: u32 = 16;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

#[cfg(target_arch = "x86_64")]
pub(super) mod arch {
    /// `AUDIT_ARCH_X86_64`.
    pub const NATIVE: u32 = 0xC000_003E;
    /// The x32 ABI marks its system call numbers with this bit; x32 programs are refused.
    pub const X32_BIT: Option<u32> = Some(0x4000_0000);
}

#[cfg(target_arch = "aarch64")]
pub(super) mod arch {
    /// `AUDIT_ARCH_AARCH64`.
    pub const NATIVE: u32 = 0xC000_00B7;
    pub const X32_BIT: Option<u32> = None;
}

/// What changes the mounts a command sees or the root its paths start from, or reaches files
/// around them: refused (`EPERM`) in every sandboxed command, so that a read-only bind or a
/// cover cannot be undone or looked behind, even by root (Landlock does not check
/// `mount_setattr`, `open_tree` or a file handle). With `chroot` refused too (root has dropped
/// the capability, but a user namespace the command makes would give it back), every process
/// of the tree keeps the supervisor's root, which the exec check resolves absolute paths from.
pub(super) const MOUNTS: [libc::c_long; 13] = [
    libc::SYS_mount,
    libc::SYS_chroot,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_setns,
    libc::SYS_open_by_handle_at,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
];

/// Refused as if the kernel lacked them (`ENOSYS`, which every caller must handle, since older
/// kernels do): `openat2`, whose flags and mode lie in a struct the filter cannot read, and
/// `io_uring_setup`, whose operations (an `openat` among them) pass no filter at all.
const UNCHECKABLE: [libc::c_long; 2] = [libc::SYS_openat2, libc::SYS_io_uring_setup];

/// The setuid and setgid bits.
const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// What makes `open` read its mode: `O_CREAT`, or `O_TMPFILE`'s own bit.
const CREATES: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
/// A `chown` argument that leaves the owner or group as it is.
const UNCHANGED: u32 = u32::MAX;

/// `fchmodat2` (Linux 6.6), the same number on both architectures; the libc crate names it on
/// x86-64 only.
const SYS_FCHMODAT2: libc::c_long = 452;

/// The calls that set a mode, and which argument holds it: refused when it has [`SET_ID`].
/// `mkdir` is not here: the kernel keeps neither bit from its mode.
#[cfg(target_arch = "x86_64")]
const MODES: [(libc::c_long, u32); 7] = [
    (libc::SYS_chmod, 1),
    (libc::SYS_fchmod, 1),
    (libc::SYS_fchmodat, 2),
    (SYS_FCHMODAT2, 2),
    (libc::SYS_creat, 1),
    (libc::SYS_mknod, 1),
    (libc::SYS_mknodat, 2),
];
#[cfg(target_arch = "aarch64")]
const MODES: [(libc::c_long, u32); 4] =
    [(libc::SYS_fchmod, 1), (libc::SYS_fchmodat, 2), (SYS_FCHMODAT2, 2), (libc::SYS_mknodat, 2)];

/// The calls that make a file with a mode only when their flags ask to create: the flags'
/// argument and the mode's.
#[cfg(target_arch = "x86_64")]
const OPENS: [(libc::c_long, u32, u32); 2] = [(libc::SYS_open, 1, 2), (libc::SYS_openat, 2, 3)];
#[cfg(target_arch = "aarch64")]
const OPENS: [(libc::c_long, u32, u32); 1] = [(libc::SYS_openat, 2, 3)];

/// The calls that change an owner: the owner's argument and the group's.
#[cfg(target_arch = "x86_64")]
const OWNERS: [(libc::c_long, u32, u32); 4] =
    [(libc::SYS_chown, 1, 2), (libc::SYS_fchown, 1, 2), (libc::SYS_lchown, 1, 2), (libc::SYS_fchownat, 2, 3)];
#[cfg(target_arch = "aarch64")]
const OWNERS: [(libc::c_long, u32, u32); 2] = [(libc::SYS_fchown, 1, 2), (libc::SYS_fchownat, 2, 3)];

/// The user and group the command runs as, as it sees them: the only owner and group it may
/// give a file (root in a mount namespace alone is 0, and may give a file to nobody else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Where a check goes: on to the instruction `n` further, or to one of the returns.
#[derive(Clone, Copy)]
enum To {
    Skip(u8),
    Allow,
    Notify,
    /// `ENOSYS`: foreign architectures and what the filter cannot check.
    Missing,
    /// `EPERM`.
    Deny,
}

/// The returns, in the order [`Filter::new`] places them after the checks.
const RETURNS: [To; 4] = [To::Allow, To::Notify, To::Missing, To::Deny];

/// One instruction before its jumps are counted.
struct Ins {
    code: u16,
    jt: To,
    jf: To,
    k: u32,
}

/// A BPF program for `seccomp(2)`.
pub struct Filter {
    code: Vec<libc::sock_filter>,
}

fn load(offset: u32) -> Ins {
    Ins { code: LD_W_ABS, jt: To::Skip(0), jf: To::Skip(0), k: offset }
}

fn arg(n: u32) -> u32 {
    ARGS + 8 * n
}

fn jump(code: u16, k: u32, jt: To, jf: To) -> Ins {
    Ins { code, jt, jf, k }
}

/// `nr`: on to the next instruction; anything else skips the `len` after it.
fn is(nr: libc::c_long, len: u8) -> Ins {
    jump(JEQ_K, nr as u32, To::Skip(0), To::Skip(len))
}

impl Filter {
    /// Refuses the calls of [`MOUNTS`] (`EPERM`), a `prctl(PR_SET_PDEATHSIG)` of any signal but
    /// `SIGKILL` (the death signal the supervisor set is what ends a program whose supervisor
    /// dies; the program may not clear or soften it), a mode with the setuid or setgid bit
    /// ([`MODES`], [`OPENS`]), an owner or group other than `own`'s ([`OWNERS`]), and the calls
    /// of [`UNCHECKABLE`] (`ENOSYS`); with `notify_exec`, sends `execve` and `execveat` to the
    /// supervisor. Allows everything else of the native architecture; refuses every call of
    /// another one (32-bit programs, x32), whose numbers differ and could slip past (`ENOSYS`).
    pub fn new(notify_exec: bool, own: Ids) -> Self {
        let mut checks = vec![jump(JEQ_K, arch::NATIVE, To::Skip(0), To::Missing), load(NR)];
        if let Some(bit) = arch::X32_BIT {
            checks.push(jump(JGE_K, bit, To::Missing, To::Skip(0)));
        }
        if notify_exec {
            for nr in [libc::SYS_execve, libc::SYS_execveat] {
                checks.push(jump(JEQ_K, nr as u32, To::Notify, To::Skip(0)));
            }
        }
        for nr in MOUNTS {
            checks.push(jump(JEQ_K, nr as u32, To::Deny, To::Skip(0)));
        }
        for nr in UNCHECKABLE {
            checks.push(jump(JEQ_K, nr as u32, To::Missing, To::Skip(0)));
        }
        // Each check below ends in a return once the number matched: the accumulator then
        // holds an argument, not the number.
        checks.extend([
            // Not prctl: on. Not its death signal, or SIGKILL: allow; else refuse.
            is(libc::SYS_prctl, 4),
            load(arg(0)),
            jump(JEQ_K, libc::PR_SET_PDEATHSIG as u32, To::Skip(0), To::Allow),
            load(arg(1)),
            jump(JEQ_K, libc::SIGKILL as u32, To::Allow, To::Deny),
        ]);
        for (nr, mode) in MODES {
            checks.extend([is(nr, 2), load(arg(mode)), jump(JSET_K, SET_ID, To::Deny, To::Allow)]);
        }
        for (nr, flags, mode) in OPENS {
            checks.extend([
                is(nr, 4),
                load(arg(flags)),
                jump(JSET_K, CREATES, To::Skip(0), To::Allow),
                load(arg(mode)),
                jump(JSET_K, SET_ID, To::Deny, To::Allow),
            ]);
        }
        for (nr, uid, gid) in OWNERS {
            checks.extend([
                is(nr, 6),
                load(arg(uid)),
                jump(JEQ_K, UNCHANGED, To::Skip(1), To::Skip(0)),
                jump(JEQ_K, own.uid, To::Skip(0), To::Deny),
                load(arg(gid)),
                jump(JEQ_K, UNCHANGED, To::Allow, To::Skip(0)),
                jump(JEQ_K, own.gid, To::Allow, To::Deny),
            ]);
        }
        // Another number, another architecture: the last check falls through to allow.
        checks.insert(0, load(ARCH));
        let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
        let end = checks.len();
        let target = |at: usize, to: To| -> u8 {
            let ret = match to {
                To::Skip(n) => return n,
                To::Allow => 0,
                To::Notify => 1,
                To::Missing => 2,
                To::Deny => 3,
            };
            to_u8(end - at - 1 + ret)
        };
        let mut code: Vec<libc::sock_filter> = checks
            .iter()
            .enumerate()
            .map(|(at, ins)| libc::sock_filter {
                code: ins.code,
                jt: target(at, ins.jt),
                jf: target(at, ins.jf),
                k: ins.k,
            })
            .collect();
        for ret in RETURNS {
            let k = match ret {
                To::Allow | To::Skip(_) => libc::SECCOMP_RET_ALLOW,
                To::Notify => libc::SECCOMP_RET_USER_NOTIF,
                To::Missing => errno(libc::ENOSYS),
                To::Deny => errno(libc::EPERM),
            };
            code.push(libc::sock_filter { code: RET_K, jt: 0, jf: 0, k });
        }
        Self { code }
    }

    /// The program as `seccomp(2)` takes it; valid while the filter lives.
    pub fn program(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            len: u16::try_from(self.code.len()).unwrap_or(u16::MAX),
            filter: self.code.as_ptr().cast_mut(),
        }
    }
}

/// A jump longer than BPF allows saturates; the jumps test catches one.
fn to_u8(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Ids = Ids { uid: 1000, gid: 1000 };

    /// Runs the filter by hand for one call: what it returns.
    fn run(filter: &Filter, arch: u32, nr: libc::c_long) -> u32 {
        run_with(filter, arch, nr, [0; 4])
    }

    fn run_with(filter: &Filter, arch: u32, nr: libc::c_long, args: [u32; 4]) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let ins = filter.code[pc];
            match ins.code {
                LD_W_ABS => {
                    acc = match ins.k {
                        ARCH => arch,
                        NR => nr as u32,
                        k => args[usize::try_from((k - ARGS) / 8).unwrap()],
                    }
                }
                JEQ_K => pc += usize::from(if acc == ins.k { ins.jt } else { ins.jf }),
                JGE_K => pc += usize::from(if acc >= ins.k { ins.jt } else { ins.jf }),
                JSET_K => pc += usize::from(if acc & ins.k != 0 { ins.jt } else { ins.jf }),
                RET_K => return ins.k,
                other => panic!("unexpected op {other}"),
            }
            pc += 1;
        }
    }

    fn denied(ret: u32) -> bool {
        (ret & libc::SECCOMP_RET_ACTION_FULL, (ret & libc::SECCOMP_RET_DATA) as i32)
            == (libc::SECCOMP_RET_ERRNO, libc::EPERM)
    }

    fn missing(ret: u32) -> bool {
        (ret & libc::SECCOMP_RET_ACTION_FULL, (ret & libc::SECCOMP_RET_DATA) as i32)
            == (libc::SECCOMP_RET_ERRNO, libc::ENOSYS)
    }

    #[test]
    fn jumps_land_on_the_returns_they_mean() {
        for notify in [true, false] {
            let filter = Filter::new(notify, ME);
            assert!(filter.code.len() < 200, "every jump fits");
            let exec = if notify { libc::SECCOMP_RET_USER_NOTIF } else { libc::SECCOMP_RET_ALLOW };
            assert_eq!(run(&filter, arch::NATIVE, libc::SYS_execve), exec);
            assert_eq!(run(&filter, arch::NATIVE, libc::SYS_execveat), exec);
            assert_eq!(run(&filter, arch::NATIVE, libc::SYS_read), libc::SECCOMP_RET_ALLOW);
            // What the exec check's resolution from the supervisor's root relies on.
            for nr in [libc::SYS_chroot, libc::SYS_pivot_root, libc::SYS_setns, libc::SYS_mount] {
                assert!(MOUNTS.contains(&nr), "{nr}");
            }
            for nr in MOUNTS {
                assert!(denied(run(&filter, arch::NATIVE, nr)), "{nr}");
            }
            for nr in UNCHECKABLE {
                assert!(missing(run(&filter, arch::NATIVE, nr)), "{nr}");
            }
            let prctl = |option: i32, value: i32| {
                run_with(&filter, arch::NATIVE, libc::SYS_prctl, [option as u32, value as u32, 0, 0])
            };
            for softer in [0, libc::SIGTERM] {
                assert!(denied(prctl(libc::PR_SET_PDEATHSIG, softer)), "{softer}");
            }
            assert_eq!(prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL), libc::SECCOMP_RET_ALLOW);
            assert_eq!(prctl(libc::PR_SET_NAME, 0), libc::SECCOMP_RET_ALLOW);
            assert!(missing(run(&filter, 0x4000_0003, 11)));
            if let Some(bit) = arch::X32_BIT {
                assert!(missing(run(&filter, arch::NATIVE, libc::c_long::from(bit | 59))));
            }
        }
    }

    #[test]
    fn a_mode_with_the_setuid_or_setgid_bit_is_refused_and_any_other_allowed() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(SYS_FCHMODAT2, libc::SYS_fchmodat2);
        let filter = Filter::new(true, ME);
        for (nr, at) in MODES {
            let with = |mode: u32| {
                let mut args = [0; 4];
                args[usize::try_from(at).unwrap()] = mode;
                run_with(&filter, arch::NATIVE, nr, args)
            };
            for mode in [0o4755, 0o2755, 0o6777, 0o104_755] {
                assert!(denied(with(mode)), "{nr} {mode:o}");
            }
            for mode in [0o755, 0o644, 0o1777, 0o100_644] {
                assert_eq!(with(mode), libc::SECCOMP_RET_ALLOW, "{nr} {mode:o}");
            }
        }
        for (nr, flags, mode) in OPENS {
            let open = |flag: i32, bits: u32| {
                let mut args = [0; 4];
                args[usize::try_from(flags).unwrap()] = (libc::O_WRONLY | flag) as u32;
                args[usize::try_from(mode).unwrap()] = bits;
                run_with(&filter, arch::NATIVE, nr, args)
            };
            assert!(denied(open(libc::O_CREAT, 0o4755)), "{nr}");
            assert!(denied(open(libc::O_TMPFILE, 0o2755)), "{nr}");
            assert_eq!(open(libc::O_CREAT, 0o755), libc::SECCOMP_RET_ALLOW, "{nr}");
            // Without O_CREAT the mode is not read, whatever the caller left there.
            assert_eq!(open(0, 0o4755), libc::SECCOMP_RET_ALLOW, "{nr}");
        }
    }

    #[test]
    fn a_file_may_be_given_to_its_own_owner_and_group_only() {
        let filter = Filter::new(false, ME);
        for (nr, uid, gid) in OWNERS {
            let chown = |owner: u32, group: u32| {
                let mut args = [0; 4];
                args[usize::try_from(uid).unwrap()] = owner;
                args[usize::try_from(gid).unwrap()] = group;
                run_with(&filter, arch::NATIVE, nr, args)
            };
            for (owner, group) in [(1000, 1000), (UNCHANGED, 1000), (1000, UNCHANGED), (UNCHANGED, UNCHANGED)] {
                assert_eq!(chown(owner, group), libc::SECCOMP_RET_ALLOW, "{nr} {owner} {group}");
            }
            for (owner, group) in [(4242, UNCHANGED), (0, 1000), (UNCHANGED, 4242), (1000, 0), (4242, 4242)] {
                assert!(denied(chown(owner, group)), "{nr} {owner} {group}");
            }
        }
    }
}

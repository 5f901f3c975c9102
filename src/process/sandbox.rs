//! The Landlock sandbox of local commands: writes confined to a list of places, TCP optionally
//! refused, signals and abstract Unix sockets of processes outside the sandbox refused (X11's,
//! a session bus listening on one), reads left alone. The supervisor (a
//! fresh single-threaded process) builds the ruleset and the command enters it between fork and
//! exec, so the command and everything it starts are inside and the supervisor is not: the
//! command can neither kill its supervisor (and so escape its cleanup) nor cairn or the editor.
//! A command run as root also loses every capability plain file work does not need
//! ([`drop_root_capabilities`]), so it cannot undo or look behind the namespace.
//!
//! Best effort by kernel ABI: write rights up to ABI 3 (file truncation), TCP bind and connect at
//! ABI 4, the signal and abstract socket scopes at ABI 6. UDP and other protocols are not covered. [`support`] asks the
//! kernel what it enforces.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};

use super::SandboxMode;

/// Writable in every sandboxed mode: what commands need to work.
const DEVICES: &[&str] =
    &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"];

/// The newest ABI whose write rights were tested with cairn (ABI 3 added truncation).
const FS_ABI: ABI = ABI::V3;
/// TCP bind and connect came with ABI 4.
const NET_ABI: ABI = ABI::V4;

/// What the running kernel's Landlock can enforce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Support {
    /// Confining writes (Landlock at all).
    pub filesystem: bool,
    /// Refusing TCP connect and bind (ABI ≥ 4).
    pub network: bool,
    /// Refusing signals to processes outside the sandbox, and connecting to their abstract Unix
    /// sockets (ABI ≥ 6).
    pub signals: bool,
}

/// Asks the kernel (by creating and discarding rulesets that must be enforced fully).
pub fn support() -> Support {
    let fs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_write(ABI::V1))
        .and_then(Ruleset::create);
    let net = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::from_all(NET_ABI))
        .and_then(Ruleset::create);
    let signals = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::Signal)
        .and_then(Ruleset::create);
    Support { filesystem: fs.is_ok(), network: net.is_ok(), signals: signals.is_ok() }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot set up the sandbox: {0}")]
pub struct SandboxError(#[from] landlock::RulesetError);

/// The ruleset for a command: under `mode`, writes only beneath `writable` and [`DEVICES`];
/// without `network`, no TCP connect or bind; signals and abstract sockets only within. `None` when neither the
/// filesystem nor the network is to be confined (`off` with the network allowed). What the
/// kernel cannot enforce is left out (cairn warns about it once).
pub fn prepare(mode: SandboxMode, network: bool, writable: &[PathBuf]) -> Result<Option<Prepared>, SandboxError> {
    let confine_fs = match mode {
        SandboxMode::WorkspaceWrite | SandboxMode::ReadOnly => true,
        SandboxMode::Off => false,
    };
    if !confine_fs && network {
        return Ok(None);
    }
    let mut ruleset = Ruleset::default().scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    if confine_fs {
        ruleset = ruleset.handle_access(AccessFs::from_write(FS_ABI))?;
    }
    if !network {
        ruleset = ruleset.handle_access(AccessNet::from_all(NET_ABI))?;
    }
    let mut created = ruleset.create()?;
    if confine_fs {
        created = created.add_rules(path_beneath_rules(writable_places(writable), AccessFs::from_write(FS_ABI)))?;
    }
    Ok(Some(created.into()))
}

/// Where a command confined by the ruleset may write: beneath `writable` and [`DEVICES`].
pub fn writable_places(writable: &[PathBuf]) -> impl Iterator<Item = PathBuf> + '_ {
    DEVICES.iter().map(PathBuf::from).chain(writable.iter().cloned())
}

/// A ruleset ready for [`enter`]: its descriptor, or `None` where the kernel has no Landlock
/// (then only `no_new_privs` is set).
pub struct Prepared(Option<std::os::fd::OwnedFd>);

impl Prepared {
    /// Whether the kernel enforces the ruleset.
    pub fn enforced(&self) -> bool {
        self.0.is_some()
    }
}

impl From<RulesetCreated> for Prepared {
    fn from(ruleset: RulesetCreated) -> Self {
        Prepared(ruleset.into())
    }
}

/// Puts the calling process (and its future children) into the ruleset, with `no_new_privs`.
/// Made between fork and exec, so it makes raw system calls only and allocates nothing.
#[allow(unsafe_code)]
pub fn enter(ruleset: &Prepared) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: prctl and landlock_restrict_self take plain integers (a descriptor we own) and touch
    // no memory of ours.
    unsafe {
        let zero = 0 as libc::c_ulong;
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, zero, zero, zero) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = &ruleset.0
            && libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0 as libc::c_uint) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The capabilities root keeps in a sandboxed command: what plain file work as root needs
/// (others' files: a checkout bind-mounted from a user who owns it; ownership; setuid and setgid
/// for tools that run as another user, `su`, `runuser`, a database's `initdb`; signals, low
/// ports, raw sockets for `ping`, priorities and limits, audit messages). Every other one —
/// mounting, file handles, immutable flags, tracing, modules, raw devices, `chroot`, keeping a
/// setgid bit on a file of another group (`CAP_FSETID`), … — is dropped, so a command run as root
/// cannot undo or look behind the namespace. What root may still do to a file's mode and owner
/// (give it to another user, set a setuid bit) the seccomp filter refuses (`filter.rs`).
const ROOT_KEEPS: [u32; 11] = [0, 1, 3, 5, 6, 7, 10, 13, 23, 24, 29];
/// The highest capability number any kernel knows today, and a margin.
const LAST_CAPABILITY: u32 = 63;

/// `struct __user_cap_header_struct` and `__user_cap_data_struct` (version 3: two of them).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// For a command run as root, between fork and exec: drops every capability but
/// [`ROOT_KEEPS`] from the bounding, inheritable and ambient sets (the program starts with what
/// is left). Raw system calls on the stack only.
#[allow(unsafe_code)]
pub fn drop_root_capabilities() -> std::io::Result<()> {
    let keep = |cap: u32| ROOT_KEEPS.contains(&cap);
    let zero = 0 as libc::c_ulong;
    // SAFETY: prctl and capget/capset take plain integers and pointers to the structs on this
    // stack frame, which outlive the calls.
    unsafe {
        // CAP_SETPCAP (8), which dropping needs, goes last.
        for cap in (0..=LAST_CAPABILITY).filter(|cap| !keep(*cap) && *cap != 8).chain([8]) {
            // A capability this kernel does not know (EINVAL) cannot be held either.
            libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), zero, zero, zero);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, zero, zero, zero);
        let mut header = CapHeader { version: 0x2008_0522, pid: 0 };
        let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capget, &mut header as *mut CapHeader, data.as_mut_ptr()) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut low, mut high) = (0u32, 0u32);
        for cap in ROOT_KEEPS {
            if cap < 32 { low |= 1 << cap } else { high |= 1 << (cap - 32) }
        }
        for (word, mask) in data.iter_mut().zip([low, high]) {
            word.effective &= mask;
            word.permitted &= mask;
            word.inheritable &= mask;
        }
        if libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

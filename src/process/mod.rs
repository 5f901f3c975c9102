//! Local child processes and the trust boundary around them: what environment they get, whether
//! they die with cairn, and which OS sandbox they run in.
//!
//! [`ProcessPolicy`] is built by `config` (the only module that reads the environment) and set up
//! by `main`, which picks the [`Launcher`]. [`ProcessPolicy::spawn`] starts a program in its own
//! process group with [`ChildEnv`] applied (no provider keys, no relative `PATH` entries). With the
//! supervisor launcher, cairn starts itself as a small supervisor (`supervisor.rs`) that builds
//! the Landlock sandbox (`sandbox.rs`) in its fresh single-threaded process, runs the program in
//! it, and kills the program's whole process tree (`tree.rs`) when the program ends, when cairn
//! closes the pipe it watches (timeout, cancel) or when cairn dies. [`Local`] is the running program; dropping
//! it before the program ended kills everything it started.
//!
//! The policy holds the sandbox mode, the network, the namespace switch, the writable, own and
//! hidden places, the [`ChildEnv`] and the [`Launcher`]: direct (nothing sandboxed, nothing dying
//! with cairn) for unit tests and benches, the supervisor when `main` runs. Each start gets a
//! [`Confinement`]: the session's roots and the programs its rules reject (for a job or a
//! server, also its session's [`Rulebook`], followed as the rules change).
//! [`ProcessPolicy::spawn_server`] starts an MCP server the same way with its stdin piped. Each
//! start is counted as running ([`running`]) until the program and all it started are gone, and
//! waits first for the editor's file calls in flight.
//! [`ProcessPolicy::guards_missing`] says when the kernel cannot keep guarded places read-only
//! and secrets hidden (no Landlock, or no namespace): accept-edits then judges commands as ask
//! mode does. What the kernel cannot enforce is said once per process on stderr.
//!
//! `unsafe` here is system calls std has no safe form of, and the descriptors and plain-data
//! structs they deal in, every block with its own SAFETY comment. By what makes them sound (a
//! tidy test keeps this list whole):
//! - Between fork and exec. cairn and the supervisor have other threads when they fork, so a
//!   child makes only async-signal-safe system calls, on memory made before the fork, and
//!   allocates nothing (another thread may have held the allocator's lock), its errors included:
//!   they are raw OS errors, the only kind made without allocating and the only kind `spawn`
//!   passes back. The `pre_exec` hooks are `tree.rs` `die_with_parent` (with `child_of`, for an
//!   MCP server started directly), `pass_on` (the watched pipe kept open across exec) and
//!   `supervisor.rs` `supervise` (its `enter`: `tree.rs` `close_inherited`, `detach`,
//!   `die_with_this_parent`, `Endings::unblock`; `namespace.rs` `fresh_proc`; `sandbox.rs`
//!   `drop_root_capabilities` and `sandbox::enter`; `seccomp.rs` `Handoff::install` and
//!   `send_fd`). `probe.rs`
//!   `child_succeeds` forks by hand: its child runs `try_namespace` and `write_file`, then
//!   `_exit`s.
//! - Descriptors owned (`from_raw_fd`) right after the call that made them, which nothing else
//!   owns: `tree.rs` `watch_pipe`, `pass_on`, `adopt_fd` (an inherited one, checked open
//!   first) and `wait_for_cairn` (a pidfd, then polled); `seccomp.rs` `pair` and `Listener::receive`; `namespace.rs` `owned` and `Blank::new`;
//!   `watch.rs` `instance`; `gate/remote.rs` `open` and `open_in`; `gate/follow.rs` `changed`
//!   (after its `openat` on a directory descriptor it owns, with a name it owns).
//! - System calls on integers, or on memory of the calling frame (a buffer whose length is
//!   passed, a NUL-terminated string, a zeroed plain-data struct the kernel fills): `tree.rs`
//!   `kill_group`, `kill_pid`, `become_subreaper`, `deny_inspection`, `reset_signal`, `raise`,
//!   `Endings::block` and `Endings::wait`; `namespace.rs` `namespace::enter`, `enter_pids`,
//!   `unshare`, `current_uid`, `current_gid`, `open_tree`, `all_read_only`, `move_mount`,
//!   `fsopen`, `fsconfig`, `fsmount`; `seccomp.rs` `serve`, `hung_up` and `respond`; `watch.rs`
//!   `add_watch` and `run`; `gate/remote.rs` `read` and `read_many` (`process_vm_readv`: the
//!   other process's addresses are only data to the kernel, which checks them), `read_link` and
//!   `is_procfs`;
//!   `gate.rs` `effective_user`; `supervisor.rs` `running_as_root`; `probe.rs` `current`;
//!   `places/sockets.rs` `listened` (a connect without waiting, its address on the frame).
//! - A test's own shared mapping of a file it made, written through a slice of exactly its
//!   length and unmapped after the last use: `gate/tests.rs`
//!   `a_file_rewritten_through_a_mapping_made_before_it_was_judged_is_judged_anew`.

mod filter;
mod gate;
mod lookup;
mod namespace;
mod passed;
mod peers;
mod places;
mod probe;
mod rulebook;
pub mod running;
mod sandbox;
mod seccomp;
pub mod supervisor;
mod terminal;
mod tree;
mod watch;

use std::ffi::{OsStr, OsString};
use std::os::fd::{IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Once;
use std::time::Duration;

use serde::Deserialize;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

pub use namespace::Kind as NamespaceKind;
pub use rulebook::Rulebook;
pub use sandbox::{Support, support as landlock_support};
pub use supervisor::Confinement;
use supervisor::Watched;
pub use terminal::InTerminal;
pub use tree::{deny_inspection, die_with_parent, kill_group};

/// What an unset or emptied `PATH` becomes: bash's own default without its trailing `.`.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin";

/// How long a supervisor gets to kill its process tree after cairn closed its pipe, before cairn
/// kills the process group itself.
const SUPERVISOR_GRACE: Duration = Duration::from_secs(2);

/// Where a local command may write (`[sandbox] mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// The workspace roots, the temp dirs, `[sandbox] writable` and the terminal devices.
    WorkspaceWrite,
    /// Only the terminal devices (`/dev/null`, `/dev/tty`, …).
    ReadOnly,
    /// Anywhere the user may.
    Off,
}

impl SandboxMode {
    pub fn id(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }

    pub fn parse(id: &str) -> Option<Self> {
        [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly, SandboxMode::Off].into_iter().find(|mode| mode.id() == id)
    }
}

/// The user cairn runs as.
pub fn current_uid() -> u32 {
    namespace::current_uid()
}

/// The namespace the kernel lets the supervisor make, if any (asked once per process).
pub fn namespace_support() -> Option<NamespaceKind> {
    probe::probe().namespace
}

/// How a local program is started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// Directly: no sandbox, and it does not die with cairn. For the library used where the
    /// executable is not cairn (unit tests, benches).
    Direct,
    /// Through this cairn executable (normally `/proc/self/exe`) as a supervisor.
    Supervisor(PathBuf),
}

/// What a child process inherits of cairn's environment: everything but these.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// Variables removed: the provider keys and any variable holding a key's value.
    pub remove: Vec<OsString>,
    /// `PATH` with its empty and relative entries dropped; `None` leaves `PATH` as it is.
    pub path: Option<OsString>,
    /// Variables set (git's protective settings).
    pub set: Vec<(OsString, OsString)>,
}

impl ChildEnv {
    /// Applies the removals and the `PATH` to a command (for any child: a shell, an MCP server).
    pub fn apply(&self, command: &mut Command) {
        for name in &self.remove {
            command.env_remove(name);
        }
        if let Some(path) = &self.path {
            command.env("PATH", path);
        }
        for (name, value) in &self.set {
            command.env(name, value);
        }
    }
}

/// Everything cairn decides about the local processes it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessPolicy {
    pub sandbox: SandboxMode,
    /// Whether sandboxed commands may open TCP connections and listen (`[sandbox] network`).
    pub network: bool,
    /// Whether commands may run in a namespace of their own (`[sandbox] namespace`), where the
    /// kernel allows one.
    pub namespace: bool,
    /// Writable under `workspace-write` besides the workspace roots: the temp dirs and
    /// `[sandbox] writable`.
    pub writable: Vec<PathBuf>,
    /// cairn's own configuration and data directories: made if missing, then hidden from every
    /// sandboxed command, whatever the workspace.
    pub own: Vec<PathBuf>,
    /// Hidden from sandboxed commands: the user's keys and credentials, `[sandbox] hidden`
    /// (absolute paths).
    pub hidden: Vec<PathBuf>,
    /// Workspace-relative globs hidden besides the secret guarded names (`[sandbox] hidden`).
    pub hidden_names: Vec<String>,
    /// Workspace-relative globs left visible even when secret (`[sandbox] visible`).
    pub visible_names: Vec<String>,
    /// Absolute paths left visible even when hidden by default (`[sandbox] visible`).
    pub visible: Vec<PathBuf>,
    /// Directories among `hidden` where the user's multiplexers and editors put their sockets
    /// (`/tmp/tmux-UID`, …): made private (mode 0700) before each command when missing, so a
    /// server the user starts while a command runs puts its socket under the command's cover.
    pub service_dirs: Vec<PathBuf>,
    /// When cairn started: the sockets older than this in the temp directories and `/run` are
    /// the user's services, hidden (`places::sockets`); `None` hides none.
    pub sockets_before: Option<std::time::SystemTime>,
    pub env: ChildEnv,
    pub launcher: Launcher,
}

impl Default for ProcessPolicy {
    fn default() -> Self {
        Self {
            sandbox: SandboxMode::WorkspaceWrite,
            network: true,
            namespace: true,
            writable: vec![PathBuf::from("/tmp")],
            own: Vec::new(),
            hidden: Vec::new(),
            hidden_names: Vec::new(),
            visible_names: Vec::new(),
            visible: Vec::new(),
            service_dirs: Vec::new(),
            sockets_before: None,
            env: ChildEnv::default(),
            launcher: Launcher::Direct,
        }
    }
}

impl ProcessPolicy {
    /// Starts `program` with `args` in `cwd`, in its own process group, stdin `/dev/null`,
    /// stdout and stderr piped. Under the supervisor, writes are confined to the confinement's
    /// roots (and the policy's other writable places) as `sandbox` says, guarded places inside
    /// the roots are read-only, secrets hidden, and the programs rules reject refused.
    pub async fn spawn(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        cwd: &Path,
        confinement: Confinement<'_>,
    ) -> std::io::Result<Local> {
        let running = running::admit(self.reach(confinement.roots)).await;
        self.start(program, args, &[], cwd, confinement, Piped::No, running)
    }

    /// Starts a program that speaks over its stdin and stdout (an MCP server), with `vars` set
    /// besides the children's environment: as [`Self::spawn`], but stdin piped to the program.
    /// The supervisor then watches a pipe of its own for cairn's end, and the program dies with
    /// cairn (`kill -9` included) along with everything it started.
    pub async fn spawn_server(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        vars: &[(String, String)],
        cwd: &Path,
        confinement: Confinement<'_>,
    ) -> std::io::Result<Local> {
        let running = running::admit(self.reach(confinement.roots)).await;
        self.start(program, args, vars, cwd, confinement, Piped::Server, running)
    }

    /// Starts a program that reads its stdin and ends by itself (a background job, a hook, a
    /// checker), as [`Self::spawn_server`]; its supervisor sweeps what it made once it ends,
    /// as a command's does.
    pub async fn spawn_job(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        vars: &[(String, String)],
        cwd: &Path,
        confinement: Confinement<'_>,
    ) -> std::io::Result<Local> {
        let running = running::admit(self.reach(confinement.roots)).await;
        self.start(program, args, vars, cwd, confinement, Piped::Job, running)
    }

    /// Starts the program, counted as running (`running`, see [`running`]) until it and all it
    /// started are gone.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        vars: &[(String, String)],
        cwd: &Path,
        confinement: Confinement<'_>,
        piped: Piped,
        running: running::Running,
    ) -> std::io::Result<Local> {
        let serve = match piped {
            Piped::No => false,
            Piped::Server | Piped::Job => true,
        };
        let mut watch_end = None;
        let mut inotify = None;
        // Outside the sandbox, a program named bare is found only where no command can write.
        let found;
        let program = match (&self.launcher, self.sandbox) {
            (Launcher::Direct, _) | (_, SandboxMode::Off) => {
                let reach: Vec<&Path> = confinement.roots.iter().chain(&self.writable).map(PathBuf::as_path).collect();
                found = lookup::unconfined(program, self.env.path.as_deref(), &reach)?;
                found.as_os_str()
            }
            (Launcher::Supervisor(_), SandboxMode::WorkspaceWrite | SandboxMode::ReadOnly) => program,
        };
        let mut command = match &self.launcher {
            Launcher::Direct => {
                let mut command = Command::new(program);
                command.args(args).kill_on_drop(true);
                command.stdin(if serve { Stdio::piped() } else { Stdio::null() });
                if serve {
                    tree::die_with_parent(&mut command);
                }
                command
            }
            Launcher::Supervisor(exe) => {
                let mut command = Command::new(exe);
                let watched = if serve {
                    let (read, write) = tree::watch_pipe()?;
                    tree::pass_on(&mut command, read);
                    watch_end = Some(write);
                    Watched::Fd(read)
                } else {
                    Watched::Stdin
                };
                // The supervisor's inotify instance, of which cairn keeps a copy (see
                // `watch::instance`); without one (the user's limit of instances reached) the
                // supervisor makes its own, or watches nothing.
                let passed =
                    watch::instance().and_then(|kept| Ok((kept.try_clone()?, kept))).ok().map(|(passed, kept)| {
                        inotify = Some(kept);
                        let passed = passed.into_raw_fd();
                        tree::pass_on(&mut command, passed);
                        passed
                    });
                let lasting = piped == Piped::Server;
                command
                    .args(self.supervised(confinement, (watched, passed), lasting, program, args))
                    .stdin(Stdio::piped());
                command
            }
        };
        self.env.apply(&mut command);
        for (name, value) in vars {
            match &self.launcher {
                Launcher::Direct => command.env(name, value),
                // Never the supervisor's own: it runs unconfined first (`passed.rs`).
                Launcher::Supervisor(_) => command.env(passed::wrapped(name), value),
            };
        }
        command.current_dir(cwd).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = command.spawn()?;
        // Once started, the child has its copy of the watched end; ours goes.
        drop(command);
        let watch = match (watch_end, &self.launcher) {
            (Some(write), _) => Some(Watch::Pipe(write)),
            (None, Launcher::Supervisor(_)) => child.stdin.take().map(Watch::Stdin),
            (None, Launcher::Direct) => None,
        };
        Ok(Local { group: child.id(), child: Some(child), watch, exited: false, inotify, running: Some(running) })
    }

    /// The supervisor's arguments for `program args` as this policy confines it.
    fn supervised(
        &self,
        confinement: Confinement<'_>,
        watched: (Watched, Option<i32>),
        lasting: bool,
        program: &OsStr,
        args: &[&OsStr],
    ) -> Vec<OsString> {
        self.warn_once();
        // Without user notification there is no exec check; the parser still refuses.
        let (rejected, rules) =
            if probe::probe().exec_check { (confinement.rejected, confinement.rules) } else { (&[][..], None) };
        let confinement = Confinement { rejected, rules, ..confinement };
        let needs_namespace = self.sandbox != SandboxMode::Off || !rejected.is_empty();
        let namespace = if needs_namespace { self.namespace_kind() } else { None };
        supervisor::arguments(self, confinement, namespace, watched, lasting, program, args)
    }

    /// Whether a program's output reads like a write the sandbox refused.
    pub fn reads_as_refused(output: &str) -> bool {
        let lower = output.to_ascii_lowercase();
        ["permission denied", "read-only file system", "operation not permitted", "eacces", "eperm", "erofs"]
            .iter()
            .any(|sign| lower.contains(sign))
    }

    /// What the model is told when a sandboxed command fails on a refused write, so it can tell
    /// the user instead of retrying blindly; `None` when commands run unsandboxed.
    pub fn refusal_hint(&self) -> Option<String> {
        if self.writes_unconfined() {
            return None;
        }
        Some(format!(
            "[cairn's sandbox ({}) lets local commands write only inside the workspace, the temp dirs and \
             `[sandbox] writable` in cairn's config.toml; a refused write fails with \"Permission denied\" or \
             \"Read-only file system\". If the command needs to write elsewhere, tell the user.]",
            self.sandbox.id()
        ))
    }

    /// Whether commands started under this policy write wherever the user may: the direct
    /// launcher, the sandbox off, or a kernel without Landlock.
    fn writes_unconfined(&self) -> bool {
        self.launcher == Launcher::Direct || self.sandbox == SandboxMode::Off || !landlock_support().filesystem
    }

    /// Whether the sandbox this policy asks for lacks what keeps guarded places read-only and
    /// secrets hidden (Landlock, or a user or mount namespace). Then a command is not let
    /// through by accept-edits: it asks as in ask mode. With the sandbox off the user chose
    /// this; the direct launcher (unit tests, benches) sandboxes nothing by design.
    pub fn guards_missing(&self) -> bool {
        match (&self.launcher, self.sandbox) {
            (Launcher::Direct, _) | (_, SandboxMode::Off) => false,
            (Launcher::Supervisor(_), SandboxMode::WorkspaceWrite | SandboxMode::ReadOnly) => {
                !landlock_support().filesystem || self.namespace_kind().is_none()
            }
        }
    }

    /// The namespace commands run in: the one the kernel allows, unless the configuration says none.
    fn namespace_kind(&self) -> Option<NamespaceKind> {
        if self.namespace { probe::probe().namespace } else { None }
    }

    /// Says once per process, on stderr, what the kernel cannot enforce of the sandbox.
    fn warn_once(&self) {
        static WARNED: Once = Once::new();
        let (fs_wanted, net_wanted) = (self.sandbox != SandboxMode::Off, !self.network);
        if !fs_wanted && !net_wanted {
            return;
        }
        WARNED.call_once(|| {
            let support = landlock_support();
            let missing = if !support.filesystem {
                Some("this kernel has no Landlock; local commands run without the sandbox")
            } else if fs_wanted && self.namespace_kind().is_none() {
                Some(
                    "local commands run without a namespace of their own (this kernel allows none, or [sandbox] \
                     namespace = false), so they can write git hooks and tool configuration and read secrets such \
                     as .env; in accept-edits mode, commands ask as in ask mode",
                )
            } else if net_wanted && !support.network {
                Some("this kernel's Landlock cannot restrict the network (needs Linux 6.7); local commands keep network access")
            } else {
                None
            };
            if let Some(why) = missing {
                tell(&format!("warning: {why} ([sandbox] in config.toml)"));
            }
        });
    }
}

/// Whether a program's stdin is piped to it, and for how long it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piped {
    /// A command: stdin `/dev/null`, swept after.
    No,
    /// A server that lives all session: nothing swept after it.
    Server,
    /// A job, a hook or a checker: ends by itself, swept after.
    Job,
}

/// A running local program. Dropping it before the program ended kills the program and
/// everything it started; after it ended, whatever it left in its process group.
pub struct Local {
    child: Option<Child>,
    group: Option<u32>,
    /// What the supervisor watches: cairn never writes it, and closing it tells the supervisor
    /// to kill its whole tree. `None` for a direct child.
    watch: Option<Watch>,
    exited: bool,
    /// cairn's copy of the supervisor's inotify instance, closed once the supervisor has ended,
    /// on a thread nobody waits for (see `watch::instance`).
    inotify: Option<OwnedFd>,
    /// Counts the program as running until it and all it started are gone: dropped once a
    /// supervised program's supervisor has ended (it kills the whole tree before it does), or
    /// with this after its group was killed.
    running: Option<running::Running>,
}

/// Says `line` on stderr as `cairn: line`, in one write: a command's processes write to the
/// same pipe, and a line written in pieces comes out cut by theirs (a write of up to 4 KiB to a
/// pipe is never split).
fn tell(line: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().lock().write_all(format!("cairn: {line}\n").as_bytes());
}

/// The pipe a supervisor watches for cairn's end: its stdin, or for a server (whose stdin is
/// the protocol) a pipe of its own.
enum Watch {
    Stdin(#[allow(dead_code)] ChildStdin),
    Pipe(#[allow(dead_code)] std::os::fd::OwnedFd),
}

impl Local {
    /// The program's stdin, for a server started with [`ProcessPolicy::spawn_server`].
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut().and_then(|child| child.stdin.take())
    }

    /// The process group's id (the supervisor's pid, or the program's when direct).
    pub fn id(&self) -> Option<u32> {
        self.group
    }

    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut().and_then(|child| child.stdout.take())
    }

    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.child.as_mut().and_then(|child| child.stderr.take())
    }

    /// Ends the program and everything it started now, and reaps it: a supervised program's
    /// supervisor is told (its watched pipe closes) and gets a grace to kill the tree, after
    /// which its group is killed.
    pub async fn stop(&mut self) {
        let (Some(group), Some(mut child)) = (self.group.take(), self.child.take()) else { return };
        let supervised = self.watch.take().is_some() && !self.exited;
        if !supervised || tokio::time::timeout(SUPERVISOR_GRACE, child.wait()).await.is_err() {
            tree::kill_group(group);
            let _ = child.wait().await;
        }
        self.exited = true;
        close_later(self.inotify.take());
        self.running = None;
    }

    /// Waits for the program to end. A program killed by a signal has no exit code.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let Some(child) = self.child.as_mut() else { return Err(std::io::ErrorKind::NotFound.into()) };
        let status = child.wait().await?;
        self.exited = true;
        close_later(self.inotify.take());
        // A supervisor ends only once the program's whole tree is gone; what a direct child left
        // in its group is killed when this drops.
        if self.watch.is_some() {
            self.running = None;
        }
        Ok(status)
    }
}

/// Closes `fd` on a thread nobody waits for: the last close of an inotify instance that had
/// watches waits out a grace period in the kernel.
fn close_later(fd: Option<OwnedFd>) {
    let Some(fd) = fd else { return };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(fd))),
        // Should no thread start, the closure and the descriptor are dropped here, closing it.
        Err(_) => drop(std::thread::Builder::new().name("cairn-close".into()).spawn(move || drop(fd))),
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let inotify = self.inotify.take();
        let running = self.running.take();
        let Some(group) = self.group else { return close_later(inotify) };
        if self.exited || self.watch.is_none() {
            tree::kill_group(group);
            return close_later(inotify);
        }
        // Supervised and still running: at EOF on its stdin the supervisor kills every process
        // the program started, setsid'd ones included, then its own group. Should it not manage
        // to, the group is killed here. The supervisor is not reaped before that, so its pid
        // (the group id) cannot be reused meanwhile.
        self.watch = None;
        let child = self.child.take();
        match (child, tokio::runtime::Handle::try_current()) {
            (Some(mut child), Ok(runtime)) => {
                runtime.spawn(async move {
                    if tokio::time::timeout(SUPERVISOR_GRACE, child.wait()).await.is_err() {
                        tree::kill_group(group);
                        let _ = child.wait().await;
                    }
                    close_later(inotify);
                    drop(running);
                });
            }
            (_, _) => {
                tree::kill_group(group);
                close_later(inotify);
            }
        }
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;

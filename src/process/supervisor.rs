//! The supervisor: cairn started as `cairn __supervise …` to run one local command.
//!
//! `main` hands over to [`intercept`] before anything else (no command-line parsing, logging or
//! async runtime), so the supervisor is a fresh single-threaded process. When the policy asks
//! for it, it first moves into a namespace of its own and sets up what the command sees there
//! (`namespace.rs`, `places.rs`: guarded places read-only, secrets hidden, rejected programs
//! covered). It builds the Landlock ruleset, becomes the subreaper of what it starts, and starts
//! the program with stdin `/dev/null`, entering the sandbox between fork and exec by raw system
//! calls, so the supervisor stays outside it and the command cannot signal it. A sandboxed child
//! also installs the seccomp filter that keeps its mounts as they are (`seccomp.rs`); when rules
//! reject programs, or the process lives across turns and follows its session's rules file
//! (`--rules`), that filter sends every exec of the tree to a thread of the supervisor, which
//! judges it (`gate.rs`). Then a thread reads its stdin, a pipe cairn keeps open and never
//! writes ([`Watched`]: for a server, whose stdin is the protocol's, a pipe of its own; in an
//! editor's terminal, nothing, and the program dies with the supervisor): end of file means cairn
//! closed it (timeout, cancel) or died, and the supervisor then kills every descendant and its
//! own process group. When the program ends, whatever it left running is killed too, the
//! guarded places the command made are swept away (`places/sweep.rs`; not for a server that
//! lives all session; a job, a hook or a checker is swept as a command is), and the
//! supervisor exits as the program did (the same exit code, or the same signal).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;

use super::gate::Gate;
use super::namespace::{self, Kind};
use super::places::{self, Home, Names, sweep};
use super::{ProcessPolicy, SandboxMode, lookup, passed, sandbox, seccomp, tree, watch};
use crate::workspace::name_globs;

/// The hidden first argument that makes cairn a supervisor.
pub const ARGUMENT: &str = "__supervise";

/// Exit codes when the program could not be run at all, as shells use them.
const BAD_ARGUMENTS: u8 = 125;
const NO_SANDBOX: u8 = 126;
const CANNOT_START: u8 = 127;

/// What one supervisor runs, and under which rules.
#[derive(Debug, Default, PartialEq)]
struct Spec {
    mode: Option<SandboxMode>,
    network: bool,
    /// The namespace to make, if any (`None`: the kernel has none to give, or nothing needs one).
    namespace: Option<Kind>,
    /// The workspace roots: writable under `workspace-write`, searched for guarded places.
    roots: Vec<PathBuf>,
    /// Writable under `workspace-write` besides the roots.
    writable: Vec<PathBuf>,
    /// cairn's own directories: made if missing, then hidden.
    own: Vec<PathBuf>,
    /// The lock file of the cairn that started it, held while the command runs (`peers.rs`).
    running_lock: Option<PathBuf>,
    hidden: Vec<PathBuf>,
    hidden_names: Vec<String>,
    visible_names: Vec<String>,
    visible: Vec<PathBuf>,
    /// Made private when missing, before the places are found (`ProcessPolicy::service_dirs`).
    service_dirs: Vec<PathBuf>,
    /// cairn's start: the sockets older than this are the user's services, hidden, and the
    /// links older than this the user's (`places/remembered.rs`).
    sockets_before: Option<std::time::SystemTime>,
    /// Programs rules reject, each with its subcommand words.
    rejected: Vec<Vec<String>>,
    /// The session's rules file, followed while a lasting process runs (`gate/follow.rs`).
    rules: Option<PathBuf>,
    /// What is watched for cairn's end.
    watched: Watched,
    /// A server that lives all session beside the user's own work: nothing made beside it is
    /// taken away or swept after it (a command, a job, a hook or a checker is swept).
    lasting: bool,
    /// The inherited inotify instance to watch guarded places with (see `watch::instance`).
    inotify: Option<i32>,
    program: OsString,
    args: Vec<OsString>,
}

/// What a supervisor watches for cairn's end: closed, it kills the whole tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Watched {
    /// Its stdin (a pipe only cairn holds); the program gets `/dev/null`.
    #[default]
    Stdin,
    /// This inherited descriptor; stdin goes to the program (a server speaking over its stdin
    /// and stdout).
    Fd(i32),
    /// Nothing: started by someone else for cairn (an editor's terminal), the supervisor lives
    /// until the program ends or it is killed, and the program dies with it.
    Nothing,
    /// The cairn that asked an editor's terminal for the command, by process id, start time
    /// (`tree::started`, which tells it from a later process given the same id) and PID
    /// namespace: its end, `kill -9` included, ends the command as a closed pipe would; the
    /// editor's signals end it too. A cairn in another PID namespace than the terminal's is not
    /// watched.
    Pid { pid: u32, started: u64, namespace: u64 },
}

/// What a command is confined to besides the policy: its session's roots and rejected programs,
/// and for a process that lives across turns, the file that keeps them as they change.
#[derive(Clone, Copy, Debug, Default)]
pub struct Confinement<'a> {
    pub roots: &'a [PathBuf],
    pub rejected: &'a [Vec<String>],
    pub rules: Option<&'a Path>,
}

/// The supervisor's arguments (after the executable) for `program args` under `policy`:
/// `__supervise MODE network|no-network [--namespace KIND] [--watch-fd N|none | --watch-pid PID:START:NS]
/// [--inotify-fd N]
/// [--lasting yes] [--root P]… [--write P]… [--own P]… [--running-lock P] [--hide P]… [--hide-name GLOB]… [--show GLOB]…
/// [--reject WORDS]… [--rules P] -- PROGRAM ARGS…`.
pub fn arguments(
    policy: &ProcessPolicy,
    confinement: Confinement<'_>,
    namespace: Option<Kind>,
    (watched, inotify): (Watched, Option<i32>),
    lasting: bool,
    program: &OsStr,
    args: &[&OsStr],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![ARGUMENT.into(), policy.sandbox.id().into()];
    out.push(if policy.network { "network" } else { "no-network" }.into());
    let mut flag = |name: &str, value: OsString| {
        out.push(name.into());
        out.push(value);
    };
    if let Some(kind) = namespace {
        flag("--namespace", kind.id().into());
    }
    match watched {
        Watched::Stdin => {}
        Watched::Fd(fd) => flag("--watch-fd", fd.to_string().into()),
        Watched::Nothing => flag("--watch-fd", "none".into()),
        Watched::Pid { pid, started, namespace } => {
            flag("--watch-pid", format!("{pid}:{started}:{namespace}").into());
        }
    }
    if let Some(fd) = inotify {
        flag("--inotify-fd", fd.to_string().into());
    }
    if lasting {
        flag("--lasting", "yes".into());
    }
    for root in confinement.roots {
        flag("--root", root.into());
    }
    if policy.sandbox == SandboxMode::WorkspaceWrite {
        for path in &policy.writable {
            flag("--write", path.into());
        }
    }
    if policy.sandbox != SandboxMode::Off {
        for path in &policy.own {
            flag("--own", path.into());
        }
        // The supervisor holds it in its data directory, the first of `own`.
        if let Some(lock) = super::peers::own_now().filter(|_| !policy.own.is_empty()) {
            flag("--running-lock", lock.into());
        }
        for path in &policy.hidden {
            flag("--hide", path.into());
        }
        for glob in &policy.hidden_names {
            flag("--hide-name", glob.into());
        }
        for glob in &policy.visible_names {
            flag("--show", glob.into());
        }
        for path in &policy.visible {
            flag("--show-path", path.into());
        }
        for dir in &policy.service_dirs {
            flag("--service-dir", dir.into());
        }
        if let Some(since) = policy.sockets_before.and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok()) {
            flag("--sockets-before", format!("{}.{:09}", since.as_secs(), since.subsec_nanos()).into());
        }
    }
    for words in confinement.rejected {
        flag("--reject", words.join(" ").into());
    }
    if let Some(path) = confinement.rules {
        flag("--rules", path.into());
    }
    out.push("--".into());
    out.push(program.into());
    out.extend(args.iter().map(OsString::from));
    out
}

fn parse(mut args: impl Iterator<Item = OsString>) -> Result<Spec, String> {
    let mode = args.next().and_then(|mode| mode.to_str().and_then(SandboxMode::parse)).ok_or("no sandbox mode")?;
    let network = match args.next().as_deref().and_then(OsStr::to_str) {
        Some("network") => true,
        Some("no-network") => false,
        _ => return Err("no network setting".into()),
    };
    let mut spec = Spec { mode: Some(mode), network, ..Spec::default() };
    loop {
        let Some(flag) = args.next() else { return Err("no -- before the program".into()) };
        let flag = flag.to_str().ok_or("an option is not UTF-8")?.to_owned();
        if flag == "--" {
            break;
        }
        let value = args.next().ok_or_else(|| format!("{flag} without a value"))?;
        let text = || value.to_str().map(str::to_owned).ok_or_else(|| format!("{flag}'s value is not UTF-8"));
        match flag.as_str() {
            "--namespace" => spec.namespace = Some(Kind::parse(&text()?).ok_or("unknown namespace kind")?),
            "--watch-fd" => {
                spec.watched = match text()?.as_str() {
                    "none" => Watched::Nothing,
                    fd => Watched::Fd(fd.parse().map_err(|_| "--watch-fd takes a number or none")?),
                }
            }
            "--watch-pid" => {
                let value = text()?;
                let mut fields = value.split(':').map(str::parse::<u64>);
                let mut field = || fields.next().and_then(Result::ok);
                let watched = match (field(), field(), field(), field()) {
                    (Some(pid), Some(started), Some(namespace), None) => {
                        u32::try_from(pid).ok().map(|pid| Watched::Pid { pid, started, namespace })
                    }
                    _ => None,
                };
                spec.watched = watched.ok_or("--watch-pid takes PID:START_TIME:PID_NAMESPACE")?;
            }
            "--inotify-fd" => spec.inotify = Some(text()?.parse().map_err(|_| "--inotify-fd takes a number")?),
            "--root" => spec.roots.push(PathBuf::from(value)),
            "--write" => spec.writable.push(PathBuf::from(value)),
            "--own" => spec.own.push(PathBuf::from(value)),
            "--running-lock" => spec.running_lock = Some(PathBuf::from(value)),
            "--lasting" => spec.lasting = text()? == "yes",
            "--hide" => spec.hidden.push(PathBuf::from(value)),
            "--hide-name" => spec.hidden_names.push(text()?),
            "--show" => spec.visible_names.push(text()?),
            "--show-path" => spec.visible.push(PathBuf::from(value)),
            "--service-dir" => spec.service_dirs.push(PathBuf::from(value)),
            "--sockets-before" => {
                let seconds: f64 = text()?.parse().map_err(|_| "--sockets-before takes seconds since the epoch")?;
                let at =
                    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| "--sockets-before: out of range")?;
                spec.sockets_before = Some(std::time::UNIX_EPOCH + at);
            }
            "--reject" => spec.rejected.push(text()?.split_whitespace().map(str::to_owned).collect()),
            "--rules" => spec.rules = Some(PathBuf::from(value)),
            other => return Err(format!("unknown option {other}")),
        }
    }
    spec.program = args.next().ok_or("no program")?;
    spec.args = args.collect();
    Ok(spec)
}

/// Runs the supervisor if cairn was started as one; `None` otherwise.
pub fn intercept() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next()? != ARGUMENT {
        return None;
    }
    Some(match parse(args) {
        Ok(spec) => supervise(&spec),
        Err(why) => say(BAD_ARGUMENTS, &format!("bad supervisor arguments: {why}")),
    })
}

fn supervise(spec: &Spec) -> ExitCode {
    let mode = spec.mode.unwrap_or(SandboxMode::WorkspaceWrite);
    // Started by an editor's terminal, nothing tells of cairn's end, and the editor ends the
    // command with a signal: caught before any thread starts, so that the sweep still runs.
    let endings = matches!(spec.watched, Watched::Nothing | Watched::Pid { .. }).then(tree::Endings::block);
    let Some(program) = lookup::sandboxed(&spec.program) else {
        return say(CANNOT_START, &format!("cannot start {}: not found", spec.program.to_string_lossy()));
    };
    // Made close-on-exec at once: the program never holds the watcher's events.
    let inotify = match spec.inotify.map(tree::adopt_fd).transpose() {
        Ok(file) => file.map(std::os::fd::OwnedFd::from),
        Err(err) => return say(BAD_ARGUMENTS, &format!("--inotify-fd: {err}")),
    };
    let mut gate = Gate::new(&spec.rejected, passed::program_path().as_deref());
    // Opened before the namespace hides the data directory it lies in.
    if let Some(Err(err)) = spec.rules.as_deref().map(|rules| gate.follow(rules)) {
        super::tell(&format!("rules the user adds while it runs will not reach this process: {err}"));
    }
    // What no mount can stop (a guarded place that does not exist yet, a repository the command
    // makes) is noted before and taken away after.
    let mut confined = None;
    // Held while the command runs: another cairn of this data directory then hands no path to
    // its editor (`running.rs`). Taken before the namespace covers the data directory.
    let _running = spec.own.first().and_then(|data| super::peers::hold(data, spec.running_lock.as_deref()));
    let writable: Vec<PathBuf> = match mode {
        SandboxMode::WorkspaceWrite => spec.roots.iter().chain(&spec.writable).cloned().collect(),
        SandboxMode::ReadOnly | SandboxMode::Off => Vec::new(),
    };
    if let Some(kind) = spec.namespace {
        match confine(kind, mode, spec, &gate, &program, &writable) {
            Ok(done) => confined = Some(done),
            Err(Unconfined::Setup(err)) => {
                return say(
                    NO_SANDBOX,
                    &format!(
                        "{err}; set [sandbox] namespace = false in config.toml to run commands without the namespace"
                    ),
                );
            }
            Err(Unconfined::TooMany(why)) => return say(NO_SANDBOX, &why),
        }
    }
    let want_pids = confined.is_some();
    let (before, watcher) = match confined {
        Some(Confined { places, before, keeper }) => {
            let watcher = watch::start(&places, before.as_ref(), keeper, inotify).unwrap_or_else(|err| {
                super::tell(&format!("the guarded places are not watched: {err}"));
                watch::Watcher::default()
            });
            (before.map(Arc::new), watcher)
        }
        None => (None, watch::Watcher::default()),
    };
    let ruleset = match sandbox::prepare(mode, spec.network, &writable) {
        Ok(ruleset) => ruleset,
        Err(err) => {
            return say(NO_SANDBOX, &format!("{err}; set [sandbox] mode = \"off\" in config.toml to run without it"));
        }
    };
    if mode != SandboxMode::Off && ruleset.as_ref().is_some_and(sandbox::Prepared::enforced) {
        gate.writes_only_beneath(sandbox::writable_places(&writable));
    }
    tree::become_subreaper();
    // Every sandboxed command gets the filter that keeps its mounts as they are. With programs
    // to judge, the notifier thread waits for the filter's listener before the fork: the
    // program's own exec already needs an answer.
    let sandboxed = spec.namespace.is_some() || mode != SandboxMode::Off;
    // The ids the command runs as (the namespace maps them to themselves): the only owner and
    // group it may give a file.
    let own = seccomp::Ids { uid: namespace::current_uid(), gid: namespace::current_gid() };
    let handoff = if !gate.is_empty() {
        match seccomp::pair(seccomp::Filter::new(true, own)) {
            Ok((handoff, listener)) => {
                std::thread::spawn(move || notify(listener, gate));
                Some(handoff)
            }
            Err(err) => return say(NO_SANDBOX, &format!("cannot set up the exec check: {err}")),
        }
    } else if sandboxed {
        Some(seccomp::Handoff::plain(seccomp::Filter::new(false, own)))
    } else {
        None
    };
    let as_root = sandboxed && running_as_root();
    // What is watched for cairn's end: stdin, or the descriptor given (then stdin is the
    // program's, and the watched pipe is not), or nothing.
    let watched: Option<Box<dyn Read + Send>> = match spec.watched {
        Watched::Fd(fd) => match tree::adopt_fd(fd) {
            Ok(file) => Some(Box::new(file)),
            Err(err) => return say(BAD_ARGUMENTS, &format!("--watch-fd {fd}: {err}")),
        },
        Watched::Stdin => Some(Box::new(std::io::stdin())),
        Watched::Nothing | Watched::Pid { .. } => None,
    };
    let me = std::process::id();
    // What ends the command early: cairn's end (the watched pipe closes), or in an editor's
    // terminal, the signal the editor sends. Either kills the tree and sweeps.
    if watched.is_some() || endings.is_some() {
        let (before_too, watcher_too) = (before.clone(), watcher.clone());
        std::thread::spawn(move || {
            let signal = match (watched, endings) {
                (Some(mut watched), _) => {
                    let mut buf = [0u8; 64];
                    while matches!(watched.read(&mut buf), Ok(n) if n > 0) {}
                    None
                }
                (None, Some(endings)) => Some(endings.wait()),
                (None, None) => return,
            };
            end(me, before_too.as_deref(), &watcher_too, true);
            match signal {
                Some(signal) => std::process::exit(128 + signal),
                None => tree::kill_group(me),
            }
        });
    }
    // In an editor's terminal for a cairn that may be killed: its end is watched beside the
    // editor's signals.
    if let Watched::Pid { pid, started, namespace } = spec.watched {
        let (before_too, watcher_too) = (before.clone(), watcher.clone());
        std::thread::spawn(move || {
            if tree::wait_for_cairn(pid, started, namespace) {
                end(me, before_too.as_deref(), &watcher_too, true);
                tree::kill_group(me);
            }
        });
    }
    // A PID namespace of its own: nothing the command starts outlives it. Made last, since a
    // process that made one can start no more threads.
    let own_pids = want_pids && namespace::enter_pids();
    let read_only_proc = mode != SandboxMode::Off;
    let mut command = Command::new(&program);
    let stdin = match spec.watched {
        Watched::Fd(_) => Stdio::inherit(),
        Watched::Stdin | Watched::Nothing | Watched::Pid { .. } => Stdio::null(),
    };
    command.arg0(&spec.program).args(&spec.args).stdin(stdin);
    passed::apply(&mut command);
    let enter = move || {
        tree::close_inherited();
        tree::detach()?;
        // Killed, the supervisor takes the program along (and with a PID namespace, the
        // kernel every process of it): nothing else ends a tree nobody watches for cairn.
        tree::die_with_this_parent()?;
        if let Some(endings) = &endings {
            endings.unblock()?;
        }
        if own_pids {
            namespace::fresh_proc(read_only_proc);
        }
        if as_root {
            sandbox::drop_root_capabilities()?;
        }
        if let Some(ruleset) = &ruleset {
            sandbox::enter(ruleset)?;
        }
        handoff.as_ref().map_or(Ok(()), seccomp::Handoff::install)
    };
    // SAFETY: between fork and exec the child only makes raw system calls on memory prepared
    // before the fork (the ruleset's descriptor, the filter, the socket), allocating nothing, as
    // a child forked while the notifier thread runs must.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(enter)
    };
    let spawned = command.spawn();
    // Dropping the command closes the child's end of the socket here: the notifier sees the end
    // of it if the child failed before sending its listener.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => return say(CANNOT_START, &format!("cannot start {}: {err}", spec.program.to_string_lossy())),
    };
    let status = child.wait();
    // With a PID namespace of its own, the program's end was every process's: the kernel
    // killed and reaped the rest before its exit reached us, and nothing is left to look for.
    end(me, before.as_deref(), &watcher, !own_pids);
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
            (None, Some(signal)) => tree::die_by(signal),
            (None, None) => ExitCode::FAILURE,
        },
        Err(err) => say(CANNOT_START, &format!("waiting for {} failed: {err}", spec.program.to_string_lossy())),
    }
}

/// Kills whatever the command left running (looked for through `/proc` if `look`), then takes
/// away what it made that no mount could stop, once the watcher is done with what it is taking
/// away. Either thread may get here first; the second finds nothing left to do.
fn end(me: u32, before: Option<&sweep::Before>, watcher: &watch::Watcher, look: bool) {
    if look {
        tree::kill_descendants(me);
    }
    // Once, whichever thread comes first; the other waits for it to finish.
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| sweep_now(before, watcher));
}

fn sweep_now(before: Option<&sweep::Before>, watcher: &watch::Watcher) {
    watcher.settle();
    for line in before.map(sweep::sweep).unwrap_or_default() {
        super::tell(&line);
    }
}

/// What a command's namespace holds.
struct Confined {
    places: places::Places,
    /// What stood before, when the command may write the roots.
    before: Option<sweep::Before>,
    keeper: namespace::Keeper,
}

/// Why a command gets no namespace.
enum Unconfined {
    /// The kernel refused a step.
    Setup(String),
    /// The workspace holds more guarded places than a namespace takes (`places::MAX_GUARDED`).
    TooMany(String),
}

impl From<String> for Unconfined {
    fn from(err: String) -> Self {
        Unconfined::Setup(err)
    }
}

/// Makes the namespace and sets up what the command sees in it.
/// Outside `writable`, every mount is read-only unless the sandbox is off.
fn confine(
    kind: Kind,
    mode: SandboxMode,
    spec: &Spec,
    gate: &Gate,
    program: &Path,
    writable: &[PathBuf],
) -> Result<Confined, Unconfined> {
    namespace::enter(kind).map_err(|err| err.to_string())?;
    let (places, before) = match mode {
        SandboxMode::Off => (places::Places::default(), None),
        SandboxMode::WorkspaceWrite | SandboxMode::ReadOnly => {
            let names = Names { hidden: name_globs(&spec.hidden_names)?, visible: name_globs(&spec.visible_names)? };
            for dir in &spec.own {
                std::fs::create_dir_all(dir).map_err(|err| format!("cannot make {}: {err}", dir.display()))?;
            }
            places::sockets::make_service_dirs(&spec.service_dirs);
            let mut hidden: Vec<PathBuf> = spec.own.iter().chain(&spec.hidden).cloned().collect();
            if let Some(before) = spec.sockets_before {
                let temp = std::env::var_os("TMPDIR").map(PathBuf::from).filter(|dir| dir.is_absolute());
                let dirs: Vec<PathBuf> = ["/tmp", "/run"].iter().map(PathBuf::from).chain(temp).collect();
                hidden.extend(places::sockets::outside(&dirs, before, &spec.visible));
            }
            // The command's own environment says where git finds the user's configuration.
            let home = Home {
                home: std::env::var_os("HOME").map(PathBuf::from),
                xdg_config: std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
            };
            let writable = mode == SandboxMode::WorkspaceWrite;
            // What walks of these roots found before stays found (`places::remembered`), kept
            // in cairn's data directory, which the command does not see.
            let kept = spec.own.first().map(|data| data.join("places"));
            let roots: Vec<PathBuf> = spec.roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect();
            let known = kept.as_deref().map(|dir| places::remembered::load(dir, &roots)).unwrap_or_default();
            let places = places::find_knowing(&roots, &hidden, &names, writable, &home, known, spec.sockets_before);
            places.check_count().map_err(|why| {
                let gone = kept.as_deref().and_then(|dir| places::remembered::gone_links(dir, &roots, &places));
                Unconfined::TooMany(why + gone.as_deref().unwrap_or_default())
            })?;
            // A read-only walk looks for no read-only places: it adds the user's links only,
            // as one whose places gave way to their directories does.
            let whole = writable && !places.fitted;
            if let Some(dir) = &kept
                && let Err(err) = places::remembered::remember(dir, &roots, &places, spec.sockets_before, whole)
            {
                tracing::debug!("cannot keep the places found: {err}");
            }
            // A server lives all session, while the user, the editor and the edit tools make
            // guarded places beside it: what appears meanwhile is theirs as much as its, so
            // nothing is taken away or swept after it. A job, a hook or a checker is swept as a
            // command is.
            let before =
                (writable && !spec.lasting).then(|| sweep::before(&spec.roots, &places.git_dirs, &places.missing));
            (places, before)
        }
    };
    // The places Landlock lets the command write stay writable; everything else is read-only,
    // the devices too: they are read and written on a read-only mount as anywhere, and no
    // command may change the mode or owner of the machine's `/dev/null` or of a terminal.
    let writable = (mode != SandboxMode::Off).then_some(writable);
    let keeper = namespace::apply(&places, &gate.stubs(Some(program)), writable).map_err(|err| err.to_string())?;
    // The working directory still points into the mounts as they were before: enter it again by
    // its path, through the new ones, or relative paths would reach around them.
    let cwd = std::env::current_dir().map_err(|err| format!("cannot read the working directory: {err}"))?;
    std::env::set_current_dir(&cwd).map_err(|err| format!("cannot enter {} again: {err}", cwd.display()))?;
    Ok(Confined { places, before, keeper })
}

fn running_as_root() -> bool {
    // SAFETY: geteuid takes nothing and cannot fail.
    #[allow(unsafe_code)]
    let euid = unsafe { libc::geteuid() };
    euid == 0
}

/// The notifier thread: the listener, once the child sends it, then a verdict for every exec.
fn notify(listener: seccomp::Listener, mut gate: Gate) {
    match listener.receive() {
        Ok(Some(listener)) => {
            // The child installed the filter before sending its listener.
            gate.fix_root();
            seccomp::serve(&listener, |notice| gate.answer(notice));
        }
        Ok(None) => {}
        Err(err) => {
            super::tell(&format!("the exec check did not start: {err}"));
        }
    }
}

/// One line on stderr, which cairn shows as the command's output.
fn say(code: u8, why: &str) -> ExitCode {
    super::tell(why);
    ExitCode::from(code)
}

#[cfg(test)]
#[path = "supervisor_tests.rs"]
mod tests;

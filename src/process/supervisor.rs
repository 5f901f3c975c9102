//! The supervisor: cairn started as `cairn __supervise …` to run one local command.
//!
//! `main` hands over to [`intercept`] before anything else (no command-line parsing, logging or
//! async runtime), so the supervisor is a fresh single-threaded process. It builds the sandbox's
//! ruleset, becomes the subreaper of what it starts, and starts the program with stdin
//! `/dev/null`, entering the sandbox between fork and exec (it still has one thread then, so
//! that is safe). Then a thread reads its stdin, a pipe cairn keeps open and never writes: end of
//! file means cairn closed it (timeout, cancel) or died, and the supervisor then kills every
//! descendant and its own process group. When the program ends, whatever it left running is
//! killed too, and the supervisor exits as the program did (the same exit code, or the same
//! signal).

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use super::{ProcessPolicy, SandboxMode, sandbox, tree};

/// The hidden first argument that makes cairn a supervisor.
pub const ARGUMENT: &str = "__supervise";

/// Exit codes when the program could not be run at all, as shells use them.
const BAD_ARGUMENTS: u8 = 125;
const NO_SANDBOX: u8 = 126;
const CANNOT_START: u8 = 127;

/// What one supervisor runs, and under which rules.
#[derive(Debug, PartialEq)]
struct Spec {
    mode: SandboxMode,
    network: bool,
    writable: Vec<PathBuf>,
    program: OsString,
    args: Vec<OsString>,
}

/// The supervisor's arguments (after the executable) for `program args` under `policy`:
/// `__supervise MODE network|no-network [--write PATH]… -- PROGRAM ARGS…`.
pub fn arguments(policy: &ProcessPolicy, roots: &[PathBuf], program: &OsStr, args: &[&OsStr]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![ARGUMENT.into(), policy.sandbox.id().into()];
    out.push(if policy.network { "network" } else { "no-network" }.into());
    let writable: Vec<&PathBuf> = match policy.sandbox {
        SandboxMode::WorkspaceWrite => roots.iter().chain(&policy.writable).collect(),
        SandboxMode::ReadOnly | SandboxMode::Off => Vec::new(),
    };
    for path in writable {
        out.push("--write".into());
        out.push(path.into());
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
    let mut writable = Vec::new();
    loop {
        match args.next().as_deref().and_then(OsStr::to_str) {
            Some("--write") => writable.push(PathBuf::from(args.next().ok_or("--write without a path")?)),
            Some("--") => break,
            _ => return Err("expected --write or --".into()),
        }
    }
    let program = args.next().ok_or("no program")?;
    Ok(Spec { mode, network, writable, program, args: args.collect() })
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
    let mut ruleset = match sandbox::prepare(spec.mode, spec.network, &spec.writable) {
        Ok(ruleset) => ruleset,
        Err(err) => {
            return say(NO_SANDBOX, &format!("{err}; set [sandbox] mode = \"off\" in config.toml to run without it"));
        }
    };
    tree::become_subreaper();
    let mut command = Command::new(&spec.program);
    command.args(&spec.args).stdin(Stdio::null());
    let enter = move || {
        tree::detach()?;
        ruleset.take().map_or(Ok(()), sandbox::enter)
    };
    // SAFETY: the supervisor has a single thread when it forks (the watcher starts afterwards), so the child may allocate; it only leaves the terminal's session and enters the Landlock ruleset built before the fork.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(enter)
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return say(CANNOT_START, &format!("cannot start {}: {err}", spec.program.to_string_lossy())),
    };
    let me = std::process::id();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 64];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        tree::kill_descendants(me);
        tree::kill_group(me);
    });
    let status = child.wait();
    tree::kill_descendants(me);
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX)),
            (None, Some(signal)) => tree::die_by(signal),
            (None, None) => ExitCode::FAILURE,
        },
        Err(err) => say(CANNOT_START, &format!("waiting for {} failed: {err}", spec.program.to_string_lossy())),
    }
}

/// One line on stderr, which cairn shows as the command's output.
fn say(code: u8, why: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "cairn: {why}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_carry_the_policy_and_only_workspace_write_has_writable_places() {
        let policy = ProcessPolicy { network: false, ..ProcessPolicy::default() };
        let roots = [PathBuf::from("/work/project")];
        let args = arguments(&policy, &roots, OsStr::new("bash"), &[OsStr::new("-c"), OsStr::new("ls -- x")]);
        let spec = parse(args.into_iter().skip(1)).unwrap();
        assert_eq!(
            spec,
            Spec {
                mode: SandboxMode::WorkspaceWrite,
                network: false,
                writable: vec![PathBuf::from("/work/project"), PathBuf::from("/tmp")],
                program: "bash".into(),
                args: vec!["-c".into(), "ls -- x".into()],
            }
        );
        let read_only = ProcessPolicy { sandbox: SandboxMode::ReadOnly, ..ProcessPolicy::default() };
        let args = arguments(&read_only, &roots, OsStr::new("true"), &[]);
        let spec = parse(args.into_iter().skip(1)).unwrap();
        assert!(spec.writable.is_empty() && spec.network);
        assert!(parse(["off".into(), "network".into(), "bash".into()].into_iter()).is_err());
    }
}

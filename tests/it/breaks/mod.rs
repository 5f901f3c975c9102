//! Breaks of the namespace boundary found by attacking it as a hostile model would, each pinned
//! by its effect on disk or in the output. Every test here fails until the break is fixed.
//!
//! Most drive the supervisor by hand (`cairn __supervise …`, as cairn starts it, with the
//! namespace kind this user gets: a mount namespace for root, a user namespace otherwise); a
//! few go end to end through `cairn exec` against the mock model. `places` attacks the guarded
//! places and the sweep (`sweep` where its walk does not look, `gitlinks` what a repository
//! stages as a submodule there), `exec` the exec check, the process tree and what root keeps,
//! `modes` what sets a file's mode and owner.

mod exec;
mod gitlinks;
mod modes;
mod own;
mod places;
mod sweep;
mod users;

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::support::kernel_keeps_it;

/// What one supervised command printed; `None` from [`supervise`] when it did not end in time.
pub struct Output {
    pub stdout: String,
    pub stderr: String,
}

pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
    })
}

/// Runs `bash -c script` in `ws` under the supervisor, the workspace `ws` its one root, `/tmp`
/// writable, `extra` options added (`--reject rm`), and waits at most `limit`.
pub fn supervise_for(ws: &Path, script: &str, extra: &[&str], limit: Duration) -> Option<Output> {
    let kind = if running_as_root() { "mount" } else { "user" };
    run_supervisor(Command::new(env!("CARGO_BIN_EXE_cairn")), kind, ws, script, extra, limit)
}

/// As [`supervise`], but as `nobody` through a user namespace (root drops to it with `setpriv`;
/// `ws` and what the test needs must belong to 65534). `None` where that cannot be done.
pub fn supervise_as_nobody(ws: &Path, script: &str, extra: &[&str]) -> Option<Output> {
    if !running_as_root() || sh_out(Path::new("/"), "command -v setpriv").is_empty() {
        println!("skipped: needs root and setpriv to drop to nobody");
        return None;
    }
    let mut setpriv = Command::new("setpriv");
    setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_cairn")]);
    let output = run_supervisor(setpriv, "user", ws, script, extra, Duration::from_secs(60));
    if output.as_ref().is_some_and(|output| output.stderr.contains("cannot create a user namespace")) {
        println!("skipped: no unprivileged user namespace here");
        return None;
    }
    output
}

fn run_supervisor(
    mut command: Command,
    kind: &str,
    ws: &Path,
    script: &str,
    extra: &[&str],
    limit: Duration,
) -> Option<Output> {
    let mut child = command
        .args(["__supervise", "workspace-write", "network", "--namespace", kind, "--root"])
        .arg(ws)
        .args(["--write", "/tmp"])
        .args(extra)
        .args(["--", "bash", "-c", script])
        .current_dir(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // cairn keeps the supervisor's stdin open while the command runs.
    let watch = child.stdin.take();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > limit {
            // The supervisor leads its own process group: kill all of it.
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(watch);
    // Read as bytes: a refused name that is not UTF-8 is echoed by bash as it is.
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    child.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut stderr).unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    Some(Output { stdout: text(stdout), stderr: text(stderr) })
}

/// As [`supervise`], with `HOME` set to `home` for the supervisor and the command.
pub fn supervise_at_home(ws: &Path, script: &str, home: &Path) -> Output {
    let kind = if running_as_root() { "mount" } else { "user" };
    let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
    command.env("HOME", home);
    run_supervisor(command, kind, ws, script, &[], Duration::from_secs(60)).expect("the supervised command did not end")
}

pub fn supervise(ws: &Path, script: &str, extra: &[&str]) -> Output {
    supervise_for(ws, script, extra, Duration::from_secs(60)).expect("the supervised command did not end")
}

pub fn sh(dir: &Path, script: &str) {
    let status = Command::new("sh").arg("-c").arg(script).current_dir(dir).status().unwrap();
    assert!(status.success(), "{script}");
}

/// Makes `ws` a repository with one commit (`a.txt`).
pub fn committed(ws: &Path) {
    sh(ws, "git init -q . && echo one > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm one");
}

/// `sh -c script` in `dir`, its stdout; failures allowed.
pub fn sh_out(dir: &Path, script: &str) -> String {
    let output = Command::new("sh").arg("-c").arg(script).current_dir(dir).output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// A directory outside every place the sandbox lets a command write (not under `/tmp`).
pub fn outside(name: &str) -> tempfile::TempDir {
    // Commands may write the temporary directories: a checkout under /tmp has its target there.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base =
        if ["/tmp", "/dev/shm"].iter().any(|tmp| target.starts_with(tmp)) { Path::new("/var/tmp") } else { target };
    tempfile::Builder::new().prefix(&format!("cairn-break-{name}-")).tempdir_in(base).unwrap()
}

/// A workspace (`<tempdir>/ws`) holding a repository with one commit.
pub fn repository() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    committed(&ws);
    (dir, ws)
}

/// Runs `git status` in `ws` as the user would, outside any sandbox.
pub fn user_runs_git_status(ws: &Path) -> String {
    sh_out(ws, "git status --short 2>&1")
}

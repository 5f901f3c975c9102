//! One hook command run: `bash -c COMMAND` started as a local command is (under the session's
//! [`ProcessPolicy`]: the supervisor, the sandbox, the children's environment without provider
//! keys), in the project's directory with `CLAUDE_PROJECT_DIR` and `CAIRN_PROJECT_DIR` set, its
//! input written to its stdin and closed, its stdout and stderr read up to [`KEEP`] bytes each.
//! At its time limit or a cancel, the program and everything it started are killed
//! ([`crate::process::Local::stop`]); it never holds the turn longer than that.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::process::{Confinement, ProcessPolicy};

/// How much of each of a hook's stdout and stderr is kept; the rest is read and dropped.
pub const KEEP: usize = 64 * 1024;

/// How a hook's run ended.
#[derive(Debug)]
pub enum Ran {
    /// It exited (`code` is `None` when a signal killed it).
    Exited { code: Option<i32>, stdout: String, stderr: String },
    /// It did not end within its time limit and was killed.
    TimedOut(Duration),
    /// The turn was cancelled meanwhile; it was killed.
    Cancelled,
    /// It could not be started.
    NotStarted(String),
}

/// Where and how a hook runs.
pub struct Place<'a> {
    pub policy: &'a ProcessPolicy,
    pub project: &'a Path,
    pub roots: &'a [std::path::PathBuf],
    pub rejected: &'a [Vec<String>],
}

/// Runs `command` with `input` on its stdin, for at most `limit`.
pub async fn run(place: &Place<'_>, command: &str, input: &[u8], limit: Duration, cancel: &CancellationToken) -> Ran {
    let project = place.project.to_string_lossy().into_owned();
    let vars = [("CLAUDE_PROJECT_DIR".to_owned(), project.clone()), ("CAIRN_PROJECT_DIR".to_owned(), project)];
    let args = [OsStr::new("-c"), OsStr::new(command)];
    let confinement = Confinement { roots: place.roots, rejected: place.rejected, rules: None };
    let mut child = match place.policy.spawn_job(OsStr::new("bash"), &args, &vars, place.project, confinement).await {
        Ok(child) => child,
        Err(err) => return Ran::NotStarted(err.to_string()),
    };
    let stdin = child.take_stdin();
    let (stdout, stderr) = (child.take_stdout(), child.take_stderr());
    let input = input.to_vec();
    let work = async {
        // A hook that never reads its stdin must not hold the run: the write is abandoned with it.
        let feed = async move {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let (_, out, err, status) = tokio::join!(feed, capped(stdout), capped(stderr), child.wait());
        (out, err, status)
    };
    let ended = tokio::select! {
        ended = tokio::time::timeout(limit, work) => Some(ended.ok()),
        () = cancel.cancelled() => None,
    };
    // Whatever it left running dies now, however it ended.
    child.stop().await;
    match ended {
        None => Ran::Cancelled,
        Some(None) => Ran::TimedOut(limit),
        Some(Some((stdout, stderr, status))) => {
            Ran::Exited { code: status.ok().and_then(|status| status.code()), stdout, stderr }
        }
    }
}

/// Everything a pipe gives until it closes, keeping the first [`KEEP`] bytes.
async fn capped<R: tokio::io::AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(mut pipe) = pipe else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = KEEP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

//! One checker run: `bash -c COMMAND` started as a local command is (under the call's
//! [`crate::process::ProcessPolicy`]: the supervisor, the sandbox, the children's environment),
//! in the workspace root holding the edited file, with `CAIRN_EDITED_FILE` set to that file's
//! path (never put into the command line, so no name needs quoting). Its stdout and stderr are
//! read line by line as they come, each line cut at [`MOST_LINE`] bytes, and only the
//! diagnostics about the edited file are kept, at most [`MOST_KEPT`]: a checker printing
//! anything, however much, costs a bounded memory. At its time limit or the call's cancel the
//! program and all it started are killed ([`crate::process::Local::stop`]). A run that ends
//! with bash's "not found" or "cannot execute" status (127, 126; the supervisor's own failures
//! to start it exit so too) did not check anything: it is [`Ran::NotStarted`] with the last
//! line of its stderr, never a clean file.

use std::ffi::OsStr;
use std::path::Path;

use tokio::io::AsyncReadExt;

use super::parse::{self, Diagnostic};
use crate::config::Checker;
use crate::process::Confinement;
use crate::tools::ToolContext;

/// The longest line of a checker's output that is read whole; the rest of it is dropped.
pub const MOST_LINE: usize = 8 * 1024;
/// The most diagnostics about the edited file one run keeps.
pub const MOST_KEPT: usize = 1000;
/// The most bytes of a checker's last stderr line said when it could not run.
const MOST_SAID: usize = 300;

/// How a checker's run ended.
#[derive(Debug)]
pub enum Ran {
    /// It ended: the diagnostics it printed about the edited file.
    Found(Vec<Diagnostic>),
    /// It did not end within its time limit and was killed.
    TimedOut,
    /// The call was cancelled meanwhile; it was killed.
    Cancelled,
    /// It could not be started.
    NotStarted(String),
}

/// Runs `checker` for the edited file `target` (a final target inside `root`).
pub async fn run(ctx: &ToolContext, checker: &Checker, root: &Path, target: &Path) -> Ran {
    let vars = [("CAIRN_EDITED_FILE".to_owned(), target.to_string_lossy().into_owned())];
    let args = [OsStr::new("-c"), OsStr::new(&checker.command)];
    let confinement = Confinement { roots: ctx.workspace.roots(), rejected: &ctx.rejected, rules: None };
    let mut child = match ctx.process.spawn_job(OsStr::new("bash"), &args, &vars, root, confinement).await {
        Ok(child) => child,
        Err(err) => return Ran::NotStarted(err.to_string()),
    };
    // Nothing is written to it: a checker that reads its stdin sees it end.
    drop(child.take_stdin());
    let (stdout, stderr) = (child.take_stdout(), child.take_stderr());
    let about = |found: &Diagnostic| names(root, &found.path, target);
    let work = async {
        let ((mut out, _), (err, said), status) =
            tokio::join!(kept(stdout, &about), kept(stderr, &about), child.wait());
        out.extend(err);
        out.truncate(MOST_KEPT);
        match status.ok().and_then(|status| status.code()) {
            Some(code @ (126 | 127)) => Ran::NotStarted(format!("exit status {code}: {said}")),
            Some(_) | None => Ran::Found(out),
        }
    };
    let ended = tokio::select! {
        ended = tokio::time::timeout(checker.timeout, work) => Some(ended.ok()),
        () = ctx.cancel.cancelled() => None,
    };
    // Whatever it left running dies now, however it ended.
    child.stop().await;
    match ended {
        None => Ran::Cancelled,
        Some(None) => Ran::TimedOut,
        Some(Some(ran)) => ran,
    }
}

/// Whether `printed` (relative to the checker's directory `root`, or absolute) is `target`.
fn names(root: &Path, printed: &str, target: &Path) -> bool {
    let path = crate::workspace::normalize(&root.join(printed));
    // Through a symlink only when the name is the same: most lines are about other files.
    path == target
        || (path.file_name() == target.file_name() && std::fs::canonicalize(&path).is_ok_and(|real| real == target))
}

/// The diagnostics of a pipe's lines that `about` keeps, read until the pipe closes, and its
/// last line that is not blank (cut at [`MOST_SAID`] bytes).
async fn kept<R, F>(pipe: Option<R>, about: &F) -> (Vec<Diagnostic>, String)
where
    R: tokio::io::AsyncRead + Unpin,
    F: Fn(&Diagnostic) -> bool,
{
    let Some(mut pipe) = pipe else { return (Vec::new(), String::new()) };
    let mut found = Vec::new();
    let mut last = String::new();
    let mut line = Vec::with_capacity(256);
    let mut buf = [0u8; 8192];
    let mut take = |line: &mut Vec<u8>, found: &mut Vec<Diagnostic>| {
        let text = String::from_utf8_lossy(line);
        if found.len() < MOST_KEPT {
            found.extend(parse::line(&text).filter(|diagnostic| about(diagnostic)));
        }
        if !text.trim().is_empty() {
            last = super::cut(text.trim(), MOST_SAID).to_owned();
        }
        line.clear();
    };
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for piece in buf[..n].split_inclusive(|byte| *byte == b'\n') {
            let (text, ends) = match piece.strip_suffix(b"\n") {
                Some(text) => (text, true),
                None => (piece, false),
            };
            let room = MOST_LINE.saturating_sub(line.len());
            line.extend_from_slice(&text[..text.len().min(room)]);
            if ends {
                take(&mut line, &mut found);
            }
        }
    }
    take(&mut line, &mut found);
    (found, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_across_reads_cut_at_their_bound_and_kept_only_about_the_file() {
        let long = "x".repeat(3 * MOST_LINE);
        let text = format!(
            "src/a.rs:1:1: error: one\n{long}\nsrc/b.rs:2:1: error: other file\nsrc/a.rs:3:1: warning: {long}\nsrc/a.rs:4:2: error: last"
        );
        let about = |found: &Diagnostic| found.path == "src/a.rs";
        let (found, last) = kept(Some(text.as_bytes()), &about).await;
        assert_eq!(last, "src/a.rs:4:2: error: last");
        let lines: Vec<u32> = found.iter().map(|found| found.line).collect();
        assert_eq!(lines, [1, 3, 4], "the unterminated last line counts too");
        assert!(found[1].message.len() < MOST_LINE);
    }

    #[test]
    fn a_printed_path_names_the_target_relative_to_the_root_or_absolute() {
        let root = Path::new("/w");
        let target = Path::new("/w/src/a.rs");
        assert!(names(root, "src/a.rs", target));
        assert!(names(root, "./src/../src/a.rs", target));
        assert!(names(root, "/w/src/a.rs", target));
        assert!(!names(root, "a.rs", target));
        assert!(!names(root, "/elsewhere/src/a.rs", target));
    }
}

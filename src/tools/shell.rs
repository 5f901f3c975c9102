//! How `bash` runs a command: in an editor terminal when the client offers `terminal`, else as a
//! local process.
//!
//! A local command is started under the session's [`crate::process::ProcessPolicy`]: in its own
//! process group, without the provider keys, and (under cairn's supervisor) in the Landlock
//! sandbox and dying with cairn. Stopping it (timeout, cancel, or the future being dropped) kills
//! everything it started, so a `sleep` a command left in the background dies with it. Its output
//! streams to the editor while it runs. A delegated command runs in the editor's terminal, which
//! starts from the editor's environment (the keys cairn was given included) and can only set
//! variables: so the command is run through `env -u NAME … PATH=… NAME=VALUE … cairn
//! __supervise … -- bash -c COMMAND`, getting the environment a local command gets and the same
//! supervisor, sandbox, namespace and exec check; the supervisor watches nothing for cairn's end
//! (the editor started it), and the command dies with it (`ProcessPolicy::in_terminal`). Where
//! no supervisor at a path a command cannot replace can be given to the terminal, the command
//! runs locally instead. The terminal is always killed (if still running) and released, even
//! when the call is abandoned.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::host::{Host, TerminalRequest, Terminals};
use super::{ToolContext, ToolError, ToolOutcome};
use crate::history::ToolContent;
use crate::process::running::{self, Running};
use crate::process::{ChildEnv, Confinement, InTerminal, ProcessPolicy};

/// How much output is kept: this much of the start and this much of the end.
const KEEP_HEAD: usize = 100 * 1024;
const KEEP_TAIL: usize = 100 * 1024;
/// How often running output is shown.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// After the shell exits, how long to wait for the rest of its output.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);

/// The start and the end of a long output, with a count of what was dropped between them.
#[derive(Default)]
struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: usize,
}

impl Capture {
    fn push(&mut self, bytes: &[u8]) {
        let room = KEEP_HEAD.saturating_sub(self.head.len());
        let (first, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(first);
        self.tail.extend(rest);
        while self.tail.len() > KEEP_TAIL {
            self.tail.pop_front();
            self.dropped += 1;
        }
    }

    fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            text.push_str(&format!("\n[... {} bytes of output dropped ...]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// Runs the command `line` as a local process.
pub(super) async fn local(line: &str, ctx: &ToolContext, timeout: Duration) -> Result<ToolOutcome, ToolError> {
    let script = [OsStr::new("-c"), OsStr::new(line)];
    // Dropping `child` (any return below) kills whatever the command left running.
    let mut child = ctx
        .process
        .spawn(
            OsStr::new("bash"),
            &script,
            ctx.workspace.cwd(),
            Confinement { roots: ctx.workspace.roots(), rejected: &ctx.rejected, rules: None },
        )
        .await
        .map_err(|err| ToolError::Tell(format!("cannot start bash: {err}")))?;
    let mut stdout = child.take_stdout();
    let mut stderr = child.take_stderr();
    let mut capture = Capture::default();
    let (mut out_buf, mut err_buf) = ([0u8; 8192], [0u8; 8192]);
    let deadline = Instant::now() + timeout;
    let mut drain_until: Option<Instant> = None;
    let mut status = None;
    let mut shown = 0usize;
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    let stopped = loop {
        if stdout.is_none() && stderr.is_none() && status.is_some() {
            break None;
        }
        tokio::select! {
            read = read_some(&mut stdout, &mut out_buf) => if let Some(n) = read { capture.push(&out_buf[..n]) },
            read = read_some(&mut stderr, &mut err_buf) => if let Some(n) = read { capture.push(&err_buf[..n]) },
            exited = child.wait(), if status.is_none() => {
                status = Some(exited.map_err(|err| ToolError::Tell(format!("waiting for bash failed: {err}")))?);
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
            () = sleep_until(drain_until) => break None,
            () = tokio::time::sleep_until(deadline) => break Some(format!("timed out after {} s", timeout.as_secs())),
            () = ctx.cancel.cancelled() => break Some("cancelled".to_owned()),
            _ = tick.tick() => {
                let size = capture.head.len() + capture.tail.len() + capture.dropped;
                if size != shown && let Some(progress) = &ctx.progress {
                    shown = size;
                    let _ = progress.send(vec![ToolContent::Text { text: capture.text() }]);
                }
            }
        }
    };
    let text = capture.text();
    if let Some(why) = stopped {
        return Err(ToolError::Tell(format!("The command {why}; it was killed. Output so far:\n{text}")));
    }
    let code = status.and_then(|s| s.code());
    let ending = match code {
        Some(code) => format!("[exit status {code}]"),
        None => "[killed by a signal]".to_owned(),
    };
    let output = if text.is_empty() { ending } else { format!("{text}\n{ending}") };
    Ok(ToolOutcome {
        content: vec![ToolContent::Text { text: output.clone() }],
        output: with_hint(ctx, code != Some(0), &text, output),
        failed: code != Some(0),
        ..ToolOutcome::default()
    })
}

/// `output`, and after it, when the command failed on what reads like a refused write, what the
/// model should know of the sandbox.
fn with_hint(ctx: &ToolContext, failed: bool, text: &str, output: String) -> String {
    let refused = failed && ProcessPolicy::reads_as_refused(text);
    let hint = refused.then(|| ctx.process.refusal_hint()).flatten();
    match hint {
        Some(hint) => format!("{output}\n{hint}"),
        None => output,
    }
}

/// Reads from a pipe; `None` (and the pipe closed) at its end. Never resolves for a closed pipe.
pub(super) async fn read_some<R: tokio::io::AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    let Some(reader) = pipe.as_mut() else { return std::future::pending().await };
    match reader.read(buf).await {
        Ok(0) | Err(_) => {
            *pipe = None;
            None
        }
        Ok(n) => Some(n),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// `program` (with its arguments) as a terminal runs it with the children's environment: through
/// `env`, which unsets the removed variables (`-u`, a terminal request can only set them) and
/// sets `PATH` and the set variables before it runs the program; as it is when there is nothing
/// to change. The command and its arguments.
fn scrubbed(env: &ChildEnv, program: Vec<String>) -> (String, Vec<String>) {
    let text = |value: &std::ffi::OsStr| value.to_string_lossy().into_owned();
    let mut args = Vec::new();
    for name in &env.remove {
        args.extend(["-u".to_owned(), text(name)]);
    }
    // After `--` only assignments and the program follow, whatever they look like.
    let mut assignments: Vec<String> = env.path.iter().map(|path| format!("PATH={}", text(path))).collect();
    assignments.extend(env.set.iter().map(|(name, value)| format!("{}={}", text(name), text(value))));
    if args.is_empty() && assignments.is_empty() {
        let mut program = program.into_iter();
        return (program.next().unwrap_or_default(), program.collect());
    }
    args.push("--".to_owned());
    args.extend(assignments);
    args.extend(program);
    (env_program(), args)
}

/// `env` by its absolute path: the editor would look a bare name up on its own `PATH`, which
/// may hold a directory of the workspace (a virtualenv's `bin` the user activated) where a
/// command can plant an `env` that then runs unconfined for the next command.
fn env_program() -> String {
    ["/usr/bin/env", "/bin/env"]
        .into_iter()
        .find(|path| std::path::Path::new(path).is_file())
        .unwrap_or("/usr/bin/env")
        .to_owned()
}

/// Kills and releases an editor terminal when dropped before [`Self::disarm`], and counts it as
/// running (see [`crate::process::running`]) until it is released.
pub(super) struct TerminalGuard {
    host: Arc<dyn Host>,
    id: Option<String>,
    running: Option<Running>,
}

impl TerminalGuard {
    /// `running` was taken before the terminal was asked for.
    pub(super) fn new(host: Arc<dyn Host>, id: String, running: Running) -> Self {
        Self { host, id: Some(id), running: Some(running) }
    }

    /// The terminal was killed if need be and released: it no longer runs.
    pub(super) fn disarm(&mut self) {
        self.id = None;
        self.running = None;
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let running = self.running.take();
        if let Some(id) = self.id.take() {
            let host = Arc::clone(&self.host);
            tokio::spawn(async move {
                if let Some(terminals) = host.terminals() {
                    let _ = terminals.kill_terminal(&id).await;
                    let _ = terminals.release_terminal(&id).await;
                }
                drop(running);
            });
        }
    }
}

/// The request for an editor terminal that runs the command `line` confined as a local command
/// is, keeping `limit` bytes of its output; `None` when it cannot be confined there and must run
/// locally. A job (`lasting`) follows the session's rules as they change.
pub(super) fn terminal_request(line: &str, ctx: &ToolContext, limit: u64, lasting: bool) -> Option<TerminalRequest> {
    let script = [OsStr::new("-c"), OsStr::new(line)];
    let rules = ctx.rulebook.as_deref().filter(|_| lasting).map(crate::process::Rulebook::path);
    let confinement = Confinement { roots: ctx.workspace.roots(), rejected: &ctx.rejected, rules };
    // Under cairn's supervisor, as a local command: the editor's terminal only shows it.
    let program: Vec<std::ffi::OsString> = match ctx.process.in_terminal(OsStr::new("bash"), &script, confinement) {
        InTerminal::Supervised { exe, args } => std::iter::once(exe.into_os_string()).chain(args).collect(),
        InTerminal::AsItIs => vec!["bash".into(), "-c".into(), line.into()],
        InTerminal::Locally => return None,
    };
    // A terminal request carries text: a place that is not UTF-8 (a root, a hidden path) would
    // reach the supervisor changed, and not be confined as named, so such a command runs here.
    let program = program.iter().map(|part| part.to_str().map(str::to_owned)).collect::<Option<Vec<_>>>()?;
    let (command, args) = scrubbed(&ctx.process.env, program);
    Some(TerminalRequest { command, args, cwd: ctx.workspace.cwd().to_path_buf(), output_byte_limit: limit })
}

/// Runs the command `line` in an editor terminal (or locally, when it cannot be confined there).
pub(super) async fn delegated(
    line: &str,
    ctx: &ToolContext,
    terminals: &dyn Terminals,
    timeout: Duration,
) -> Result<ToolOutcome, ToolError> {
    running::prepare().await;
    let Some(request) = terminal_request(line, ctx, (KEEP_HEAD + KEEP_TAIL) as u64, false) else {
        return local(line, ctx, timeout).await;
    };
    let running = running::admit(ctx.process.reach(ctx.workspace.roots())).await;
    let id = terminals
        .create_terminal(&request)
        .await
        .map_err(|err| ToolError::Tell(format!("cannot start the command: {err}")))?;
    let mut guard = TerminalGuard::new(Arc::clone(&ctx.host), id.clone(), running);
    if let Some(progress) = &ctx.progress {
        let _ = progress.send(vec![ToolContent::Terminal { terminal_id: id.clone() }]);
    }
    let stopped = tokio::select! {
        exit = terminals.wait_for_terminal_exit(&id) => match exit {
            Ok(exit) => Ok(exit),
            Err(err) => Err(format!("failed: {err}")),
        },
        () = tokio::time::sleep(timeout) => Err(format!("timed out after {} s", timeout.as_secs())),
        () = ctx.cancel.cancelled() => Err("cancelled".to_owned()),
    };
    if stopped.is_err() {
        let _ = terminals.kill_terminal(&id).await;
    }
    let output = terminals.terminal_output(&id).await;
    let _ = terminals.release_terminal(&id).await;
    guard.disarm();
    let content = vec![ToolContent::Terminal { terminal_id: id.clone() }];
    let text = match output {
        Ok(output) if output.truncated => format!("[output truncated at the start]\n{}", output.output),
        Ok(output) => output.output,
        Err(err) => format!("[the output could not be read: {err}]"),
    };
    let exit = match stopped {
        Ok(exit) => exit,
        Err(why) => return Err(ToolError::Tell(format!("The command {why}; it was killed. Output so far:\n{text}"))),
    };
    let ending = match (exit.code, &exit.signal) {
        (Some(code), _) => format!("[exit status {code}]"),
        (None, Some(signal)) => format!("[killed by {signal}]"),
        (None, None) => "[exit status unknown]".to_owned(),
    };
    let output = if text.is_empty() { ending } else { format!("{text}\n{ending}") };
    let output = with_hint(ctx, exit.code != Some(0), &text, output);
    Ok(ToolOutcome { output, content, failed: exit.code != Some(0), ..ToolOutcome::default() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a terminal runs, run here: the removed variables are gone, whatever their names look
    /// like, and `PATH` and the set variables are as a local command gets them.
    #[test]
    fn a_terminal_command_runs_with_the_childrens_environment() {
        let env = ChildEnv {
            remove: vec!["CAIRN_TEST_KEY".into(), "-u".into()],
            path: Some("/usr/bin:/bin".into()),
            set: vec![("GIT_CONFIG_NOSYSTEM".into(), "1 two\nthree".into())],
        };
        let script = "printf '%s|%s|%s' \"${CAIRN_TEST_KEY:-unset}\" \"$PATH\" \"$GIT_CONFIG_NOSYSTEM\"";
        let (command, args) = scrubbed(&env, vec!["bash".into(), "-c".into(), script.into()]);
        assert!(
            command.starts_with('/') && command.ends_with("/env"),
            "never looked up on the editor's PATH: {command}"
        );
        assert_eq!(args[..4], ["-u", "CAIRN_TEST_KEY", "-u", "-u"]);
        let output = std::process::Command::new(&command)
            .args(&args)
            .env("CAIRN_TEST_KEY", "sk-secret")
            .env("PATH", "relative/bin:/usr/bin:/bin")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), "unset|/usr/bin:/bin|1 two\nthree");
        let plain = scrubbed(&ChildEnv::default(), vec!["bash".into(), "-c".into(), "true".into()]);
        assert_eq!(plain, ("bash".to_owned(), vec!["-c".to_owned(), "true".to_owned()]), "nothing to change");
    }
}

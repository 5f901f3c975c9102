//! A stdio MCP server as a local process: started in its own process group with the
//! environment every child gets (no provider keys, absolute `PATH`) plus its own variables, in
//! the session's directory; its stderr read into a bounded tail (and logged at debug, never
//! passed on); its stdout watched for lines that are not JSON-RPC and for a line longer than
//! [`LINE_LIMIT`] (which the protocol drops, so an answer in one would never come); its whole group killed when
//! it is dropped, and the program itself killed by the kernel when cairn dies (a server that
//! ignores the end of its stdin would otherwise outlive a `kill -9`).
//!
//! It runs without cairn's supervisor and so without Landlock: the supervisor takes the
//! program's stdin as the pipe it watches for cairn's death, and an MCP server needs stdin and
//! stdout for the protocol. MCP servers are programs the user configured, like the editor's
//! terminals; they get the scrubbed environment and die with the session.

use std::collections::VecDeque;
use std::path::Path;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use crate::process::ChildEnv;

/// The stderr tail keeps at most this many lines …
const TAIL_LINES: usize = 20;
/// … and this many bytes …
const TAIL_BYTES: usize = 2048;
/// … of lines cut at this many bytes.
const LINE_BYTES: usize = 1024;
/// What is kept of a line on stdout that is not JSON-RPC, for the message that names it.
const GARBAGE_SHOWN: usize = 200;
/// The longest line (its newline included) read from a server as one message: what rmcp's
/// stdio transport reads; it drops a longer line, and the request it answered waits on.
pub(super) const LINE_LIMIT: u64 = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH as u64;

/// A line on stdout longer than [`LINE_LIMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LongLine {
    /// Its bytes so far, its newline included once it ended.
    pub bytes: u64,
    pub ended: bool,
}

/// A running stdio server. Dropping it kills its process group.
pub(super) struct Process {
    child: Child,
    group: Group,
    stderr: watch::Receiver<Tail>,
    /// Ends when stderr reaches its end (every holder of the pipe is gone).
    stderr_done: tokio::task::JoinHandle<()>,
    garbage: watch::Receiver<Option<String>>,
    long_line: watch::Receiver<Option<LongLine>>,
}

/// The pipes the protocol runs over.
pub(super) type Pipes = (Sniffer, ChildStdin);

impl Process {
    /// Starts `command` in `cwd`. The error is the message for the user.
    pub fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        vars: &[(String, String)],
        env: &ChildEnv,
        cwd: &Path,
    ) -> Result<(Self, Pipes), String> {
        let mut cmd = Command::new(command);
        cmd.args(args);
        env.apply(&mut cmd);
        for (name, value) in vars {
            cmd.env(name, value);
        }
        cmd.current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        crate::process::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|err| format!("cannot start `{command}`: {err}"))?;
        let group = Group(child.id());
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!("cannot start `{command}`: its pipes are missing"));
        };
        let (tail_tx, tail_rx) = watch::channel(Tail::default());
        let name = server.to_owned();
        let stderr_done = tokio::spawn(read_stderr(name, stderr, tail_tx));
        let (garbage_tx, garbage_rx) = watch::channel(None);
        let (long_tx, long_rx) = watch::channel(None);
        let sniffer = Sniffer {
            inner: stdout,
            garbage: garbage_tx,
            long_line: long_tx,
            state: LineState::Start,
            line: Vec::new(),
            length: 0,
        };
        let process = Self { child, group, stderr: tail_rx, stderr_done, garbage: garbage_rx, long_line: long_rx };
        Ok((process, (sniffer, stdin)))
    }

    /// The last lines the server wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr.borrow().render()
    }

    /// The first line the server wrote to stdout that was not JSON-RPC, if any.
    pub fn garbage(&self) -> Option<String> {
        self.garbage.borrow().clone()
    }

    /// Resolves once the server has written a line longer than [`LINE_LIMIT`] to stdout (never,
    /// if the reader of stdout is gone first).
    pub fn long_line(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut seen = self.long_line.clone();
        async move {
            if seen.wait_for(Option::is_some).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// What to say about the line longer than [`LINE_LIMIT`], once it ended (or `grace` passed:
    /// the rest of it is read, and dropped, meanwhile).
    pub async fn long_line_told(&self, grace: Duration) -> String {
        let mut seen = self.long_line.clone();
        let _ = tokio::time::timeout(grace, seen.wait_for(|line| line.is_some_and(|line| line.ended))).await;
        let limit = format!("the {} MiB cairn reads as one MCP message", LINE_LIMIT >> 20);
        match *seen.borrow() {
            Some(LongLine { bytes, ended: true }) => {
                format!("it wrote a line of {bytes} bytes to stdout, more than {limit}, so its answer was dropped")
            }
            Some(LongLine { bytes, ended: false }) => format!(
                "it wrote a line of more than {limit} to stdout ({bytes} bytes so far), so its answer was dropped"
            ),
            None => format!("it wrote a line longer than {limit} to stdout"),
        }
    }

    /// The exit status if the program ends within `grace`, after which the rest of its stderr
    /// is read (for at most `grace` more: something it started may hold the pipe).
    pub async fn settle(&mut self, grace: Duration) -> Option<ExitStatus> {
        let status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok);
        if status.is_some() {
            let _ = tokio::time::timeout(grace, &mut self.stderr_done).await;
        }
        status
    }

    /// Kills the whole process group now and reaps the program.
    pub async fn kill(&mut self) {
        self.group.kill();
        // Killed once: the group id may be reused after the reaping.
        self.group.0 = None;
        let _ = self.child.wait().await;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stderr_done.abort();
    }
}

/// The process group of a server; killed when dropped.
struct Group(Option<u32>);

impl Group {
    fn kill(&mut self) {
        if let Some(group) = self.0 {
            crate::process::kill_group(group);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Describes how a program ended, for messages.
pub(super) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

async fn read_stderr(server: String, mut stderr: tokio::process::ChildStderr, tail: watch::Sender<Tail>) {
    let mut buffer = [0u8; 4096];
    loop {
        match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                let chunk = buffer.get(..read).unwrap_or_default();
                tail.send_modify(|tail| {
                    for line in tail.push(chunk) {
                        tracing::debug!(target: "cairn::mcp::stderr", server = %server, "{line}");
                    }
                });
            }
        }
    }
    tail.send_modify(Tail::finish);
}

/// The last lines of a stream: at most [`TAIL_LINES`] lines and [`TAIL_BYTES`] bytes.
#[derive(Debug, Default)]
pub(super) struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    /// The line being read, cut at [`LINE_BYTES`] (and one more byte, to know it was cut).
    partial: Vec<u8>,
}

impl Tail {
    /// Adds a chunk; returns the lines it completed.
    fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        for piece in chunk.split_inclusive(|b| *b == b'\n') {
            let (body, ended) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = (LINE_BYTES + 1).saturating_sub(self.partial.len());
            self.partial.extend(body.iter().take(room));
            if ended {
                done.push(self.end_line());
            }
        }
        done
    }

    fn finish(&mut self) {
        if !self.partial.is_empty() {
            self.end_line();
        }
    }

    fn end_line(&mut self) -> String {
        let cut = self.partial.len() > LINE_BYTES;
        self.partial.truncate(LINE_BYTES);
        let mut line = String::from_utf8_lossy(&self.partial).trim_end_matches('\r').to_owned();
        if cut {
            line.push('…');
        }
        self.partial.clear();
        self.bytes += line.len() + 1;
        self.lines.push_back(line.clone());
        while self.lines.len() > TAIL_LINES || (self.bytes > TAIL_BYTES && self.lines.len() > 1) {
            if let Some(dropped) = self.lines.pop_front() {
                self.bytes -= dropped.len() + 1;
            }
        }
        line
    }

    fn render(&self) -> String {
        let mut text: Vec<&str> = self.lines.iter().map(String::as_str).collect();
        let partial = String::from_utf8_lossy(self.partial.get(..LINE_BYTES).unwrap_or(&self.partial));
        if !partial.is_empty() {
            text.push(&partial);
        }
        text.join("\n").trim().to_owned()
    }
}

/// Where the reader of stdout is within a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LineState {
    /// Nothing but whitespace read of this line yet.
    Start,
    /// The line opened like a JSON-RPC message.
    Json,
    /// The line opened with something else; collected into `line`.
    Garbage,
}

/// The server's stdout as the protocol reads it, noting the first line that cannot be a
/// JSON-RPC message (the protocol skips such lines, so without this a server that writes only
/// those would be a silent timeout).
pub(super) struct Sniffer {
    inner: ChildStdout,
    garbage: watch::Sender<Option<String>>,
    long_line: watch::Sender<Option<LongLine>>,
    state: LineState,
    line: Vec<u8>,
    /// Bytes of the line being read, so far.
    length: u64,
}

impl Sniffer {
    fn inspect(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        loop {
            let newline = memchr::memchr(b'\n', rest);
            let (piece, after) = match newline {
                Some(at) => (rest.get(..at).unwrap_or_default(), rest.get(at + 1..).unwrap_or_default()),
                None => (rest, &[][..]),
            };
            self.within_line(piece);
            if newline.is_none() {
                break;
            }
            self.end_line();
            rest = after;
        }
    }

    /// Bytes of a line, without its newline.
    fn within_line(&mut self, bytes: &[u8]) {
        self.length += bytes.len() as u64;
        if self.length > LINE_LIMIT {
            self.note_long_line(false);
        }
        for &byte in bytes {
            match (self.state, byte) {
                (LineState::Json, _) => break,
                (LineState::Start, b' ' | b'\t' | b'\r') => {}
                (LineState::Start, b'{' | b'[') => self.state = LineState::Json,
                (LineState::Start, _) => {
                    self.state = LineState::Garbage;
                    self.line.clear();
                    self.line.push(byte);
                }
                (LineState::Garbage, _) if self.line.len() < GARBAGE_SHOWN => self.line.push(byte),
                (LineState::Garbage, _) => break,
            }
        }
    }

    fn end_line(&mut self) {
        self.length += 1;
        if self.length > LINE_LIMIT {
            self.note_long_line(true);
        }
        if self.state == LineState::Garbage {
            self.report();
        }
        self.state = LineState::Start;
        self.length = 0;
    }

    /// Notes the first line longer than [`LINE_LIMIT`]: once when it passes the limit, again
    /// when it ends (with its length).
    fn note_long_line(&mut self, ended: bool) {
        let bytes = self.length;
        self.long_line.send_if_modified(|first| {
            let news = match first {
                None => true,
                Some(seen) => ended && !seen.ended,
            };
            if news {
                *first = Some(LongLine { bytes, ended });
            }
            news
        });
    }

    fn report(&mut self) {
        let line = String::from_utf8_lossy(&self.line).trim().to_owned();
        tracing::debug!(target: "cairn::mcp::stdout", "not JSON-RPC: {line}");
        self.garbage.send_if_modified(|first| {
            if first.is_some() {
                return false;
            }
            *first = Some(line);
            true
        });
    }
}

impl AsyncRead for Sniffer {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.inspect(buf.filled().get(before..).unwrap_or_default());
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_within_its_budget() {
        let mut tail = Tail::default();
        let mut completed = Vec::new();
        for i in 0..30 {
            completed.extend(tail.push(format!("line {i}\n").as_bytes()));
        }
        assert_eq!(completed.len(), 30);
        completed.extend(tail.push(b"unfinished"));
        let text = tail.render();
        assert!(text.starts_with("line 10\n") && text.ends_with("line 29\nunfinished"), "{text}");
        let mut tail = Tail::default();
        tail.push(&vec![b'x'; 10_000]);
        tail.push(b"\nend\n");
        let text = tail.render();
        assert_eq!(text, format!("{}…\nend", "x".repeat(LINE_BYTES)));
    }
}

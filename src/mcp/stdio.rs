//! A stdio MCP server as a local process, started as local commands are
//! (`ProcessPolicy::spawn_server`): under cairn's supervisor, in the sandbox and namespace commands get (guarded places read-only, secrets
//! hidden, the session's rejected programs refused at exec; the network kept), with the
//! environment every child gets (no provider keys, absolute `PATH`) plus its own variables, in
//! the session's directory. The supervisor watches a pipe of its own for cairn's end (stdin and
//! stdout are the protocol's), so the server and everything it started, `setsid`'d or not, dies
//! with the session and with cairn, `kill -9` included; it takes away and sweeps nothing, since
//! the server lives beside the user's own work. A server configured with `sandbox = false`
//! runs supervised the same way, without the sandbox and namespace.
//!
//! Its stderr is read into a bounded tail (a ring of its last bytes; logged at debug, never
//! passed on) cheaply and at a bounded rate ([`READ_CHUNK`] at a time, at most [`WINDOW_READS`]
//! reads and [`WINDOW_BYTES`] per [`WINDOW`]), so a server flooding it costs cairn little; its
//! stdout is watched for lines that are not JSON-RPC (quoted when a start fails) and for a line
//! longer than [`LINE_LIMIT`] (which the protocol drops, so an answer in one would never come:
//! it fails a start at once). Dropping it ends its whole tree.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::pin::Pin;
use std::process::ExitStatus;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::watch;

use super::Sandbox;
use crate::process::{Confinement, Local};

/// The stderr tail shows at most this many lines …
const TAIL_LINES: usize = 20;
/// … and this many bytes …
const TAIL_BYTES: usize = 2048;
/// … of lines cut at this many bytes.
const LINE_BYTES: usize = 1024;
/// What is kept of a line on stdout that is not JSON-RPC, for the message that names it.
const GARBAGE_SHOWN: usize = 200;
/// The longest line (its newline included) read from a server as one message (`lines.rs`); a
/// longer line is dropped, and the request it answered waits on.
pub(super) const LINE_LIMIT: u64 = 16 << 20;

/// A line on stdout longer than [`LINE_LIMIT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LongLine {
    /// Its bytes so far, its newline included once it ended.
    pub bytes: u64,
    pub ended: bool,
}

/// A running stdio server. Dropping it ends everything it started.
pub(super) struct Process {
    local: Local,
    stderr: watch::Receiver<Tail>,
    /// Ends when stderr reaches its end (every holder of the pipe is gone).
    stderr_done: tokio::task::JoinHandle<()>,
    garbage: watch::Receiver<Option<String>>,
    long_line: watch::Receiver<Option<LongLine>>,
}

/// The pipes the protocol runs over.
pub(super) type Pipes = (Sniffer, ChildStdin);

impl Process {
    /// Starts `command` in the session's directory. The error is the message for the user.
    pub async fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        vars: &[(String, String)],
        sandbox: &Sandbox,
        sandboxed: bool,
    ) -> Result<(Self, Pipes), String> {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let confinement = Confinement {
            roots: &sandbox.roots,
            rejected: &sandbox.rejected,
            rules: sandbox.rulebook.as_deref().map(crate::process::Rulebook::path),
        };
        let mut local = sandbox
            .policy(sandboxed)
            .spawn_server(OsStr::new(command), &args, vars, sandbox.cwd(), confinement)
            .await
            .map_err(|err| format!("cannot start `{command}`: {err}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (local.take_stdin(), local.take_stdout(), local.take_stderr())
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
        let process = Self { local, stderr: tail_rx, stderr_done, garbage: garbage_rx, long_line: long_rx };
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
        let status = tokio::time::timeout(grace, self.local.wait()).await.ok().and_then(Result::ok);
        if status.is_some() {
            let _ = tokio::time::timeout(grace, &mut self.stderr_done).await;
        }
        status
    }

    /// Ends the program and everything it started now, and reaps it.
    pub async fn kill(&mut self) {
        self.local.stop().await;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stderr_done.abort();
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

/// Bytes read from stderr at a time: the most a pipe holds by default, so a full pipe is
/// drained in one read.
const READ_CHUNK: usize = 64 * 1024;
/// The raw bytes of stderr kept for the tail: room for [`TAIL_BYTES`] of whole lines around the
/// longest line kept.
const RING_BYTES: usize = 2 * (TAIL_BYTES + LINE_BYTES);
/// Stderr is read in windows of this long …
const WINDOW: Duration = Duration::from_millis(100);
/// … of at most this many bytes and reads; past either, the reader waits for the next window
/// and the pipe holds what comes meanwhile (a server writing faster waits on its writes).
const WINDOW_BYTES: usize = 2 << 20;
const WINDOW_READS: usize = 32;

async fn read_stderr(server: String, mut stderr: tokio::process::ChildStderr, tail: watch::Sender<Tail>) {
    let mut buffer = vec![0u8; READ_CHUNK];
    let mut window = Window { start: tokio::time::Instant::now(), bytes: 0, reads: 0 };
    loop {
        let read = match stderr.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let chunk = buffer.get(..read).unwrap_or_default();
        if tracing::enabled!(target: "cairn::mcp::stderr", tracing::Level::DEBUG) {
            // Line by line as read: a line split between two reads is logged in two pieces.
            for line in chunk.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
                let line = String::from_utf8_lossy(line);
                tracing::debug!(target: "cairn::mcp::stderr", server = %server, "{}", line.trim_end_matches('\r'));
            }
        }
        // Nobody waits for a change: the tail is read when a failure is told.
        tail.send_if_modified(|tail| {
            tail.push(chunk);
            false
        });
        window.count(read).await;
    }
}

/// What stderr was read in the current window.
struct Window {
    start: tokio::time::Instant,
    bytes: usize,
    reads: usize,
}

impl Window {
    /// Counts a read; once the window's bytes or reads are spent, waits for the next window.
    async fn count(&mut self, read: usize) {
        let now = tokio::time::Instant::now();
        if now >= self.start + WINDOW {
            *self = Window { start: now, bytes: 0, reads: 0 };
        }
        self.bytes += read;
        self.reads += 1;
        if self.bytes >= WINDOW_BYTES || self.reads >= WINDOW_READS {
            tokio::time::sleep_until(self.start + WINDOW).await;
            *self = Window { start: tokio::time::Instant::now(), bytes: 0, reads: 0 };
        }
    }
}

/// The last bytes of a stream, rendered as its last lines: at most [`TAIL_LINES`] lines and
/// [`TAIL_BYTES`] bytes, each cut at [`LINE_BYTES`]. Only the last [`RING_BYTES`] are kept, so
/// a chunk costs a copy of at most that much, however much the stream holds.
#[derive(Debug, Default)]
pub(super) struct Tail {
    ring: VecDeque<u8>,
    /// Bytes before the ring's were dropped: its first line may have begun before it.
    dropped: bool,
}

impl Tail {
    /// Adds a chunk of the stream.
    fn push(&mut self, chunk: &[u8]) {
        let kept = chunk.get(chunk.len().saturating_sub(RING_BYTES)..).unwrap_or_default();
        self.dropped |= kept.len() < chunk.len();
        let over = (self.ring.len() + kept.len()).saturating_sub(RING_BYTES);
        if over > 0 {
            self.ring.drain(..over);
            self.dropped = true;
        }
        self.ring.extend(kept);
    }

    fn render(&self) -> String {
        let bytes: Vec<u8> = self.ring.iter().copied().collect();
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        // What follows the last newline: a line not finished (or nothing).
        let partial = lines.pop().unwrap_or_default();
        let mut shown: VecDeque<String> = VecDeque::new();
        let mut total = 0;
        for (at, line) in lines.iter().enumerate() {
            let text = cut(line, at == 0 && self.dropped);
            total += text.len() + 1;
            shown.push_back(text);
            while shown.len() > TAIL_LINES || (total > TAIL_BYTES && shown.len() > 1) {
                if let Some(gone) = shown.pop_front() {
                    total -= gone.len() + 1;
                }
            }
        }
        if !partial.is_empty() {
            shown.push_back(cut(partial, lines.is_empty() && self.dropped));
        }
        Vec::from(shown).join("\n").trim().to_owned()
    }
}

/// A line as shown: cut at [`LINE_BYTES`] (`…` after), `…` before when its start was dropped.
fn cut(line: &[u8], started_before: bool) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut text = String::from(if started_before { "…" } else { "" });
    text.push_str(&String::from_utf8_lossy(line.get(..LINE_BYTES).unwrap_or(line)));
    if line.len() > LINE_BYTES {
        text.push('…');
    }
    text
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
        for i in 0..30 {
            tail.push(format!("line {i}\n").as_bytes());
        }
        tail.push(b"unfinished");
        let text = tail.render();
        assert!(text.starts_with("line 10\n") && text.ends_with("line 29\nunfinished"), "{text}");
        let mut tail = Tail::default();
        tail.push(&vec![b'x'; 10_000]);
        tail.push(b"\nend\r\n");
        let text = tail.render();
        assert_eq!(text, format!("…{}…\nend", "x".repeat(LINE_BYTES)), "a line begun before what is kept says so");
        let mut tail = Tail::default();
        let long: Vec<u8> = (0..500).flat_map(|i| format!("{}{i}\n", "y".repeat(100)).into_bytes()).collect();
        tail.push(&long);
        let text = tail.render();
        assert!(text.len() <= TAIL_BYTES && text.ends_with(&format!("{}499", "y".repeat(100))), "{text}");
    }

    #[test]
    fn the_tail_holds_a_bounded_number_of_bytes_however_much_is_pushed() {
        let mut tail = Tail::default();
        for _ in 0..100 {
            tail.push(&[b'z'; READ_CHUNK]);
            tail.push(b"\n");
            assert!(tail.ring.len() <= RING_BYTES);
        }
        assert_eq!(tail.render(), format!("…{}…", "z".repeat(LINE_BYTES)), "the end of the last line, cut");
    }
}

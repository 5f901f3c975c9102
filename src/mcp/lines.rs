//! A stdio server's messages as lines (the stdio transport of MCP): one task reads its stdout
//! a line at a time, each line at most [`LINE_LIMIT`] bytes (a longer one is dropped unread as
//! it streams by, and noted by the `Sniffer` in `stdio.rs`), and hands what parses as JSON to
//! the connection; a line that does not is skipped. Another task writes the connection's
//! messages to its stdin, one line each, and closes stdin when the connection ends.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use super::rpc::{INBOUND, Inbound, Kind, Link, OUTBOUND, Outgoing};
use super::stdio::{LINE_LIMIT, Sniffer};

/// What the line buffer keeps between lines; a larger one (a long answer's) is let go.
const KEEP: usize = 1 << 20;

/// The connection's ends over a server's stdout and stdin.
pub(super) fn link(server: &str, stdout: Sniffer, stdin: ChildStdin) -> Link {
    let (outbound, to_write) = mpsc::channel(OUTBOUND);
    let (received, inbound) = mpsc::channel(INBOUND);
    tokio::spawn(read(server.to_owned(), stdout, received));
    tokio::spawn(write(stdin, to_write));
    Link { outbound, inbound }
}

async fn read(server: String, stdout: Sniffer, received: mpsc::Sender<Inbound>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line, LINE_LIMIT).await {
            Ok(Line::Whole) => {}
            Ok(Line::Oversized) => {
                tracing::warn!(server, "the server wrote a line longer than {LINE_LIMIT} bytes; it was dropped");
                continue;
            }
            Ok(Line::End) => break,
            Err(err) => {
                tracing::debug!(server, %err, "reading the server's stdout failed");
                break;
            }
        }
        let text = line.trim_ascii();
        if !text.is_empty() {
            match serde_json::from_slice::<Value>(text) {
                Ok(message) => {
                    if received.send(Inbound::Message(message)).await.is_err() {
                        break;
                    }
                }
                Err(err) => tracing::debug!(server, %err, "a line that is not JSON, skipped"),
            }
        }
        line.clear();
        if line.capacity() > KEEP {
            line = Vec::new();
        }
    }
}

async fn write(mut stdin: ChildStdin, mut to_write: mpsc::Receiver<Outgoing>) {
    while let Some(Outgoing { mut text, kind }) = to_write.recv().await {
        text.push('\n');
        let written = match stdin.write_all(text.as_bytes()).await {
            Ok(()) => stdin.flush().await,
            Err(err) => Err(err),
        };
        let failed = written.as_ref().err().map(|err| format!("writing to the server's stdin failed: {err}"));
        if let Kind::Notification { delivered: Some(delivered), .. } = kind {
            let _ = delivered.send(failed.clone().map_or(Ok(()), Err));
        }
        if failed.is_some() {
            // Its stdout tells the connection how it ended.
            break;
        }
    }
}

/// How reading a line ended.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A whole line is in the buffer, its newline included.
    Whole,
    /// A line longer than the limit went by; nothing of it is kept.
    Oversized,
    /// The stream ended (what followed the last newline is dropped).
    End,
}

/// Reads one line into `line` (empty when called), never holding more than `limit` bytes of it.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, line: &mut Vec<u8>, limit: u64) -> std::io::Result<Line> {
    let mut oversized = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(Line::End);
        }
        let newline = memchr::memchr(b'\n', available);
        let take = newline.map_or(available.len(), |at| at + 1);
        if !oversized {
            if (line.len() + take) as u64 > limit {
                oversized = true;
                *line = Vec::new();
            } else {
                line.extend_from_slice(available.get(..take).unwrap_or_default());
            }
        }
        reader.consume(take);
        if newline.is_some() {
            return Ok(if oversized { Line::Oversized } else { Line::Whole });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_over_the_limit_are_skipped_whole_and_the_next_read() {
        let input = format!("{}\n{{\"a\":1}}\r\n{}\nshort", "x".repeat(40), "y".repeat(41));
        // A small buffer makes the long lines arrive in pieces.
        let mut reader = BufReader::with_capacity(7, input.as_bytes());
        let mut line = Vec::new();
        assert_eq!(read_line(&mut reader, &mut line, 41).await.unwrap(), Line::Whole);
        assert_eq!(line.len(), 41);
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line, 41).await.unwrap(), Line::Whole);
        assert_eq!(line, b"{\"a\":1}\r\n");
        line.clear();
        assert_eq!(read_line(&mut reader, &mut line, 41).await.unwrap(), Line::Oversized);
        assert!(line.is_empty());
        assert_eq!(read_line(&mut reader, &mut line, 41).await.unwrap(), Line::End, "an unfinished line is dropped");
    }
}

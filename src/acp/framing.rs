//! Newline-delimited input read a line at a time without ever buffering more than a limit: a
//! line past it is skipped whole and reported as such, so no client can make cairn hold an
//! unbounded line. Used by the JSON-RPC peer on its input and by the editor's bridge to a server.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What [`read_line`] found.
pub(crate) enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Reads one line into `line` (without its newline), refusing to buffer more than `limit` bytes.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    input: &mut R,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && !too_long {
                Line::Eof
            } else if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
        let (chunk, found) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (&buf[..at], Some(at)),
            None => (buf, None),
        };
        if !too_long && line.len() + chunk.len() <= limit {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line.clear();
        }
        let used = found.map_or(buf.len(), |at| at + 1);
        input.consume(used);
        if found.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Complete });
        }
    }
}

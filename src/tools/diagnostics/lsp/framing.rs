//! LSP's base protocol: every message is a JSON body behind `Content-Length: N` and any other
//! `Name: value` header lines, the headers ended by an empty line, all lines ended by `\r\n`.
//! [`read`] takes one message from a server's stdout however its bytes arrive, holding at
//! most [`MOST_HEADER`] bytes of headers and refusing a body over [`MOST_MESSAGE`] before
//! reading it; [`write`] sends one.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest body read as one message.
pub const MOST_MESSAGE: u64 = 16 << 20;
/// The most bytes of one message's headers.
pub const MOST_HEADER: u64 = 8 * 1024;

/// Why a server's output is not LSP.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a header line that is not `Name: value` (\"{0}\")")]
    BadHeader(String),
    #[error("a message without Content-Length")]
    NoLength,
    #[error("a message of {0} bytes, over the {MOST_MESSAGE}-byte bound")]
    TooLarge(u64),
    #[error("headers longer than {MOST_HEADER} bytes")]
    LongHeader,
    #[error("a message that is not JSON ({0})")]
    NotJson(String),
    #[error("its output ended inside a message")]
    Truncated,
    #[error("its output could not be read ({0})")]
    Io(#[from] std::io::Error),
}

/// The next message; `None` when the output ended between messages.
pub async fn read<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Option<Value>, FrameError> {
    let mut length = None;
    let mut header = Vec::new();
    let mut first = true;
    let mut spent = 0u64;
    loop {
        header.clear();
        let room = MOST_HEADER.saturating_sub(spent);
        let n = (&mut *reader).take(room).read_until(b'\n', &mut header).await?;
        spent += n as u64;
        if n == 0 && room == 0 {
            return Err(FrameError::LongHeader);
        }
        if n == 0 {
            return if first { Ok(None) } else { Err(FrameError::Truncated) };
        }
        if header.last() != Some(&b'\n') {
            return Err(if n as u64 >= room { FrameError::LongHeader } else { FrameError::Truncated });
        }
        first = false;
        let line = String::from_utf8_lossy(&header);
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(FrameError::BadHeader(super::super::cut(line, 80).to_owned()));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let value = value.trim();
            length = Some(value.parse::<u64>().map_err(|_| FrameError::BadHeader(format!("Content-Length: {value}")))?);
        }
    }
    let length = length.ok_or(FrameError::NoLength)?;
    if length > MOST_MESSAGE {
        return Err(FrameError::TooLarge(length));
    }
    let mut body = Vec::with_capacity(usize::try_from(length).unwrap_or(0).min(64 * 1024));
    let read = (&mut *reader).take(length).read_to_end(&mut body).await?;
    if (read as u64) < length {
        return Err(FrameError::Truncated);
    }
    serde_json::from_slice(&body).map(Some).map_err(|err| FrameError::NotJson(err.to_string()))
}

/// Writes one message.
pub async fn write<W: AsyncWrite + Unpin>(writer: &mut W, message: &Value) -> std::io::Result<()> {
    let body = serde_json::to_vec(message)?;
    let mut framed = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    framed.extend_from_slice(&body);
    writer.write_all(&framed).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use serde_json::json;
    use tokio::io::{AsyncRead, BufReader, ReadBuf};

    use super::*;

    /// Gives its bytes at most `step` at a time, as a pipe may.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let end = (self.at + self.step).min(self.bytes.len()).min(self.at + buf.remaining());
            buf.put_slice(&self.bytes[self.at..end]);
            self.at = end;
            Poll::Ready(Ok(()))
        }
    }

    fn reader(bytes: impl Into<Vec<u8>>, step: usize) -> BufReader<Trickle> {
        BufReader::new(Trickle { bytes: bytes.into(), at: 0, step })
    }

    #[tokio::test]
    async fn messages_are_read_whole_however_their_bytes_are_split() {
        let mut bytes = Vec::new();
        write(&mut bytes, &json!({"jsonrpc": "2.0", "id": 1, "result": null})).await.unwrap();
        bytes.extend_from_slice(
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: 2\r\n\r\n{}",
        );
        for step in [1, 3, 7, 4096] {
            let mut reader = reader(bytes.clone(), step);
            assert_eq!(read(&mut reader).await.unwrap(), Some(json!({"jsonrpc": "2.0", "id": 1, "result": null})));
            assert_eq!(read(&mut reader).await.unwrap(), Some(json!({})), "step {step}");
            assert!(read(&mut reader).await.unwrap().is_none(), "the end between messages is no error");
        }
    }

    #[tokio::test]
    async fn a_huge_length_is_refused_before_its_body_is_read() {
        let mut huge = reader(format!("Content-Length: {}\r\n\r\n{{", MOST_MESSAGE + 1), 5);
        assert!(matches!(read(&mut huge).await, Err(FrameError::TooLarge(n)) if n == MOST_MESSAGE + 1));
        let mut overflow = reader(b"Content-Length: 99999999999999999999999\r\n\r\n".to_vec(), 5);
        assert!(matches!(read(&mut overflow).await, Err(FrameError::BadHeader(_))));
    }

    #[tokio::test]
    async fn garbage_is_said_not_waited_on() {
        let mut garbage = reader(b"hello, I am not LSP\n".to_vec(), 4);
        let err = read(&mut garbage).await.unwrap_err();
        assert_eq!(err.to_string(), "a header line that is not `Name: value` (\"hello, I am not LSP\")");
        let mut endless = reader(vec![b'x'; 3 * MOST_HEADER as usize], 1000);
        assert!(matches!(read(&mut endless).await, Err(FrameError::LongHeader)));
        let mut no_length = reader(b"X-Other: 1\r\n\r\n{}".to_vec(), 4);
        assert!(matches!(read(&mut no_length).await, Err(FrameError::NoLength)));
        let mut not_json = reader(b"Content-Length: 3\r\n\r\nabc".to_vec(), 2);
        assert!(matches!(read(&mut not_json).await, Err(FrameError::NotJson(_))));
        let mut cut_short = reader(b"Content-Length: 30\r\n\r\n{\"a\":".to_vec(), 2);
        assert!(matches!(read(&mut cut_short).await, Err(FrameError::Truncated)));
    }
}

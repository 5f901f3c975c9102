//! stdin and stdout as the protocol uses them: read and written straight from the async
//! runtime when they are pipes or sockets (what editors and clients give an agent: Zed, Neovim
//! and Python spawn it with pipes, Node with socket pairs), so that a line in or out costs no
//! hand-off to a blocking thread. Anything else (a terminal, a file) goes through tokio's
//! blocking stdin and stdout, as before.
//!
//! Reading and writing without blocking takes `O_NONBLOCK` on the pipe's (or socket's) shared
//! file description; [`Stdio::restore`] gives it back when cairn is done with it, so that a
//! process sharing the description after cairn (`(cairn; other) | consumer`) finds it as it was.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// What stdin or stdout turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pipe,
    Socket,
    /// A terminal, a file, `/dev/null`: read and written on a blocking thread.
    Other,
}

/// stdin and stdout, opened for the runtime.
pub struct Stdio {
    pub input: Box<dyn AsyncRead + Unpin + Send>,
    pub output: Box<dyn AsyncWrite + Unpin + Send>,
    kinds: [Kind; 2],
}

impl Stdio {
    /// Opens both; must run inside the runtime.
    pub fn open() -> Self {
        let (input, input_kind) = or_blocking(reader(), || boxed_read(tokio::io::stdin()), "stdin");
        let (output, output_kind) = or_blocking(writer(), || boxed_write(tokio::io::stdout()), "stdout");
        Self { input, output, kinds: [input_kind, output_kind] }
    }

    /// The kinds of stdin and stdout, and what restores them once the protocol is done.
    pub fn restorer(&self) -> Restore {
        Restore { kinds: self.kinds }
    }
}

/// Makes stdin and stdout blocking again, as cairn found them.
pub struct Restore {
    kinds: [Kind; 2],
}

impl Restore {
    pub fn restore(self) {
        for (fd, kind) in [io::stdin().as_fd(), io::stdout().as_fd()].into_iter().zip(self.kinds) {
            let restored = fd.try_clone_to_owned().and_then(|fd| match kind {
                // Taking the fd back as blocking clears `O_NONBLOCK` on the description.
                Kind::Pipe => {
                    pipe::Receiver::from_owned_fd_unchecked(fd).and_then(pipe::Receiver::into_blocking_fd).map(drop)
                }
                Kind::Socket => std::os::unix::net::UnixStream::from(fd).set_nonblocking(false),
                Kind::Other => Ok(()),
            });
            if let Err(err) = restored {
                tracing::debug!(%err, "stdin or stdout stays non-blocking");
            }
        }
    }
}

/// The side `opened` for the runtime, or else `blocking` (tokio's own, on a blocking thread).
fn or_blocking<T>(opened: io::Result<Option<(T, Kind)>>, blocking: impl FnOnce() -> T, side: &str) -> (T, Kind) {
    match opened {
        Ok(Some(opened)) => opened,
        Ok(None) => (blocking(), Kind::Other),
        Err(err) => {
            tracing::debug!(%err, side, "read or written on a blocking thread");
            (blocking(), Kind::Other)
        }
    }
}

fn kind(fd: &OwnedFd) -> io::Result<Kind> {
    let file = File::from(fd.try_clone()?);
    let kind = file.metadata()?.file_type();
    Ok(if kind.is_fifo() {
        Kind::Pipe
    } else if kind.is_socket() {
        Kind::Socket
    } else {
        Kind::Other
    })
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

fn reader() -> io::Result<Option<(Reader, Kind)>> {
    let fd = io::stdin().as_fd().try_clone_to_owned()?;
    Ok(match kind(&fd)? {
        Kind::Pipe => Some((boxed_read(pipe::Receiver::from_owned_fd(fd)?), Kind::Pipe)),
        Kind::Socket => Some((boxed_read(socket(fd)?), Kind::Socket)),
        Kind::Other => None,
    })
}

fn writer() -> io::Result<Option<(Writer, Kind)>> {
    let fd = io::stdout().as_fd().try_clone_to_owned()?;
    Ok(match kind(&fd)? {
        Kind::Pipe => Some((boxed_write(pipe::Sender::from_owned_fd(fd)?), Kind::Pipe)),
        Kind::Socket => Some((boxed_write(socket(fd)?), Kind::Socket)),
        Kind::Other => None,
    })
}

/// A stream socket (a socket pair's end, as Node gives its children) for the runtime.
fn socket(fd: OwnedFd) -> io::Result<UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(fd);
    socket.set_nonblocking(true)?;
    UnixStream::from_std(socket)
}

fn boxed_read(reader: impl AsyncRead + Unpin + Send + 'static) -> Reader {
    Box::new(reader)
}

fn boxed_write(writer: impl AsyncWrite + Unpin + Send + 'static) -> Writer {
    Box::new(writer)
}

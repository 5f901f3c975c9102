//! Accepting connections for `cairn serve`, with the limits a listener open to every program of
//! the machine needs: a request's headers must arrive within [`HEADER_TIME`] (a client that
//! opens connections and sends half a request would otherwise hold a descriptor each for good),
//! connections not yet upgraded count against a cap of their own (past it a connection is
//! answered 503 and closed), and the process's limit on open descriptors is raised to what the
//! system allows. Each connection is served by hyper, HTTP/1.1 with upgrades or HTTP/2 (which the
//! transport's Streamable HTTP profile asks for, spoken here with prior knowledge); `http`
//! answers each request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::Server;

/// Sockets served over HTTP per connection the server takes (`Limits::connections`): a client
/// of the Streamable HTTP profile holds one for its POSTs and one per event stream it reads over
/// HTTP/1.1 (HTTP/2 carries them all on one).
pub const SOCKETS_PER_CONNECTION: usize = 4;

/// How long a request's headers may take to arrive.
pub const HEADER_TIME: Duration = Duration::from_secs(10);

/// What accepts connections: TCP (with `TCP_NODELAY`: every update is a small frame of its own,
/// which Nagle's algorithm would hold until the previous one's delayed ACK) or a Unix socket.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "TCP_NODELAY not set");
        }
        Ok(stream)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        Ok(tokio::net::UnixListener::accept(self).await?.0)
    }
}

/// One among at most so many, counted while it lives: a socket served over HTTP here, a
/// connection upgraded to a WebSocket in `upgrade` or opened by an `initialize` in `http`.
pub(super) struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot of `open`, if fewer than `most` are taken.
    pub(super) fn take(open: &Arc<AtomicUsize>, most: usize) -> Option<Self> {
        let taken = open.fetch_add(1, Ordering::AcqRel);
        let slot = Self(Arc::clone(open));
        (taken < most).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `server`'s one route on `listener` (over TLS when `tls` is given) until `stop`
/// resolves; at most `most` sockets are served over HTTP at once (upgraded ones are counted
/// apart, by `upgrade`).
pub async fn serve<L: Accept>(
    listener: L,
    server: Server,
    most: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: impl Future<Output = ()>,
) {
    raise_open_files();
    let pending = Arc::new(AtomicUsize::new(0));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
        };
        let mut io = match accepted {
            Ok(io) => io,
            Err(err) => {
                // Out of descriptors, or a connection reset before it was taken: wait a moment
                // rather than spin, as the error may last.
                tracing::warn!(%err, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(counted) = Slot::take(&pending, most) else {
            if tls.is_some() {
                continue; // a plain answer would not be read on a TLS socket
            }
            tokio::spawn(async move {
                let body = "cairn serve has too many connections open; try again later\n";
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tokio::time::timeout(Duration::from_secs(1), io.write_all(answer.as_bytes())).await;
            });
            continue;
        };
        let server = server.clone();
        let service = hyper::service::service_fn(move |request| {
            let server = server.clone();
            async move { Ok::<_, std::convert::Infallible>(super::http::answer(request, &server).await) }
        });
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_http(io, service).await,
                // The handshake has the headers' time limit: a client that opens a socket and
                // says nothing holds it no longer over TLS.
                Some(tls) => match tokio::time::timeout(HEADER_TIME, tls.accept(io)).await {
                    Ok(Ok(io)) => serve_http(io, service).await,
                    Ok(Err(err)) => tracing::debug!(%err, "a TLS handshake failed"),
                    Err(_) => tracing::debug!("a TLS handshake took longer than {HEADER_TIME:?}"),
                },
            }
            drop(counted);
        });
    }
}

/// Serves HTTP/1.1 (with upgrades) or HTTP/2 on `io` until it closes.
async fn serve_http<I, S>(io: I, service: S)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<super::upgrade::Body>,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HEADER_TIME);
    builder.http2().timer(TokioTimer::new());
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(err) = connection.await {
        tracing::debug!(%err, "an HTTP connection ended with an error");
    }
}

/// Raises the soft limit on open descriptors to the hard one: each connection holds one.
fn raise_open_files() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct we own; setrlimit reads it.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

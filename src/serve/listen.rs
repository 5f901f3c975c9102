//! Accepting connections for `cairn serve`, with the limits a listener open to every program of
//! the machine needs: a request's headers must arrive within [`HEADER_TIME`] (a client that
//! opens connections and sends half a request would otherwise hold a descriptor each for good),
//! connections not yet upgraded count against a cap of their own (past it a connection is
//! answered 503 and closed), and the process's limit on open descriptors is raised to what the
//! system allows. Each connection is served by hyper, HTTP/1.1 with upgrades or HTTP/2 (which the
//! transport's Streamable HTTP profile asks for, spoken here with prior knowledge); `http`
//! answers each request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
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
        let activity = Arc::new(Activity::default());
        let watched = Arc::clone(&activity);
        let service = hyper::service::service_fn(move |request| {
            let (server, busy) = (server.clone(), Busy::start(&watched));
            async move {
                let response = super::http::answer(request, &server).await;
                // Busy until the answer's body is done with: an event stream keeps its socket.
                let response = response.map(|body| BodyExt::boxed_unsync(Guarded { body, _busy: busy }));
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_http(io, service, activity).await,
                // The handshake has the headers' time limit: a client that opens a socket and
                // says nothing holds it no longer over TLS.
                Some(tls) => match tokio::time::timeout(HEADER_TIME, tls.accept(io)).await {
                    Ok(Ok(io)) => serve_http(io, service, activity).await,
                    Ok(Err(err)) => tracing::debug!(%err, "a TLS handshake failed"),
                    Err(_) => tracing::debug!("a TLS handshake took longer than {HEADER_TIME:?}"),
                },
            }
            drop(counted);
        });
    }
}

/// What a socket served over HTTP is doing: answers not yet done with (an event stream's lasts
/// as long as the stream), and when the last one ended.
#[derive(Default)]
struct Activity {
    busy: AtomicUsize,
    /// Milliseconds since the socket was taken at which it was last busy.
    since: AtomicU64,
    taken: std::sync::OnceLock<std::time::Instant>,
}

impl Activity {
    fn now(&self) -> u64 {
        let taken = self.taken.get_or_init(std::time::Instant::now);
        u64::try_from(taken.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How long it has had nothing to do; zero while busy.
    fn idle(&self) -> Duration {
        if self.busy.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.now().saturating_sub(self.since.load(Ordering::Acquire)))
    }
}

/// An answer's body, keeping its socket busy until it is done with; its length and end are the
/// body's own.
struct Guarded {
    body: super::upgrade::Body,
    _busy: Busy,
}

impl hyper::body::Body for Guarded {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// One answer under way on a socket.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.since.store(self.0.now(), Ordering::Release);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves HTTP/1.1 (with upgrades) or HTTP/2 on `io` until it closes. A socket with no answer
/// under way for [`HEADER_TIME`] is closed: HTTP/1.1's own limit covers a request's headers, and
/// this one also covers an HTTP/2 socket that opens no stream, or no more, and keeps quiet.
async fn serve_http<I, S>(io: I, service: S, activity: Arc<Activity>)
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
    activity.since.store(activity.now(), Ordering::Release);
    let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    let mut checks = tokio::time::interval(HEADER_TIME / 4);
    let mut closing = false;
    let ended = loop {
        tokio::select! {
            ended = connection.as_mut() => break ended,
            _ = checks.tick() => {
                // HTTP/2's graceful close waits for the client to answer a ping; one that keeps
                // quiet is dropped at the next check.
                if closing {
                    break Ok(());
                }
                if activity.idle() >= HEADER_TIME {
                    tracing::debug!("closing a socket idle for {:?}", activity.idle());
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    };
    if let Err(err) = ended {
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

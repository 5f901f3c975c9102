//! `cairn serve`: the Agent Client Protocol over WebSocket, for any number of clients, with
//! sessions that belong to the server instead of to a connection.
//!
//! One endpoint, `/acp`, upgrades a `GET` to a WebSocket (the `Acp-Connection-Id` header on the
//! 101 names the connection) and serves it as an editor is served on stdio (`socket`). All
//! connections share one [`Registry`] whose sink is a [`Hub`]: a session's updates go to every
//! connection viewing it, any connection may load or resume a session another one made, and a
//! connection that goes away only detaches; its turns go on and are recorded. A connection is
//! pinged, and one silent for two heartbeats is cut off (a half-open socket); past a number of
//! open connections an upgrade is answered 503 ([`Limits`]); connections not yet upgraded have a
//! cap and a time limit of their own (`listen`). SIGTERM or SIGINT stops accepting,
//! cancels the running turns cleanly and flushes the store.
//!
//! It listens on loopback or on a Unix socket (made 0600): serving beyond this machine needs
//! tokens, which come with the HTTP profile of the transport.

pub mod bridge;
mod listen;
mod socket;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::config::Config;
use crate::session::{Hub, Registry};
use crate::store::Store;

/// Where `cairn serve` listens when not told.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// The header naming a connection, on the upgrade's answer.
const CONNECTION_HEADER: &str = "acp-connection-id";

/// A place to listen: a TCP address, or a Unix socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Listen {
    /// `ADDR:PORT`, or a path (anything with a `/`) for a Unix socket. A TCP address must be
    /// loopback.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.contains('/') {
            return Ok(Self::Unix(PathBuf::from(text)));
        }
        let address: SocketAddr = text.parse().map_err(|_| {
            format!("--listen {text}: not an address; give IP:PORT (such as {DEFAULT_LISTEN}) or a Unix socket's path")
        })?;
        if !address.ip().is_loopback() {
            return Err(format!(
                "--listen {text}: not a loopback address; cairn serve has no tokens to check clients with yet, so it \
                 serves this machine only: listen on 127.0.0.1 or ::1, or on a Unix socket"
            ));
        }
        Ok(Self::Tcp(address))
    }
}

/// How `cairn serve` treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How often a connection is pinged; one silent for two of these is cut off.
    pub heartbeat: Duration,
    /// Connections open at once; past it an upgrade is answered 503.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { heartbeat: Duration::from_secs(20), connections: 1024 }
    }
}

/// What every connection shares.
#[derive(Clone)]
struct Server {
    sessions: Registry,
    hub: Arc<Hub>,
    limits: Limits,
    /// Connections open now.
    open: Arc<AtomicUsize>,
}

/// One open connection, counted while it lives.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A slot, if fewer than `most` are taken.
    fn take(open: &Arc<AtomicUsize>, most: usize) -> Option<Self> {
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

/// Serves until SIGTERM or SIGINT. `setup` loads the configuration and opens the store.
pub async fn run(
    listen: Listen,
    limits: Limits,
    setup: impl FnOnce() -> Result<(Store, Arc<Config>), String>,
) -> Result<(), String> {
    let (store, config) = setup()?;
    let hub = Hub::new();
    let sessions = Registry::new(store, config, Arc::clone(&hub) as Arc<dyn crate::session::UpdateSink>);
    crate::llm::http::prepare();
    sessions.warm_default_model();
    let server = Server { sessions: sessions.clone(), hub, limits, open: Arc::new(AtomicUsize::new(0)) };
    let app = axum::Router::new().route("/acp", get(upgrade)).with_state(server);
    let stop = async {
        stopped().await;
        tracing::info!("stopping: cancelling the running turns");
    };
    let most = limits.connections;
    match listen {
        Listen::Tcp(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|err| format!("cannot listen on {address}: {err}"))?;
            let bound = listener.local_addr().map_err(|err| err.to_string())?;
            say(&format!("cairn serve: listening on ws://{bound}/acp"));
            listen::serve(listener, app, most, stop).await;
        }
        Listen::Unix(path) => {
            let (listener, id) = bind_unix(&path)?;
            say(&format!("cairn serve: listening on {} (WebSocket at /acp)", path.display()));
            listen::serve(listener, app, most, stop).await;
            unbind_unix(&path, id);
        }
    }
    sessions.shutdown().await;
    Ok(())
}

/// A Unix socket at `path`, readable and writable by this user alone from the moment it is
/// there: it is bound in a new 0700 directory beside `path`, made 0600, then renamed into place.
/// A socket left at `path` by a server that is gone is replaced; anything else is not touched.
/// Also the socket's identity, so that only this socket is removed at exit.
fn bind_unix(path: &std::path::Path) -> Result<(tokio::net::UnixListener, (u64, u64)), String> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let shown = path.display();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{shown} exists and is not a socket; give another path"));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{shown} is in use by a running server"));
        }
    }
    let parent = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let private = parent.join(format!(".{}", crate::ids::new_id("cairn-serve")));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|err| format!("cannot listen on {shown}: cannot make a directory in {}: {err}", parent.display()))?;
    let bound = private.join("acp.sock");
    let made = (|| {
        let listener =
            tokio::net::UnixListener::bind(&bound).map_err(|err| format!("cannot listen on {shown}: {err}"))?;
        std::fs::set_permissions(&bound, std::fs::Permissions::from_mode(0o600))
            .map_err(|err| format!("cannot make {shown} private: {err}"))?;
        let meta = std::fs::symlink_metadata(&bound).map_err(|err| err.to_string())?;
        std::fs::rename(&bound, path).map_err(|err| format!("cannot listen on {shown}: {err}"))?;
        Ok((listener, (meta.dev(), meta.ino())))
    })();
    let _ = std::fs::remove_file(&bound);
    let _ = std::fs::remove_dir(&private);
    made
}

/// Removes the socket at `path` if it is still the one this server bound.
fn unbind_unix(path: &std::path::Path, id: (u64, u64)) {
    use std::os::unix::fs::MetadataExt;
    if std::fs::symlink_metadata(path).is_ok_and(|meta| (meta.dev(), meta.ino()) == id) {
        let _ = std::fs::remove_file(path);
    }
}

/// `GET /acp`: the WebSocket upgrade, naming the connection. A request from a web page (any
/// `Origin` header: browsers send one with every WebSocket handshake, programs do not) is
/// refused: a page the user visits could otherwise open a socket to this loopback port and
/// drive the agent, tools and all.
async fn upgrade(
    State(server): State<Server>,
    headers: axum::http::HeaderMap,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
        tracing::info!(origin = ?origin, "refused a connection from a web page");
        let why = "cairn serve takes no connections from web pages (the request has an Origin header): a page \
                   could drive the agent; connect from a program\n";
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            let why = format!(
                "{rejection}: /acp speaks ACP over WebSocket (GET with Upgrade: websocket); the HTTP profile is not \
                 served yet\n"
            );
            return (rejection.status(), why).into_response();
        }
    };
    let Some(slot) = Slot::take(&server.open, server.limits.connections) else {
        let why = format!(
            "cairn serve has {} connections open, its limit (--max-connections); try again later\n",
            server.limits.connections
        );
        return (StatusCode::SERVICE_UNAVAILABLE, why).into_response();
    };
    let connection = crate::ids::new_id("conn");
    let header = HeaderValue::from_str(&connection);
    tracing::debug!(%connection, "a client connected");
    let heartbeat = server.limits.heartbeat;
    let mut response = upgrade.max_message_size(socket::MAX_FRAME).max_frame_size(socket::MAX_FRAME).on_upgrade(
        move |ws| async move {
            socket::serve(ws, server.sessions, server.hub, connection, heartbeat).await;
            drop(slot);
        },
    );
    match header {
        Ok(value) => {
            response.headers_mut().insert(CONNECTION_HEADER, value);
        }
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
    response
}

/// Resolves at SIGTERM or SIGINT.
async fn stopped() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// One plain line on stderr, for the person who started the server.
pub(crate) fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_is_loopback_or_a_socket_path() {
        assert_eq!(Listen::parse("127.0.0.1:0"), Ok(Listen::Tcp("127.0.0.1:0".parse().unwrap())));
        assert_eq!(Listen::parse("[::1]:7420"), Ok(Listen::Tcp("[::1]:7420".parse().unwrap())));
        assert_eq!(Listen::parse("/run/user/1000/cairn.sock"), Ok(Listen::Unix("/run/user/1000/cairn.sock".into())));
        assert_eq!(Listen::parse("./cairn.sock"), Ok(Listen::Unix("./cairn.sock".into())));
        let open = Listen::parse("0.0.0.0:7420").unwrap_err();
        assert!(open.contains("not a loopback address") && open.contains("127.0.0.1"), "{open}");
        let wrong = Listen::parse("localhost").unwrap_err();
        assert!(wrong.contains("IP:PORT"), "{wrong}");
    }
}

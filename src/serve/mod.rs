//! `cairn serve`: the Agent Client Protocol over WebSocket and Streamable HTTP, for any number
//! of clients, with sessions that belong to the server instead of to a connection.
//!
//! One endpoint, `/acp` (`http`), upgrades a `GET` to a WebSocket (`upgrade`; the
//! `Acp-Connection-Id` header on the 101 names the connection) and serves it as an editor is
//! served on stdio (`socket`), or serves the Streamable HTTP profile: messages POSTed, answers
//! and updates on event streams (`http`). All
//! connections share one [`Registry`] whose sink is a [`Hub`]: a session's updates go to every
//! connection viewing it, any connection may load or resume a session another one made, and a
//! connection that goes away only detaches; its turns go on and are recorded. A connection is
//! pinged, and one silent for two heartbeats is cut off (a half-open socket); past a number of
//! open connections an upgrade or an `initialize` is answered 503 ([`Limits`]); sockets served
//! over HTTP have a cap and a time limit of their own (`listen`). SIGTERM or SIGINT stops accepting,
//! cancels the running turns cleanly and flushes the store.
//!
//! Without `--auth` it listens on loopback or on a Unix socket (made 0600), every request must
//! show the server's own secret, kept in the data directory (`secret`: any program can reach a
//! loopback port, and a sandboxed command never sees that directory), and every connection acts
//! for the local user. With `--auth` (required for any other address) every
//! request to `/acp` must carry a bearer token `cairn serve token create` made (`auth`,
//! `tokens`), checked before anything touches state; the connection then acts for the token's
//! principal, which owns the sessions it creates and sees no other's.

mod auth;
pub mod bridge;
mod http;
mod listen;
mod seat;
pub mod secret;
mod socket;
mod tls;
pub mod tokens;
mod upgrade;

pub use tls::TlsFiles;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crate::config::Config;
use crate::session::{Hub, Registry};
use crate::store::Store;

/// Where `cairn serve` listens when not told.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

/// A place to listen: a TCP address, or a Unix socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Listen {
    /// `ADDR:PORT`, or a path (anything with a `/`) for a Unix socket. A TCP address that is
    /// not loopback is taken only with `auth` (tokens checked).
    pub fn parse(text: &str, auth: bool) -> Result<Self, String> {
        if text == LOCAL {
            return local_socket().map(Self::Unix);
        }
        if text.contains('/') {
            return Ok(Self::Unix(PathBuf::from(text)));
        }
        let address: SocketAddr = text.parse().map_err(|_| {
            format!("--listen {text}: not an address; give IP:PORT (such as {DEFAULT_LISTEN}) or a Unix socket's path")
        })?;
        if !address.ip().is_loopback() && !auth {
            return Err(format!(
                "--listen {text}: not a loopback address; serving beyond this machine needs --auth, so that only \
                 clients holding a token (`cairn serve token create --principal NAME`) get in; or listen on \
                 127.0.0.1, ::1 or a Unix socket"
            ));
        }
        Ok(Self::Tcp(address))
    }
}

/// What names the user's own socket, in `--listen`, `--server` and `[serve] url`.
pub const LOCAL: &str = "local";

/// The user's own socket: `cairn.sock` in the runtime directory (`$XDG_RUNTIME_DIR`, which only
/// the user can enter).
pub fn local_socket() -> Result<PathBuf, String> {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir).join("cairn.sock")),
        None => Err(format!(
            "`{LOCAL}` is the socket cairn.sock in your runtime directory, but XDG_RUNTIME_DIR is not set; give a \
             socket's path instead"
        )),
    }
}

/// How `cairn serve` treats its connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How often a connection is pinged; one silent for two of these is cut off.
    pub heartbeat: Duration,
    /// Connections open at once (WebSocket and Streamable HTTP); past it an upgrade or an
    /// `initialize` is answered 503.
    pub connections: usize,
    /// Of those, what one principal of `--auth` may hold; past it its next is answered 503.
    pub per_principal: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { heartbeat: Duration::from_secs(20), connections: 1024, per_principal: 64 }
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
    /// The Streamable HTTP connections, by id.
    http: Arc<http::Connections>,
    /// The connections each principal holds.
    seats: Arc<seat::Seats>,
    /// What every request must show: a token (`--auth`) or the server's own secret.
    gate: auth::Gate,
}

/// Serves until SIGTERM or SIGINT, over TLS with `tls`' certificate when given. `setup` loads
/// the configuration and opens the store. With `auth`, every request must carry a live token of
/// the store's; refused at start when there is none.
pub async fn run(
    listen: Listen,
    limits: Limits,
    auth: bool,
    tls: Option<TlsFiles>,
    setup: impl FnOnce() -> Result<(Store, Arc<Config>), String>,
) -> Result<(), String> {
    let tls = tls.as_ref().map(tls::acceptor).transpose()?;
    let (ws, http) = if tls.is_some() { ("wss", "https") } else { ("ws", "http") };
    let (store, config) = setup()?;
    if let Some(database) = store.shared_database() {
        say(&format!("cairn serve: sessions are kept in PostgreSQL at {database}"));
    }
    let gate = auth::Gate::open(&store, auth, &config.data_dir)?;
    // Where this server listens is noted beside the secret, for the bridge (without `--auth`).
    let secret_dir = (!auth).then(|| config.data_dir.clone());
    let note = |at: &str| secret_dir.as_deref().map_or(Ok(()), |dir| secret::listening(dir, at));
    if !auth {
        say(&format!(
            "cairn serve: clients show the secret kept in {} as `Authorization: Bearer` (`cairn acp --server` \
             does by itself)",
            secret::path(&config.data_dir).display()
        ));
    }
    let hub = Hub::new();
    hub.share(&store);
    let sessions = Registry::new(store, config, Arc::clone(&hub) as Arc<dyn crate::session::UpdateSink>);
    crate::llm::http::prepare();
    sessions.warm_default_model();
    let server = Server {
        sessions: sessions.clone(),
        hub,
        limits,
        open: Arc::new(AtomicUsize::new(0)),
        http: Arc::default(),
        seats: Arc::default(),
        gate,
    };
    let stop = async {
        stopped().await;
        tracing::info!("stopping: cancelling the running turns");
    };
    let most = limits.connections.saturating_mul(listen::SOCKETS_PER_CONNECTION);
    match listen {
        Listen::Tcp(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|err| format!("cannot listen on {address}: {err}"))?;
            let bound = listener.local_addr().map_err(|err| err.to_string())?;
            note(&bound.to_string())?;
            say(&format!("cairn serve: listening on {ws}://{bound}/acp (Streamable HTTP at {http}://{bound}/acp)"));
            listen::serve(listener, server.clone(), most, tls, stop).await;
        }
        Listen::Unix(path) => {
            let (listener, id) = bind_unix(&path)?;
            let canonical =
                std::fs::canonicalize(&path).map_err(|err| format!("cannot find {}: {err}", path.display()))?;
            note(&canonical.to_string_lossy())?;
            say(&format!("cairn serve: listening on {} (WebSocket and Streamable HTTP at /acp)", path.display()));
            listen::serve(listener, server.clone(), most, tls, stop).await;
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

/// `text`, one message of a frame, as one line without its newline: a raw line break (which JSON
/// allows only between tokens, a string's being escaped) becomes a space, so no text changes and
/// one frame never becomes two lines.
fn one_line(text: &str) -> Vec<u8> {
    text.bytes().map(|b| if matches!(b, b'\n' | b'\r') { b' ' } else { b }).collect()
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
    fn a_listen_address_is_loopback_or_a_socket_path_unless_tokens_are_checked() {
        assert_eq!(Listen::parse("127.0.0.1:0", false), Ok(Listen::Tcp("127.0.0.1:0".parse().unwrap())));
        assert_eq!(Listen::parse("[::1]:7420", false), Ok(Listen::Tcp("[::1]:7420".parse().unwrap())));
        let socket = Listen::parse("/run/user/1000/cairn.sock", false);
        assert_eq!(socket, Ok(Listen::Unix("/run/user/1000/cairn.sock".into())));
        assert_eq!(Listen::parse("./cairn.sock", false), Ok(Listen::Unix("./cairn.sock".into())));
        let open = Listen::parse("0.0.0.0:7420", false).unwrap_err();
        assert!(open.contains("not a loopback address") && open.contains("--auth"), "{open}");
        assert_eq!(Listen::parse("0.0.0.0:7420", true), Ok(Listen::Tcp("0.0.0.0:7420".parse().unwrap())));
        let wrong = Listen::parse("localhost", true).unwrap_err();
        assert!(wrong.contains("IP:PORT"), "{wrong}");
    }
}

//! The HTTP client the model providers share, built once per process off the request path, and
//! the connections opened ahead of a session's first request.
//!
//! Building the client is the costliest step of a first request (its TLS setup reads and parses
//! every root certificate of the system), so nothing that answers a request builds it: startup
//! calls [`prepare`] on a blocking thread once the sessions are set up, and async code gets it
//! through [`client`], which waits for that build on a blocking thread when it is still running,
//! never on the runtime's workers.
//!
//! A provider's `warm` opens a connection ([`Warming::start`]) and notes it as under way, once
//! per URL in [`WARM_AGAIN_AFTER`]; a request to the same URL sent meanwhile first waits for it
//! ([`Warming::join`], at most [`SHARE_WAIT`]) and then takes that connection from the pool,
//! instead of opening a second one beside it.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();

/// Builds the shared client now, on the calling thread (which may block), unless it is built.
pub fn prepare() {
    let _ = blocking_client();
}

/// The shared client, built on the calling thread if it is not yet: for code that may block.
fn blocking_client() -> reqwest::Client {
    CLIENT
        .get_or_init(|| {
            crate::net::client_builder().connect_timeout(Duration::from_secs(30)).build().unwrap_or_else(|err| {
                tracing::warn!(%err, "HTTP client setup failed; using defaults");
                reqwest::Client::new()
            })
        })
        .clone()
}

/// The shared client, for async code: a build still to do or under way is done or waited for on
/// a blocking thread.
pub(crate) async fn client() -> reqwest::Client {
    if let Some(client) = CLIENT.get() {
        return client.clone();
    }
    match tokio::task::spawn_blocking(blocking_client).await {
        Ok(client) => client,
        // The blocking pool is shutting down: nothing else is waiting for this thread.
        Err(_) => blocking_client(),
    }
}

/// A warmed connection idles in the pool for 90 s; warming again sooner would open nothing new.
pub(crate) const WARM_AGAIN_AFTER: Duration = Duration::from_secs(30);

/// The longest a request waits for a connection being opened ahead to the same URL before it
/// opens its own: more than a TLS handshake with a distant server takes.
pub(crate) const SHARE_WAIT: Duration = Duration::from_secs(2);

/// The connections being opened ahead of a first request (and those opened within
/// [`WARM_AGAIN_AFTER`]), by URL.
static WARMINGS: Mutex<Vec<Noted>> = Mutex::new(Vec::new());

struct Noted {
    url: String,
    at: Instant,
    /// Closed when the connection is open (or opening it failed).
    done: watch::Receiver<()>,
}

/// A connection being opened ahead to one URL; dropping it tells the requests waiting for it.
pub(crate) struct Warming {
    _open: watch::Sender<()>,
}

impl Warming {
    /// Notes that a connection to `url` is being opened, unless one was within
    /// [`WARM_AGAIN_AFTER`] (an editor opening many sessions at once warms one connection, not
    /// one per session): then `None`.
    pub(crate) fn start(url: &str) -> Option<Self> {
        let mut noted = WARMINGS.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        noted.retain(|noted| now.duration_since(noted.at) < WARM_AGAIN_AFTER);
        if noted.iter().any(|noted| noted.url == url) {
            return None;
        }
        let (open, done) = watch::channel(());
        noted.push(Noted { url: url.to_owned(), at: now, done });
        Some(Self { _open: open })
    }

    /// Waits, at most [`SHARE_WAIT`], for a connection to `url` still being opened ahead, so
    /// that the request after it takes that connection instead of racing it with its own.
    pub(crate) async fn join(url: &str) {
        let pending = {
            let noted = WARMINGS.lock().unwrap_or_else(PoisonError::into_inner);
            noted
                .iter()
                .find(|noted| noted.url == url && noted.done.has_changed().is_ok())
                .map(|noted| noted.done.clone())
        };
        if let Some(mut done) = pending {
            // Closed, not changed, is what ends the wait: the value is never sent.
            let _ = tokio::time::timeout(SHARE_WAIT, done.changed()).await;
        }
    }
}

#[cfg(test)]
mod tests;

//! PostgreSQL, the store shared by `cairn serve` replicas: where a database is, how to reach it
//! (in TLS as the URL's `sslmode` asks, `tls`), and what went wrong, said without ever showing
//! its password.
//!
//! The backend (`store`, `Postgres`) has a writer task that commits queued writes in batches
//! under the sessions' leases (`writer`, each write's statements chosen in `writes`) and the
//! statements on sessions, messages and parts (`rows`), file checkpoints (`checkpoints`),
//! project rules (`rules`), listings (`listing`), imports, exports and forks (`transfer`) and
//! bearer tokens (`tokens`); beside it, the schema and its migration (`migrate`, run once under
//! an advisory lock however many replicas start together), the cross-replica session lease
//! with its fencing token (`lease`), and each session's event log with the follower that
//! streams another replica's writes (`events`), pruned of old rows (`prune`). A connection lost
//! to a restart, a failover or a network blip is made again (`regain`): the writer's within a
//! bound, running its batch again only when it did not commit; the reader's at its next use.
//! It carries all of the store; `cairn serve --store` selects it.

mod checkpoints;
mod claims;
#[cfg(test)]
mod claims_tests;
pub mod events;
#[cfg(test)]
mod events_tests;
#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod follow_tests;
mod follower;
mod grouped;
#[cfg(test)]
mod grouped_tests;
pub mod health;
mod held;
pub mod inbox;
pub mod late;
pub mod lease;
mod listing;
#[cfg(test)]
mod lock_order_tests;
mod logged;
pub mod migrate;
#[cfg(test)]
mod outage_tests;
mod prepared;
pub mod prune;
mod regain;
mod rows;
mod rules;
mod store;
mod streams;
#[cfg(test)]
mod streams_tests;
pub mod sweeper;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(test)]
mod tls_tests;
pub mod tokens;
mod transfer;
mod writer;
#[cfg(test)]
mod writer_tests;
mod writes;

pub use prepared::Prepared;
pub use regain::REGAIN_WITHIN;
pub use store::{Postgres, Tuning};
pub use writer::Then;

use std::fmt;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio_postgres::config::Host;
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::{AsyncMessage, Client, Config, Notification};

use crate::pgurl::{self, SslMode};

/// How long a connection attempt may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why PostgreSQL could not do what was asked. The database is named by host, port, database
/// and user, never with its password.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PgError {
    #[error(
        "the PostgreSQL URL is malformed ({0}); write postgres://user:password@host:port/database (the password is never shown)"
    )]
    BadUrl(String),
    #[error("cannot connect to PostgreSQL at {at}: {detail}; check that it runs and accepts this host and user")]
    Connect { at: String, detail: String },
    /// TLS was asked for and could not be had, or the server's certificate was refused.
    #[error("no TLS connection to PostgreSQL at {at}: {detail}; {fix}")]
    Tls { at: String, detail: String, fix: String },
    #[error("PostgreSQL at {at}: {detail}")]
    Query { at: String, detail: String },
    /// The session's lease is another replica's now: the write was rolled back.
    #[error(
        "session {session} is now run by another replica (this one's lease, epoch {epoch}, was taken over); nothing was written"
    )]
    Fenced { session: String, epoch: i64 },
    #[error(
        "the PostgreSQL database at {at} has cairn schema version {found}, newer than this cairn supports ({supported}); upgrade this replica to the version the others run"
    )]
    TooNew { at: String, found: i64, supported: i64 },
    /// The writer's connection broke and no new one could be made in time (`regain`).
    #[error(
        "the connection to PostgreSQL at {at} was lost and not regained within {within_s} s ({detail}): {outcome}; check that the database is running and reachable from this host"
    )]
    Lost { at: String, within_s: u64, detail: String, outcome: String },
    #[error("the PostgreSQL store has stopped: cairn is shutting down")]
    Stopped,
}

/// A PostgreSQL database, as a `postgres://` URL or a `key=value` string names it.
#[derive(Clone)]
pub struct PgTarget {
    config: Config,
    /// `sslmode`, as the URL says or libpq's default.
    mode: SslMode,
    tls: tls::Connector,
    /// What errors and logs call it: `user@host:port/database`.
    shown: String,
}

impl PgTarget {
    /// Reads the URL and, for `verify-ca` and `verify-full`, its `sslrootcert` file.
    pub fn parse(url: &str) -> Result<Self, PgError> {
        let split = pgurl::split(url).map_err(PgError::BadUrl)?;
        let mut config: Config =
            split.rest.parse().map_err(|err: tokio_postgres::Error| PgError::BadUrl(err.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(PgError::BadUrl("it names no host".into()));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("cairn");
        // Every statement cairn sends touches few rows through an index, but the planner
        // estimates some (the prune's age filter on a table not analyzed yet, a load of a long
        // session) above JIT's cost threshold; PostgreSQL then compiles them with LLVM, 150 ms
        // of the server's CPU for a statement that runs in under one. Options the URL gives
        // come after, so a `-c jit=on` there still wins.
        let options = match config.get_options() {
            Some(given) if !given.is_empty() => format!("-c jit=off {given}"),
            _ => "-c jit=off".to_owned(),
        };
        config.options(&options);
        // PostgreSQL never speaks TLS on a Unix socket; libpq ignores sslmode there too.
        let local = config.get_hosts().iter().all(|host| matches!(host, Host::Unix(_)));
        config.ssl_mode(match split.ssl_mode {
            _ if local => WireMode::Disable,
            SslMode::Disable => WireMode::Disable,
            SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        });
        let shown = shown(&config);
        let tls = tls::Connector::new(split.ssl_mode, split.root_cert.as_deref()).map_err(|detail| PgError::Tls {
            at: shown.clone(),
            detail,
            fix:
                "give sslrootcert the path of a readable PEM file of the authority that signed the server's certificate"
                    .into(),
        })?;
        Ok(Self { config, mode: split.ssl_mode, tls, shown })
    }

    /// Every connection made from here on is ended by the server once it has sat inside a
    /// transaction for `limit` without a word (`idle_in_transaction_session_timeout`). A
    /// replica paused or cut off mid-transaction would otherwise keep its row locks (a batch's
    /// `FOR SHARE` of its leases) until its TCP connection is found dead, and every sweep skips
    /// a locked lease: its sessions could not be taken over. With `limit` the lease's time to
    /// live, the locks go when the lease lapses; the paused replica, when it wakes, finds its
    /// connection ended and its batch fenced. Options the URL gave are kept.
    pub fn limit_idle_transactions(&mut self, limit: std::time::Duration) {
        let millis = limit.as_millis().max(1);
        let options = match self.config.get_options() {
            Some(given) if !given.is_empty() => format!("{given} -c idle_in_transaction_session_timeout={millis}"),
            _ => format!("-c idle_in_transaction_session_timeout={millis}"),
        };
        self.config.options(&options);
    }

    /// Connects, with the connection's driver on a task of its own (it ends when the client
    /// is dropped or the server goes away).
    pub async fn connect(&self) -> Result<Client, PgError> {
        let (client, connection) =
            self.config.connect(self.tls.clone()).await.map_err(|err| self.connect_failed(&err))?;
        let at = self.shown.clone();
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!("the connection to PostgreSQL at {at} ended: {}", detail(&err));
            }
        });
        Ok(client)
    }

    /// The connection kept in `slot` by a task of its own, made again when there is none or it
    /// broke; `None` when it cannot be made, logged as a failure to `doing`.
    pub async fn connected<'a>(&self, slot: &'a mut Option<Client>, doing: &str) -> Option<&'a mut Client> {
        if slot.as_ref().is_none_or(Client::is_closed) {
            *slot = match self.connect().await {
                Ok(fresh) => Some(fresh),
                Err(err) => {
                    tracing::warn!("cannot {doing}: {err}");
                    None
                }
            };
        }
        slot.as_mut()
    }

    /// Connects and listens on `channel`: the notifications that arrive come out of the
    /// receiver, which ends when the connection does.
    pub async fn listen(&self, channel: &str) -> Result<(Client, mpsc::UnboundedReceiver<Notification>), PgError> {
        let (client, mut connection) =
            self.config.connect(self.tls.clone()).await.map_err(|err| self.connect_failed(&err))?;
        let (notes, heard) = mpsc::unbounded_channel();
        let at = self.shown.clone();
        tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(note)) => {
                        if notes.send(note).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::debug!("the listening connection to PostgreSQL at {at} ended: {}", detail(&err));
                        return;
                    }
                }
            }
        });
        client.batch_execute(&format!("LISTEN {channel}")).await.map_err(|err| self.failed(&err))?;
        Ok((client, heard))
    }

    /// [`Self::listen`] again after the listening connection was lost, every `every` until it
    /// can (`None`: `stop` came first); each failure is logged as `doing` failing.
    pub async fn listen_again(
        &self,
        channel: &str,
        every: std::time::Duration,
        stop: &tokio_util::sync::CancellationToken,
        doing: &str,
    ) -> Option<(Client, mpsc::UnboundedReceiver<Notification>)> {
        loop {
            tokio::select! {
                () = stop.cancelled() => return None,
                () = tokio::time::sleep(every) => {}
            }
            match self.listen(channel).await {
                Ok(pair) => return Some(pair),
                Err(err) => tracing::warn!("{doing} in PostgreSQL: {err}; trying again"),
            }
        }
    }

    /// Why a connection failed, with the fix when it was TLS.
    fn connect_failed(&self, err: &tokio_postgres::Error) -> PgError {
        let at = self.shown.clone();
        let mode = self.mode.name();
        if let Some(why) = tls::refused_certificate(err) {
            let fix = match self.mode {
                SslMode::VerifyFull => format!(
                    "its certificate must be signed by an authority in sslrootcert (or the system's roots) and name the \
                     host as the URL writes it; give sslrootcert the PEM file of the authority that signed it (sslmode={mode})"
                ),
                SslMode::Disable | SslMode::Prefer | SslMode::Require | SslMode::VerifyCa => format!(
                    "its certificate must be signed by an authority in sslrootcert (or the system's roots); give \
                     sslrootcert the PEM file of the authority that signed it (sslmode={mode})"
                ),
            };
            return PgError::Tls { at, detail: format!("its certificate was refused: {why}"), fix };
        }
        let text = detail(err);
        if text.contains("does not support TLS") {
            return PgError::Tls {
                at,
                detail: format!("the server does not accept TLS, and sslmode={mode} requires it"),
                fix: "turn ssl on in its postgresql.conf (with ssl_cert_file and ssl_key_file), or, on a network \
                      you trust, write sslmode=prefer or disable in the URL"
                    .into(),
            };
        }
        PgError::Connect { at, detail: text }
    }

    /// The error of a statement against this database.
    pub fn failed(&self, err: &tokio_postgres::Error) -> PgError {
        PgError::Query { at: self.shown.clone(), detail: detail(err) }
    }
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgTarget({})", self.shown)
    }
}

fn shown(config: &Config) -> String {
    let user = config.get_user().unwrap_or("(default user)");
    let port = |index: usize| config.get_ports().get(index).or(config.get_ports().first()).copied().unwrap_or(5432);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(index, host)| match host {
            Host::Tcp(name) => format!("{name}:{}", port(index)),
            Host::Unix(dir) => format!("{}:{}", dir.display(), port(index)),
        })
        .collect();
    let database = config.get_dbname().unwrap_or(user);
    format!("{user}@{}/{database}", hosts.join(","))
}

/// What PostgreSQL said, rather than tokio-postgres's "db error" wrapper.
fn detail(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            // The cause, when tokio-postgres's own text does not already end with it.
            let text = err.to_string();
            match std::error::Error::source(err).map(ToString::to_string) {
                Some(cause) if !text.ends_with(&cause) => format!("{text}: {cause}"),
                _ => text,
            }
        }
    }
}

//! The bearer tokens of `cairn serve --auth` on PostgreSQL (`serve_tokens`), as the SQLite store
//! keeps them: only a secret's SHA-256, a revoked token keeping its row; and [`PgTokenCheck`],
//! the lookup a handshake makes.
//!
//! A check is synchronous (a handshake is answered where it is read), and a PostgreSQL client
//! is not: so a check runs on a thread of its own with a one-thread runtime and a connection of
//! its own, and the caller blocks for one indexed lookup, as it does on SQLite's read-only
//! connection. A connection that broke is made again at the next check, so a database restart
//! costs the checks made while it is down, not the server's life.

use std::sync::mpsc as std_mpsc;

use tokio::sync::mpsc;
use tokio_postgres::{Client, GenericClient};

use super::PgTarget;
use crate::store::{StoreError, TokenRow};

type Result<T> = std::result::Result<T, tokio_postgres::Error>;

const TOKEN_COLUMNS: &str = "id, principal, created_at, revoked_at";

fn token_from_row(row: &tokio_postgres::Row) -> TokenRow {
    TokenRow { id: row.get(0), principal: row.get(1), created_at: row.get(2), revoked_at: row.get(3) }
}

pub async fn insert(client: &impl GenericClient, id: &str, principal: &str, hash: &[u8; 32], at: i64) -> Result<()> {
    client
        .execute(
            "INSERT INTO serve_tokens (id, principal, hash, created_at) VALUES ($1, $2, $3, $4)",
            &[&id, &principal, &&hash[..], &at],
        )
        .await?;
    Ok(())
}

/// A token as another store keeps it, times and hash kept; nothing if its id or hash is stored.
pub async fn copy(client: &impl GenericClient, row: &TokenRow, hash: &[u8; 32]) -> Result<()> {
    client
        .execute(
            "INSERT INTO serve_tokens (id, principal, hash, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
            &[&row.id, &row.principal, &&hash[..], &row.created_at, &row.revoked_at],
        )
        .await?;
    Ok(())
}

/// Every token with its hash, oldest first (a hash that is not 32 bytes is left out).
pub async fn list_with_hashes(client: &impl GenericClient) -> Result<Vec<(TokenRow, [u8; 32])>> {
    let sql = format!("SELECT {TOKEN_COLUMNS}, hash FROM serve_tokens ORDER BY created_at, id");
    let rows = client.query(&sql, &[]).await?;
    Ok(rows
        .iter()
        .filter_map(|row| Some((token_from_row(row), <[u8; 32]>::try_from(row.get::<_, &[u8]>(4)).ok()?)))
        .collect())
}

/// Whether the token `id` exists (revoked or not).
pub async fn exists(client: &impl GenericClient, id: &str) -> Result<bool> {
    Ok(client.query_opt("SELECT 1 FROM serve_tokens WHERE id = $1", &[&id]).await?.is_some())
}

/// Stamps `id` revoked, keeping the first time it was.
pub async fn revoke(client: &impl GenericClient, id: &str, at: i64) -> Result<()> {
    client.execute("UPDATE serve_tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1", &[&id, &at]).await?;
    Ok(())
}

/// Every token, oldest first.
pub async fn list(client: &impl GenericClient) -> Result<Vec<TokenRow>> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM serve_tokens ORDER BY created_at, id");
    Ok(client.query(&sql, &[]).await?.iter().map(token_from_row).collect())
}

/// What a check asks its thread.
enum Ask {
    Find([u8; 32], std_mpsc::SyncSender<std::result::Result<Option<TokenRow>, StoreError>>),
    AnyLive(std_mpsc::SyncSender<std::result::Result<bool, StoreError>>),
}

/// Checks tokens on a connection of its own, on a thread of its own (see the module's text).
/// The thread ends when this is dropped.
pub struct PgTokenCheck {
    asks: mpsc::UnboundedSender<Ask>,
}

impl PgTokenCheck {
    /// Starts the thread and connects; waits for the connection, so a database that cannot be
    /// reached is said here.
    pub fn open(target: &PgTarget) -> std::result::Result<Self, StoreError> {
        let (asks, mut queue) = mpsc::unbounded_channel();
        let (ready, connected) = std_mpsc::sync_channel(1);
        let target = target.clone();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|err| {
            StoreError::Postgres(super::PgError::Connect {
                at: target.to_string(),
                detail: format!("cannot start the token check's runtime: {err}"),
            })
        })?;
        std::thread::Builder::new()
            .name("cairn-pg-tokens".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut client = match target.connect().await {
                        Ok(client) => {
                            let _ = ready.send(Ok(()));
                            Some(client)
                        }
                        Err(err) => {
                            let _ = ready.send(Err(StoreError::Postgres(err)));
                            return;
                        }
                    };
                    while let Some(ask) = queue.recv().await {
                        answer(&target, &mut client, ask).await;
                    }
                });
            })
            .map_err(|err| {
                StoreError::Postgres(super::PgError::Connect {
                    at: "PostgreSQL".into(),
                    detail: format!("cannot start the token check's thread: {err}"),
                })
            })?;
        connected.recv().unwrap_or(Err(StoreError::Closed))?;
        Ok(Self { asks })
    }

    /// The token whose secret hashes to `hash`, as stored now (revoked or not). Blocks for one
    /// indexed lookup.
    pub fn find(&self, hash: &[u8; 32]) -> std::result::Result<Option<TokenRow>, StoreError> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.asks.send(Ask::Find(*hash, reply)).map_err(|_| StoreError::Closed)?;
        answer.recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Whether any token is not revoked.
    pub fn any_live(&self) -> std::result::Result<bool, StoreError> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.asks.send(Ask::AnyLive(reply)).map_err(|_| StoreError::Closed)?;
        answer.recv().unwrap_or(Err(StoreError::Closed))
    }
}

/// Answers one ask on the thread's connection, connecting again first if it broke.
async fn answer(target: &PgTarget, client: &mut Option<Client>, ask: Ask) {
    let client = target.connected(client, "connect again to check tokens").await;
    let failed = |err: tokio_postgres::Error| StoreError::Postgres(target.failed(&err));
    let down = || {
        StoreError::Postgres(super::PgError::Connect {
            at: target.to_string(),
            detail: "the token check's connection is down".into(),
        })
    };
    match ask {
        Ask::Find(hash, reply) => {
            let found = match client {
                Some(client) => {
                    let sql = format!("SELECT {TOKEN_COLUMNS} FROM serve_tokens WHERE hash = $1");
                    client
                        .query_opt(&sql, &[&&hash[..]])
                        .await
                        .map(|row| row.as_ref().map(token_from_row))
                        .map_err(failed)
                }
                None => Err(down()),
            };
            let _ = reply.send(found);
        }
        Ask::AnyLive(reply) => {
            let live = match client {
                Some(client) => client
                    .query_opt("SELECT 1 FROM serve_tokens WHERE revoked_at IS NULL LIMIT 1", &[])
                    .await
                    .map(|row| row.is_some())
                    .map_err(failed),
                None => Err(down()),
            };
            let _ = reply.send(live);
        }
    }
}

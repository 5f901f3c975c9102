//! The bearer tokens of `cairn serve --auth`: their rows (`serve_tokens`), and [`SqliteTokenCheck`],
//! the read a handshake makes to find the token a secret's hash names (on SQLite; `store::tokens`
//! gives it the shape both backends share).
//!
//! Only a secret's SHA-256 is stored; the secret itself never reaches this module. A check runs
//! on a read-only connection of its own, so a handshake never waits behind another read (a long
//! history being loaded): it is one lookup in the unique index on `hash`, a few microseconds,
//! run where the handshake is answered. Revoking keeps the row and stamps `revoked_at`; a
//! revoked token is refused from the next check on, with no restart.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::StoreError;

/// A token as `cairn serve token list` shows it: never its secret, nor its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    /// The short public name (`tok_…`).
    pub id: String,
    /// Who connects with it; the owner of the sessions its connections create.
    pub principal: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

const TOKEN_COLUMNS: &str = "id, principal, created_at, revoked_at";

fn token_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRow> {
    Ok(TokenRow { id: row.get(0)?, principal: row.get(1)?, created_at: row.get(2)?, revoked_at: row.get(3)? })
}

pub(super) fn insert(conn: &Connection, id: &str, principal: &str, hash: &[u8; 32], at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO serve_tokens (id, principal, hash, created_at) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![id, principal, &hash[..], at])?;
    Ok(())
}

/// A token as another store keeps it, times and hash kept; nothing if its id or hash is stored.
pub(super) fn copy(conn: &Connection, row: &TokenRow, hash: &[u8; 32]) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO serve_tokens (id, principal, hash, created_at, revoked_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT DO NOTHING",
    )?
    .execute(params![row.id, row.principal, &hash[..], row.created_at, row.revoked_at])?;
    Ok(())
}

/// Every token with its hash, oldest first (a hash that is not 32 bytes is left out).
pub(super) fn list_with_hashes(conn: &Connection) -> rusqlite::Result<Vec<(TokenRow, [u8; 32])>> {
    let sql = format!("SELECT {TOKEN_COLUMNS}, hash FROM serve_tokens ORDER BY created_at, id");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([], |row| Ok((token_from_row(row)?, row.get::<_, Vec<u8>>(4)?)))?;
    let mut tokens = Vec::new();
    for row in rows {
        let (token, hash) = row?;
        if let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) {
            tokens.push((token, hash));
        }
    }
    Ok(tokens)
}

/// Whether the token `id` exists (revoked or not).
pub(super) fn exists(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM serve_tokens WHERE id = ?1")?.exists([id])
}

/// Stamps `id` revoked, keeping the first time it was.
pub(super) fn revoke(conn: &Connection, id: &str, at: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE serve_tokens SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1")?
        .execute(params![id, at])?;
    Ok(())
}

/// Every token, oldest first.
pub(super) fn list(conn: &Connection) -> rusqlite::Result<Vec<TokenRow>> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM serve_tokens ORDER BY created_at, id");
    let mut stmt = conn.prepare_cached(&sql)?;
    stmt.query_map([], token_from_row)?.collect()
}

/// The token whose secret hashes to `hash`, revoked or not.
fn by_hash(conn: &Connection, hash: &[u8; 32]) -> rusqlite::Result<Option<TokenRow>> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM serve_tokens WHERE hash = ?1");
    conn.prepare_cached(&sql)?.query_row([&hash[..]], token_from_row).optional()
}

/// A read-only connection for checking tokens, apart from the store's reads.
pub struct SqliteTokenCheck {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl SqliteTokenCheck {
    pub(super) fn open(path: &Path) -> Result<Self, StoreError> {
        let sqlite = |err: rusqlite::Error| StoreError::from_sqlite(path, &err);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(sqlite)?;
        conn.busy_timeout(super::BUSY_TIMEOUT).map_err(sqlite)?;
        Ok(Self { path: path.to_owned(), conn: Mutex::new(conn) })
    }

    /// The token whose secret hashes to `hash`, as stored now (revoked or not). Blocks for one
    /// indexed lookup.
    pub fn find(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        by_hash(&conn, hash).map_err(|err| StoreError::from_sqlite(&self.path, &err))
    }

    /// Whether any token is not revoked.
    pub fn any_live(&self) -> Result<bool, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        conn.prepare_cached("SELECT 1 FROM serve_tokens WHERE revoked_at IS NULL")
            .and_then(|mut stmt| stmt.exists([]))
            .map_err(|err| StoreError::from_sqlite(&self.path, &err))
    }
}

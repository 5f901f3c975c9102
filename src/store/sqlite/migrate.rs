//! Schema migrations: the numbered files in `schema/`, applied in order, tracked by
//! `PRAGMA user_version`. A database stamped newer than we know is refused, never touched.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// `schema/NNNN_*.sql`, in order; the schema version is the number applied.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../../../schema/0001_init.sql"),
    include_str!("../../../schema/0002_permission_rules.sql"),
    include_str!("../../../schema/0003_subagents.sql"),
    include_str!("../../../schema/0004_tool_rules.sql"),
    include_str!("../../../schema/0005_session_leases.sql"),
    include_str!("../../../schema/0006_total_tokens.sql"),
    include_str!("../../../schema/0007_lease_identity.sql"),
    include_str!("../../../schema/0008_part_pieces.sql"),
    include_str!("../../../schema/0009_serve_tokens.sql"),
    include_str!("../../../schema/0010_fetch_rules.sql"),
    include_str!("../../../schema/0011_checkpoints.sql"),
];

/// The schema version this build writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// Fails if the database is unreadable or stamped newer than [`LATEST`]; writes nothing.
pub fn check_version(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(|err| StoreError::from_sqlite(path, &err))?;
    // One statement, so one snapshot: read apart, another process's migration could commit
    // between the two, and its tables would be seen without its stamp.
    let (found, tables): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(|err| StoreError::from_sqlite(path, &err))?;
    if found > LATEST {
        return Err(StoreError::TooNew { path: path.to_owned(), found, supported: LATEST });
    }
    if found == 0 && tables > 0 {
        let detail = format!("it is a SQLite database with {tables} schema objects but no cairn schema version");
        return Err(StoreError::Corrupt { path: path.to_owned(), detail });
    }
    Ok(())
}

/// Brings the database up to [`LATEST`] in one transaction. Two processes opening a fresh file at
/// once are safe: the second waits for the first's write lock, then sees its version.
pub fn to_latest(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let sqlite = |err: rusqlite::Error| StoreError::from_sqlite(path, &err);
    let found = version(conn).map_err(sqlite)?;
    if found > LATEST {
        return Err(StoreError::TooNew { path: path.to_owned(), found, supported: LATEST });
    }
    if found == LATEST {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sqlite)?;
    let found = version(&tx).map_err(sqlite)?;
    if found > LATEST {
        return Err(StoreError::TooNew { path: path.to_owned(), found, supported: LATEST });
    }
    let applied = usize::try_from(found).unwrap_or(0);
    for sql in MIGRATIONS.iter().skip(applied) {
        tx.execute_batch(sql).map_err(sqlite)?;
    }
    tx.pragma_update(None, "user_version", LATEST).map_err(sqlite)?;
    tx.commit().map_err(sqlite)
}

fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

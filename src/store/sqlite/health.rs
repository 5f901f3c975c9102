//! The database's health, for `cairn doctor`: read on a read-only connection, so checking a
//! database never creates, migrates or changes it.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

/// What `cairn doctor` reports about the database file.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    /// Bytes of the database with its write-ahead log.
    pub size: u64,
    /// `PRAGMA user_version`.
    pub version: i64,
    /// The version this build writes.
    pub supported: i64,
    /// What `PRAGMA integrity_check` found: `["ok"]`, or its first problems.
    pub integrity: Vec<String>,
    /// Stored sessions, sub-agents' included.
    pub sessions: i64,
}

impl Health {
    pub fn is_intact(&self) -> bool {
        self.integrity == ["ok"]
    }
}

/// The health of the database at `path`; `None` when there is no file yet (cairn creates it at
/// first use).
pub fn check(path: &Path) -> Result<Option<Health>, StoreError> {
    let size = |path: &Path| std::fs::metadata(path).map(|metadata| metadata.len());
    let main = match size(path) {
        Ok(main) => main,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(StoreError::Open { path: path.to_owned(), detail: err.to_string() }),
    };
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let size = main + size(Path::new(&wal)).unwrap_or(0);
    let sqlite = |err: rusqlite::Error| StoreError::from_sqlite(path, &err);
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(sqlite)?;
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(sqlite)?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(sqlite)?;
    let integrity = conn
        .prepare("PRAGMA integrity_check(20)")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>())
        .map_err(sqlite)?;
    let sessions = if version > 0 {
        conn.query_row("SELECT count(*) FROM sessions", [], |row| row.get(0)).map_err(sqlite)?
    } else {
        0
    };
    Ok(Some(Health { size, version, supported: super::migrate::LATEST, integrity, sessions }))
}

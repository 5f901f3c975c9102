//! The writer thread's connection as a batch uses it: one `BEGIN IMMEDIATE` transaction per
//! batch, a savepoint per write inside it (so one bad write fails alone), then a commit, or a
//! rollback if the commit fails.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::StoreError;

pub(super) const BEGIN: &str = "BEGIN IMMEDIATE";
pub(super) const COMMIT: &str = "COMMIT";
pub(super) const SAVEPOINT: &str = "SAVEPOINT w";
pub(super) const RELEASE: &str = "RELEASE w";

/// The write connection and the file it is open on (named in errors).
pub(super) struct Db {
    pub conn: Connection,
    pub path: PathBuf,
}

impl Db {
    pub fn error(&self, err: &rusqlite::Error) -> StoreError {
        StoreError::from_sqlite(&self.path, err)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a batch's transaction: `IMMEDIATE`, so every check inside it (a lease's) and the
    /// writes it allows are one step for every process sharing the file.
    pub fn begin(&self) -> Result<(), StoreError> {
        self.run(BEGIN).map_err(|err| self.error(&err))
    }

    /// Commits the batch; if that fails, rolls it back and says why.
    pub fn commit(&self) -> Result<(), StoreError> {
        self.run(COMMIT).map_err(|err| {
            let _ = self.conn.execute_batch("ROLLBACK");
            self.error(&err)
        })
    }

    /// Runs one statement without parameters, compiled once per connection.
    fn run(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Compiles `statements` now, so that the writes that use them later find them compiled:
    /// the first prompt of a process then pays for none (each takes 20–50 µs). One that does not
    /// compile is left to fail, with its error, where it is used.
    pub fn prepare(&self, statements: &[&str]) {
        for sql in statements {
            if let Err(err) = self.conn.prepare_cached(sql) {
                tracing::debug!(%err, sql, "a statement did not compile ahead");
            }
        }
    }

    /// Runs one write inside a savepoint, so its failure rolls back only its own rows.
    pub fn savepoint(&self, write: impl FnOnce(&Connection) -> rusqlite::Result<()>) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<()> {
            self.run(SAVEPOINT)?;
            match write(&self.conn) {
                Ok(()) => self.run(RELEASE),
                Err(err) => {
                    self.conn.execute_batch("ROLLBACK TO w; RELEASE w")?;
                    Err(err)
                }
            }
        };
        run().map_err(|err| self.error(&err))
    }
}

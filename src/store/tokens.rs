//! [`TokenCheck`], the lookup `cairn serve --auth` makes at each request to find the token a
//! secret's hash names, whichever backend holds the tokens: a read-only SQLite connection of its
//! own (`sqlite::tokens`), or a PostgreSQL connection on a thread of its own (`pg::tokens`).
//! Either way a check is synchronous and costs one indexed lookup.

use super::sqlite::tokens::SqliteTokenCheck;
use super::{StoreError, TokenRow};
use crate::store::pg::tokens::PgTokenCheck;

/// A connection of its own for checking tokens (see [`super::Store::token_check`]). One per
/// server, made once: the SQLite variant's size costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum TokenCheck {
    Sqlite(SqliteTokenCheck),
    Postgres(PgTokenCheck),
}

impl TokenCheck {
    /// The token whose secret hashes to `hash`, as stored now (revoked or not). Blocks for one
    /// indexed lookup.
    pub fn find(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError> {
        match self {
            Self::Sqlite(check) => check.find(hash),
            Self::Postgres(check) => check.find(hash),
        }
    }

    /// Whether any token is not revoked.
    pub fn any_live(&self) -> Result<bool, StoreError> {
        match self {
            Self::Sqlite(check) => check.any_live(),
            Self::Postgres(check) => check.any_live(),
        }
    }
}

//! The PostgreSQL schema: the numbered files in `schema/pg/`, applied in order, tracked in
//! `cairn_schema` (one row per version applied).
//!
//! Replicas that start together all migrate: each takes a transaction-scoped advisory lock
//! first, so one applies what is missing while the others wait, then find it applied. A
//! migration is one transaction with its stamp (PostgreSQL's DDL is transactional), so a replica
//! killed mid-way leaves the previous version whole. A database stamped newer than this build
//! knows is refused and left untouched: a replica of an older cairn must not write to it.

use tokio_postgres::Client;

use super::{PgError, PgTarget};

/// `schema/pg/NNNN_*.sql`, in order; the schema version is the number applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../schema/pg/0001_leases.sql"),
    include_str!("../../../schema/pg/0002_session_events.sql"),
    include_str!("../../../schema/pg/0003_sessions.sql"),
    include_str!("../../../schema/pg/0004_rules_tokens_checkpoints.sql"),
    include_str!("../../../schema/pg/0005_inbox_and_origins.sql"),
    include_str!("../../../schema/pg/0006_writers.sql"),
    include_str!("../../../schema/pg/0007_replicas.sql"),
    include_str!("../../../schema/pg/0008_pieces_unchecked.sql"),
    include_str!("../../../schema/pg/0009_questions_indexed.sql"),
    include_str!("../../../schema/pg/0010_fewer_index_writes.sql"),
    include_str!("../../../schema/pg/0011_pieces_behind_the_log.sql"),
];

/// The schema version this build writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// The advisory lock the migrations are taken under: "cairn" in ASCII, any fixed number would do.
const LOCK: i64 = 0x0063_6169_726e;

/// Brings the database to [`LATEST`], or refuses one stamped newer. Returns the version found.
pub async fn to_latest(client: &mut Client, target: &PgTarget) -> Result<i64, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let tx = client.transaction().await.map_err(failed)?;
    tx.execute("SELECT pg_advisory_xact_lock($1::bigint)", &[&LOCK]).await.map_err(failed)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cairn_schema (version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await
    .map_err(failed)?;
    let found: i64 =
        tx.query_one("SELECT coalesce(max(version), 0) FROM cairn_schema", &[]).await.map_err(failed)?.get(0);
    if found > LATEST {
        return Err(PgError::TooNew { at: target.to_string(), found, supported: LATEST });
    }
    for (version, sql) in (1_i64..).zip(MIGRATIONS).skip(usize::try_from(found).unwrap_or(0)) {
        tx.batch_execute(sql).await.map_err(failed)?;
        tx.execute("INSERT INTO cairn_schema (version) VALUES ($1)", &[&version]).await.map_err(failed)?;
        tracing::info!("PostgreSQL at {target}: schema migrated to version {version}");
    }
    tx.commit().await.map_err(failed)?;
    Ok(found)
}

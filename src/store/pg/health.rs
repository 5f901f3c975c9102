//! The PostgreSQL database's health, for `cairn doctor`: read in one read-only transaction, so
//! checking never creates, migrates or changes anything.

use super::{PgError, PgTarget, migrate};

/// What `cairn doctor` reports about a PostgreSQL store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgHealth {
    /// The schema version applied (0: cairn never started against it).
    pub version: i64,
    /// The version this build writes.
    pub supported: i64,
    /// Stored sessions, sub-agents' included (0 before the schema has them).
    pub sessions: i64,
    /// Turns running now: leases held and renewed.
    pub running: i64,
    /// Leases that lapsed without being released: replicas that died mid-turn, whose turns a
    /// running replica's sweeper has yet to close.
    pub lapsed: i64,
}

/// Connects to `target` and reads its health.
pub async fn check(target: &PgTarget) -> Result<PgHealth, PgError> {
    let mut client = target.connect().await?;
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let tx = client.build_transaction().read_only(true).start().await.map_err(failed)?;
    let exists = |table: &'static str| {
        let tx = &tx;
        async move {
            let found: bool =
                tx.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table]).await.map_err(failed)?.get(0);
            Ok::<bool, PgError>(found)
        }
    };
    let version: i64 = if exists("cairn_schema").await? {
        tx.query_one("SELECT coalesce(max(version), 0) FROM cairn_schema", &[]).await.map_err(failed)?.get(0)
    } else {
        0
    };
    let sessions: i64 = if exists("sessions").await? {
        tx.query_one("SELECT count(*) FROM sessions", &[]).await.map_err(failed)?.get(0)
    } else {
        0
    };
    let (running, lapsed): (i64, i64) = if exists("session_leases").await? {
        let row = tx
            .query_one(
                "SELECT count(*) FILTER (WHERE expires_at > now()), count(*) FILTER (WHERE expires_at <= now())
                 FROM session_leases WHERE released_at IS NULL",
                &[],
            )
            .await
            .map_err(failed)?;
        (row.get(0), row.get(1))
    } else {
        (0, 0)
    };
    tx.commit().await.map_err(failed)?;
    Ok(PgHealth { version, supported: migrate::LATEST, sessions, running, lapsed })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::SessionId;
    use crate::store::pg::{fixture, lease};

    #[tokio::test]
    async fn a_database_is_read_as_it_is_and_never_changed() {
        let target = PgTarget::parse(&fixture::database().await).unwrap();
        let empty = check(&target).await.unwrap();
        assert_eq!((empty.version, empty.sessions, empty.running, empty.lapsed), (0, 0, 0, 0));
        assert_eq!(check(&target).await.unwrap().version, 0, "checking did not migrate it");

        let mut client = target.connect().await.unwrap();
        migrate::to_latest(&mut client, &target).await.unwrap();
        lease::take(&client, &target, &SessionId::generate(), "a", Duration::from_secs(60)).await.unwrap();
        lease::take(&client, &target, &SessionId::generate(), "b", Duration::from_millis(1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let health = check(&target).await.unwrap();
        assert_eq!((health.version, health.supported), (migrate::LATEST, migrate::LATEST));
        assert_eq!((health.running, health.lapsed), (1, 1));
    }
}

//! The session lease across replicas: which replica runs a session's turn, with a fencing
//! token.
//!
//! A lease is a row of `session_leases`: its holder (a replica's name), an `epoch` that grows by
//! one at every take, and an expiry on the database's clock. [`take`] succeeds when the session
//! has no lease, or its lease lapsed or was released, and returns the new epoch; while another
//! holder's lease runs it answers who holds it. The holder [`renew`]s it well within its time to
//! live and [`release`]s it at the turn's end.
//!
//! The epoch is what keeps a turn to one replica. Every write transaction of a session starts
//! with [`fence`]: the lease row, read `FOR SHARE`, must still name this holder and epoch. A
//! replica that was paused past its lease (`kill -STOP`, a long stall, a partition) finds
//! another epoch there and writes nothing. A lease that lapsed unreleased belonged to a replica
//! that died mid-turn: any replica's [`sweep`] takes it over, once, to close that turn. The share lock also orders a takeover after a
//! write already in flight: the takeover's update waits for that write to commit, so the new
//! holder reads everything the old one wrote, and the old one writes nothing after.
//!
//! A take's epoch is also its mark ([`mark_of`]), by which a caller says which turn its history
//! was read after, and a holder's name says the host and process an error names ([`holder_of`]).

use std::time::Duration;

use tokio_postgres::{GenericClient, Transaction};

use super::{PgError, PgTarget, Prepared, rows};
use crate::ids::{LeaseHolder, SessionId};

/// A lease this replica holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub session: SessionId,
    pub holder: String,
    /// The fencing token: every take makes a greater one.
    pub epoch: i64,
}

/// What [`take`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    Took(Lease),
    /// Another holder's lease runs: who, since when and until when (milliseconds since the
    /// epoch, on the database's clock).
    Held {
        holder: String,
        taken_ms: i64,
        expires_ms: i64,
    },
}

fn seconds(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

/// Takes `session`'s lease for `holder` for `ttl`, unless another holder's lease runs.
pub async fn take(
    client: &impl GenericClient,
    target: &PgTarget,
    session: &SessionId,
    holder: &str,
    ttl: Duration,
) -> Result<Taken, PgError> {
    try_take(client, &Prepared::default(), session, holder, ttl).await.map_err(|err| target.failed(&err))
}

/// [`take`] inside a batch: a statement's failure stays one, as the batch must roll back. The
/// statement is prepared once in `prepared`, `client`'s connection's.
pub async fn try_take(
    client: &impl GenericClient,
    prepared: &Prepared,
    session: &SessionId,
    holder: &str,
    ttl: Duration,
) -> Result<Taken, tokio_postgres::Error> {
    // The lease as found is read in the statement's snapshot, before its take: whether it was
    // another holder's, never released.
    let statement = prepared
        .get(
            client,
            "WITH took AS (
               INSERT INTO session_leases AS lease (session_id, holder, epoch, expires_at, taken_at)
               VALUES ($1, $2, 1, now() + $3::float8 * interval '1 second', now())
               ON CONFLICT (session_id) DO UPDATE
                  SET holder = excluded.holder, epoch = lease.epoch + 1, expires_at = excluded.expires_at,
                      taken_at = excluded.taken_at, released_at = NULL
                  WHERE lease.expires_at <= now() OR lease.holder = excluded.holder
               RETURNING epoch
             )
             SELECT took.epoch, coalesce(
                      (SELECT seen.holder <> $2 AND seen.released_at IS NULL FROM session_leases AS seen
                        WHERE seen.session_id = $1), false)
               FROM took",
        )
        .await?;
    let took = client.query_opt(&statement, &[&session.as_str(), &holder, &seconds(ttl)]).await?;
    if let Some(row) = took {
        if row.get::<_, bool>(1) {
            rows::fold_streams(client, &[session]).await?;
        }
        return Ok(Taken::Took(Lease { session: session.clone(), holder: holder.to_owned(), epoch: row.get(0) }));
    }
    let row = client
        .query_one(
            "SELECT holder, (extract(epoch FROM taken_at) * 1000)::bigint, (extract(epoch FROM expires_at) * 1000)::bigint
             FROM session_leases WHERE session_id = $1",
            &[&session.as_str()],
        )
        .await?;
    Ok(Taken::Held { holder: row.get(0), taken_ms: row.get(1), expires_ms: row.get(2) })
}

/// Extends `lease` by `ttl` from now. `false`: the lease is another's now (a takeover after it
/// lapsed), and the turn must end without writing.
pub async fn renew(
    client: &impl GenericClient,
    target: &PgTarget,
    lease: &Lease,
    ttl: Duration,
) -> Result<bool, PgError> {
    let renewed = client
        .execute(
            "UPDATE session_leases SET expires_at = now() + $4::float8 * interval '1 second'
             WHERE session_id = $1 AND holder = $2 AND epoch = $3",
            &[&lease.session.as_str(), &lease.holder, &lease.epoch, &seconds(ttl)],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(renewed == 1)
}

/// [`renew`] for every lease in `leases`, in one statement prepared once in `prepared`,
/// `client`'s connection's: the sessions of those still held (renewed), the others being
/// another's now.
pub async fn renew_all(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    leases: &[&Lease],
    ttl: Duration,
) -> Result<std::collections::HashSet<SessionId>, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let sessions: Vec<&str> = leases.iter().map(|lease| lease.session.as_str()).collect();
    let holders: Vec<&str> = leases.iter().map(|lease| lease.holder.as_str()).collect();
    let epochs: Vec<i64> = leases.iter().map(|lease| lease.epoch).collect();
    let statement = prepared
        .get(
            client,
            "UPDATE session_leases AS lease SET expires_at = now() + $4::float8 * interval '1 second'
             FROM unnest($1::text[], $2::text[], $3::bigint[]) AS mine(session_id, holder, epoch)
             WHERE lease.session_id = mine.session_id AND lease.holder = mine.holder AND lease.epoch = mine.epoch
             RETURNING lease.session_id",
        )
        .await
        .map_err(failed)?;
    let rows = client.query(&statement, &[&sessions, &holders, &epochs, &seconds(ttl)]).await.map_err(failed)?;
    Ok(rows.iter().map(|row| SessionId::from_string(row.get::<_, String>(0))).collect())
}

/// The first statement of every write transaction of `lease`'s session: `false` when the lease
/// is no longer this holder's at this epoch, and the transaction must be rolled back. While the
/// transaction lasts, no takeover can commit.
pub async fn fence(tx: &Transaction<'_>, target: &PgTarget, lease: &Lease) -> Result<bool, PgError> {
    Ok(fence_all(tx, &Prepared::default(), target, &[lease]).await?.is_none())
}

const FENCE: &str = "SELECT lease.session_id FROM session_leases AS lease
     JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS mine(session_id, holder, epoch)
       ON lease.session_id = mine.session_id AND lease.holder = mine.holder AND lease.epoch = mine.epoch
     FOR SHARE OF lease";

/// Locks the lease rows of `sessions` (sorted), the sessions a batch takes leases of other
/// than by the claims that go first together (those lock their leases before their prompts
/// touch the sessions' rows), at its start: every transaction that locks more than one of a session's rows locks its lease's
/// first (the sweeper closing a dead replica's turn, a delete), so a take after a write of its
/// session's row in the same batch, or one for a command, never holds those while it waits
/// for the lease, and two batches lock their takes' leases in one order. A lease another
/// replica holds live is left alone: its take is refused without waiting for that replica's
/// running batch (which holds it `FOR SHARE`), and without blocking its next.
pub async fn lock_for_takes(
    client: &impl GenericClient,
    prepared: &Prepared,
    me: &str,
    sessions: &[SessionId],
) -> Result<(), tokio_postgres::Error> {
    let sessions: Vec<&str> = sessions.iter().map(SessionId::as_str).collect();
    let statement = prepared
        .get(
            client,
            "SELECT 1 FROM session_leases WHERE session_id = ANY($1::text[])
               AND NOT (released_at IS NULL AND expires_at > now() AND holder <> $2)
             ORDER BY session_id FOR UPDATE",
        )
        .await?;
    client.execute(&statement, &[&sessions, &me]).await.map(|_| ())
}

/// [`fence`] for a batch's sessions, in one statement (prepared once in `prepared`, the
/// connection's): the first lease that is no longer held, if any.
pub async fn fence_all<'a>(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    target: &PgTarget,
    leases: &[&'a Lease],
) -> Result<Option<&'a Lease>, PgError> {
    let sessions: Vec<&str> = leases.iter().map(|lease| lease.session.as_str()).collect();
    let holders: Vec<&str> = leases.iter().map(|lease| lease.holder.as_str()).collect();
    let epochs: Vec<i64> = leases.iter().map(|lease| lease.epoch).collect();
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared.get(tx, FENCE).await.map_err(failed)?;
    let held = tx.query(&statement, &[&sessions, &holders, &epochs]).await.map_err(failed)?;
    let held: std::collections::HashSet<&str> = held.iter().map(|row| row.get(0)).collect();
    Ok(leases.iter().copied().find(|lease| !held.contains(lease.session.as_str())))
}

/// Another holder's live lease on `session` or a sub-agent session below it, if any, as
/// (session, holder, taken and expiry in milliseconds). Their lease rows stay locked until the
/// transaction ends, so no take of them commits before the write this check guards.
pub async fn held_below(
    client: &impl GenericClient,
    session: &SessionId,
    me: &str,
) -> Result<Option<(SessionId, String, i64, i64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "WITH RECURSIVE down(id) AS (
               SELECT $1::text UNION SELECT s.id FROM sessions s JOIN down ON s.parent_id = down.id WHERE s.subagent IS NOT NULL
             )
             SELECT lease.session_id, lease.holder, lease.released_at IS NULL AND lease.expires_at > now(),
                    (extract(epoch FROM lease.taken_at) * 1000)::bigint, (extract(epoch FROM lease.expires_at) * 1000)::bigint
             FROM session_leases AS lease WHERE lease.session_id IN (SELECT id FROM down)
             ORDER BY lease.session_id
             FOR UPDATE OF lease",
            &[&session.as_str()],
        )
        .await?;
    Ok(rows
        .iter()
        .find(|row| row.get::<_, bool>(2) && row.get::<_, &str>(1) != me)
        .map(|row| (SessionId::from_string(row.get::<_, String>(0)), row.get(1), row.get(3), row.get(4))))
}

/// Lets anyone take the session from now on. `false`: it was no longer this holder's.
pub async fn release(client: &impl GenericClient, target: &PgTarget, lease: &Lease) -> Result<bool, PgError> {
    try_release(client, lease).await.map_err(|err| target.failed(&err))
}

/// [`release`] inside a batch: a statement's failure stays one, as the batch must roll back.
pub async fn try_release(client: &impl GenericClient, lease: &Lease) -> Result<bool, tokio_postgres::Error> {
    let released = client
        .execute(
            "UPDATE session_leases SET expires_at = now(), released_at = now()
             WHERE session_id = $1 AND holder = $2 AND epoch = $3",
            &[&lease.session.as_str(), &lease.holder, &lease.epoch],
        )
        .await?;
    Ok(released == 1)
}

/// A lease [`sweep`] took over, and the holder that let it lapse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    pub lease: Lease,
    pub dead: String,
}

/// Takes over, for `holder`, the leases that lapsed more than `grace` ago without being released:
/// their holders died or stalled mid-turn. Each comes back with the next epoch (so its old holder
/// is fenced) and the old holder's name, for the caller to close the turn it left open and
/// release. Sweepers on several replicas never take the same lease: rows another sweeper has
/// locked are skipped, and the take itself checks the lease is still lapsed.
pub async fn sweep(
    client: &impl GenericClient,
    target: &PgTarget,
    holder: &str,
    grace: Duration,
    ttl: Duration,
) -> Result<Vec<Swept>, PgError> {
    let rows = client
        .query(
            "UPDATE session_leases AS lease SET holder = $1, epoch = lease.epoch + 1, taken_at = now(),
                expires_at = now() + $3::float8 * interval '1 second'
             FROM (
                SELECT session_id, holder FROM session_leases
                WHERE released_at IS NULL AND expires_at < now() - $2::float8 * interval '1 second'
                FOR UPDATE SKIP LOCKED
             ) AS old
             WHERE lease.session_id = old.session_id AND lease.released_at IS NULL
               AND lease.expires_at < now() - $2::float8 * interval '1 second'
             RETURNING lease.session_id, lease.epoch, old.holder",
            &[&holder, &seconds(grace), &seconds(ttl)],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(rows
        .iter()
        .map(|row| Swept {
            lease: Lease {
                session: SessionId::from_string(row.get::<_, String>(0)),
                holder: holder.to_owned(),
                epoch: row.get(1),
            },
            dead: row.get(2),
        })
        .collect())
}

/// The mark of a lease's take that [`crate::store::LastTurn::By`] names: its epoch.
pub fn mark_of(epoch: i64) -> String {
    format!("epoch {epoch}")
}

/// The epoch a [`mark_of`] names, if it names one.
pub fn epoch_of(mark: &str) -> Option<i64> {
    mark.strip_prefix("epoch ")?.parse().ok()
}

/// Another replica's lease as the error names it: a replica is named `host:pid:…`.
pub(super) fn holder_of(session: &SessionId, holder: &str, since: i64, heartbeat: i64) -> LeaseHolder {
    let mut fields = holder.splitn(3, ':');
    let host = fields.next().unwrap_or(holder).to_owned();
    let pid = fields.next().and_then(|pid| pid.parse().ok()).unwrap_or(0);
    LeaseHolder { session: session.clone(), pid, host, since, heartbeat }
}

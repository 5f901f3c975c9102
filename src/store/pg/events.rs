//! Each session's event log in PostgreSQL: its rows appended, and read back.
//!
//! The lease holder [`append`]s a batch's updates, as they will be shown, in the batch's own
//! transaction, for all its sessions in two statements: fenced first, so a replica whose lease
//! was taken over writes nothing, and given each session's next `seq` numbers, so per session
//! `seq` order is commit order (the writer's batch, whose transaction fenced its leases first,
//! appends with [`append_fenced`], the insert alone). After the
//! commit, and outside it (NOTIFY takes a lock every commit would otherwise wait for), it wakes
//! the other replicas with one [`notify`] naming the batch's sessions.
//!
//! Each row names the replica that showed it to its own clients as it committed (`origin`: the
//! holder whose recorder wrote it): that replica's sessions skip it, as their clients have it.
//!
//! Other replicas read the log with a [`Follower`] (`follower.rs`).

use std::collections::HashMap;

use tokio_postgres::{GenericClient, Transaction};

pub use super::follower::{Appended, Follower, OwnRows};
pub use super::late::{ASKED, CLOSED, Missed, missed, open_questions};
use super::lease::{Lease, fence_all};
use super::{PgError, PgTarget, Prepared};
use crate::ids::SessionId;

/// The channel wake-ups go on.
pub(super) const CHANNEL: &str = "cairn_events";
/// A wake-up's payload names sessions up to this many bytes (PostgreSQL takes 8000); a batch
/// of more names every session.
const PAYLOAD: usize = 7000;
/// A wake-up that names the replica whose writer sent it starts with this, the name and a
/// newline, before the sessions.
pub(super) const ORIGIN: char = '@';

/// One row of a session's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub seq: i64,
    pub epoch: i64,
    /// The replica that showed it as it committed; empty for rows nobody showed then (the
    /// sweeper's).
    pub origin: String,
    /// The update as shown.
    pub body: String,
}

/// The session's last `seq` (0 for none): what its next holder continues from.
pub async fn last_seq(client: &impl GenericClient, target: &PgTarget, session: &SessionId) -> Result<i64, PgError> {
    let row = client
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&session.as_str()])
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(row.get(0))
}

/// [`last_seq`], the statement prepared once in `prepared`, `client`'s connection's.
pub async fn last_seq_prepared(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    session: &SessionId,
) -> Result<i64, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared
        .get(client, "SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1")
        .await
        .map_err(failed)?;
    Ok(client.query_one(&statement, &[&session.as_str()]).await.map_err(failed)?.get(0))
}

/// The last `seq` (0 for none) of each of `sessions`, in one statement prepared once in
/// `prepared`, `client`'s connection's.
pub async fn last_seqs(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    sessions: &[&str],
) -> Result<HashMap<String, i64>, PgError> {
    if sessions.is_empty() {
        return Ok(HashMap::new());
    }
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared
        .get(
            client,
            "SELECT log.session_id, coalesce((SELECT max(seq) FROM session_events WHERE session_id = log.session_id), 0)
             FROM unnest($1::text[]) AS log(session_id)",
        )
        .await
        .map_err(failed)?;
    let rows = client.query(&statement, &[&sessions]).await.map_err(failed)?;
    Ok(rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1))).collect())
}

/// One session's part of a batch: `bodies` become its events `first_seq..`; `chunks`, when not
/// empty, has one entry per body: the streamed chunk the row also carries.
pub struct Append<'a> {
    pub lease: &'a Lease,
    pub first_seq: i64,
    pub bodies: &'a [String],
    pub chunks: &'a [Option<Chunk<'a>>],
}

/// A streamed chunk a row of the log carries beside the update as shown: its part, its number
/// among the part's chunks (from 1) and its text, which the part's pieces do not hold yet
/// (`streams.rs`). A reader adds the text of a streaming part's rows numbered past its pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    pub message: &'a str,
    pub idx: i32,
    pub number: i32,
    pub text: &'a str,
}

/// Appends a writer batch's events, for any number of sessions, in `tx`: one statement checks
/// every session's lease (the fence, `FOR SHARE`) and one inserts every event. If a session's
/// lease is another replica's now, nothing is inserted and the error names it
/// ([`PgError::Fenced`]): roll `tx` back, and write the batch again without that session.
pub async fn append(tx: &Transaction<'_>, target: &PgTarget, batch: &[Append<'_>]) -> Result<(), PgError> {
    let prepared = Prepared::default();
    let leases: Vec<&Lease> = batch.iter().map(|part| part.lease).collect();
    if let Some(lease) = fence_all(tx, &prepared, target, &leases).await? {
        return Err(PgError::Fenced { session: lease.session.to_string(), epoch: lease.epoch });
    }
    append_fenced(tx, &prepared, target, batch).await
}

/// [`append`] in a transaction that has already fenced every lease of `batch` (the writer's
/// batch fences the leases it held at its start and holds those it took in it): one statement,
/// prepared once in `prepared`, the connection's.
pub async fn append_fenced(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    target: &PgTarget,
    batch: &[Append<'_>],
) -> Result<(), PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let mut rows_sessions = Vec::new();
    let mut rows_seqs = Vec::new();
    let mut rows_epochs = Vec::new();
    let mut rows_bodies = Vec::new();
    let mut rows_origins = Vec::new();
    let mut chunks = Vec::new();
    for part in batch {
        for (at, (seq, body)) in (part.first_seq..).zip(part.bodies).enumerate() {
            rows_sessions.push(part.lease.session.as_str());
            rows_seqs.push(seq);
            rows_epochs.push(part.lease.epoch);
            rows_bodies.push(body.as_str());
            rows_origins.push(part.lease.holder.as_str());
            chunks.push(part.chunks.get(at).copied().flatten());
        }
    }
    let rows = (&rows_sessions[..], &rows_seqs[..], &rows_epochs[..], &rows_bodies[..], &rows_origins[..]);
    insert(tx, prepared, rows, &chunks).await.map_err(failed)
}

/// Appends `bodies` to `session`'s log after its last row, as no replica's (`origin` empty: no
/// client was shown them as they committed), in the caller's transaction, which must hold the
/// session's lease: the sweeper closing a dead replica's turn.
pub async fn append_unshown(
    tx: &Transaction<'_>,
    lease: &Lease,
    bodies: &[String],
) -> Result<(), tokio_postgres::Error> {
    if bodies.is_empty() {
        return Ok(());
    }
    let last: i64 = tx
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&lease.session.as_str()])
        .await?
        .get(0);
    let count = bodies.len();
    let sessions = vec![lease.session.as_str(); count];
    let seqs: Vec<i64> = (last + 1..).take(count).collect();
    let epochs = vec![lease.epoch; count];
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let origins = vec![""; count];
    insert(tx, &Prepared::default(), (&sessions, &seqs, &epochs, &bodies, &origins), &[]).await
}

/// Appends `bodies` to `session`'s log after its last row, as `me`'s, in the writer's batch
/// that changed the session's settings while this replica holds no lease of it, unless a
/// replica holds it (then nothing, `None`: the holder alone numbers the log while it runs a
/// turn, and the change is handed on to it). The batch's update of the session's row orders
/// this against a turn starting: every lease take locks that row too (a prompt's insert updates
/// it), so either the take waits for this commit and its writer numbers on after these rows,
/// or this waits for the take and finds the lease held. A lease whose holder stopped unreleased is held
/// until a sweeper closes it. A lease `me` took again later in the same batch (the next turn's
/// claim right after the release) is no other replica's: the change is logged after the new
/// turn's rows, as its holder's, since nobody else would log it or be handed it.
pub async fn append_unheld(
    tx: &Transaction<'_>,
    target: &PgTarget,
    session: &SessionId,
    me: &str,
    bodies: &[String],
) -> Result<Option<Appended>, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let id = session.as_str();
    let lease = tx
        .query_opt(
            "SELECT epoch, released_at IS NULL AND holder <> $2 FROM session_leases WHERE session_id = $1",
            &[&id, &me],
        )
        .await
        .map_err(failed)?;
    let epoch = match lease {
        Some(lease) if lease.get::<_, bool>(1) => return Ok(None),
        Some(lease) => lease.get::<_, i64>(0),
        None => 0,
    };
    if bodies.is_empty() {
        return Ok(None);
    }
    let last: i64 = tx
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&id])
        .await
        .map_err(failed)?
        .get(0);
    let count = i64::try_from(bodies.len()).unwrap_or(i64::MAX);
    let seqs: Vec<i64> = (last + 1..last + 1 + count).collect();
    let sessions = vec![id; bodies.len()];
    let epochs = vec![epoch; bodies.len()];
    let texts: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let origins = vec![me; bodies.len()];
    insert(tx, &Prepared::default(), (&sessions, &seqs, &epochs, &texts, &origins), &[]).await.map_err(failed)?;
    Ok(Some(Appended { session: session.clone(), seqs: last + 1..last + 1 + count, epoch }))
}

/// Rows of the log: sessions, seqs, epochs, bodies and origins, one each per row.
type Rows<'a> = (&'a [&'a str], &'a [i64], &'a [i64], &'a [&'a str], &'a [&'a str]);

const INSERT: &str =
    "INSERT INTO session_events (session_id, seq, epoch, body, origin, part_message, part_idx, part_chunk, piece)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[],
                          $6::text[], $7::int4[], $8::int4[], $9::text[])";

/// Inserts `rows`, each with its chunk of `chunks` (by row; none past its end).
async fn insert(
    client: &impl GenericClient,
    prepared: &Prepared,
    (sessions, seqs, epochs, bodies, origins): Rows<'_>,
    chunks: &[Option<Chunk<'_>>],
) -> Result<(), tokio_postgres::Error> {
    let chunk = |at: usize| chunks.get(at).copied().flatten();
    let messages: Vec<Option<&str>> = (0..sessions.len()).map(|at| chunk(at).map(|chunk| chunk.message)).collect();
    let indexes: Vec<Option<i32>> = (0..sessions.len()).map(|at| chunk(at).map(|chunk| chunk.idx)).collect();
    let numbers: Vec<Option<i32>> = (0..sessions.len()).map(|at| chunk(at).map(|chunk| chunk.number)).collect();
    let texts: Vec<Option<&str>> = (0..sessions.len()).map(|at| chunk(at).map(|chunk| chunk.text)).collect();
    let statement = prepared.get(client, INSERT).await?;
    client
        .execute(&statement, &[&sessions, &seqs, &epochs, &bodies, &origins, &messages, &indexes, &numbers, &texts])
        .await?;
    Ok(())
}

/// Wakes the followers of `sessions`: once per committed batch, outside its transaction. The
/// statement is prepared once in `prepared`, `client`'s connection's.
pub async fn notify(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    sessions: &[SessionId],
) -> Result<(), PgError> {
    notify_from(client, prepared, target, None, sessions).await
}

/// [`notify`] naming the replica whose writer appended the rows (`origin`): that replica's own
/// follower has been told of them already ([`OwnRows`]) and skips the wake-up.
pub async fn notify_from(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    origin: Option<&str>,
    sessions: &[SessionId],
) -> Result<(), PgError> {
    let mut payload = String::new();
    if let Some(origin) = origin {
        payload.push(ORIGIN);
        payload.push_str(origin);
        payload.push('\n');
    }
    let named_from = payload.len();
    for session in sessions {
        if payload.len() + session.as_str().len() + 1 > PAYLOAD {
            // Too many to name: naming none wakes every session.
            payload.truncate(named_from);
            break;
        }
        if payload.len() > named_from {
            payload.push(',');
        }
        payload.push_str(session.as_str());
    }
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared.get(client, "SELECT pg_notify($1, $2)").await.map_err(failed)?;
    client.execute(&statement, &[&CHANNEL, &payload]).await.map_err(failed)?;
    Ok(())
}

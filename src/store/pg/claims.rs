//! A batch's lease takes (`Write::TakeLease`, each a turn's claim: check, take, prompt, title),
//! run together at the batch's start in a few set-based statements instead of a claim's
//! statements one claim after another.
//!
//! When many prompts arrive at once, a batch carries many claims; run in turn, each cost three
//! round trips and five statements, and the chunks of every running turn queued behind them.
//! Here a batch's claims cost one round trip: one statement checks and takes every lease
//! (`INSERT … SELECT FROM unnest … ON CONFLICT DO UPDATE … WHERE`: each claim's check on the row
//! as found, then the one-take condition on the row locked, which must still be the row
//! checked), and the prompts, their parts and the titles follow in one statement each, sent
//! with it, each writing only for the leases it took. Only refused claims cost a second round
//! trip, a read of their rows to say why. The lease keeps its guarantees: the take is still one
//! row-locking upsert per lease, so one holder at a time; each take makes the epoch one
//! greater; the expiry is set on the database's clock; a take refused because another holder's
//! lease runs answers who holds it, as one take does, and never locks that lease's row (it
//! would wait for that replica's batch).
//!
//! Only the takes that can run before the batch's other writes without changing what any write
//! sees are run so ([`first`]): a take with a prompt, whose session no earlier write of the batch
//! touched, and that comes before every write that may reach across sessions (a delete, a fork,
//! an import, a hide). The others run in their place, one at a time, as before: so do a take
//! without a prompt, which locks its session's row by itself, and a take for a command another
//! replica handed, which first checks the command is still its own.

use std::collections::{HashMap, HashSet};

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::grouped::Columns;
use super::lease::{Lease, epoch_of, holder_of, mark_of};
use super::writer::{Done, PartKey, State};
use super::writes::session_of;
use super::{PgError, rows};
use crate::history::Message;
use crate::ids::{SessionId, now_ms};
use crate::store::{LastTurn, StoreError, Write};

/// A session's lease row as a take's check reads it.
pub(super) struct LeaseRow {
    pub holder: String,
    pub epoch: i64,
    /// Neither released nor expired.
    pub live: bool,
    pub taken_ms: i64,
    pub expires_ms: i64,
}

/// Why a take must be refused before it runs, given its session's lease row (`None`: no row):
/// another replica's lease runs, or the caller's history is older than the session's last turn.
pub(super) fn refusal(
    row: Option<&LeaseRow>,
    state: &State<'_>,
    session: &SessionId,
    last: &LastTurn,
) -> Option<StoreError> {
    let Some(row) = row else {
        return matches!(last, LastTurn::By(Some(_)))
            .then(|| StoreError::LeaseMoved { session: session.clone(), last: None });
    };
    if row.live && row.holder != state.me {
        let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
        let heartbeat = row.expires_ms - ttl;
        return Some(StoreError::Leased(Box::new(holder_of(session, &row.holder, row.taken_ms, heartbeat))));
    }
    let current = match last {
        LastTurn::Ours => row.holder == state.me,
        LastTurn::By(mark) => mark.as_deref() == Some(mark_of(row.epoch).as_str()),
    };
    (!current).then(|| StoreError::LeaseMoved { session: session.clone(), last: Some(mark_of(row.epoch)) })
}

/// The takes of `writes` that may run at the batch's start, all together (their indexes): each
/// one's session untouched by any write before it in the batch, and no write before it one
/// that may reach another session's rows.
pub(super) fn first(writes: &[Write], open: &HashMap<PartKey, SessionId>) -> Vec<usize> {
    let none = HashMap::new();
    let mut touched: HashSet<&SessionId> = HashSet::new();
    let mut takes = Vec::new();
    for (job, write) in writes.iter().enumerate() {
        match write {
            Write::TakeLease { session_id, prompt: Some(_), command: None, .. } => {
                if touched.insert(session_id) {
                    takes.push(job);
                }
                continue;
            }
            // A take with no prompt (`/compact`, `/rewind`) locks its session's row on its own,
            // and a handed command's take checks the command is still its taker's: both rare,
            // both run in their place.
            Write::TakeLease { .. } => {}
            Write::InsertSession(row) => {
                touched.insert(&row.id);
            }
            Write::ReleaseLease { session_id } | Write::FinalizeOrphans { session_id } => {
                touched.insert(session_id);
            }
            Write::DeleteSession { .. }
            | Write::DeleteUnprompted { .. }
            | Write::HideFrom { .. }
            | Write::ForkSession { .. }
            | Write::ImportSession { .. } => break,
            Write::SetSessionTitle { .. }
            | Write::SetSessionSetting { .. }
            | Write::AddSessionRule { .. }
            | Write::SetSessionRules { .. }
            | Write::SetArchived { .. }
            | Write::SetMessageMeta { .. }
            | Write::InsertMessage { .. }
            | Write::FinishMessage { .. }
            | Write::PutPart { .. }
            | Write::OpenPart { .. }
            | Write::AppendPart { .. }
            | Write::ClosePart { .. }
            | Write::PutBlobs(_)
            | Write::PutCheckpoints { .. }
            | Write::FinishRestore { .. }
            | Write::TrimCheckpoints { .. }
            | Write::AddProjectRule { .. }
            | Write::RemoveProjectRule { .. }
            | Write::AddToken { .. }
            | Write::CopyToken { .. }
            | Write::RevokeToken { .. }
            | Write::Show { .. }
            | Write::Barrier => {}
        }
        if let Some(session) = session_of(write, open, &none) {
            touched.insert(session);
        }
    }
    takes
}

const READ: &str = "SELECT session_id, holder, epoch, released_at IS NULL AND expires_at > now(),
        (extract(epoch FROM taken_at) * 1000)::bigint, (extract(epoch FROM expires_at) * 1000)::bigint
     FROM session_leases WHERE session_id = ANY($1::text[])";

/// Every claim's check and take at once, each row locked: a claim passes its check on the
/// lease row as the statement found it (see [`expected`]), and takes the lease if nobody else's
/// runs and the row is still the one checked (the epoch it is given is one more than the one
/// seen, the one-take condition's epoch + 1). A lease another replica holds live as found is
/// not touched at all: locking its row would wait for that replica's batch, whose fence holds
/// it, and hold up that replica's next one (the two replicas' batches could deadlock). Rows are
/// locked in the sessions' order, as every batch locks them. Answers the leases taken, with
/// their epochs and whether each was another holder's that lapsed unreleased (read as found:
/// the take is of that row, its epoch unchanged).
const TAKE: &str = "WITH took AS (
       INSERT INTO session_leases AS lease (session_id, holder, epoch, expires_at, taken_at)
       SELECT mine.session_id, $2, coalesce(seen.epoch, 0) + 1, now() + $3::float8 * interval '1 second', now()
         FROM unnest($1::text[], $4::bool[], $5::int8[]) AS mine(session_id, ours, epoch)
         LEFT JOIN session_leases AS seen ON seen.session_id = mine.session_id
        WHERE CASE WHEN mine.ours THEN seen.session_id IS NULL OR seen.holder = $2
                   WHEN mine.epoch IS NULL THEN seen.session_id IS NULL
                   ELSE seen.epoch = mine.epoch END
          AND (seen.session_id IS NULL OR seen.holder = $2 OR seen.released_at IS NOT NULL OR seen.expires_at <= now())
        ORDER BY mine.session_id
       ON CONFLICT (session_id) DO UPDATE
          SET holder = excluded.holder, epoch = lease.epoch + 1, expires_at = excluded.expires_at,
              taken_at = excluded.taken_at, released_at = NULL
          WHERE (lease.expires_at <= now() OR lease.holder = excluded.holder) AND lease.epoch + 1 = excluded.epoch
       RETURNING session_id, epoch
     )
     SELECT took.session_id, took.epoch, coalesce(seen.holder <> $2 AND seen.released_at IS NULL, false)
       FROM took LEFT JOIN session_leases AS seen ON seen.session_id = took.session_id";

/// Sent after [`TAKE`] in the same transaction, the prompts' statements write only for the
/// sessions whose lease it took: held by this replica and taken at this transaction's start.
const MESSAGES: &str = "WITH taken AS (
         SELECT session_id FROM session_leases
          WHERE session_id = ANY($2::text[]) AND holder = $6 AND taken_at = now()
     ),
     touched AS (UPDATE sessions SET updated_at = $5 WHERE id IN (SELECT session_id FROM taken))
     INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at)
     SELECT m.id, m.session_id, m.role, m.meta, $5, $5
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS m(id, session_id, role, meta)
      WHERE m.session_id IN (SELECT session_id FROM taken)";

const PARTS: &str =
    "INSERT INTO parts (message_id, session_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at)
     SELECT p.message_id, p.session_id, p.idx, p.type, p.data, p.call, p.state, $8, $8
       FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[])
         AS p(message_id, session_id, idx, type, data, call, state)
       JOIN session_leases AS taken
         ON taken.session_id = p.session_id AND taken.holder = $9 AND taken.taken_at = now()";

const TITLES: &str = "UPDATE sessions AS s SET title = t.title, updated_at = $3
     FROM unnest($1::text[], $2::text[]) AS t(id, title)
     JOIN session_leases AS taken ON taken.session_id = t.id AND taken.holder = $4 AND taken.taken_at = now()
     WHERE s.id = t.id AND s.title IS NULL";

/// Runs the takes `jobs` of `writes` (as [`first`] chose them) together, answering each in
/// `done`: refused by its check, held by another replica, fenced (`fenced`: leases this
/// replica held that another took over), or taken with its prompt and title written. `Err`
/// is a statement's failure: the transaction is aborted.
pub(super) async fn take_all(
    tx: &impl GenericClient,
    state: &State<'_>,
    writes: &[Write],
    jobs: &[usize],
    fenced: &HashSet<SessionId>,
    done: &mut Done,
) -> Result<(), tokio_postgres::Error> {
    struct Claim<'a> {
        job: usize,
        session: &'a SessionId,
        prompt: Option<&'a Message>,
        title: Option<&'a str>,
    }
    let mut claims = Vec::with_capacity(jobs.len());
    for &job in jobs {
        let Some(Write::TakeLease { session_id, last, prompt, title, command: None }) = writes.get(job) else {
            continue;
        };
        if fenced.contains(session_id) {
            let epoch = state.held.get(session_id).map_or(0, |lease| lease.epoch);
            done.results[job] = Err(StoreError::Postgres(PgError::Fenced { session: session_id.to_string(), epoch }));
            continue;
        }
        claims.push((Claim { job, session: session_id, prompt: prompt.as_ref(), title: title.as_deref() }, last));
    }
    if claims.is_empty() {
        return Ok(());
    }
    // In one order, so two replicas taking overlapping sets lock their rows in the same order.
    claims.sort_by(|a, b| a.0.session.as_str().cmp(b.0.session.as_str()));
    let names: Vec<&str> = claims.iter().map(|(claim, _)| claim.session.as_str()).collect();
    let (ours, epochs): (Vec<bool>, Vec<Option<i64>>) = claims.iter().map(|(_, last)| expected(last)).unzip();
    let seconds = state.ttl.as_secs_f64();
    let take = state.prepared.get(tx, TAKE).await?;
    // The prompts go in the same round trip, after the take: each is written only if its lease
    // was taken by this transaction.
    let prompts: Vec<_> = claims.iter().map(|(claim, _)| (claim.session, claim.prompt, claim.title)).collect();
    let taking = async {
        let params: [&(dyn ToSql + Sync); 5] = [&names, &state.me, &seconds, &ours, &epochs];
        tx.query(&take, &params).await
    };
    let (taken, written) = futures::future::join(taking, write_prompts(tx, state, &prompts)).await;
    let taken = taken?;
    written?;
    let epochs: HashMap<String, i64> = taken.iter().map(|row| (row.get(0), row.get(1))).collect();
    // A lease taken from a holder that stopped mid-turn: the text it streamed only into the
    // log goes into pieces, as the sweeper's close would have done had it come first.
    let orphaned: Vec<SessionId> = taken
        .iter()
        .filter(|row| row.get::<_, bool>(2))
        .map(|row| SessionId::from_string(row.get::<_, String>(0)))
        .collect();
    if !orphaned.is_empty() {
        rows::fold_streams(tx, &orphaned.iter().collect::<Vec<_>>()).await?;
    }
    let (took, refused): (Vec<_>, Vec<_>) =
        claims.into_iter().partition(|(claim, _)| epochs.contains_key(claim.session.as_str()));
    if !refused.is_empty() {
        // Why, from the lease rows as they are now: another replica's lease runs (who holds
        // it, as one take answers), or the session had a turn since the caller's history.
        let names: Vec<&str> = refused.iter().map(|(claim, _)| claim.session.as_str()).collect();
        let read = state.prepared.get(tx, READ).await?;
        let rows: HashMap<String, LeaseRow> = tx
            .query(&read, &[&names])
            .await?
            .iter()
            .map(|row| {
                let lease = LeaseRow {
                    holder: row.get(1),
                    epoch: row.get(2),
                    live: row.get(3),
                    taken_ms: row.get(4),
                    expires_ms: row.get(5),
                };
                (row.get::<_, String>(0), lease)
            })
            .collect();
        for (claim, last) in refused {
            let row = rows.get(claim.session.as_str());
            // A check that would pass now was made against a row that changed under the take.
            let moved =
                || StoreError::LeaseMoved { session: claim.session.clone(), last: row.map(|row| mark_of(row.epoch)) };
            done.results[claim.job] = Err(refusal(row, state, claim.session, last).unwrap_or_else(moved));
        }
    }
    for (claim, _) in took {
        let epoch = epochs.get(claim.session.as_str()).copied().unwrap_or_default();
        done.taken.push(Lease { session: claim.session.clone(), holder: state.me.to_owned(), epoch });
    }
    Ok(())
}

/// What a take's check asks of its lease row, as [`TAKE`] takes it: that this replica holds
/// it or nobody ever did (`true`), else that its epoch is this one (`None`: that there is no
/// row). A mark that names no epoch matches none.
fn expected(last: &LastTurn) -> (bool, Option<i64>) {
    match last {
        LastTurn::Ours => (true, None),
        LastTurn::By(None) => (false, None),
        LastTurn::By(Some(mark)) => (false, Some(epoch_of(mark).unwrap_or(-1))),
    }
}

/// The claims' prompts with their parts, and the titles of sessions that have none yet: one
/// statement each, sent together (the server runs them in the order sent, the messages first).
async fn write_prompts(
    tx: &impl GenericClient,
    state: &State<'_>,
    claims: &[(&SessionId, Option<&Message>, Option<&str>)],
) -> Result<(), tokio_postgres::Error> {
    let now = now_ms();
    let mut rows = Columns::default();
    let (mut titled, mut titles) = (Vec::new(), Vec::new());
    for (session, prompt, title) in claims {
        if let Some(message) = prompt {
            rows.message(session, message);
            for (index, part) in message.parts.iter().enumerate() {
                rows.part(session, &message.id, u32::try_from(index).unwrap_or(u32::MAX), part);
            }
        }
        if let Some(title) = title {
            titled.push(session.as_str());
            titles.push(*title);
        }
    }
    // Prepared before any is sent, so they go out in this order.
    let (insert, put, name) = (
        state.prepared.get(tx, MESSAGES).await?,
        state.prepared.get(tx, PARTS).await?,
        state.prepared.get(tx, TITLES).await?,
    );
    let messages = async {
        if rows.ids.is_empty() {
            return Ok(0);
        }
        let mut params = rows.messages(&now);
        params.push(&state.me);
        tx.execute(&insert, &params).await
    };
    let parts = async {
        if rows.owners.is_empty() {
            return Ok(0);
        }
        let mut params = rows.parts(&now);
        params.push(&state.me);
        tx.execute(&put, &params).await
    };
    let named = async {
        if titled.is_empty() {
            return Ok(0);
        }
        tx.execute(&name, &[&titled, &titles, &now, &state.me]).await
    };
    let (messages, parts, named) = futures::future::join3(messages, parts, named).await;
    messages?;
    parts?;
    named?;
    Ok(())
}

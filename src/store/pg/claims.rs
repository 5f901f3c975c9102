//! A batch's lease takes (`Write::TakeLease`, each a turn's claim: check, take, prompt, title),
//! run together at the batch's start in a few set-based statements instead of a claim's
//! statements one claim after another.
//!
//! When many prompts arrive at once, a batch carries many claims; run in turn, each cost three
//! round trips and five statements, and the chunks of every running turn queued behind them.
//! Here a batch's claims cost one read of their lease rows, one take of every lease that passed
//! its check (`INSERT … SELECT FROM unnest … ON CONFLICT DO UPDATE … WHERE`, the same condition
//! as one take), and the prompts, their parts and the titles in one statement each, sent
//! together. The lease keeps its guarantees: the take is still one row-locking upsert per
//! lease, so one holder at a time; each take makes the epoch one greater; the expiry is set on
//! the database's clock; a take refused because another holder's lease runs answers who holds
//! it, as one take does.
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

use super::PgError;
use super::lease::Lease;
use super::writer::{Done, PartKey, State, holder_of, mark_of};
use super::writes::session_of;
use crate::history::Message;
use crate::ids::{SessionId, now_ms};
use crate::store::codec::{self, to_json};
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

const TAKE: &str = "INSERT INTO session_leases AS lease (session_id, holder, epoch, expires_at, taken_at)
     SELECT mine.session_id, $2, 1, now() + $3::float8 * interval '1 second', now()
       FROM unnest($1::text[]) AS mine(session_id)
     ON CONFLICT (session_id) DO UPDATE
        SET holder = excluded.holder, epoch = lease.epoch + 1, expires_at = excluded.expires_at,
            taken_at = excluded.taken_at, released_at = NULL
        WHERE lease.expires_at <= now() OR lease.holder = excluded.holder
     RETURNING session_id, epoch";

const MESSAGES: &str = "WITH touched AS (UPDATE sessions SET updated_at = $5 WHERE id = ANY($2::text[]))
     INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at)
     SELECT m.id, m.session_id, m.role, m.meta, $5, $5
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS m(id, session_id, role, meta)";

const PARTS: &str =
    "INSERT INTO parts (message_id, session_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at)
     SELECT p.message_id, p.session_id, p.idx, p.type, p.data, p.call, p.state, $8, $8
       FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[])
         AS p(message_id, session_id, idx, type, data, call, state)";

const TITLES: &str = "UPDATE sessions AS s SET title = t.title, updated_at = $3
     FROM unnest($1::text[], $2::text[]) AS t(id, title) WHERE s.id = t.id AND s.title IS NULL";

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
    let names: Vec<&str> = claims.iter().map(|(claim, _)| claim.session.as_str()).collect();
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
    let mut passed = Vec::with_capacity(claims.len());
    for (claim, last) in claims {
        match refusal(rows.get(claim.session.as_str()), state, claim.session, last) {
            Some(refused) => done.results[claim.job] = Err(refused),
            None => passed.push(claim),
        }
    }
    if passed.is_empty() {
        return Ok(());
    }
    // In one order, so two replicas taking overlapping sets lock their rows in the same order.
    passed.sort_by(|a, b| a.session.as_str().cmp(b.session.as_str()));
    let names: Vec<&str> = passed.iter().map(|claim| claim.session.as_str()).collect();
    let seconds = state.ttl.as_secs_f64();
    let take = state.prepared.get(tx, TAKE).await?;
    let epochs: HashMap<String, i64> =
        tx.query(&take, &[&names, &state.me, &seconds]).await?.iter().map(|row| (row.get(0), row.get(1))).collect();
    let (took, held): (Vec<Claim>, Vec<Claim>) =
        passed.into_iter().partition(|claim| epochs.contains_key(claim.session.as_str()));
    if !held.is_empty() {
        // Another replica took it between the check and the take: who, as one take answers.
        let names: Vec<&str> = held.iter().map(|claim| claim.session.as_str()).collect();
        let read = state.prepared.get(tx, READ).await?;
        let rows: HashMap<String, (String, i64, i64)> = tx
            .query(&read, &[&names])
            .await?
            .iter()
            .map(|row| (row.get(0), (row.get(1), row.get(4), row.get(5))))
            .collect();
        let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
        for claim in held {
            let (holder, taken_ms, expires_ms) = rows.get(claim.session.as_str()).cloned().unwrap_or_default();
            done.results[claim.job] =
                Err(StoreError::Leased(Box::new(holder_of(claim.session, &holder, taken_ms, expires_ms - ttl))));
        }
    }
    if took.is_empty() {
        return Ok(());
    }
    write_prompts(tx, state, &took.iter().map(|claim| (claim.session, claim.prompt, claim.title)).collect::<Vec<_>>())
        .await?;
    for claim in took {
        let epoch = epochs.get(claim.session.as_str()).copied().unwrap_or_default();
        done.taken.push(Lease { session: claim.session.clone(), holder: state.me.to_owned(), epoch });
    }
    Ok(())
}

/// The claims' prompts with their parts, and the titles of sessions that have none yet: one
/// statement each, sent together (the server runs them in the order sent, the messages first).
async fn write_prompts(
    tx: &impl GenericClient,
    state: &State<'_>,
    claims: &[(&SessionId, Option<&Message>, Option<&str>)],
) -> Result<(), tokio_postgres::Error> {
    let now = now_ms();
    let (mut ids, mut sessions, mut roles, mut metas) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut owners, mut owner_sessions, mut indexes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut kinds, mut data, mut calls, mut tool_states) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut titled, mut titles) = (Vec::new(), Vec::new());
    for (session, prompt, title) in claims {
        if let Some(message) = prompt {
            ids.push(message.id.as_str());
            sessions.push(session.as_str());
            roles.push(message.role.as_str());
            metas.push(to_json(&message.meta));
            for (index, part) in message.parts.iter().enumerate() {
                let (call, tool_state) = codec::tool_columns(part);
                owners.push(message.id.as_str());
                owner_sessions.push(session.as_str());
                indexes.push(i32::try_from(index).unwrap_or(i32::MAX));
                kinds.push(part.kind());
                data.push(to_json(part));
                calls.push(call);
                tool_states.push(tool_state);
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
        if ids.is_empty() {
            return Ok(0);
        }
        let params: [&(dyn ToSql + Sync); 5] = [&ids, &sessions, &roles, &metas, &now];
        tx.execute(&insert, &params).await
    };
    let parts = async {
        if owners.is_empty() {
            return Ok(0);
        }
        let params: [&(dyn ToSql + Sync); 8] =
            [&owners, &owner_sessions, &indexes, &kinds, &data, &calls, &tool_states, &now];
        tx.execute(&put, &params).await
    };
    let named = async {
        if titled.is_empty() {
            return Ok(0);
        }
        tx.execute(&name, &[&titled, &titles, &now]).await
    };
    let (messages, parts, named) = futures::future::join3(messages, parts, named).await;
    messages?;
    parts?;
    named?;
    Ok(())
}

//! One function per [`Write`] for the PostgreSQL writer: what each write does inside a batch's
//! transaction (`one`), its statements in `rows` and the files beside it. A write refused
//! without a statement (a lease held elsewhere, an unknown token) answers `Ok(Err)` before it
//! runs any, so a refusal never leaves half a write in the batch; a statement's failure aborts
//! the transaction and the writer runs the batch again with a savepoint per write. Which
//! session a write changes ([`session_of`]) decides its fence and its events.

use std::collections::HashMap;

use tokio_postgres::GenericClient;

use super::claims::{LeaseRow, refusal};
use super::grouped::Group;
use super::lease::{self, Taken, holder_of};
use super::writer::{Done, PartKey, State};
use super::{PgError, PgTarget};
use super::{checkpoints, inbox, rows, rules, tokens, transfer};
use crate::ids::{MessageId, SessionId, now_ms};
use crate::store::{LastTurn, StoreError, TitleBy, Write};

/// Runs one write's statements: `Err` is a statement's failure (the transaction is aborted);
/// `Ok(Err)` a write refused without one.
pub(super) async fn one(
    tx: &impl GenericClient,
    target: &PgTarget,
    state: &State<'_>,
    write: &Write,
    done: &mut Done,
    opened: &mut HashMap<PartKey, SessionId>,
) -> Result<Result<(), StoreError>, tokio_postgres::Error> {
    let now = now_ms();
    match write {
        Write::InsertSession(row) => rows::insert_session(tx, row).await?,
        Write::SetSessionTitle { id, title, by } => {
            let client = *by == TitleBy::Client;
            if !rows::set_title(tx, id, title, client, now).await? && !client {
                return Ok(Err(StoreError::TitleKept(id.clone())));
            }
        }
        Write::SetSessionSetting { id, kept, value } => rows::set_setting(tx, id, *kept, value, now).await?,
        Write::AddSessionRule { id, rule } => rows::add_session_rule(tx, id, rule).await?,
        Write::SetSessionRules { id, rules } => rows::set_session_rules(tx, id, rules, now).await?,
        Write::SetArchived { id, archived } => rows::set_archived(tx, id, *archived, now).await?,
        Write::TakeLease { session_id, last, prompt, title, command } => {
            // Its lease's row is locked already, at the batch's start or in its savepoint
            // (`Writer::attempt_once`, `lease::lock_for_takes`), unless another replica holds it live.
            if let Some(refused) = check_last(tx, state, session_id, last).await? {
                return Ok(Err(refused));
            }
            if prompt.is_none() && title.is_none() {
                // A take with no prompt (`/compact`, `/rewind`) takes the session's row too, as a
                // prompt's insert does: so a settings change logged while nobody held the lease
                // (`events::append_unheld`) either commits first, numbered before this holder's
                // rows, or waits and finds the lease taken.
                tx.execute("SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE", &[&session_id.as_str()]).await?;
            }
            if let Some(command) = command
                && !inbox::still_taken(tx, state.prepared, *command, state.me).await?
            {
                return Ok(Err(StoreError::CommandAnswered(*command)));
            }
            // A statement's failure aborts the transaction: it must fail the batch's run, never
            // pass for a refusal that lets the rest of the batch "commit" a rolled-back transaction.
            let lease = match lease::try_take(tx, state.prepared, session_id, state.me, state.ttl).await? {
                Taken::Took(lease) => lease,
                Taken::Held { holder, taken_ms, expires_ms } => {
                    let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
                    return Ok(Err(StoreError::Leased(Box::new(holder_of(
                        session_id,
                        &holder,
                        taken_ms,
                        expires_ms - ttl,
                    )))));
                }
            };
            // The prompt and the title are sent together: the server runs them in order.
            let inserted = async {
                match prompt {
                    Some(prompt) => rows::insert_message(tx, state.prepared, session_id, prompt, now).await,
                    None => Ok(()),
                }
            };
            let titled = async {
                match title {
                    Some(title) => rows::set_first_title(tx, state.prepared, session_id, title, now).await,
                    None => Ok(()),
                }
            };
            let (inserted, titled) = futures::future::join(inserted, titled).await;
            inserted?;
            titled?;
            // Held only once the whole take went in: a take whose prompt failed rolls back. It
            // supersedes a release earlier in the batch, and an earlier take of it.
            done.released.retain(|session| session != session_id);
            done.taken.retain(|taken| &taken.session != session_id);
            done.taken.push(lease);
        }
        Write::ReleaseLease { session_id } => {
            // The lease as this batch leaves it so far: taken in it, or held before it.
            let taken = done.taken.iter().position(|taken| &taken.session == session_id);
            if let Some(lease) = taken.map(|at| &done.taken[at]).or_else(|| state.held.get(session_id)) {
                lease::try_release(tx, lease).await?;
                if let Some(at) = taken {
                    done.taken.remove(at);
                }
                done.released.push(session_id.clone());
            }
            // The turn that lost it, if it was lost, has ended: the session's writes from here
            // on are no longer that turn's.
            done.ended.push(session_id.clone());
        }
        Write::FinalizeOrphans { session_id } => {
            let live: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM session_leases WHERE session_id = $1 AND released_at IS NULL AND expires_at > now())",
                    &[&session_id.as_str()],
                )
                .await?
                .get(0);
            if !live {
                rows::finalize_orphans(tx, session_id, now).await?;
            }
        }
        Write::InsertMessage { session_id, message } => {
            rows::insert_message(tx, state.prepared, session_id, message, now).await?
        }
        Write::SetMessageMeta { message_id, meta } => rows::set_message_meta(tx, message_id, meta, now).await?,
        Write::FinishMessage { session_id, message_id, meta } => {
            rows::finish_message(tx, session_id, message_id, meta, now).await?;
        }
        // A group of one (`grouped.rs`): what a part's write does besides its statement is the
        // group's, alone or in a run.
        Write::PutPart { .. } | Write::OpenPart { .. } => {
            let mut group = Group::default();
            group.take(write, opened);
            group.send(tx, state.prepared).await?;
        }
        // Its text goes into a piece or rides on its log row at the batch's end (`streams.rs`).
        Write::AppendPart { message_id, index, .. } => {
            let key = (message_id.clone(), *index);
            if !opened.contains_key(&key) && !state.open.contains_key(&key) {
                let detail = format!("chunk for part {index} of {message_id}, which is not open");
                return Ok(Err(StoreError::Postgres(PgError::Query { at: target.to_string(), detail })));
            }
        }
        Write::ClosePart { message_id, index } => {
            let key = (message_id.clone(), *index);
            if let Some(session) = opened.remove(&key) {
                done.shut.push((key.clone(), session));
            }
            done.closed.push(key);
        }
        Write::HideFrom { session_id, from } => {
            if let Some(refused) = leased_below(tx, state, session_id).await? {
                return Ok(Err(refused));
            }
            rows::hide_from(tx, session_id, from, now).await?;
        }
        Write::DeleteSession { id } | Write::DeleteUnprompted { id } => {
            let only_unprompted = matches!(write, Write::DeleteUnprompted { .. });
            if let Some(refused) = leased_below(tx, state, id).await? {
                // Another replica is using it: an unprompted one stays, as asked.
                return Ok(if only_unprompted { Ok(()) } else { Err(refused) });
            }
            let deleted = rows::delete_session(tx, id, only_unprompted).await?;
            if !deleted.is_empty() {
                checkpoints::drop_unused_blobs(tx).await?;
            }
            // Their lease rows went with them: this replica's are no longer held.
            done.released.extend(deleted.into_iter().filter(|session| state.held.contains_key(session)));
        }
        Write::PutBlobs(blobs) => checkpoints::put_blobs(tx, blobs).await?,
        Write::PutCheckpoints { session_id, prompt, captures, restore } => {
            let captures = checkpoints::of_write(prompt.as_ref(), captures, restore.as_deref(), now);
            if let Some(detail) = checkpoints::missing(tx, &captures, &[]).await? {
                return Ok(Err(StoreError::Postgres(PgError::Query { at: target.to_string(), detail })));
            }
            checkpoints::put_captures(tx, session_id, &captures).await?;
        }
        Write::FinishRestore { session_id } => checkpoints::finish_restore(tx, session_id).await?,
        Write::TrimCheckpoints { session_id, session_bytes, total_bytes } => {
            checkpoints::trim(tx, session_id, *session_bytes, *total_bytes).await?;
        }
        Write::AddProjectRule { project, rule } => rules::add(tx, project, rule, now).await?,
        Write::RemoveProjectRule { project, rule } => rules::remove(tx, project, rule).await?,
        Write::ForkSession { row, parent } => transfer::fork_session(tx, row, parent, now).await?,
        Write::ImportSession { row, messages, checkpoints: carried, blobs } => {
            // Refused before anything is written, so no half import is left in the batch.
            if let Some(detail) = checkpoints::missing(tx, &checkpoints::of_import(carried), blobs).await? {
                return Ok(Err(StoreError::Postgres(PgError::Query { at: target.to_string(), detail })));
            }
            transfer::import_session(tx, row, messages, carried, blobs).await?;
        }
        Write::AddToken { id, principal, hash } => tokens::insert(tx, id, principal, hash, now).await?,
        Write::CopyToken { row, hash } => tokens::copy(tx, row, hash).await?,
        Write::RevokeToken { id } => {
            if !tokens::exists(tx, id).await? {
                return Ok(Err(StoreError::UnknownToken(id.clone())));
            }
            tokens::revoke(tx, id, now).await?;
        }
        Write::Barrier | Write::Show { .. } => {}
    }
    Ok(Ok(()))
}

/// [`StoreError::Leased`] while another replica's lease runs on `session` or a sub-agent below
/// it (see [`lease::held_below`]).
async fn leased_below(
    tx: &impl GenericClient,
    state: &State<'_>,
    session: &SessionId,
) -> Result<Option<StoreError>, tokio_postgres::Error> {
    let Some((leased, holder, taken_ms, expires_ms)) = lease::held_below(tx, session, state.me).await? else {
        return Ok(None);
    };
    let ttl = i64::try_from(state.ttl.as_millis()).unwrap_or(i64::MAX);
    Ok(Some(StoreError::Leased(Box::new(holder_of(&leased, &holder, taken_ms, expires_ms - ttl)))))
}

/// Refuses a take while another replica's lease runs, or whose caller's history is older than
/// the session's last turn.
async fn check_last(
    tx: &impl GenericClient,
    state: &State<'_>,
    session: &SessionId,
    last: &LastTurn,
) -> Result<Option<StoreError>, tokio_postgres::Error> {
    let statement = state
        .prepared
        .get(
            tx,
            "SELECT holder, epoch, released_at IS NULL AND expires_at > now(),
                    (extract(epoch FROM taken_at) * 1000)::bigint, (extract(epoch FROM expires_at) * 1000)::bigint
             FROM session_leases WHERE session_id = $1",
        )
        .await?;
    let row = tx.query_opt(&statement, &[&session.as_str()]).await?.map(|row| LeaseRow {
        holder: row.get(0),
        epoch: row.get(1),
        live: row.get(2),
        taken_ms: row.get(3),
        expires_ms: row.get(4),
    });
    Ok(refusal(row.as_ref(), state, session, last))
}

/// The session a write changes, when it names one or writes a part open in it.
pub(super) fn session_of<'a>(
    write: &'a Write,
    open: &'a HashMap<PartKey, SessionId>,
    opened: &'a HashMap<PartKey, SessionId>,
) -> Option<&'a SessionId> {
    let part = |message: &MessageId, index: u32| {
        let key = (message.clone(), index);
        opened.get(&key).or_else(|| open.get(&key))
    };
    match write {
        Write::SetSessionTitle { id, .. }
        | Write::SetSessionSetting { id, .. }
        | Write::AddSessionRule { id, .. }
        | Write::SetSessionRules { id, .. }
        | Write::SetArchived { id, .. } => Some(id),
        Write::TakeLease { session_id, .. }
        | Write::InsertMessage { session_id, .. }
        | Write::FinishMessage { session_id, .. }
        | Write::PutPart { session_id, .. }
        | Write::OpenPart { session_id, .. }
        | Write::HideFrom { session_id, .. }
        | Write::PutCheckpoints { session_id, .. }
        | Write::FinishRestore { session_id }
        | Write::TrimCheckpoints { session_id, .. }
        | Write::Show { session_id } => Some(session_id),
        Write::AppendPart { message_id, index, .. } | Write::ClosePart { message_id, index } => {
            part(message_id, *index)
        }
        Write::InsertSession(_)
        | Write::ReleaseLease { .. }
        | Write::FinalizeOrphans { .. }
        | Write::SetMessageMeta { .. }
        | Write::DeleteSession { .. }
        | Write::DeleteUnprompted { .. }
        | Write::PutBlobs(_)
        | Write::AddProjectRule { .. }
        | Write::RemoveProjectRule { .. }
        | Write::ForkSession { .. }
        | Write::ImportSession { .. }
        | Write::AddToken { .. }
        | Write::CopyToken { .. }
        | Write::RevokeToken { .. }
        | Write::Barrier => None,
    }
}

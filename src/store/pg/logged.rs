//! What a batch of the PostgreSQL writer appends to its sessions' event logs, in the batch's
//! transaction: which writes are logged (those of sessions whose lease this replica holds, and
//! a settings change where nobody else holds it), numbered on from each log's last `seq`, and
//! the `seq` each write's first logged update got. Worked out first ([`Plan`]), so the writer
//! knows which chunks log a row that can carry their text (`streams.rs`), then appended with
//! the batch's last statements ([`log`]). Split from `writer.rs`.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use super::events;
use super::lease::Lease;
use super::writer::{Done, PartKey};
use super::writes::session_of;
use super::{PgTarget, Prepared};
use crate::ids::SessionId;
use crate::store::{StoreError, Write};

/// What [`log`] reads of the writer while a batch holds its connection.
pub(super) struct Known<'a> {
    pub target: &'a PgTarget,
    pub prepared: &'a Prepared,
    pub open: &'a HashMap<PartKey, SessionId>,
    pub held: &'a HashMap<SessionId, Lease>,
    pub seqs: &'a HashMap<SessionId, i64>,
}

/// Which of a batch's writes go into which session's log, worked out before anything is sent:
/// the writer decides from it which chunks its pieces may leave to the log (`streams.rs`).
#[derive(Default)]
pub(super) struct Plan<'w> {
    /// Each session logged under a lease of this replica: the lease, its rows' bodies, and the
    /// chunk each row carries (by row).
    logged: Vec<(Lease, Vec<String>, Vec<Option<events::Chunk<'w>>>)>,
    /// Each logged write: its index, its session's place in `logged`, and where its first
    /// update is among that session's.
    placed: Vec<(usize, usize, usize)>,
    /// Settings changed in sessions whose lease this replica does not hold: logged if nobody does.
    unheld: Vec<(usize, SessionId, &'w [String])>,
}

impl<'w> Plan<'w> {
    /// Which of `writes` are logged: those that committed and show something, of sessions
    /// whose lease this replica holds (their writer, so the one to number their events), each
    /// write's events after the previous write's; and settings changes where nobody holds the
    /// lease, after all of them.
    pub fn of(
        known: &Known<'_>,
        writes: &[Write],
        shown: &'w [Vec<String>],
        done: &Done,
        opened: &HashMap<PartKey, SessionId>,
    ) -> Self {
        let mut plan = Plan::default();
        // Where each session is in `logged`: a batch may carry chunks of a thousand sessions.
        let mut at: HashMap<SessionId, usize> = HashMap::new();
        // Sessions whose lease this batch gave back: what it writes of them later is not theirs to log.
        let mut given_back: Vec<&SessionId> = Vec::new();
        for (job, ((write, bodies), result)) in writes.iter().zip(shown).zip(&done.results).enumerate() {
            match (write, result) {
                (Write::ReleaseLease { session_id }, Ok(())) => given_back.push(session_id),
                // Taken again after it (the next turn's claim): what follows is the new turn's.
                (Write::TakeLease { session_id, .. }, Ok(())) => given_back.retain(|gone| *gone != session_id),
                _ => {}
            }
            if bodies.is_empty() || result.is_err() {
                continue;
            }
            let Some(session) = session_of(write, known.open, opened) else { continue };
            if done.lost.contains(session) {
                continue;
            }
            let lease =
                done.taken.iter().rev().find(|lease| lease.session == *session).or_else(|| known.held.get(session));
            let Some(lease) = lease.filter(|_| !given_back.contains(&session)) else {
                if let Write::SetSessionSetting { .. } = write {
                    plan.unheld.push((job, session.clone(), bodies));
                }
                continue;
            };
            match at.get(&lease.session) {
                Some(&index) => {
                    let rows = &mut plan.logged[index];
                    plan.placed.push((job, index, rows.1.len()));
                    rows.1.extend(bodies.iter().cloned());
                    rows.2.resize(rows.1.len(), None);
                }
                None => {
                    at.insert(lease.session.clone(), plan.logged.len());
                    plan.placed.push((job, plan.logged.len(), 0));
                    plan.logged.push((lease.clone(), bodies.clone(), vec![None; bodies.len()]));
                }
            }
        }
        plan
    }

    /// Whether write `job` goes into its session's log under this replica's lease.
    pub fn logs(&self, job: usize) -> bool {
        self.placed.binary_search_by_key(&job, |placed| placed.0).is_ok()
    }

    /// Has the first row write `job` logs carry `chunk`; nothing if it logs no row.
    pub fn carry(&mut self, job: usize, chunk: events::Chunk<'w>) {
        if let Ok(found) = self.placed.binary_search_by_key(&job, |placed| placed.0) {
            let (_, index, offset) = self.placed[found];
            self.logged[index].2[offset] = Some(chunk);
        }
    }
}

/// Appends what `plan` logs to the sessions' event logs, in the batch's transaction, each
/// session numbered on from its log's last `seq`. Answers the rows each session got and the
/// `seq` of each write's first logged update.
pub(super) async fn log(
    tx: &Transaction<'_>,
    known: &Known<'_>,
    me: &str,
    writes: usize,
    plan: &Plan<'_>,
    done: &Done,
) -> Result<Logged, StoreError> {
    let logged = &plan.logged;
    if logged.is_empty() {
        let firsts = vec![None; writes];
        return log_unheld(tx, known.target, me, &plan.unheld, Logged { seqs: Vec::new(), firsts }).await;
    }
    // A session whose next `seq` is not known (its lease taken in this batch, or before it but
    // nothing logged since) is numbered on from its log's last row, read for all at once.
    let taken_now = |session: &SessionId| done.taken.iter().any(|taken| taken.session == *session);
    let unknown: Vec<&str> = logged
        .iter()
        .map(|(lease, ..)| &lease.session)
        .filter(|session| taken_now(session) || !known.seqs.contains_key(*session))
        .map(SessionId::as_str)
        .collect();
    let lasts = events::last_seqs(tx, known.prepared, known.target, &unknown).await.map_err(StoreError::Postgres)?;
    let mut seqs = Vec::with_capacity(logged.len());
    let mut appends = Vec::with_capacity(logged.len());
    let mut firsts = Vec::with_capacity(logged.len());
    for (lease, bodies, chunks) in logged {
        let first = match known.seqs.get(&lease.session) {
            Some(next) if !taken_now(&lease.session) => *next,
            _ => lasts.get(lease.session.as_str()).copied().unwrap_or(0) + 1,
        };
        let count = i64::try_from(bodies.len()).unwrap_or(i64::MAX);
        seqs.push(events::Appended { session: lease.session.clone(), seqs: first..first + count, epoch: lease.epoch });
        firsts.push(first);
        appends.push(events::Append { lease, first_seq: first, bodies, chunks });
    }
    // Every lease logged under was fenced at the batch's start (`fence`: those held then) or
    // taken in it (its row locked since), so the log's rows need no fence of their own.
    events::append_fenced(tx, known.prepared, known.target, &appends).await.map_err(StoreError::Postgres)?;
    let mut by_write = vec![None; writes];
    for &(job, index, offset) in &plan.placed {
        by_write[job] = Some(firsts[index] + i64::try_from(offset).unwrap_or(i64::MAX));
    }
    log_unheld(tx, known.target, me, &plan.unheld, Logged { seqs, firsts: by_write }).await
}

/// Appends what the settings changes of `unheld` show to their sessions' logs, after every
/// row of the batch, where no replica holds the session's lease ([`events::append_unheld`]);
/// `logged` with their rows.
async fn log_unheld(
    tx: &Transaction<'_>,
    target: &PgTarget,
    me: &str,
    unheld: &[(usize, SessionId, &[String])],
    mut logged: Logged,
) -> Result<Logged, StoreError> {
    for (job, session, bodies) in unheld {
        let appended = events::append_unheld(tx, target, session, me, bodies).await.map_err(StoreError::Postgres)?;
        if let Some(appended) = appended {
            logged.firsts[*job] = Some(appended.seqs.start);
            logged.seqs.push(appended);
        }
    }
    Ok(logged)
}

/// What a batch appended to the event logs: the rows of each session, and the `seq` of each
/// write's first logged update (by write; `None` when it logged nothing).
#[derive(Default)]
pub(super) struct Logged {
    pub seqs: Vec<events::Appended>,
    pub firsts: Vec<Option<i64>>,
}

//! The leases the PostgreSQL writer holds, kept between its batches: renewed all at once
//! every third of their time to live (one statement, however many are held, so a writer holding
//! many is not held up renewing them), releases that failed tried again, and every lease given
//! back at shutdown; and what a batch asks of them: its writes fenced, its takes' sessions.

use std::collections::{HashMap, HashSet};

use tokio::time::Instant;
use tokio_postgres::Transaction;

use super::lease::{self, Lease};
use super::writer::{PartKey, Writer};
use super::writes::session_of;
use super::{PgTarget, Prepared};
use crate::ids::SessionId;
use crate::store::{StoreError, Write};

impl Writer {
    /// Renews every lease held; one another replica took is lost.
    pub(super) async fn renew(&mut self) {
        if let Err(err) = self.regain(Instant::now() + self.ttl / 6, None).await {
            tracing::warn!("cannot renew this replica's session leases: {err}");
            return;
        }
        // All in one statement: a writer holding many leases is not held up renewing them.
        let leases: Vec<&Lease> = self.held.values().collect();
        let lost: Vec<SessionId> =
            match lease::renew_all(&self.client, &self.prepared, &self.target, &leases, self.ttl).await {
                Ok(renewed) => leases
                    .iter()
                    .filter(|lease| !renewed.contains(&lease.session))
                    .map(|lease| lease.session.clone())
                    .collect(),
                Err(err) => {
                    tracing::warn!("cannot renew this replica's session leases: {err}");
                    Vec::new()
                }
            };
        for session in lost {
            tracing::warn!(%session, "another replica took over the session's lease");
            self.unshown.remove(&session);
            self.held.remove(&session);
            self.seqs.remove(&session);
            self.streams.forget(&session);
            self.lost.insert(session);
        }
    }

    /// Tries again the releases that failed; one another replica took meanwhile is gone too.
    pub(super) async fn release_again(&mut self) {
        if self.unreleased.is_empty() || self.regain(Instant::now(), None).await.is_err() {
            return;
        }
        let sessions: Vec<SessionId> = self.unreleased.iter().cloned().collect();
        for session in sessions {
            let Some(lease) = self.held.get(&session) else {
                self.unreleased.remove(&session);
                continue;
            };
            match lease::release(&self.client, &self.target, lease).await {
                Ok(_) => {
                    self.unshown.remove(&session);
                    self.held.remove(&session);
                    self.seqs.remove(&session);
                    self.unreleased.remove(&session);
                }
                Err(err) => tracing::warn!(%session, "cannot release the session's lease yet: {err}"),
            }
        }
    }

    pub(super) async fn release_all(&mut self) {
        self.unshown.clear();
        if let Err(err) = self.regain(Instant::now() + self.ttl / 6, None).await {
            // They lapse by themselves: the sweeper of another replica closes their turns.
            tracing::warn!("cannot release this replica's session leases: {err}");
            self.held.clear();
            return;
        }
        for (_, lease) in self.held.drain() {
            if let Err(err) = lease::release(&self.client, &self.target, &lease).await {
                tracing::warn!(session = %lease.session, "cannot release the session's lease: {err}");
            }
        }
    }
}

/// The sessions whose leases `writes` take, sorted, each once.
pub(super) fn takes<'a>(writes: impl IntoIterator<Item = &'a Write>) -> Vec<SessionId> {
    let mut taken: Vec<SessionId> = writes
        .into_iter()
        .filter_map(|write| match write {
            Write::TakeLease { session_id, .. } => Some(session_id.clone()),
            _ => None,
        })
        .collect();
    taken.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
    taken.dedup();
    taken
}

/// Fences the sessions of `writes` and `behind` (those whose streamed text the batch may
/// write as pieces) whose lease this replica holds: the set of those another replica took over.
pub(super) async fn fence<'b>(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    target: &PgTarget,
    held: &HashMap<SessionId, Lease>,
    writes: &[Write],
    open: &HashMap<PartKey, SessionId>,
    behind: impl Iterator<Item = &'b SessionId>,
) -> Result<HashSet<SessionId>, StoreError> {
    let none = HashMap::new();
    let mut mine: Vec<&Lease> =
        writes.iter().filter_map(|write| session_of(write, open, &none)).filter_map(|id| held.get(id)).collect();
    mine.extend(behind.filter_map(|id| held.get(id)));
    mine.sort_by(|a, b| a.session.as_str().cmp(b.session.as_str()));
    mine.dedup_by(|a, b| a.session == b.session);
    let mut lost = HashSet::new();
    while let Some(gone) = lease::fence_all(tx, prepared, target, &mine).await.map_err(StoreError::Postgres)? {
        lost.insert(gone.session.clone());
        mine.retain(|lease| !lost.contains(&lease.session));
    }
    Ok(lost)
}

//! The leases the PostgreSQL writer holds, kept between its batches: renewed all at once
//! every third of their time to live (one statement, however many are held, so a writer holding
//! many is not held up renewing them), releases that failed tried again, and every lease given
//! back at shutdown.

use tokio::time::Instant;

use super::lease::{self, Lease};
use super::writer::Writer;
use crate::ids::SessionId;

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

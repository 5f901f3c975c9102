//! The writer's bookkeeping of this process's session leases: which it holds, as committed.
//!
//! A take counts once its batch commits; so does a release, and a release that failed (the
//! database busy, a failed commit) is held still and tried again with the next batch, or the next
//! heartbeat, until it commits. While any lease is held (or a release is owed), the writer wakes
//! every `beat_every` to refresh them, and it gives them all back when it stops.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::lease::{self, Holder};
use super::tx::Db;
use super::{StoreError, Write};
use crate::ids::SessionId;

pub(super) struct Held {
    /// This process as a lease holder.
    me: Holder,
    /// The sessions whose lease this process took and has not released, as committed.
    held: HashSet<SessionId>,
    /// The sessions whose release was asked for and has not been committed yet.
    unreleased: HashSet<SessionId>,
    /// When the held leases were last refreshed.
    beat: Instant,
    /// How often they are (`lease::HEARTBEAT_EVERY` but in tests).
    beat_every: Duration,
    /// The batch under way: what `held` and `unreleased` were before it, the releases it asks
    /// for, and those it made, which count once it commits.
    before: (HashSet<SessionId>, HashSet<SessionId>),
    asked: Vec<SessionId>,
    released: HashSet<SessionId>,
}

impl Held {
    pub fn new(me: Holder, beat_every: Duration) -> Self {
        Self {
            me,
            held: HashSet::new(),
            unreleased: HashSet::new(),
            beat: Instant::now(),
            beat_every,
            before: (HashSet::new(), HashSet::new()),
            asked: Vec::new(),
            released: HashSet::new(),
        }
    }

    pub fn me(&self) -> &Holder {
        &self.me
    }

    /// Whether this process holds `session`'s lease, as committed or taken in this batch.
    pub fn holds(&self, session: &SessionId) -> bool {
        self.held.contains(session)
    }

    /// How long the writer may sleep before the next heartbeat is due; `None` while nothing is
    /// held or owed.
    pub fn idle_for(&self) -> Option<Duration> {
        let idle = self.held.is_empty() && self.unreleased.is_empty();
        (!idle).then(|| self.beat_every.saturating_sub(self.beat.elapsed()))
    }

    /// A batch of `writes` begins: remembers the leases as they are, in case it does not commit.
    pub fn begin<'a>(&mut self, writes: impl Iterator<Item = &'a Write>) {
        self.before = (self.held.clone(), self.unreleased.clone());
        self.asked = writes
            .filter_map(|write| match write {
                Write::ReleaseLease { session_id } => Some(session_id.clone()),
                _ => None,
            })
            .collect();
        self.released.clear();
    }

    /// Inside the batch's transaction, before its writes: refreshes the leases if their heartbeat
    /// is due, and tries again the releases that failed before.
    pub fn start(&mut self, db: &Db, now: i64) {
        if !self.held.is_empty() && self.beat.elapsed() >= self.beat_every {
            self.beat = Instant::now();
            if let Err(err) = lease::beat(&db.conn, &self.me, now) {
                tracing::warn!(%err, "the session leases' heartbeat could not be written");
            }
        }
        for session in self.unreleased.clone() {
            if self.release(db, &session, now).is_ok() {
                self.released.insert(session);
            }
        }
    }

    /// The batch took `session`'s lease: an earlier release still pending must not give it back.
    pub fn taken(&mut self, session: &SessionId) {
        self.held.insert(session.clone());
        self.unreleased.remove(session);
        self.released.remove(session);
    }

    /// Gives back `session`'s lease in a savepoint of the batch; owed until it commits.
    pub fn give_back(&mut self, db: &Db, session: &SessionId, now: i64) -> Result<(), StoreError> {
        self.unreleased.insert(session.clone());
        let result = self.release(db, session, now);
        if result.is_ok() {
            self.released.insert(session.clone());
        }
        result
    }

    /// The batch deleted `session`: there is no lease left to hold or give back.
    pub fn deleted(&mut self, session: &SessionId) {
        self.held.remove(session);
        self.unreleased.remove(session);
        self.released.remove(session);
    }

    /// The batch committed: its releases count.
    pub fn committed(&mut self) {
        for session in self.released.drain() {
            self.held.remove(&session);
            self.unreleased.remove(&session);
        }
        self.asked.clear();
    }

    /// The batch did not commit (or never began): the leases are as they were, and the releases
    /// it asked for are still owed.
    pub fn rolled_back(&mut self) {
        (self.held, self.unreleased) = std::mem::take(&mut self.before);
        self.unreleased.extend(self.asked.drain(..));
        self.released.clear();
    }

    /// Gives every lease of this process back, outside any batch (the writer is stopping).
    pub fn release_all(&mut self, db: &Db, now: i64) {
        if let Err(err) = lease::release_all(&db.conn, &self.me, now) {
            tracing::warn!(%err, "this process's session leases could not be released; they lapse when it exits");
        }
        self.held.clear();
        self.unreleased.clear();
    }

    fn release(&self, db: &Db, session: &SessionId, now: i64) -> Result<(), StoreError> {
        let result = db.savepoint(|conn| lease::release(conn, &self.me, session, now));
        if let Err(err) = &result {
            tracing::warn!(%session, %err, "a session lease could not be released; it is tried again with the next write");
        }
        result
    }
}

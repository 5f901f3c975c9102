//! Bytes on their way somewhere (queued, not yet taken), and the gate a producer of bulk waits
//! at so that they stay a bounded amount.
//!
//! A [`Backlog`] is counted up when something is queued and down when it is taken (written,
//! committed, or dropped). Queueing never waits, so nothing that must not wait (a response, a
//! callback on the store's writer thread) ever does. A producer of bulk awaits
//! [`Backlog::room`] between its pieces instead: at or above the high mark it waits until the
//! count is down to the low mark, so one that outruns its consumer is held, and woken once per
//! drain rather than once per piece. A closed backlog (its consumer is gone and will take
//! nothing more) never holds anyone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::Notify;

pub struct Backlog {
    high: usize,
    low: usize,
    bytes: AtomicUsize,
    /// The consumer is gone: nobody waits any more.
    closed: AtomicBool,
    drained: Notify,
}

impl Backlog {
    /// Producers wait from `high` bytes on, until the count is down to `low` (at most `high`).
    pub fn new(high: usize, low: usize) -> Self {
        Self {
            high,
            low: low.min(high),
            bytes: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            drained: Notify::new(),
        }
    }

    /// `bytes` more are on their way.
    pub fn add(&self, bytes: usize) {
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
    }

    /// `bytes` of those were taken (or dropped).
    pub fn take(&self, bytes: usize) {
        let before = self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        if before > self.low && before.saturating_sub(bytes) <= self.low {
            self.drained.notify_waiters();
        }
    }

    /// Bytes on their way now.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Nothing will be taken any more: let every producer go, now and later.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Resolves at once below the high mark; at or above it, once the count is down to the low
    /// mark or the backlog is closed.
    pub async fn room(&self) {
        if self.bytes() < self.high || self.is_closed() {
            return;
        }
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before looking, so a drain between the look and the wait is not missed.
            drained.as_mut().enable();
            if self.bytes() <= self.low || self.is_closed() {
                return;
            }
            drained.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_producer_waits_from_the_high_mark_until_the_low_mark() {
        let backlog = Backlog::new(100, 40);
        backlog.add(99);
        assert!(backlog.room().now_or_never().is_some(), "below the high mark there is room");
        backlog.add(1);
        let mut waiting = Box::pin(backlog.room());
        assert!(waiting.as_mut().now_or_never().is_none(), "at the high mark a producer waits");
        backlog.take(50);
        assert!(waiting.as_mut().now_or_never().is_none(), "above the low mark it still waits");
        backlog.take(10);
        assert!(waiting.as_mut().now_or_never().is_some(), "down to the low mark it goes on");
    }

    #[tokio::test]
    async fn a_closed_backlog_holds_nobody() {
        let backlog = Backlog::new(10, 5);
        backlog.add(1_000);
        let mut waiting = Box::pin(backlog.room());
        assert!(waiting.as_mut().now_or_never().is_none());
        backlog.close();
        assert!(waiting.as_mut().now_or_never().is_some(), "closing lets the waiting producer go");
        assert!(backlog.room().now_or_never().is_some(), "and later ones do not wait");
    }
}

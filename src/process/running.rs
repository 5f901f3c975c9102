//! Whether a process cairn started may be running, for the tools that would hand a path to the
//! editor.
//!
//! The editor resolves a path it is given again, following links, after cairn judged it: a
//! process that outlives one call (a background job, an MCP or language server, a command
//! beside the tool) could swap a directory of that path for a link in between and send the
//! editor's read or write elsewhere. So the editor's file methods are used only while nothing
//! cairn started runs, and nothing starts while one of them is under way. Two process-wide
//! counts keep this: [`Running`], one for every process (local or in an editor's terminal) from
//! before it starts until it and all it started are gone, and [`Quiet`], one for every editor
//! file call in flight. A start counts itself first, then waits until no editor call is in
//! flight ([`admit`]); an editor call counts itself first, then goes ahead only if nothing runs
//! ([`quiet`]). Both orders are sequentially consistent, so of a start and a call that overlap
//! at least one sees the other: the call then works on the disk itself, or the start waits for
//! the call's answer.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Processes (and editor terminals) that may be running.
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Editor file calls in flight.
static EDITING: AtomicUsize = AtomicUsize::new(0);
/// Told when the last editor file call in flight ends.
static DRAINED: LazyLock<Notify> = LazyLock::new(Notify::new);

/// One process cairn started (or is about to start), counted until this drops: drop it only
/// once the process and everything it started are gone.
#[derive(Debug)]
pub struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a process about to start, once no editor file call is in flight: the call that was
/// going on when the process was counted gets its answer before the process can touch a path.
pub async fn admit() -> Running {
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let running = Running(());
    loop {
        let drained = DRAINED.notified();
        tokio::pin!(drained);
        // Registered before the count is looked at: an end between the two still wakes it.
        drained.as_mut().enable();
        if EDITING.load(Ordering::SeqCst) == 0 {
            return running;
        }
        drained.await;
    }
}

/// One editor file call in flight while nothing cairn started runs; no process starts until it
/// drops.
#[derive(Debug)]
pub struct Quiet(());

impl Drop for Quiet {
    fn drop(&mut self) {
        if EDITING.fetch_sub(1, Ordering::SeqCst) == 1 {
            DRAINED.notify_waiters();
        }
    }
}

/// Leave to hand a path to the editor: `None` while a process cairn started may be running,
/// and the path must then be read or written on the disk, without following links.
pub fn quiet() -> Option<Quiet> {
    EDITING.fetch_add(1, Ordering::SeqCst);
    let quiet = Quiet(());
    (RUNNING.load(Ordering::SeqCst) == 0).then_some(quiet)
}

/// How many processes cairn started may be running.
pub fn count() -> usize {
    RUNNING.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_editor_file_call_goes_ahead_while_a_process_is_counted() {
        let running = admit().await;
        assert!(count() >= 1);
        assert!(quiet().is_none(), "a counted process keeps the editor's file calls off");
        drop(running);
    }

    #[tokio::test]
    async fn a_start_waits_until_the_editor_file_call_in_flight_is_answered() {
        // Other tests start processes of their own; an editor call goes ahead once none runs.
        let call = loop {
            match quiet() {
                Some(call) => break call,
                None => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        };
        let mut start = Box::pin(admit());
        assert!(futures::poll!(start.as_mut()).is_pending(), "started while the editor resolves a path");
        drop(call);
        let running = start.await;
        assert!(quiet().is_none());
        drop(running);
    }
}

//! A job in an editor terminal: the user watches it live, and the same tools read and kill it.
//! Its task asks the editor for the terminal's output when a read comes (ACP has no push of
//! output), keeps what is new since the last ask in the ring like a local job's, waits for the
//! terminal's exit, and kills the terminal when its kill switch is cancelled or its last
//! handle goes; the terminal is released once its end and last output are in, and killed and
//! released if the task is dropped before. An editor terminal takes no input from cairn.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::ring::Ring;
use super::{Ask, Ending, JobHandle, JobState, Progress};
use crate::process::running::Running;
use crate::tools::host::{ExitStatus, Host, HostError, TerminalOutput};
use crate::tools::shell::TerminalGuard;

/// At how many places of what was seen before the output now is tried, when the editor dropped
/// the start of a terminal's output.
const CANDIDATES: usize = 64;

/// Starts the task of the job in terminal `id`, counted as `running` until it is released,
/// keeping `cap` bytes of its output.
pub(super) fn spawn(
    host: Arc<dyn Host>,
    id: String,
    running: Running,
    cap: usize,
    cancel: CancellationToken,
    report: impl Fn(JobState) + Send + Sync + 'static,
) -> JobHandle {
    let (asks, asked) = mpsc::unbounded_channel();
    let (progress, watched) = watch::channel(Progress { printed: 0, state: JobState::Running });
    let job = Job { ring: Ring::new(cap), progress, asked, seen: String::new() };
    tokio::spawn(job.run(host, id, running, cancel.clone(), report));
    JobHandle { asks, progress: watched, cancel, input: None }
}

struct Job {
    ring: Ring,
    progress: watch::Sender<Progress>,
    asked: mpsc::UnboundedReceiver<Ask>,
    /// The terminal's output as last seen.
    seen: String,
}

impl Job {
    async fn run(
        mut self,
        host: Arc<dyn Host>,
        id: String,
        running: Running,
        cancel: CancellationToken,
        report: impl Fn(JobState),
    ) {
        let mut guard = TerminalGuard::new(Arc::clone(&host), id.clone(), running);
        let Some(terminals) = host.terminals() else {
            return self.end(JobState::Ended(Ending::Lost("the editor no longer offers terminals".into())), &report);
        };
        let exit = terminals.wait_for_terminal_exit(&id);
        tokio::pin!(exit);
        let ended = loop {
            tokio::select! {
                exit = &mut exit => break ending(exit),
                () = cancel.cancelled() => {
                    let _ = terminals.kill_terminal(&id).await;
                    break Ending::Killed;
                }
                ask = self.asked.recv() => match ask {
                    Some(ask) => {
                        self.refresh(terminals.terminal_output(&id).await);
                        self.answer(ask);
                    }
                    // Every handle is gone: the guard kills and releases the terminal.
                    None => return,
                },
            }
        };
        self.refresh(terminals.terminal_output(&id).await);
        let _ = terminals.release_terminal(&id).await;
        guard.disarm();
        self.end(JobState::Ended(ended), &report);
        while let Some(ask) = self.asked.recv().await {
            self.answer(ask);
        }
    }

    fn end(&mut self, state: JobState, report: &impl Fn(JobState)) {
        self.progress.send_modify(|progress| progress.state = state.clone());
        report(state);
    }

    /// Keeps what the terminal printed since it was last asked.
    fn refresh(&mut self, output: Result<TerminalOutput, HostError>) {
        let Ok(output) = output else { return };
        let new = fresh(&self.seen, &output.output);
        self.seen = output.output;
        match new {
            Fresh::After(at) => {
                let tail = self.seen.as_bytes()[at..].to_vec();
                self.ring.push(&tail);
            }
            Fresh::Unknown => {
                self.ring.push(b"[the editor's terminal dropped output cairn had not read]\n");
                let all = self.seen.as_bytes().to_vec();
                self.ring.push(&all);
            }
        }
        let total = self.ring.total();
        self.progress.send_modify(|progress| progress.printed = total);
    }

    fn answer(&mut self, ask: Ask) {
        ask.answer(&mut self.ring, &self.progress);
    }
}

/// Where the new part of a terminal's output starts, given what was seen before.
#[derive(Debug, PartialEq, Eq)]
enum Fresh {
    /// At this byte: everything before it was seen.
    After(usize),
    /// The editor dropped the start and what was seen last cannot be found: all of it may be new.
    Unknown,
}

/// The editor keeps the end of a terminal's output: when its start was dropped, what is shown
/// now begins inside what was seen, at a place from which the rest of what was seen is its
/// start. The earliest such place (the longest overlap) is looked for among the places where
/// the first character of the output now appears, at most [`CANDIDATES`] of them.
fn fresh(seen: &str, now: &str) -> Fresh {
    if now.starts_with(seen) {
        return Fresh::After(seen.len());
    }
    let Some(first) = now.chars().next() else { return Fresh::Unknown };
    // The overlap is no longer than what is shown now.
    let earliest = seen.len().saturating_sub(now.len());
    seen.match_indices(first)
        .filter(|(at, _)| *at >= earliest)
        .take(CANDIDATES)
        .find(|(at, _)| now.starts_with(&seen[*at..]))
        .map_or(Fresh::Unknown, |(at, _)| Fresh::After(seen.len() - at))
}

fn ending(exit: Result<ExitStatus, HostError>) -> Ending {
    match exit {
        Ok(ExitStatus { code: Some(code), .. }) => Ending::Exited(i32::try_from(code).unwrap_or(i32::MAX)),
        Ok(ExitStatus { code: None, signal: Some(signal) }) => Ending::Signal(signal),
        Ok(ExitStatus { code: None, signal: None }) => Ending::Lost("the editor gave no status".to_owned()),
        Err(err) => Ending::Lost(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_part_of_a_terminals_output_is_found_after_what_was_seen() {
        assert_eq!(fresh("", "abc"), Fresh::After(0));
        assert_eq!(fresh("ab", "abc"), Fresh::After(2));
        // The editor dropped the start: what was seen last is found again.
        assert_eq!(fresh("one\ntwo\n", "two\nthree\n"), Fresh::After(4));
        assert_eq!(fresh("gone\n", "other\n"), Fresh::Unknown);
        assert_eq!(fresh("a❄b", "❄bc"), Fresh::After(4));
    }
}

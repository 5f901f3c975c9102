//! A local job's task: it owns the process (started under cairn's supervisor with its stdin
//! piped, as an MCP server is, so it dies with cairn, `kill -9` included, and everything it
//! started with it, `setsid`'d daemons too) and its output. It reads stdout and stderr into the
//! ring as they come (a job that closes them keeps running, and is still waited for), feeds
//! stdin from a task of its own (a job that does not read its input never stalls its output),
//! kills the process tree when its kill switch is cancelled or its last handle goes, and goes
//! on answering reads after the end.

use std::os::unix::process::ExitStatusExt as _;

use tokio::io::AsyncWriteExt as _;
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ring::Ring;
use super::{Ask, DRAIN_AFTER_END, Ending, Input, JobHandle, JobState, Progress};
use crate::process::Local;
use crate::tools::shell::read_some;

/// Inputs waiting for the job to read them: one more is refused until it does.
const INPUTS_WAITING: usize = 1;

/// Starts the task of the local job `local`, keeping `cap` bytes of its output; `report` is told
/// when it ends.
pub(super) fn spawn(
    mut local: Local,
    cap: usize,
    cancel: CancellationToken,
    report: impl Fn(JobState) + Send + Sync + 'static,
) -> JobHandle {
    let (asks, asked) = mpsc::unbounded_channel();
    let (progress, watched) = watch::channel(Progress { printed: 0, state: JobState::Running });
    let input = local.take_stdin().map(|stdin| {
        let (input, inputs) = mpsc::channel(INPUTS_WAITING);
        tokio::spawn(feed(stdin, inputs));
        input
    });
    let job = Job { ring: Ring::new(cap), progress, asked };
    tokio::spawn(job.run(local, cancel.clone(), report));
    JobHandle { asks, progress: watched, cancel, input }
}

struct Job {
    ring: Ring,
    progress: watch::Sender<Progress>,
    asked: mpsc::UnboundedReceiver<Ask>,
}

impl Job {
    async fn run(mut self, mut local: Local, cancel: CancellationToken, report: impl Fn(JobState)) {
        let (mut stdout, mut stderr) = (local.take_stdout(), local.take_stderr());
        let (mut out_buf, mut err_buf) = (vec![0u8; 8192], vec![0u8; 8192]);
        // How it ended, and until when its last output is waited for.
        let mut ending: Option<(Ending, Instant)> = None;
        loop {
            let draining = ending.as_ref().map(|(_, until)| *until);
            tokio::select! {
                read = read_some(&mut stdout, &mut out_buf) => if let Some(n) = read { self.printed(&out_buf[..n]) },
                read = read_some(&mut stderr, &mut err_buf) => if let Some(n) = read { self.printed(&err_buf[..n]) },
                status = local.wait(), if ending.is_none() => {
                    let ended = match status {
                        Ok(status) => match (status.code(), status.signal()) {
                            (Some(code), _) => Ending::Exited(code),
                            (None, Some(signal)) => Ending::Signal(signal_name(signal)),
                            (None, None) => Ending::Lost("no status".to_owned()),
                        },
                        Err(err) => Ending::Lost(err.to_string()),
                    };
                    ending = Some((ended, Instant::now() + DRAIN_AFTER_END));
                }
                () = cancel.cancelled(), if ending.is_none() => {
                    local.stop().await;
                    ending = Some((Ending::Killed, Instant::now() + DRAIN_AFTER_END));
                }
                () = until(draining) => {}
                ask = self.asked.recv() => match ask {
                    Some(ask) => self.answer(ask),
                    // Every handle is gone (the session's jobs closed): dropping `local` kills it.
                    None => return,
                },
            }
            let drained = (stdout.is_none() && stderr.is_none()) || draining.is_some_and(|at| Instant::now() >= at);
            if let Some((ended, _)) = ending.take_if(|_| drained) {
                let state = JobState::Ended(ended);
                self.progress.send_modify(|progress| progress.state = state.clone());
                report(state);
                break;
            }
        }
        // Ended: reads are still answered, until the last handle goes.
        drop((stdout, stderr, local));
        while let Some(ask) = self.asked.recv().await {
            self.answer(ask);
        }
    }

    fn printed(&mut self, bytes: &[u8]) {
        self.ring.push(bytes);
        let total = self.ring.total();
        self.progress.send_modify(|progress| progress.printed = total);
    }

    fn answer(&mut self, ask: Ask) {
        ask.answer(&mut self.ring, &self.progress);
    }
}

/// Writes what `job_input` sends, in order; closes stdin at an `eof` or a failed write.
async fn feed(mut stdin: ChildStdin, mut inputs: mpsc::Receiver<Input>) {
    while let Some(Input { bytes, eof, reply }) = inputs.recv().await {
        let written = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await
        }
        .await;
        let failed = written.is_err();
        let _ = reply.send(written.map_err(|err| err.to_string()));
        if eof || failed {
            return;
        }
    }
}

async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGKILL => "SIGKILL".to_owned(),
        libc::SIGTERM => "SIGTERM".to_owned(),
        libc::SIGINT => "SIGINT".to_owned(),
        libc::SIGHUP => "SIGHUP".to_owned(),
        libc::SIGSEGV => "SIGSEGV".to_owned(),
        libc::SIGABRT => "SIGABRT".to_owned(),
        libc::SIGPIPE => "SIGPIPE".to_owned(),
        other => other.to_string(),
    }
}

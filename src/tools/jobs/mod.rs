//! Background jobs: commands `bash` starts with `background: true`, which outlive the call and
//! the turn that started them and belong to the session. [`Jobs`] is the session's handle on
//! the task that owns them (`owner.rs`): it numbers them, holds at most `[jobs] max` running,
//! keeps the ended ones readable, and kills every one when the session closes (or when the
//! last handle goes). Each job is a task of its own owning its process and its output
//! (`ring.rs`: a byte cap, the oldest lines dropped first and counted): a local process under
//! cairn's supervisor with its stdin piped (`local.rs`), so it dies with cairn as a command
//! does, `kill -9` included, or an editor terminal (`terminal.rs`), which the user watches
//! live. `start.rs` starts one for `bash`; `calls.rs` holds `job_output`, `job_input` and
//! `job_kill`, which reach only the jobs of their own session's handle.

mod calls;
mod local;
mod owner;
mod ring;
mod start;
mod terminal;

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use crate::config::JobSettings;
pub use calls::{JobInput, JobKill, JobOutput};
pub(super) use start::start;

use ring::Unread;

/// A session's jobs, as its turns' tools and its actor reach them. Cheap to clone; when the
/// last clone goes, every job is killed.
#[derive(Clone)]
pub struct Jobs {
    requests: Option<mpsc::UnboundedSender<owner::Request>>,
    board: watch::Receiver<Vec<JobInfo>>,
    settings: JobSettings,
}

/// One job as `/jobs` and `/status` show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: u32,
    /// The command line, as the model gave it.
    pub command: String,
    pub state: JobState,
    /// The editor terminal it runs in, if it does.
    pub terminal: Option<String>,
    /// The process group of a local job (its supervisor's pid).
    pub pid: Option<u32>,
}

/// Whether a job runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Starting or running.
    Running,
    Ended(Ending),
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it (named as the editor or the system names it).
    Signal(String),
    /// cairn killed it: `job_kill`, or its session closed.
    Killed,
    /// Its end could not be learned (the editor's terminal failed).
    Lost(String),
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobState::Running => f.write_str("running"),
            JobState::Ended(Ending::Exited(code)) => write!(f, "exited with status {code}"),
            JobState::Ended(Ending::Signal(signal)) => write!(f, "ended by signal {signal}"),
            JobState::Ended(Ending::Killed) => f.write_str("killed"),
            JobState::Ended(Ending::Lost(why)) => write!(f, "ended, how is unknown ({why})"),
        }
    }
}

/// Why a job could not be started or reached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("there is no job {id} in this session ({known}); start one with bash and `background: true`")]
    NotFound { id: u32, known: String },
    #[error(
        "{max} jobs of this session are running, the most `[jobs] max` allows; end one with job_kill first \
         (or raise `[jobs] max` in cairn's config.toml)"
    )]
    Full { max: usize },
    #[error(
        "background jobs are off here (`[jobs] max = 0` in cairn's config.toml); run the command without `background`"
    )]
    Off,
    #[error("the session is closing; no job can start or be reached")]
    Closed,
    #[error(
        "job {0} runs in the editor's terminal, which takes no input from cairn; start it without input, or pipe \
         its input into the command line"
    )]
    NoInput(u32),
    #[error("job {id}'s input is closed ({why}); nothing more can be written to it")]
    InputClosed { id: u32, why: String },
}

/// What a job shows to whoever reads it: how much it printed, and whether it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Progress {
    printed: u64,
    state: JobState,
}

/// A request to a job's task.
enum Ask {
    /// What it printed since the last read, left unread.
    Peek(oneshot::Sender<(Unread, JobState)>),
    /// What it printed since the last read, read now.
    Take(oneshot::Sender<(Unread, JobState)>),
}

impl Ask {
    /// Answers from the job's output and its state now.
    fn answer(self, ring: &mut ring::Ring, progress: &watch::Sender<Progress>) {
        let state = progress.borrow().state.clone();
        match self {
            Ask::Peek(reply) => {
                let _ = reply.send((ring.peek(), state));
            }
            Ask::Take(reply) => {
                let _ = reply.send((ring.take(), state));
            }
        }
    }
}

/// Bytes for a job's stdin; `eof` closes it after them.
struct Input {
    bytes: Vec<u8>,
    eof: bool,
    reply: oneshot::Sender<Result<(), String>>,
}

/// One job, as the owner and the tools reach its task.
#[derive(Clone)]
struct JobHandle {
    asks: mpsc::UnboundedSender<Ask>,
    progress: watch::Receiver<Progress>,
    /// Cancelled: the job is killed.
    cancel: CancellationToken,
    /// Its stdin; `None` in an editor's terminal.
    input: Option<mpsc::Sender<Input>>,
}

impl JobHandle {
    async fn ask(&self, ask: impl FnOnce(oneshot::Sender<(Unread, JobState)>) -> Ask) -> (Unread, JobState) {
        let (reply, answer) = oneshot::channel();
        let _ = self.asks.send(ask(reply));
        let state = self.progress.borrow().state.clone();
        answer.await.unwrap_or((Unread::default(), state))
    }

    /// Kills the job and waits until it is gone.
    async fn kill(&self) {
        self.cancel.cancel();
        self.ended().await;
    }

    /// Waits until the job has ended and its output is in.
    async fn ended(&self) {
        let mut progress = self.progress.clone();
        let _ = progress.wait_for(|progress| progress.state != JobState::Running).await;
    }
}

impl Jobs {
    /// A session's jobs, owned by a task of their own, bounded by `settings`.
    pub fn start(settings: JobSettings) -> Jobs {
        let (requests, board) = owner::spawn(settings);
        Jobs { requests: Some(requests), board, settings }
    }

    /// No jobs at all: `bash` refuses `background` (for contexts that run no session).
    pub fn none() -> Jobs {
        let (_, board) = watch::channel(Vec::new());
        Jobs { requests: None, board, settings: JobSettings { max: 0, ..JobSettings::default() } }
    }

    /// The jobs as they are now, oldest first.
    pub fn list(&self) -> Vec<JobInfo> {
        self.board.borrow().clone()
    }

    pub fn settings(&self) -> JobSettings {
        self.settings
    }

    /// Kills every job and waits until each is gone; later requests are refused.
    pub async fn close(&self) {
        let Some(requests) = &self.requests else { return };
        let (reply, done) = oneshot::channel();
        if requests.send(owner::Request::Close { reply }).is_ok() {
            let _ = done.await;
        }
    }

    async fn request<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T, JobError>>) -> owner::Request,
    ) -> Result<T, JobError> {
        let Some(requests) = &self.requests else { return Err(JobError::Off) };
        let (reply, answer) = oneshot::channel();
        requests.send(request(reply)).map_err(|_| JobError::Closed)?;
        answer.await.map_err(|_| JobError::Closed)?
    }

    /// A place for a new job running `command`, refused when `[jobs] max` run already.
    async fn reserve(&self, command: &str) -> Result<owner::Slot, JobError> {
        if self.settings.max == 0 {
            return Err(JobError::Off);
        }
        let command = command.to_owned();
        self.request(|reply| owner::Request::Reserve { command, reply }).await
    }

    /// The job `id` of this session.
    async fn get(&self, id: u32) -> Result<JobHandle, JobError> {
        self.request(|reply| owner::Request::Get { id, reply }).await
    }
}

/// How long after a job's process ended its last output is waited for.
const DRAIN_AFTER_END: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests;

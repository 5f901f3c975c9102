//! The task that owns a session's jobs: it numbers them (from 1, per session), refuses a new one
//! while `[jobs] max` run, keeps ended ones readable (the oldest ended forgotten first once as
//! many have ended as may run), publishes the list `/jobs` shows, and on close (or when the
//! last handle goes) kills every job and waits until each is gone. A job id is only ever looked
//! up here, in its own session's map: no handle reaches another session's jobs.

use std::collections::BTreeMap;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{JobError, JobHandle, JobInfo, JobSettings, JobState};

/// What the owner is asked through a [`super::Jobs`] handle.
pub(super) enum Request {
    Reserve { command: String, reply: oneshot::Sender<Result<Slot, JobError>> },
    Get { id: u32, reply: oneshot::Sender<Result<JobHandle, JobError>> },
    Close { reply: oneshot::Sender<()> },
}

/// What starting jobs and running ones tell the owner.
enum Report {
    /// A reserved job started: its task's handle.
    Adopt { id: u32, handle: JobHandle, terminal: Option<String>, pid: Option<u32> },
    /// A reserved job did not start.
    Release { id: u32 },
    /// A job's state changed (it ended).
    Changed { id: u32, state: JobState },
}

/// A reserved place for one job: its id and kill switch. Dropped before [`Slot::adopt`], the
/// place is given back.
pub(super) struct Slot {
    pub id: u32,
    pub cancel: CancellationToken,
    reports: mpsc::UnboundedSender<Report>,
    adopted: bool,
}

impl Slot {
    /// Tells the owner the job started.
    pub fn adopt(mut self, handle: JobHandle, terminal: Option<String>, pid: Option<u32>) {
        self.adopted = true;
        let _ = self.reports.send(Report::Adopt { id: self.id, handle, terminal, pid });
    }

    /// What the job's task calls when its state changes.
    pub fn reporter(&self) -> impl Fn(JobState) + Send + Sync + 'static {
        let (reports, id) = (self.reports.clone(), self.id);
        move |state| {
            let _ = reports.send(Report::Changed { id, state });
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.adopted {
            let _ = self.reports.send(Report::Release { id: self.id });
        }
    }
}

struct Entry {
    info: JobInfo,
    /// `None` while the job starts.
    handle: Option<JobHandle>,
}

struct Owner {
    settings: JobSettings,
    next: u32,
    jobs: BTreeMap<u32, Entry>,
    /// The parent of every job's kill switch.
    root: CancellationToken,
    board: watch::Sender<Vec<JobInfo>>,
    reports: mpsc::UnboundedSender<Report>,
    closed: bool,
}

/// Starts the owner; its request channel and the board of jobs it publishes. It ends, every
/// job killed, once every [`super::Jobs`] handle is gone.
pub(super) fn spawn(settings: JobSettings) -> (mpsc::UnboundedSender<Request>, watch::Receiver<Vec<JobInfo>>) {
    let (requests, mut asked) = mpsc::unbounded_channel();
    let (reports, mut told) = mpsc::unbounded_channel();
    let (board, shown) = watch::channel(Vec::new());
    let mut owner = Owner {
        settings,
        next: 1,
        jobs: BTreeMap::new(),
        root: CancellationToken::new(),
        board,
        reports,
        closed: false,
    };
    tokio::spawn(async move {
        loop {
            // Reports first: a job adopted before a tool asks for it is found.
            tokio::select! {
                biased;
                Some(report) = told.recv() => owner.note(report).await,
                request = asked.recv() => match request {
                    Some(request) => owner.serve(request).await,
                    None => break,
                },
            }
        }
        owner.close().await;
    });
    (requests, shown)
}

impl Owner {
    async fn serve(&mut self, request: Request) {
        match request {
            Request::Reserve { command, reply } => {
                let _ = reply.send(self.reserve(command));
            }
            Request::Get { id, reply } => {
                let found = self.jobs.get(&id).and_then(|entry| entry.handle.clone());
                let _ = reply.send(found.ok_or_else(|| self.not_found(id)));
            }
            Request::Close { reply } => {
                self.close().await;
                let _ = reply.send(());
            }
        }
    }

    async fn note(&mut self, report: Report) {
        match report {
            Report::Adopt { id, handle, terminal, pid } => match self.jobs.get_mut(&id) {
                Some(entry) if !self.closed => {
                    entry.info.terminal = terminal;
                    entry.info.pid = pid;
                    entry.info.state = handle.progress.borrow().state.clone();
                    entry.handle = Some(handle);
                    self.publish();
                }
                // Closed meanwhile: the job goes at once.
                Some(_) | None => handle.kill().await,
            },
            Report::Release { id } => {
                self.jobs.remove(&id);
                self.publish();
            }
            Report::Changed { id, state } => {
                if let Some(entry) = self.jobs.get_mut(&id) {
                    entry.info.state = state;
                    self.publish();
                }
            }
        }
    }

    fn reserve(&mut self, command: String) -> Result<Slot, JobError> {
        if self.closed {
            return Err(JobError::Closed);
        }
        let running = self.jobs.values().filter(|entry| entry.info.state == JobState::Running).count();
        if running >= self.settings.max {
            return Err(JobError::Full { max: self.settings.max });
        }
        // Ended jobs stay readable until as many have ended as may run; then the oldest goes.
        let ended: Vec<u32> =
            self.jobs.iter().filter(|(_, entry)| entry.info.state != JobState::Running).map(|(id, _)| *id).collect();
        for id in ended.iter().take((ended.len() + 1).saturating_sub(self.settings.max)) {
            self.jobs.remove(id);
        }
        let id = self.next;
        self.next += 1;
        let info = JobInfo { id, command, state: JobState::Running, terminal: None, pid: None };
        self.jobs.insert(id, Entry { info, handle: None });
        self.publish();
        Ok(Slot { id, cancel: self.root.child_token(), reports: self.reports.clone(), adopted: false })
    }

    fn not_found(&self, id: u32) -> JobError {
        let ids: Vec<String> = self.jobs.keys().map(u32::to_string).collect();
        let known = if ids.is_empty() { "it has none".to_owned() } else { format!("its jobs: {}", ids.join(", ")) };
        JobError::NotFound { id, known }
    }

    /// Kills every job and waits until each is gone.
    async fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.root.cancel();
        let handles: Vec<JobHandle> = self.jobs.values().filter_map(|entry| entry.handle.clone()).collect();
        futures::future::join_all(handles.iter().map(JobHandle::ended)).await;
        self.jobs.clear();
        self.publish();
    }

    fn publish(&self) {
        self.board.send_replace(self.jobs.values().map(|entry| entry.info.clone()).collect());
    }
}

//! Checkpoints around tool calls: before a batch that may change files runs, what it may change
//! is captured and committed; after it, what it changed. `write` and `edit` capture the one file
//! they change; a command that is not read-only, an MCP tool (which may do anything) and a
//! sub-agent capture the whole workspace. A capture that cannot be made or stored (a full disk)
//! keeps the batch from running: no change is made that a checkpoint does not cover. Sessions
//! without checkpoints (sub-agents, whose changes their parent's `task` call captures, and
//! `[checkpoints] enabled = false`) skip all of this.

use std::path::PathBuf;

use super::Turn;
use super::events::AgentEvent;
use crate::history::Role;
use crate::ids::MessageId;
use crate::tools::checkpoint::{Blob, By, Capture, CaptureError, Entry, Tracker};
use crate::tools::{Access, Invocation};

/// Contents recorded between two commits: a capture holds at most about this much in memory.
const FLUSH_BYTES: usize = 8 << 20;

/// What a batch's calls may change, captured before they ran.
pub(super) enum Around {
    /// The files `write` and `edit` change, as they were.
    Files { call_id: Option<String>, seen: Vec<Entry> },
    /// The whole workspace; `stored`: the capture before held files, so one after is stored
    /// even if empty.
    Workspace { call_id: Option<String>, stored: bool },
}

/// Captures what `batch` may change and waits until it is committed. `Ok(None)`: nothing to
/// capture. `Err`: the batch must not run; why, for its calls' results.
pub(super) async fn before(
    turn: &mut Turn<'_>,
    message: &MessageId,
    batch: &[(u32, Invocation)],
) -> Result<Option<Around>, String> {
    let Some(tracker) = turn.tools.checkpoints.as_deref() else { return Ok(None) };
    let Some((first_index, first)) = batch.first() else { return Ok(None) };
    let call_id = if batch.len() == 1 { super::calls::call_id(turn, message, *first_index) } else { None };
    let around = match first.access() {
        Access::ReadOnly => return Ok(None),
        Access::Write => {
            let paths = targets(tracker, batch, &turn.tools.workspace);
            if paths.is_empty() {
                return Ok(None);
            }
            let mut seen = Vec::new();
            let mut blobs = Vec::new();
            for path in paths {
                let (entry, blob) = tracker.file(&path).await.map_err(|err| refused(&err))?;
                seen.push(entry);
                blobs.extend(blob);
            }
            store(turn, By::Seen, call_id.clone(), seen.clone(), blobs, false).await?;
            Around::Files { call_id, seen }
        }
        Access::Execute
            if batch.iter().all(|(_, call)| {
                call.permission(&turn.tools.workspace).is_some_and(|request| request.reads_only())
            }) =>
        {
            return Ok(None);
        }
        Access::Execute | Access::Other | Access::Delegate => {
            let stored = scan(turn, By::Seen, call_id.clone(), false).await?;
            Around::Workspace { call_id, stored }
        }
    };
    Ok(Some(around))
}

/// Captures what the batch changed. A failure is logged: the change is made and the next
/// capture will see it. After a capture before was stored, the one after is stored even when
/// nothing changed: a `seen` capture left last means a call a crash cut short, and at the next
/// load whatever differs then (a user's edits while the session was closed included) would be
/// taken for that call's doing and put back by a rewind without asking.
pub(super) async fn after(turn: &mut Turn<'_>, around: Around) {
    let Some(tracker) = turn.tools.checkpoints.as_deref() else { return };
    let result = match around {
        Around::Files { call_id, seen } => {
            let mut made = Vec::new();
            let mut blobs = Vec::new();
            let mut failed = None;
            for before in seen {
                match tracker.file(&before.path).await {
                    Ok((entry, blob)) if entry.state != before.state => {
                        made.push(entry);
                        blobs.extend(blob);
                    }
                    Ok(_) => {}
                    Err(err) => failed = Some(err.to_string()),
                }
            }
            match failed {
                Some(why) => Err(why),
                None => store(turn, By::Made, call_id, made, blobs, true).await.map(drop),
            }
        }
        Around::Workspace { call_id, stored } => scan(turn, By::Made, call_id, stored).await.map(drop),
    };
    if let Err(why) = result {
        tracing::warn!(%why, "what a tool call changed could not be captured; the next capture will see it");
    }
}

/// The final targets of the calls that lie in the session's directory.
fn targets(tracker: &Tracker, batch: &[(u32, Invocation)], workspace: &crate::tools::Workspace) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = batch
        .iter()
        .flat_map(|(_, call)| call.locations(workspace))
        .filter_map(|location| tracker.relative(std::path::Path::new(&location.path)))
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// Scans the workspace, storing what differs from the last capture (even nothing, if `always`);
/// whether a capture was stored.
async fn scan(turn: &mut Turn<'_>, by: By, call_id: Option<String>, always: bool) -> Result<bool, String> {
    // What a cancelled call changed before it stopped is captured all the same.
    let cancel = match by {
        By::Seen => turn.cancel.clone(),
        By::Made => tokio_util::sync::CancellationToken::new(),
    };
    let Some(tracker) = turn.tools.checkpoints.as_deref_mut() else { return Ok(false) };
    let (mut blobs, handle) = tracker.scan(&cancel);
    let mut held = Vec::new();
    let mut bytes = 0;
    let mut failed = None;
    while let Some(blob) = blobs.recv().await {
        bytes += blob.data.len();
        held.push(blob);
        if bytes >= FLUSH_BYTES {
            turn.recorder.record(AgentEvent::Blobs(std::mem::take(&mut held)));
            bytes = 0;
            if let Err(err) = turn.recorder.flush().await {
                // The scan stops at its next file, its receiver gone.
                failed = Some(err.to_string());
                break;
            }
        }
    }
    drop(blobs);
    let mut scanned = handle.await.map_err(|err| format!("the checkpoint stopped unexpectedly: {err}"))?;
    if let Some(tracker) = turn.tools.checkpoints.as_deref_mut() {
        tracker.give_back(&mut scanned);
    }
    match (failed, scanned.failure.take()) {
        (Some(why), _) => return Err(why),
        (None, Some(err)) => return Err(refused(&err)),
        (None, None) => {}
    }
    store(turn, by, call_id, scanned.entries, held, always).await
}

/// Records a capture and its contents and waits for the commit; the tracker takes the
/// capture's states once it is stored. An empty capture is stored only if `always`; whether
/// one was.
async fn store(
    turn: &mut Turn<'_>,
    by: By,
    call_id: Option<String>,
    entries: Vec<Entry>,
    blobs: Vec<Blob>,
    always: bool,
) -> Result<bool, String> {
    if entries.is_empty() && !always {
        return Ok(false);
    }
    let prompt = prompt(turn);
    if !blobs.is_empty() {
        turn.recorder.record(AgentEvent::Blobs(blobs));
    }
    let capture = Capture { by, call_id, entries };
    turn.recorder.record(AgentEvent::Checkpoint { prompt, capture: capture.clone() });
    turn.recorder.flush().await.map_err(|err| format!("the checkpoint could not be saved: {err}"))?;
    if let Some(tracker) = turn.tools.checkpoints.as_deref_mut() {
        tracker.settle(&capture.entries);
    }
    Ok(true)
}

/// The prompt whose turn this is: the latest user message (a prompt steered into the turn
/// included).
fn prompt(turn: &Turn<'_>) -> Option<MessageId> {
    turn.history.iter().rev().find(|message| message.role == Role::User).map(|message| message.id.clone())
}

fn refused(err: &CaptureError) -> String {
    err.to_string()
}

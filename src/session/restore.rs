//! Putting a session's files back from its checkpoints (`/rewind` with `code` or `both`, and
//! `/rewind undo`), and finishing a restore a crash interrupted.
//!
//! The files to restore are judged against the disk, then shown to the user as a permission
//! question listing each file and what happens to it (with the diffs of text files); files
//! someone else changed since the session did are named, and kept unless the user chooses to
//! restore them too. Before a file is touched, the restore is recorded: the files as they are
//! (so the restore can itself be undone) and what they become, marked pending. It is then
//! applied file by file and marked done. A crash in between leaves it pending: the next time the
//! session goes live, [`resume`] applies it again to its end (each file's restore is a whole
//! write or rename, so applying it twice changes nothing).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use crate::history::{CallState, ToolContent, ToolKind, ToolPart};
use crate::ids::{MessageId, SessionId};
use crate::store::{CheckpointInfo, Store, Write};
use crate::tools::Host;
use crate::tools::checkpoint::{self, By, Capture, Change, Digest, Entry, Restore, State, Tracker};
use crate::tools::host::{OptionKind, PermissionAnswer, PermissionOption};

/// Contents held before they are stored, when a crash's leftovers are captured.
const STORE_BYTES: usize = 8 << 20;
/// Diffs shown in the question, at most, and only of text files up to this size.
const SHOWN_DIFFS: usize = 20;
const SHOWN_DIFF_BYTES: usize = 64 * 1024;

/// Where a restore goes back to.
pub enum Point {
    /// Before the prompt `message` (its first line shown).
    Before { message: MessageId, line: String },
    /// Before the session's last restore.
    Undo,
}

/// What a restore works with.
pub struct Restoring<'a> {
    pub store: &'a Store,
    pub session: &'a SessionId,
    pub tracker: &'a mut Tracker,
    pub host: &'a Arc<dyn Host>,
}

/// Reads the session's last file states into `tracker` if it has not yet.
pub async fn load(store: &Store, session: &SessionId, tracker: &mut Tracker) {
    if tracker.loaded() {
        return;
    }
    match store.checkpoint_captures(session).await {
        Ok(stored) => tracker.load(checkpoint::latest(&stored)),
        Err(err) => {
            // Every file is captured anew: more to store, nothing missed.
            tracing::warn!(%session, %err, "the session's checkpoints could not be read; capturing afresh");
            tracker.load(Vec::new());
        }
    }
}

/// Takes each file's last state from `stored` (the session's captures, as read) into `tracker`,
/// if it has none yet.
fn known_from(tracker: &mut Tracker, stored: &[checkpoint::Stored]) {
    if !tracker.loaded() {
        tracker.load(checkpoint::latest(stored));
    }
}

/// Puts the files back to `point`, after asking; what to tell the user, and whether the user
/// cancelled (then nothing else of the rewind is done either).
pub async fn files(restoring: Restoring<'_>, point: Point) -> (String, bool) {
    match restore(restoring, point).await {
        Ok(None) => ("Rewind cancelled: no file was changed.".to_owned(), true),
        Ok(Some(text)) => (text, false),
        Err(err) => (format!("The files were not restored: {err}."), false),
    }
}

/// `None`: the user cancelled.
async fn restore(restoring: Restoring<'_>, point: Point) -> Result<Option<String>, crate::store::StoreError> {
    let Restoring { store, session, tracker, host } = restoring;
    let stored = store.checkpoint_captures(session).await?;
    known_from(tracker, &stored);
    let infos = store.checkpoints(session).await?;
    let (from, label) = match &point {
        Point::Before { message, line } => (first_at_or_after(&infos, message), format!("before “{line}”")),
        Point::Undo => (
            infos.iter().rev().find(|info| info.restore.is_some() && info.by == By::Seen).map(|info| info.id),
            "before the last rewind".to_owned(),
        ),
    };
    let Some(from) = from else {
        return Ok(Some(match point {
            Point::Before { .. } => "No files were changed since then: none to restore.".to_owned(),
            Point::Undo => "There is no rewind of files to undo.".to_owned(),
        }));
    };
    let mut text = String::new();
    if let Point::Before { message, .. } = &point
        && infos.iter().any(CheckpointInfo::is_base)
        && infos
            .iter()
            .find(|info| !info.is_base())
            .and_then(|info| info.prompt_id.as_ref())
            .is_none_or(|kept| message < kept)
    {
        text.push_str(
            "Checkpoints that old were dropped to stay within [checkpoints] session_bytes and total_bytes; the files \
             go back to the oldest state kept.\n",
        );
    }
    let planned = checkpoint::plan(&stored, from);
    let settings = tracker.settings();
    let judged = Restore::judge(tracker.root(), planned, settings.max_file_bytes).await;
    let restore = judged.map_err(|err| crate::store::StoreError::Sqlite {
        path: tracker.root().to_owned(),
        detail: format!("the files could not be read: {err}"),
    })?;
    if restore.items.is_empty() {
        return Ok(Some(format!("{text}The files are as they were {label}: nothing to restore.")));
    }
    let blobs = store.file_blobs(restore.hashes()).await?;
    let summary = checkpoint::summary(&restore, &blobs, tracker.root());
    let keep_changed = match ask(host, &restore, &blobs, tracker.root(), &summary, &label).await {
        Answer::All => false,
        Answer::KeepChanged => true,
        Answer::Cancel => return Ok(None),
    };
    let chosen: Vec<(PathBuf, State)> = restore
        .items
        .iter()
        .filter(|(_, _, change)| match change {
            Change::Restore => true,
            Change::Conflict => !keep_changed,
            Change::Unrestorable(_) => false,
        })
        .map(|(planned, _, _)| (planned.path.clone(), planned.target))
        .collect();
    if !chosen.is_empty() {
        // Recorded before a file is touched: the files as they are now, then what they become.
        let mut seen = Vec::new();
        let mut contents = Vec::new();
        for (path, _) in &chosen {
            let (entry, blob) = tracker.file(path).await.map_err(|err| crate::store::StoreError::Sqlite {
                path: tracker.root().join(path),
                detail: err.to_string(),
            })?;
            seen.push(entry);
            contents.extend(blob);
        }
        store.commit(Write::PutBlobs(contents)).await?;
        let made: Vec<Entry> =
            chosen.iter().map(|(path, state)| Entry { path: path.clone(), state: *state, stamp: 0 }).collect();
        let captures = vec![
            Capture { by: By::Seen, call_id: None, entries: seen.clone() },
            Capture { by: By::Made, call_id: None, entries: made.clone() },
        ];
        let write =
            Write::PutCheckpoints { session_id: session.clone(), prompt: None, captures, restore: Some(label.clone()) };
        store.commit(write).await?;
        tracker.settle(&seen);
        let applied = checkpoint::apply(tracker.root(), &chosen, &blobs, host).await;
        finish(store, session).await;
        tracker.settle(&made);
        let restored = applied.iter().filter(|applied| applied.result.is_ok()).count();
        let _ = writeln!(text, "Restored {restored} of {} files to {label}:", chosen.len());
        for applied in &applied {
            let _ = match &applied.result {
                Ok(state) => writeln!(text, "- {}: {}", applied.path.display(), done(state)),
                Err(why) => writeln!(text, "- {}: NOT restored: {why}", applied.path.display()),
            };
        }
    }
    for (planned, _, change) in &restore.items {
        let _ = match change {
            Change::Conflict if keep_changed => {
                writeln!(text, "- {}: kept as it is (changed since by someone else)", planned.path.display())
            }
            Change::Unrestorable(why) => writeln!(text, "- {}: not restored: {why}", planned.path.display()),
            Change::Restore | Change::Conflict => Ok(()),
        };
    }
    text.push_str("`/rewind undo` puts these files back as they were before this rewind.");
    Ok(Some(text))
}

/// The first checkpoint taken in the turn of `message` or a later one.
fn first_at_or_after(infos: &[CheckpointInfo], message: &MessageId) -> Option<i64> {
    infos.iter().find(|info| info.prompt_id.as_ref().is_some_and(|p| p.as_str() >= message.as_str())).map(|i| i.id)
}

fn done(state: &State) -> &'static str {
    match state {
        State::Missing => "removed",
        State::Link { .. } => "link restored",
        State::File { .. } | State::Uncovered { .. } => "restored",
    }
}

/// Marks the session's restore done; a failure leaves it to [`resume`].
async fn finish(store: &Store, session: &SessionId) {
    if let Err(err) = store.commit(Write::FinishRestore { session_id: session.clone() }).await {
        tracing::warn!(%session, %err, "a restore was applied but not marked done; it is applied again at the next load");
    }
}

enum Answer {
    All,
    KeepChanged,
    Cancel,
}

/// Asks the user about the restore. With nobody to ask, files changed by someone else are kept.
async fn ask(
    host: &Arc<dyn Host>,
    restore: &Restore,
    blobs: &HashMap<Digest, Vec<u8>>,
    root: &std::path::Path,
    summary: &str,
    label: &str,
) -> Answer {
    let conflicts = restore.conflicts().count();
    let Some(permissions) = host.permissions() else {
        return if conflicts > 0 { Answer::KeepChanged } else { Answer::All };
    };
    let mut card = ToolPart::new(format!("rewind-{}", MessageId::generate()), "rewind".to_owned());
    card.title = format!("Restore {} files to {label}", restore.items.len());
    card.kind = ToolKind::Edit;
    card.state = CallState::Suspended;
    card.content.push(ToolContent::Text { text: summary.to_owned() });
    for (planned, _, change) in restore.items.iter().take(SHOWN_DIFFS) {
        let (State::File { hash, .. }, Change::Restore | Change::Conflict) = (&planned.target, change) else {
            continue;
        };
        let Some(new) = blobs.get(hash).filter(|new| new.len() <= SHOWN_DIFF_BYTES) else { continue };
        let path = root.join(&planned.path);
        // Never a FIFO or a link's target: only a regular file reached without a link is read.
        let old = checkpoint::current(root, &planned.path, SHOWN_DIFF_BYTES as u64);
        let (Ok(new_text), old_text) = (std::str::from_utf8(new), old.map(String::from_utf8)) else { continue };
        let old_text = match old_text {
            Some(Ok(text)) => Some(text),
            Some(Err(_)) => continue,
            None => None,
        };
        card.content.push(ToolContent::Diff {
            path: path.display().to_string(),
            old_text,
            new_text: new_text.to_owned(),
        });
    }
    let mut options = vec![PermissionOption {
        id: "restore".into(),
        label: "Restore these files".to_owned(),
        kind: OptionKind::AllowOnce,
    }];
    if conflicts > 0 {
        options[0].label = format!("Restore all, overwriting the {conflicts} changed since");
        options.push(PermissionOption {
            id: "restore_keep".into(),
            label: "Restore, keeping the files changed since".to_owned(),
            kind: OptionKind::AllowOnce,
        });
    }
    options.push(PermissionOption { id: "cancel".into(), label: "Cancel".to_owned(), kind: OptionKind::RejectOnce });
    match permissions.request_permission(&card, &options).await {
        Ok(PermissionAnswer::Selected(id)) if id == "restore" => Answer::All,
        Ok(PermissionAnswer::Selected(id)) if id == "restore_keep" => Answer::KeepChanged,
        Ok(PermissionAnswer::Selected(_) | PermissionAnswer::Cancelled) => Answer::Cancel,
        Err(err) => {
            tracing::warn!(%err, "the rewind question failed; nothing is restored");
            Answer::Cancel
        }
    }
}

/// Captures what a call a crash cut short changed: its capture before it was stored, the one
/// after never was. What differs now from the files' last states is recorded as that call's
/// doing (with whatever else changed since the crash), so a rewind puts it back too.
pub async fn interrupted(store: &Store, session: &SessionId, tracker: &mut Tracker) {
    let Ok(infos) = store.checkpoints(session).await else { return };
    let Some(last) = infos.last().filter(|info| info.by == By::Seen && info.restore.is_none() && !info.is_base())
    else {
        return;
    };
    let (call_id, prompt) = (last.call_id.clone(), last.prompt_id.clone());
    load(store, session, tracker).await;
    let (mut rx, handle) = tracker.scan(&tokio_util::sync::CancellationToken::new());
    // Stored as they come, a few MiB at a time: what the call made may be large.
    let (mut blobs, mut bytes, mut failed) = (Vec::new(), 0, None);
    while let Some(blob) = rx.recv().await {
        bytes += blob.data.len();
        blobs.push(blob);
        if bytes >= STORE_BYTES {
            bytes = 0;
            if let Err(err) = store.commit(Write::PutBlobs(std::mem::take(&mut blobs))).await {
                failed = Some(err);
                break;
            }
        }
    }
    drop(rx);
    let mut scanned = match handle.await {
        Ok(scanned) => scanned,
        Err(err) => return tracing::warn!(%session, %err, "what an interrupted call changed was not captured"),
    };
    tracker.give_back(&mut scanned);
    if let Some(err) = scanned.failure.take() {
        return tracing::warn!(%session, %err, "what an interrupted call changed was not captured");
    }
    if let Some(err) = failed {
        return tracing::warn!(%session, %err, "what an interrupted call changed was not stored");
    }
    if scanned.entries.is_empty() {
        return;
    }
    let captures = vec![Capture { by: By::Made, call_id, entries: scanned.entries.clone() }];
    let stored = match store.commit(Write::PutBlobs(blobs)).await {
        Ok(()) => {
            store.commit(Write::PutCheckpoints { session_id: session.clone(), prompt, captures, restore: None }).await
        }
        Err(err) => Err(err),
    };
    match stored {
        Ok(()) => tracker.settle(&scanned.entries),
        Err(err) => tracing::warn!(%session, %err, "what an interrupted call changed was not stored"),
    }
}

/// Applies the session's pending restore (one a crash interrupted) to its end; what to tell the
/// user, if there was one.
pub async fn resume(store: &Store, session: &SessionId, tracker: &mut Tracker, host: &Arc<dyn Host>) -> Option<String> {
    let infos = store.checkpoints(session).await.ok()?;
    let pending = infos.iter().rev().find(|info| info.pending)?;
    let stored = store.checkpoint_captures(session).await.ok()?;
    let made = stored.iter().find(|capture| capture.id == pending.id)?;
    let targets: Vec<(PathBuf, State)> = made.entries.iter().map(|entry| (entry.path.clone(), entry.state)).collect();
    let blobs = store.file_blobs(targets.iter().filter_map(|(_, state)| state.hash()).collect()).await.ok()?;
    known_from(tracker, &stored);
    let applied = checkpoint::apply(tracker.root(), &targets, &blobs, host).await;
    finish(store, session).await;
    tracker.settle(&made.entries);
    let failed = applied.iter().filter(|applied| applied.result.is_err()).count();
    let label = pending.restore.as_deref().unwrap_or("an earlier point");
    Some(match failed {
        0 => format!("A rewind of files to {label} was interrupted; it was completed ({} files).", targets.len()),
        n => format!(
            "A rewind of files to {label} was interrupted; it was completed except for {n} of {} files (see /checkpoints).",
            targets.len()
        ),
    })
}

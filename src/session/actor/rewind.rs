//! The actor's `/rewind` and `/checkpoints`, and the checkpoints it keeps between turns.
//!
//! `/rewind [n] [code|conversation|both]` goes back to before the n-th last prompt: its files
//! (put back from the checkpoints, after asking: `session::restore`), its messages (hidden, kept
//! in the database), or both, files first. `/rewind undo` puts the files of the last rewind back
//! as they were before it. A rewind runs like a turn: it holds the session's lease, on the
//! history as stored, with the session's checkpoints lent to it. `/checkpoints` lists what the
//! checkpoints hold, per prompt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::{Actor, Reply, Running, TurnOutcome};
use crate::agent::StopReason;
use crate::history::view::context_used;
use crate::history::{Message, Role};
use crate::ids::MessageId;
use crate::llm::catalog;
use crate::session::commands::Rewinding;
use crate::session::restore::{self, Point, Restoring};
use crate::session::{TurnEnd, Update};
use crate::store::Write;
use crate::tools::checkpoint::{By, Tracker};

impl Actor {
    /// The session's checkpoints, made at their first use; `None` when they are turned off.
    pub(super) fn take_checkpoints(&mut self) -> Option<Tracker> {
        let config = &self.services.config;
        if !config.checkpoints.enabled {
            return None;
        }
        self.checkpoints.take().or_else(|| {
            let root = self.root.clone();
            let own = [Some(config.data_dir.clone()), config.config_dir.clone()];
            let skip = own.into_iter().flatten().map(|dir| std::fs::canonicalize(&dir).unwrap_or(dir)).collect();
            Some(Tracker::new(&root, config.checkpoints, skip))
        })
    }

    /// Finishes what a crash cut short: a restore of files (telling the user), or the capture
    /// after a call; not while another live process holds the session.
    pub(super) async fn resume_restore(&mut self) {
        // Another live process running a turn or a rewind in the session is not cut short: its
        // capture or restore is under way there.
        if !matches!(self.services.store.held_elsewhere(&self.row.id).await, Ok(None)) {
            return;
        }
        let Some(mut tracker) = self.take_checkpoints() else { return };
        let host = self.services.sink.host(&self.row.id);
        let store = &self.services.store;
        if let Some(text) = restore::resume(store, &self.row.id, &mut tracker, &host).await {
            self.tell(text);
        }
        restore::interrupted(store, &self.row.id, &mut tracker).await;
        self.checkpoints = Some(tracker);
    }

    /// Goes back on the last turns (their files, their messages or both) or undoes the last
    /// rewind of files. Runs like a turn: it holds the session's lease, on the history as stored.
    pub(super) fn spawn_rewind(&mut self, ticket: u64, rewinding: Rewinding, reply: Reply<TurnEnd>) {
        let Some(mut history) = self.history.take() else {
            self.say("The session is busy.".to_owned());
            let _ = reply.send(Ok(StopReason::EndTurn.into()));
            return;
        };
        let mut recorder = self.turn_recorder(ticket, None);
        let (store, sink, id) = (self.services.store.clone(), Arc::clone(&self.services.sink), self.row.id.clone());
        let info = catalog::info(&self.services.config, &self.row.model);
        let cost = info.prices.map(|_| self.row.cost_usd);
        let rules = self.rules.clone();
        let history_len = history.len();
        let mut checkpoints = self.take_checkpoints();
        let host = self.services.sink.host(&self.row.id);
        self.turn = Some(tokio::spawn(async move {
            if let Err(err) = recorder.claim(&mut history, None).await {
                return TurnOutcome { history, rules, checkpoints, result: Err(err.into()), claimed: false };
            }
            let (turns, code, conversation) = match rewinding {
                Rewinding::Turns { turns, reach } => (turns, reach.code(), reach.conversation()),
                Rewinding::Undo => (0, true, false),
            };
            let point = match rewinding {
                Rewinding::Undo => Ok(Point::Undo),
                Rewinding::Turns { .. } => {
                    cut_at(&history, turns).map(|(at, line)| Point::Before { message: history[at].id.clone(), line })
                }
            };
            let mut said = Vec::new();
            let mut cancelled = false;
            match (point, checkpoints.as_mut()) {
                (Err(text), _) => said.push(text),
                (Ok(_), None) if code => said.push(
                    "Files were not restored: checkpoints are off ([checkpoints] enabled = false in config.toml)."
                        .to_owned(),
                ),
                (Ok(point), Some(tracker)) if code => {
                    let restoring = Restoring { store: &store, session: &id, tracker, host: &host };
                    let (text, no) = restore::files(restoring, point).await;
                    said.push(text);
                    cancelled = no;
                }
                (Ok(_), _) => {}
            }
            if conversation
                && !cancelled
                && let Ok((at, line)) = cut_at(&history, turns)
            {
                let from = history[at].id.clone();
                match store.commit(Write::HideFrom { session_id: id.clone(), from }).await {
                    Ok(()) => {
                        history.truncate(at);
                        let used = context_used(&history);
                        sink.send(&id, Update::Usage { used, size: info.context_window, cost });
                        let what = if turns == 1 { "turn" } else { "turns" };
                        said.push(format!(
                            "Rewound {turns} {what}: the next prompt continues from before “{line}”. The hidden \
                             messages are kept in the database.{}",
                            if code { "" } else { " Files were not changed (`/rewind code` restores them)." }
                        ));
                    }
                    Err(err) => said.push(format!("The conversation was not rewound: {err}.")),
                }
            }
            sink.send(&id, Update::EphemeralText { text: said.join("\n\n") });
            TurnOutcome { history, rules, checkpoints, result: Ok(StopReason::EndTurn.into()), claimed: true }
        }));
        let cancel = tokio_util::sync::CancellationToken::new();
        self.running = Some(Running::unsteered(ticket, None, history_len, cancel, reply));
    }

    /// `/checkpoints`: per prompt, when, and the files its calls changed.
    pub(super) fn list_checkpoints(&mut self, reply: Reply<TurnEnd>) {
        let (store, sink, id) = (self.services.store.clone(), Arc::clone(&self.services.sink), self.row.id.clone());
        let prompts: BTreeMap<MessageId, String> = self
            .history
            .iter()
            .flatten()
            .filter(|message| message.role == Role::User)
            .map(|message| (message.id.clone(), crate::session::title::first_line(&message.parts).unwrap_or_default()))
            .collect();
        let enabled = self.services.config.checkpoints.enabled;
        tokio::spawn(async move {
            let text = match store.checkpoints(&id).await {
                Ok(infos) => listing(&infos, &prompts, enabled),
                Err(err) => format!("The checkpoints could not be read: {err}."),
            };
            sink.send(&id, Update::EphemeralText { text });
            let _ = reply.send(Ok(StopReason::EndTurn.into()));
        });
    }
}

/// The checkpoints as `/checkpoints` shows them: one line per prompt (or restore) that
/// changed files.
fn listing(infos: &[crate::store::CheckpointInfo], prompts: &BTreeMap<MessageId, String>, enabled: bool) -> String {
    let mut lines = Vec::new();
    let mut current: Option<(String, i64, u64, u64)> = None;
    for info in infos.iter().filter(|info| info.by == By::Made && info.files > 0) {
        let name = match (&info.restore, &info.prompt_id) {
            (Some(label), _) => {
                format!("rewind of files to {label}{}", if info.pending { " (interrupted)" } else { "" })
            }
            (None, Some(prompt)) => match prompts.get(prompt) {
                Some(line) => format!("“{line}”"),
                None => "a prompt no longer shown (rewound)".to_owned(),
            },
            (None, None) => "unknown".to_owned(),
        };
        match current.as_mut() {
            Some((shown, _, files, bytes)) if *shown == name && info.restore.is_none() => {
                *files += info.files;
                *bytes += info.bytes;
            }
            _ => {
                lines.extend(current.take());
                current = Some((name, info.created_at, info.files, info.bytes));
            }
        }
    }
    lines.extend(current);
    if lines.is_empty() {
        return if enabled {
            "No checkpoints yet: none of this session's tool calls has changed a file.".to_owned()
        } else {
            "Checkpoints are off ([checkpoints] enabled = false in config.toml).".to_owned()
        };
    }
    let mut text =
        "File changes kept, oldest first (`/rewind n code` goes back to before the n-th last prompt):".to_owned();
    for (name, at, files, bytes) in lines {
        let when = chrono::DateTime::from_timestamp_millis(at).map(|at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string());
        let _ = write!(text, "\n- {name}: {files} file changes, {bytes} bytes, {}", when.unwrap_or_default());
    }
    text
}

/// Where cutting the last `n` user turns off `history` starts, and that prompt's first line;
/// or why nothing can be rewound.
fn cut_at(history: &[Message], n: usize) -> Result<(usize, String), String> {
    let prompts: Vec<usize> =
        history.iter().enumerate().filter(|(_, m)| m.role == Role::User).map(|(i, _)| i).collect();
    if prompts.is_empty() {
        return Err("Nothing to rewind: this session has no turns yet.".to_owned());
    }
    if n > prompts.len() {
        let (count, turns) = (prompts.len(), if prompts.len() == 1 { "turn" } else { "turns" });
        return Err(format!(
            "Nothing was rewound: this session has {count} {turns}; /rewind {count} goes back to before the first."
        ));
    }
    let at = prompts[prompts.len() - n.max(1)];
    Ok((at, crate::session::title::first_line(&history[at].parts).unwrap_or_default()))
}

//! What a session's actor hands to the replica running the session's turn, in a store shared
//! by replicas, besides the prompts the lease refused (`remote.rs`).
//!
//! A settings change (`session/set_mode`, `session/set_config_option`), a title and a
//! `_session/steering` prompt sent while another replica holds the session's lease go to that
//! replica through the inbox ([`Handed`]): its running turn takes the mode at its next
//! decision, its queued prompts run with the model, a steered prompt joins its turn. The
//! client is answered from the holder's outcome, and a setting or title it took is put in
//! effect here too, unstored (the holder stored it). While nobody holds the lease the command
//! is served here as on one replica.
//!
//! A change stored while nobody ran a turn is handed to nobody, so before a turn may start
//! here the session's settings are read again from its row: the lease holder alone numbers
//! the session's event log, so a replica that does not hold it has no way to log the change
//! for the others' followers, and the row is where every replica stored it. What this replica
//! queued to store of the row is committed first, so the row never takes back its own newer
//! change; with nothing of it queued (as before most turns) the row is read at once, without
//! waiting for the writer's next batch.

use tokio::sync::oneshot;

use super::remote::Waiting;
use super::{Actor, Command, Reply};
use crate::permissions::Mode;
use crate::session::handoff::Handed;
use crate::session::{SessionError, SessionView, Update};
use crate::settings::Setting;

impl Actor {
    /// What the actor does with `command` before serving it, in a store shared by replicas:
    /// hands it to the replica holding the session's lease (`None`: handed, its answer comes
    /// later), or, before work that may start a turn here, reads the session's settings again.
    pub(super) async fn before(&mut self, command: Command) -> Option<Command> {
        if self.remote.is_none() || self.running.is_some() || self.closing {
            return Some(command);
        }
        let handed = match &command {
            Command::Set { setting, .. } => Handed::set(setting),
            Command::SetTitle { title, .. } => Handed::Title { title: title.clone() },
            Command::Steer { parts, start_if_idle, .. } => {
                Handed::Steer { parts: parts.clone(), start_if_idle: *start_if_idle }
            }
            Command::Prompt { .. } => {
                self.read_settings().await;
                return Some(command);
            }
            Command::Cancel
            | Command::CancelPrompt { .. }
            | Command::SetForTurn { .. }
            | Command::Attach { .. }
            | Command::Fork { .. }
            | Command::Answered { .. }
            | Command::Follow { .. }
            | Command::Close { .. } => return Some(command),
        };
        match self.services.store.held_elsewhere(&self.row.id).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                if matches!(command, Command::Steer { .. }) {
                    self.read_settings().await;
                }
                return Some(command);
            }
            Err(err) => {
                tracing::warn!(session = %self.row.id, %err, "who runs the session's turn could not be read; the command is served here");
                return Some(command);
            }
        }
        let Some(sent) = self.services.store.send_command(&self.row.id, handed.json()).await else {
            return Some(command);
        };
        let waiting = match waiting(command, self.numbered()) {
            Ok(waiting) => waiting,
            Err(command) => return Some(*command),
        };
        match sent {
            Ok(id) => {
                tracing::info!(session = %self.row.id, command = id, "a command was handed to the replica running the session's turn");
                if let Some(followed) = self.remote.as_mut() {
                    followed.handed.insert(id, waiting);
                }
            }
            Err(err) => fail(waiting, SessionError::from(err)),
        }
        None
    }

    /// `Command::Set`: the change is in effect and stored at once; in a store shared by
    /// replicas it goes into the session's event log with the write, for the other replicas'
    /// clients, and this replica's are shown it as it commits (`remote.rs`, `mine_committed`;
    /// with one process, the request's handler shows them).
    pub(super) fn set(&mut self, setting: Setting) -> Result<SessionView, SessionError> {
        self.set_logged(setting).map(|(view, _)| view)
    }

    /// [`Self::set`], and whether the change went into the session's log, once committed.
    pub(super) fn set_logged(
        &mut self,
        setting: Setting,
    ) -> Result<(SessionView, oneshot::Receiver<bool>), SessionError> {
        let shown = match self.services.store.logs_events() {
            true => vec![crate::session::handoff::setting_event(&setting)],
            false => Vec::new(),
        };
        let option = setting.option();
        let write = self.apply(setting)?;
        let ((logged, was_logged), mine, unstored) = (oneshot::channel(), self.mine(option), self.unstored());
        let after = move |result: Result<Option<i64>, crate::store::StoreError>| {
            let seq = result.ok().flatten();
            mine.committed(seq);
            drop(unstored);
            let _ = logged.send(seq.is_some());
        };
        self.services.store.submit_logged(write, shown, Box::new(after));
        Ok((self.view(), was_logged))
    }

    /// A setting the lease holder took: in effect here too (it stored it); the session's view.
    pub(super) fn set_as_handed(&mut self, setting: Setting) -> SessionView {
        if let Err(err) = self.apply(setting) {
            tracing::info!(session = %self.row.id, %err, "a setting the replica running the turn took cannot be used here");
        }
        self.view()
    }

    /// A title the lease holder stored: in effect and shown here too; the session's view. One
    /// this replica took back and stored itself (nobody held the lease) is shown already.
    pub(super) fn title_as_handed(&mut self, title: String) -> SessionView {
        self.title_pending = None;
        if self.row.title.as_deref() != Some(title.as_str()) {
            self.row.title = Some(title.clone());
            self.services.sink.send(&self.row.id, Update::Title(title));
        }
        self.view()
    }

    /// Answers a settings change: at once on a store of this process alone, and once it is
    /// committed on one shared by replicas, where the replica running the session's next turn
    /// reads it from the row: a client told its change is made may prompt another replica
    /// right away. The writer commits in order, so its barrier comes after the change.
    ///
    /// Nobody held the lease when the change was served here, but a replica may have started
    /// a turn since, having read the settings before this change committed. If the change went
    /// into the log, that replica's actor reads it there; if not (that replica held the lease by
    /// then) and one holds the lease once it has committed, the change is handed on to it (as
    /// when a turn runs elsewhere), so its turn runs with it all the same, and the client is
    /// answered after that.
    pub(super) fn answer_once_stored(
        &self,
        reply: Reply<SessionView>,
        result: Result<(SessionView, oneshot::Receiver<bool>), SessionError>,
        setting: Setting,
    ) {
        let (view, logged) = match result {
            Ok((view, logged)) => (view, logged),
            Err(err) => {
                let _ = reply.send(Err(err));
                return;
            }
        };
        if self.remote.is_none() {
            let _ = reply.send(Ok(view));
            return;
        }
        let (store, session) = (self.services.store.clone(), self.row.id.clone());
        let then = move |stored: Result<(), crate::store::StoreError>| {
            if let Err(err) = stored {
                let _ = reply.send(Err(SessionError::from(err)));
                return;
            }
            tokio::spawn(async move {
                // Told before the barrier's callback runs: the writer runs them in queue order.
                if !logged.await.unwrap_or(false) {
                    hand_on(&store, &session, &setting).await;
                }
                let _ = reply.send(Ok(view));
            });
        };
        self.services.store.submit(crate::store::Write::Barrier, Some(Box::new(then)));
    }

    /// A setting another replica changed (the event log's row `seq`): in effect here too,
    /// unstored (that replica stored it), and shown to this replica's clients as a change made
    /// by another client of this replica is (the session's options), unless it changes nothing
    /// here (this replica's own change, handed on) or this replica handed that very change to
    /// the lease holder and shows it with the holder's answer.
    pub(super) fn set_elsewhere(&mut self, seq: i64, setting: Setting) {
        if self.mine_first(seq, &setting) {
            return;
        }
        let handed = self.remote.as_ref().is_some_and(|followed| {
            followed
                .handed
                .values()
                .any(|waiting| matches!(waiting, Waiting::Set { setting: sent, .. } if *sent == setting))
        });
        if handed {
            return;
        }
        let before = self.view();
        if let Err(err) = self.apply(setting) {
            tracing::info!(session = %self.row.id, %err, "a setting another replica stored cannot be used here");
            return;
        }
        let view = self.view();
        if view != before {
            self.services.sink.send_logged(&self.row.id, seq, Update::Options(Box::new(view)));
        }
    }

    /// Puts in effect the settings the session's row holds now (another replica may have
    /// changed them while nobody ran a turn), telling this replica's clients what changed. A
    /// headless run's own settings for its turn (`unsaved`) are left as they are.
    async fn read_settings(&mut self) {
        if !self.unsaved.is_empty() || !self.queue.is_empty() {
            return;
        }
        let store = &self.services.store;
        let flushed = match self.storing_row() {
            true => store.flush().await,
            false => Ok(()),
        };
        // The log's last `seq` is read beside the row, for the turn about to start to wait for
        // (`caught_up`), instead of after it.
        let read = match flushed {
            Ok(()) => {
                let (row, last) = tokio::join!(store.session(&self.row.id), store.last_logged(&self.row.id));
                if let (Ok(last), Some(followed)) = (last, self.remote.as_mut()) {
                    followed.known_last = Some(last);
                }
                row
            }
            Err(err) => Err(err),
        };
        let row = match read {
            Ok(Some(row)) => row,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(session = %self.row.id, %err, "the session's settings could not be read again; the turn keeps these");
                return;
            }
        };
        let mut changed = false;
        if row.model != self.row.model {
            self.row.model = row.model;
            self.models = None;
            changed = true;
        }
        if row.thought_level != self.row.thought_level {
            self.row.thought_level = row.thought_level;
            changed = true;
        }
        if row.busy_prompt != self.row.busy_prompt {
            self.row.busy_prompt = row.busy_prompt;
            changed = true;
        }
        if row.title.is_some() && row.title != self.row.title {
            self.row.title = row.title;
            if row.title_by_client {
                self.title_pending = None;
            }
        }
        if let Some(mode) = row.mode.as_deref().and_then(Mode::parse)
            && mode != *self.mode.borrow()
        {
            // Seen by `mode_switched` as already stored.
            self.row.mode = Some(mode.id().to_owned());
            self.mode.send_replace(mode);
            self.services.sink.send(&self.row.id, Update::Mode(mode));
            changed = true;
        }
        if changed {
            tracing::debug!(session = %self.row.id, "settings another replica stored are in effect");
            self.services.sink.send(&self.row.id, Update::Options(Box::new(self.view())));
        }
    }
}

/// Hands `setting`, stored while nobody held `session`'s lease, to the replica holding it now,
/// if any (its answer comes to nobody: the change is stored already).
async fn hand_on(store: &crate::store::Store, session: &crate::ids::SessionId, setting: &Setting) {
    match store.held_elsewhere(session).await {
        Ok(Some(_)) => {}
        Ok(None) => return,
        Err(err) => {
            tracing::warn!(%session, %err, "who runs the session's turn could not be read again after a settings change");
            return;
        }
    }
    match store.send_command(session, Handed::set(setting).json()).await {
        Some(Ok(command)) => tracing::info!(
            %session,
            command,
            "a setting stored as another replica started a turn was handed on to it"
        ),
        Some(Err(err)) => {
            tracing::warn!(%session, %err, "a setting stored as another replica started a turn could not be handed on to it");
        }
        None => {}
    }
}

/// What waits for the answer to a handed command; the command back if it is not one.
fn waiting(command: Command, after: u64) -> Result<Waiting, Box<Command>> {
    match command {
        Command::Set { setting, reply } => Ok(Waiting::Set { setting, reply, after }),
        Command::SetTitle { title, reply } => Ok(Waiting::Title { title, reply, after }),
        Command::Steer { reply, .. } => Ok(Waiting::Steer { reply }),
        other @ (Command::Prompt { .. }
        | Command::Cancel
        | Command::CancelPrompt { .. }
        | Command::SetForTurn { .. }
        | Command::Attach { .. }
        | Command::Fork { .. }
        | Command::Answered { .. }
        | Command::Follow { .. }
        | Command::Close { .. }) => Err(Box::new(other)),
    }
}

/// Answers a command that could not be handed with `err`.
fn fail(waiting: Waiting, err: SessionError) {
    match waiting {
        Waiting::Prompt { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Waiting::Set { reply, .. } | Waiting::Title { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Waiting::Steer { reply } => {
            let _ = reply.send(Err(err));
        }
    }
}

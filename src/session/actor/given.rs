//! What a client sets on a session outside its turns, through the actor: its title
//! (`session/set_title`) and the editor's system prompt (`systemPrompt` on an opening). Each is
//! in effect at once and stored. And the mode a turn switched (a plan the user approved):
//! stored, then told to the client as a `current_mode_update` and the options.

use std::sync::Arc;

use super::{Actor, Reply, setup};
use crate::agent::prompt::ClientPrompt;
use crate::session::{SessionError, SessionView, Update};
use crate::settings::{Kept, Setting};
use crate::store::Write;

impl Actor {
    /// `Command::SetTitle`: in effect and shown once stored; a model-written title still to come
    /// is dropped, and one already being written is refused by the store (`title`).
    pub(super) fn set_title(&mut self, title: String, reply: Reply<SessionView>) {
        self.title_pending = None;
        self.row.title = Some(title.clone());
        self.changed_here("title");
        let (sink, id, view) = (Arc::clone(&self.services.sink), self.row.id.clone(), self.view());
        let write = Write::SetSessionTitle { id: id.clone(), title: title.clone(), by: crate::store::TitleBy::Client };
        let unstored = self.unstored();
        self.services.store.submit(
            write,
            Some(Box::new(move |result| {
                drop(unstored);
                if result.is_ok() {
                    sink.send(&id, Update::Title(title));
                }
                let _ = reply.send(result.map(|()| view).map_err(SessionError::from));
            })),
        );
    }

    /// The session's mode changed: by the actor itself (`Setting::Mode`, stored and told where it
    /// was set), or by a turn (a plan approved), which is stored here and then told to the client.
    pub(super) fn mode_switched(&mut self) {
        let mode = *self.mode_seen.borrow_and_update();
        if self.row.mode.as_deref() == Some(mode.id()) {
            return;
        }
        self.row.mode = Some(mode.id().to_owned());
        let (kept, value) = Setting::Mode(mode).kept();
        let (sink, id, view) = (Arc::clone(&self.services.sink), self.row.id.clone(), self.view());
        let write = Write::SetSessionSetting { id: id.clone(), kept, value };
        let unstored = self.unstored();
        self.services.store.submit(
            write,
            Some(Box::new(move |result| match (result, unstored) {
                (Ok(()), _) => {
                    sink.send(&id, Update::Mode(mode));
                    sink.send(&id, Update::Options(Box::new(view)));
                }
                (Err(err), _) => tracing::warn!(session = %id, %err, "the mode an approved plan chose was not stored"),
            })),
        );
    }

    /// The editor's instructions, given when it opened the session: kept with the session and
    /// part of the system prompt from the next turn on (the running one keeps its own). The same
    /// instructions again change nothing, so the prompt stays byte-stable for the provider's cache.
    pub(super) fn use_client_prompt(&mut self, prompt: ClientPrompt) {
        if self.row.system_prompt.as_ref() == Some(&prompt) {
            return;
        }
        let value = match serde_json::to_string(&prompt) {
            Ok(value) => value,
            Err(err) => return tracing::error!(%err, "the editor's system prompt could not be stored"),
        };
        self.system = setup::prepare_system(&self.services.config, &self.root, Some(prompt.clone()));
        self.system_warned = false;
        self.row.system_prompt = Some(prompt);
        let write = Write::SetSessionSetting { id: self.row.id.clone(), kept: Kept::Metadata("system_prompt"), value };
        self.services.store.submit(write, None);
    }
}

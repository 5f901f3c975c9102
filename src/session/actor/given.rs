//! What a client sets on a session outside its turns, through the actor: its title
//! (`session/set_title`) and the editor's system prompt (`systemPrompt` on an opening). Each is
//! in effect at once and stored.

use std::sync::Arc;

use super::{Actor, Reply, setup};
use crate::agent::prompt::ClientPrompt;
use crate::session::{SessionError, SessionView, Update};
use crate::settings::Kept;
use crate::store::Write;

impl Actor {
    /// `Command::SetTitle`: in effect and shown once stored; a model-written title still to come
    /// is dropped, and one already being written is refused by the store (`title`).
    pub(super) fn set_title(&mut self, title: String, reply: Reply<SessionView>) {
        self.title_pending = None;
        self.row.title = Some(title.clone());
        let (sink, id, view) = (Arc::clone(&self.services.sink), self.row.id.clone(), self.view());
        let write = Write::SetSessionTitle { id: id.clone(), title: title.clone(), by: crate::store::TitleBy::Client };
        self.services.store.submit(
            write,
            Some(Box::new(move |result| {
                if result.is_ok() {
                    sink.send(&id, Update::Title(title));
                }
                let _ = reply.send(result.map(|()| view).map_err(SessionError::from));
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
        self.system = setup::prepare_system(&self.services.config, &self.row.cwd, Some(prompt.clone()));
        self.system_warned = false;
        self.row.system_prompt = Some(prompt);
        let write = Write::SetSessionSetting { id: self.row.id.clone(), kept: Kept::Metadata("system_prompt"), value };
        self.services.store.submit(write, None);
    }
}

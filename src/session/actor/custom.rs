//! The actor's commands from files and skills (`session::custom`): read when the session goes
//! live, checked for changes at each prompt (a new `available_commands_update` when the set
//! offered changed), and run. A command's text becomes the prompt; one that names allowed
//! tools or a model runs its turn with exactly those ([`Only`]): the turn's tools are cut to the
//! ones listed (and so are the tools of the sub-agents it starts with `task`), and every call is
//! still judged by the session's mode and rules, so a command never gets more than the session
//! would allow. A model that cannot be used is named in a notice, and the turn runs on the
//! session's model.

use std::sync::Arc;

use super::{Actor, Queued, Reply, Work};
use crate::agent::StopReason;
use crate::config::Config;
use crate::history::Part;
use crate::session::custom::expand::{Judge, expand};
use crate::session::custom::{Custom, Places};
use crate::session::setup::{self, Model};
use crate::session::{TurnEnd, Update};
use crate::tools::Registry;
use crate::trace::TraceContext;

/// What a command's turn is held to.
pub struct Only {
    /// The command, for the reason a withheld tool's call is given.
    command: String,
    tools: Option<Vec<String>>,
    model: Option<Arc<Model>>,
}

impl Only {
    /// `tools` cut to the command's list (all of them when it names none). The session's turn
    /// applies it to the tools its sub-agents are made from as well (`setup::session_tools`).
    pub fn cut(&self, tools: &Registry) -> Registry {
        match &self.tools {
            Some(allowed) => {
                let why = format!("the command /{} may only use: {}", self.command, allowed.join(", "));
                tools.keep(|tool| allowed.iter().any(|allowed| allowed.eq_ignore_ascii_case(tool)), &why)
            }
            None => tools.clone(),
        }
    }

    /// The model its turn runs on, when it names one.
    pub fn model(&self) -> Option<Arc<Model>> {
        self.model.clone()
    }
}

/// Where a session in `cwd` finds its commands.
pub fn places(config: &Config, cwd: &std::path::Path) -> Places {
    Places { cwd: cwd.into(), home: config.home_dir.clone(), config_dir: config.config_dir.clone() }
}

/// The name and arguments of a prompt that starts with `/`.
fn typed(parts: &[Part]) -> Option<(&str, &str)> {
    let [Part::Text { text }] = parts else { return None };
    let line = text.trim_start().strip_prefix('/')?;
    Some(line.split_once(char::is_whitespace).unwrap_or((line, "")))
}

impl Actor {
    /// Reads the commands again if their files changed, and tells the client when the set did.
    pub(super) fn refresh_commands(&mut self) {
        if self.custom.refresh(&places(&self.services.config, &self.root)) {
            self.services.sink.send(&self.row.id, Update::Commands(self.custom.advertised()));
        }
    }

    /// A prompt no built-in command took: a command from a file or a skill when it names one,
    /// else a plain prompt.
    pub(super) fn custom_or_prompt(
        &mut self,
        ticket: u64,
        trace: Option<TraceContext>,
        parts: Vec<Part>,
        reply: Reply<TurnEnd>,
    ) {
        // A command file added, changed or removed since is offered (or gone) now.
        self.refresh_commands();
        let found = typed(&parts).and_then(|(name, args)| Some((self.custom.find(name)?.clone(), args.to_owned())));
        let Some((command, args)) = found else { return self.prompt(ticket, trace, parts, reply) };
        let workspace = setup::workspace(&self.services.config, &self.root, &self.directories);
        let judge =
            Judge { workspace: &workspace, mode: *self.mode.borrow(), rules: &self.rules, confined: self.confined() };
        let text = match expand(&command, &args, &judge) {
            Ok(text) => text,
            Err(why) => {
                self.say(why);
                self.save_unsaved();
                let _ = reply.send(Ok(StopReason::EndTurn.into()));
                return;
            }
        };
        let parts = vec![Part::Text { text }];
        match self.only(&command) {
            None => self.prompt(ticket, trace, parts, reply),
            // Held to its own tools and model, it never joins a running turn.
            Some(only) => self.enqueue(Queued { ticket, trace, work: Work::Command(parts, Box::new(only)), reply }),
        }
    }

    /// What `command`'s turn is held to, if anything.
    fn only(&self, command: &Custom) -> Option<Only> {
        let model =
            command.model.as_deref().and_then(|reference| match Model::resolve(&self.services.config, reference) {
                Ok(model) => Some(model),
                Err(err) => {
                    self.tell(format!(
                        "The command /{} asks for the model {reference}, which cannot be used ({err}); it runs on the \
                         session's model, {}.",
                        command.name, self.row.model
                    ));
                    None
                }
            });
        if model.is_none() && command.tools.is_none() {
            return None;
        }
        Some(Only { command: command.name.clone(), tools: command.tools.clone(), model })
    }
}

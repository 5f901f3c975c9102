//! Sub-agents: the session side of the `task` tool.
//!
//! A [`Spawner`] is the [`Delegate`] of one session's `task` tool. For a call it stores a new
//! session (its `parent_id` the caller, `subagent` the agent's name, so `session/list` leaves it
//! out unless asked), builds a child [`Turn`] and runs it on the same engine, `agent::run_turn`,
//! inside the parent's call:
//!
//! - tools: the parent's, less `task` at `[subagents] max_depth` and less what a named agent's
//!   `tools` leaves out; a call to one of those is told why;
//! - permissions: the parent's mode (the same watch) and a copy of its rules, never wider; its
//!   questions reach the editor through the parent's host, titled with the sub-agent;
//! - limits: `[subagents] max_rounds` and `timeout_secs`; the model of the named agent, else
//!   `[subagents] model`, else the session's; at most `[subagents] max_total` sub-agents in all
//!   under one prompt (a [`Parent`] is made per turn and shared by every level below it);
//! - cancel: its token is a child of the call's, itself a child of the parent turn's, so a
//!   cancel reaches every level at once and each turn drops its HTTP stream;
//! - progress: its recorder commits its rows, then hands its updates to the call (`progress`)
//!   and, through the session's sink and under its own id, to a client that takes sub-agents
//!   (announced on its parent by a `subagent_update`, linked from the call's card);
//! - cancel from the client: `session/cancel` on its id stops its turn alone ([`Running`]),
//!   and the call fails as cancelled;
//! - cost: its messages' usage counts toward every session above it in the same transaction
//!   (`store`); the call's outcome carries it for the parent turn's running total.
//!
//! Whatever ends the child (its answer, a limit, an error, a timeout) is the call's result, and a
//! limit that stopped it is named there with its setting; a child never fails its parent's turn.

mod host;
mod progress;
mod shown;
mod spawn;

pub use shown::{replay_children, shown_again};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use serde_json::Value;

use crate::config::Config;
use crate::history::{Message, Role};
use crate::ids::SessionId;
use crate::session::{Update, UpdateSink};
use crate::store::Store;
use crate::tools::agents::NamedAgent;
use crate::tools::task::{self, Task, TaskArgs};
use crate::tools::{Registry, ToolError};
use spawn::Spawner;

/// What every sub-agent of one turn shares, at every depth.
pub struct Parent {
    pub store: Store,
    pub config: Arc<Config>,
    pub session: SessionId,
    pub cwd: String,
    /// The session's `provider/model`, for sub-agents nothing else names a model for.
    pub model: String,
    /// The named agents of the project.
    pub agents: Arc<[NamedAgent]>,
    /// Where the session's updates go: a sub-agent's are sent there too, routed with the
    /// session's id and naming their own.
    pub shown: Arc<dyn UpdateSink>,
    /// The sub-agents running in this process, for `session/cancel` on one of them.
    pub running: Arc<Running>,
    /// The session's hooks: its sub-agents' tool calls fire them too.
    pub hooks: Option<Arc<crate::hooks::Hooks>>,
    /// Sub-agents started under this turn so far, nested ones included (`[subagents] max_total`).
    started: AtomicU32,
}

/// The sub-agents running in this process, by session id: what `session/cancel` on a
/// sub-agent's id stops (its turn alone; its parent's `task` call then fails as cancelled).
#[derive(Default)]
pub struct Running(Mutex<HashMap<SessionId, CancellationToken>>);

impl Running {
    /// Cancels the sub-agent `id` if it runs here; `false` if it does not.
    pub fn cancel(&self, id: &SessionId) -> bool {
        let token = self.lock().get(id).cloned();
        token.map(|token| token.cancel()).is_some()
    }

    /// Keeps `token` as `id`'s until the guard is dropped.
    fn enter(self: &Arc<Self>, id: SessionId, token: CancellationToken) -> RunningGuard {
        self.lock().insert(id.clone(), token);
        RunningGuard { running: Arc::clone(self), id }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, CancellationToken>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running sub-agent's entry in [`Running`], removed when it ends (or its call is dropped).
struct RunningGuard {
    running: Arc<Running>,
    id: SessionId,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.lock().remove(&self.id);
    }
}

impl Parent {
    /// What the sub-agents of the session `session` share; reads the project's named agents
    /// (on a blocking thread: a walk up the project's directories).
    pub async fn new(
        store: Store,
        config: Arc<Config>,
        session: SessionId,
        cwd: String,
        model: String,
        (shown, running): (Arc<dyn UpdateSink>, Arc<Running>),
    ) -> Self {
        let (dir, home) = (std::path::PathBuf::from(&cwd), config.home_dir.clone());
        let agents = tokio::task::spawn_blocking(move || crate::tools::agents::load(&dir, home.as_deref()).0)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(%err, "reading the named agents failed; the task tool offers none");
                Vec::new()
            });
        let agents = agents.into();
        Self { store, config, session, cwd, model, agents, shown, running, hooks: None, started: AtomicU32::new(0) }
    }

    /// Sends `update` of session `on` (this turn's session or one of its sub-agents) through the
    /// session's stream.
    fn show(&self, on: &SessionId, update: Update) {
        if *on == self.session {
            self.shown.send(on, update);
        } else {
            self.shown.send(&self.session, Update::Elsewhere { session: on.clone(), update: Box::new(update) });
        }
    }

    /// Counts one more sub-agent of this turn; `Err` with the limit when there is no room.
    fn admit(&self) -> Result<(), ToolError> {
        let most = self.config.subagents.max_total;
        self.started.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < most).then_some(n + 1)).map(|_| ()).map_err(
            |_| {
                refuse(format!(
                    "Not started: this prompt has already started {most} sub-agents, its limit ([subagents] max_total = {most}). Do the rest of the work yourself, or finish and report what is left."
                ))
            },
        )
    }
}

/// The tools of a session that `base` describes: `base`, and `task` when sub-agents are on.
pub fn tools(base: &Registry, parent: Parent) -> Registry {
    let parent = Arc::new(parent);
    let caller = parent.session.clone();
    with_task(base, base, &parent, 0, caller)
}

/// The catalog a session's system prompt lists: `base`'s tools and, when sub-agents are on,
/// `task` with the project's named agents.
pub fn catalog(settings: &crate::config::Subagents, base: &Registry, agents: &[NamedAgent]) -> Vec<Arc<Value>> {
    let mut specs = base.specs().to_vec();
    if settings.max_depth > 0 {
        specs.push(Arc::new(serde_json::json!({
            "name": task::NAME,
            "description": task::describe(agents),
            "parameters": crate::tools::schema_of::<TaskArgs>(),
        })));
    }
    specs
}

/// `tools` (already cut to what its agent may use) with `task` for the session `caller` at
/// `depth`, or without it and a reason when that session may not start sub-agents.
fn with_task(tools: &Registry, base: &Registry, parent: &Arc<Parent>, depth: u32, caller: SessionId) -> Registry {
    let settings = &parent.config.subagents;
    if depth >= settings.max_depth {
        let why = if settings.max_depth == 0 {
            "sub-agents are turned off ([subagents] max_depth = 0)".to_owned()
        } else {
            format!(
                "this is a sub-agent at depth {depth}, and sub-agents may nest at most {} deep ([subagents] max_depth); do the work yourself",
                settings.max_depth
            )
        };
        return tools.withhold(task::NAME, &why);
    }
    let spawner = Spawner { parent: Arc::clone(parent), base: base.clone(), depth, caller };
    let mut tools = tools.clone();
    if let Err(err) = tools.add(Task::new(Arc::clone(&parent.agents), Arc::new(spawner), settings.timeout)) {
        tracing::warn!(%err, "the task tool was not added");
    }
    tools
}

/// Why a child could not even start: the call's failure.
fn refuse(why: String) -> ToolError {
    ToolError::Tell(why)
}

/// What a sub-agent is told about itself, with its named agent's instructions.
fn role(depth: u32, agent: Option<&NamedAgent>) -> String {
    let mut role = format!(
        "You are a sub-agent (depth {depth}), started by another agent with the task in the user message. \
         Work on it alone: nobody can answer questions. End with one complete, self-contained report; \
         your final message is all the other agent receives."
    );
    if let Some(agent) = agent {
        role.push_str(&format!("\n\n## Agent {}\n{}", agent.name, agent.instructions));
    }
    role
}

/// The text of the last assistant message that has any.
fn last_text(history: &[Message]) -> Option<String> {
    history.iter().rev().filter(|message| message.role == Role::Assistant).find_map(|message| {
        let text: String = crate::history::texts(&message.parts).collect();
        (!text.trim().is_empty()).then(|| text.trim().to_owned())
    })
}

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
//! - progress: its recorder commits its rows, then hands its updates to the call (`progress`);
//! - cost: its messages' usage counts toward every session above it in the same transaction
//!   (`store`); the call's outcome carries it for the parent turn's running total.
//!
//! Whatever ends the child (its answer, a limit, an error, a timeout) is the call's result, and a
//! limit that stopped it is named there with its setting; a child never fails its parent's turn.

mod host;
mod progress;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::agent::{self, StopReason, Toolbox, Turn, prompt};
use crate::config::Config;
use crate::history::{Message, Part, Role, ToolContent};
use crate::ids::{SessionId, now_ms};
use crate::llm::catalog;
use crate::permissions::Scope;
use crate::store::{SessionRow, Store, Write};
use crate::tools::agents::NamedAgent;
use crate::tools::task::{self, Delegate, Task, TaskArgs};
use crate::tools::{Registry, ToolContext, ToolError, ToolOutcome};

use super::Status;
use super::recorder::StoreRecorder;
use host::NamedHost;
use progress::{ChildSink, Progress};

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
    /// Sub-agents started under this turn so far, nested ones included (`[subagents] max_total`).
    started: AtomicU32,
}

impl Parent {
    /// What the sub-agents of the session `session` share; reads the project's named agents
    /// (on a blocking thread: a walk up the project's directories).
    pub async fn new(store: Store, config: Arc<Config>, session: SessionId, cwd: String, model: String) -> Self {
        let (dir, home) = (std::path::PathBuf::from(&cwd), config.home_dir.clone());
        let agents = tokio::task::spawn_blocking(move || crate::tools::agents::load(&dir, home.as_deref()).0)
            .await
            .unwrap_or_else(|err| {
                tracing::warn!(%err, "reading the named agents failed; the task tool offers none");
                Vec::new()
            });
        Self { store, config, session, cwd, model, agents: agents.into(), started: AtomicU32::new(0) }
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
    with_task(base, base, &parent, 0)
}

/// The catalog a session's system prompt lists: `base`'s tools and, when sub-agents are on,
/// `task` with the project's named agents.
pub fn catalog(settings: &crate::config::Subagents, base: &Registry, agents: &[NamedAgent]) -> Vec<Value> {
    let mut specs = base.specs().to_vec();
    if settings.max_depth > 0 {
        specs.push(serde_json::json!({
            "name": task::NAME,
            "description": task::describe(agents),
            "parameters": crate::tools::schema_of::<TaskArgs>(),
        }));
    }
    specs
}

/// `tools` (already cut to what its agent may use) with `task` for a session at `depth`, or
/// without it and a reason when that session may not start sub-agents.
fn with_task(tools: &Registry, base: &Registry, parent: &Arc<Parent>, depth: u32) -> Registry {
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
    let spawner = Spawner { parent: Arc::clone(parent), base: base.clone(), depth };
    let mut tools = tools.clone();
    if let Err(err) = tools.add(Task::new(Arc::clone(&parent.agents), Arc::new(spawner), settings.timeout)) {
        tracing::warn!(%err, "the task tool was not added");
    }
    tools
}

/// Runs the sub-agents that a session at `depth` starts.
struct Spawner {
    parent: Arc<Parent>,
    /// The tools a sub-agent may get, `task` aside.
    base: Registry,
    depth: u32,
}

/// Why a child could not even start: the call's failure.
fn refuse(why: String) -> ToolError {
    ToolError::Tell(why)
}

#[async_trait::async_trait]
impl Delegate for Spawner {
    async fn run(
        &self,
        task: &TaskArgs,
        agent: Option<&NamedAgent>,
        ctx: &ToolContext,
    ) -> Result<ToolOutcome, ToolError> {
        let caller = ctx.caller.as_ref().ok_or_else(|| refuse("a sub-agent needs its caller's permissions".into()))?;
        let parent = &self.parent;
        parent.admit()?;
        let config = &parent.config;
        let settings = &config.subagents;
        let depth = self.depth + 1;
        let name = agent.map_or(task::NAME, |agent| agent.name.as_str());
        // The model writes the description: one line, so it cannot hide what follows it.
        let description = crate::tools::one_line(&task.description);
        let who = match agent {
            Some(agent) => format!("Sub-agent {}: {description}", agent.name),
            None => format!("Sub-agent: {description}"),
        };
        let model_ref = agent
            .and_then(|agent| agent.model.clone())
            .or_else(|| settings.model.clone())
            .unwrap_or_else(|| parent.model.clone());
        let resolved = crate::llm::resolve(config, &model_ref).map_err(|err| match agent {
            Some(agent) => refuse(format!(
                "The agent `{}` ({}) asks for the model {model_ref}, which cannot be used: {err}",
                agent.name,
                agent.path.display()
            )),
            None => refuse(format!("The sub-agent's model {model_ref} cannot be used: {err}")),
        })?;
        let tools = match agent.and_then(|agent| agent.tools.as_ref().map(|tools| (agent, tools))) {
            Some((agent, allowed)) => {
                // The agent's list is lowercased; tool names need not be (`mcp__GitHub__getIssue`).
                let listed = |tool: &str| allowed.iter().any(|allowed| allowed.eq_ignore_ascii_case(tool));
                for unknown in allowed
                    .iter()
                    .filter(|tool| *tool != task::NAME && !self.base.names().any(|n| n.eq_ignore_ascii_case(tool)))
                {
                    tracing::warn!(agent = %agent.name, path = %agent.path.display(), tool = %unknown, "the agent lists a tool cairn does not have");
                }
                let why = format!("the agent `{}` may only use: {}", agent.name, allowed.join(", "));
                let cut = self.base.keep(listed, &why);
                // Its own sub-agents get what it has, never the tools it was cut from.
                if listed(task::NAME) { with_task(&cut, &cut, parent, depth) } else { cut.withhold(task::NAME, &why) }
            }
            None => with_task(&self.base, &self.base, parent, depth),
        };

        let mut row = SessionRow::new(SessionId::generate(), parent.cwd.clone(), model_ref.clone(), now_ms());
        row.title = Some(description.chars().take(80).collect());
        row.parent_id = Some(parent.session.clone());
        row.subagent = Some(name.to_owned());
        row.rules = caller.rules.iter().filter(|rule| rule.source == Scope::Session).cloned().collect();
        let child = row.id.clone();
        tracing::info!(parent = %parent.session, %child, agent = name, depth, "starting a sub-agent");
        let stored = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(refuse("Cancelled before the sub-agent started.".into())),
            stored = parent.store.commit(Write::InsertSession(Box::new(row))) => stored,
        };
        stored.map_err(|err| refuse(format!("The sub-agent's session could not be stored: {err}")))?;

        let gathered = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(refuse("Cancelled before the sub-agent started.".into())),
            gathered = prompt::gather(Path::new(&parent.cwd), config.home_dir.as_deref(), tools.specs(), &config.process.env) => gathered,
        };
        let mut sources = gathered;
        sources.role = Some(role(depth, agent));
        let system = Arc::new(prompt::assemble(&sources));

        let host: Arc<dyn crate::tools::Host> =
            Arc::new(NamedHost { inner: Arc::clone(&ctx.host), who, card: ctx.call_id.clone() });
        let (updates, mut shown) = mpsc::unbounded_channel();
        let sink = Arc::new(ChildSink { updates, host: Arc::clone(&host) });
        let status = Arc::new(watch::Sender::new(Status::Busy));
        let mut recorder = StoreRecorder::new(child.clone(), parent.cwd.clone(), parent.store.clone(), sink, status);
        let mut history: Vec<Message> = Vec::new();
        let mut rules = caller.rules.clone();
        let cancel = ctx.cancel.child_token();
        let mut limits = config.limits.clone();
        limits.max_rounds = settings.max_rounds;
        // The run below enforces the sub-agent's own time limit, so it can say which one it was.
        limits.timeout = None;
        let turn = Turn {
            provider: resolved.provider.as_ref(),
            model: resolved.model.clone(),
            model_ref: model_ref.clone(),
            system,
            history: &mut history,
            recorder: &mut recorder,
            cancel: cancel.clone(),
            limits,
            tools: Toolbox {
                workspace: ctx.workspace.clone(),
                host,
                mode: caller.mode.clone(),
                rules: &mut rules,
                process: Arc::clone(&ctx.process),
                registry: Arc::new(tools),
            },
            info: catalog::info(config, &model_ref),
            thought: None,
            spent: 0.0,
            context_used: 0,
            summarizer: None,
            run: agent::Run::child(ctx.user_wait.clone(), Arc::clone(&ctx.images.read)),
        };

        // The child's turn takes its session's lease with its prompt. It is given back when the
        // child is over, and also if this call is dropped before (the parent's cancel grace or
        // the call's hard stop ran out) or panics.
        let lease = parent.store.release_on_drop(child.clone());
        let deadline = tokio::time::Instant::now() + settings.timeout;
        let mut timed_out = false;
        let mut progress = Progress::default();
        let mut dirty = false;
        let mut last_shown = tokio::time::Instant::now() - progress::EVERY;
        let result = {
            let running = agent::run_turn(turn, vec![Part::Text { text: task.prompt.clone() }]);
            tokio::pin!(running);
            loop {
                tokio::select! {
                    result = &mut running => break result,
                    Some(update) = shown.recv() => dirty |= progress.fold(update),
                    () = tokio::time::sleep_until(last_shown + progress::EVERY), if dirty => {
                        dirty = false;
                        last_shown = tokio::time::Instant::now();
                        if let Some(to) = &ctx.progress {
                            let _ = to.send(progress.content());
                        }
                    }
                    () = tokio::time::sleep_until(deadline), if !timed_out => {
                        timed_out = true;
                        cancel.cancel();
                    }
                }
            }
        };
        drop(lease);
        // Its turn ended with a flush: every update it committed is in the channel by now,
        // the notice of a limit that stopped it included.
        while let Ok(update) = shown.try_recv() {
            progress.fold(update);
        }
        // The child's rows are committed (its turn ends with a flush): its cost includes its own
        // sub-agents'.
        let cost = match parent.store.session(&child).await {
            Ok(Some(row)) => row.cost_usd,
            _ => crate::history::cost(&history),
        };
        let answer = last_text(&history);
        let rounds = history.iter().filter(|message| {
            message.role == Role::Assistant && !message.parts.iter().any(|part| matches!(part, Part::Notice { .. }))
        });
        let failed = |why: String| {
            let output = match answer.as_deref() {
                Some(text) => format!("{why}\n\nIts last words:\n{text}"),
                None => why,
            };
            Ok(ToolOutcome {
                content: vec![ToolContent::Text { text: output.clone() }],
                output,
                failed: true,
                cost,
                ..ToolOutcome::default()
            })
        };
        tracing::info!(%child, ?result, timed_out, cost, "the sub-agent ended");
        match result {
            _ if timed_out => failed(format!(
                "The sub-agent did not finish within {} s ([subagents] timeout_secs) and was stopped.",
                settings.timeout.as_secs()
            )),
            Ok(StopReason::EndTurn) => {
                let output = answer.unwrap_or_else(|| "The sub-agent ended without an answer.".to_owned());
                Ok(ToolOutcome {
                    content: vec![ToolContent::Text { text: output.clone() }],
                    output,
                    cost,
                    ..ToolOutcome::default()
                })
            }
            Ok(StopReason::MaxTurnRequests) if rounds.count() >= settings.max_rounds as usize => failed(format!(
                "The sub-agent stopped at its limit of {} model requests ([subagents] max_rounds) before it finished.",
                settings.max_rounds
            )),
            Ok(StopReason::MaxTurnRequests) => failed(format!(
                "The sub-agent stopped at a limit before it finished: {}",
                progress.notice().unwrap_or("no reason was given")
            )),
            Ok(StopReason::MaxTokens) => {
                failed("The sub-agent's answer was cut off at the model's output limit.".into())
            }
            Ok(StopReason::Refusal) => failed("The sub-agent's model refused the task.".into()),
            Ok(StopReason::Cancelled) => failed("The sub-agent was cancelled.".into()),
            Err(err) => failed(format!("The sub-agent failed: {err}")),
        }
    }
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

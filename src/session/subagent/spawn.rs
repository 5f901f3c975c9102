//! One `task` call's sub-agent, in three steps: [`Spawner::prepare`] checks the limits, resolves
//! its model, cuts its tools, stores its session and builds its turn through `setup`;
//! [`drive`] runs that turn inside the call, showing its progress and stopping it at its time
//! limit; [`report`] makes the call's result of how it ended, naming a limit that stopped it.
//! The child's lease is given back by a guard, also when the call is dropped or panics. A
//! sub-agent's background jobs are its own session's, killed when it ends (and when the call is
//! dropped: its last handle goes with it).

use std::path::Path;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::host::NamedHost;
use super::progress::{self, ChildSink, Progress};
use super::shown::{Sent, message};
use super::{Parent, last_text, refuse, role, with_task};
use crate::agent::{self, StopReason};
use crate::history::{Message, Part, Role, ToolContent};
use crate::ids::{SessionId, now_ms};
use crate::permissions::{Rule, Scope};
use crate::session::recorder::StoreRecorder;
use crate::session::setup::{self, Model, Setup};
use crate::session::{Status, SubagentInfo, Update};
use crate::store::{SessionRow, Write};
use crate::tools::agents::NamedAgent;
use crate::tools::task::{self, Delegate, TaskArgs};
use crate::tools::{Registry, ToolContext, ToolError, ToolOutcome};

/// Runs the sub-agents that a session at `depth` starts.
pub(super) struct Spawner {
    pub(super) parent: Arc<Parent>,
    /// The tools a sub-agent may get, `task` aside.
    pub(super) base: Registry,
    pub(super) depth: u32,
    /// The session whose `task` tool this is: the turn's session, or a sub-agent.
    pub(super) caller: SessionId,
}

/// A sub-agent ready to run: its stored session and its turn's parts.
struct Child {
    id: SessionId,
    /// How its parent announces it.
    info: SubagentInfo,
    setup: Setup,
    recorder: StoreRecorder,
    rules: Vec<Rule>,
    /// Its updates, once committed.
    shown: mpsc::UnboundedReceiver<Update>,
}

/// How a sub-agent's turn ended.
struct Ended {
    result: Result<StopReason, agent::TurnError>,
    timed_out: bool,
    history: Vec<Message>,
    progress: Progress,
    /// What it cost, its own sub-agents included.
    cost: f64,
}

#[async_trait::async_trait]
impl Delegate for Spawner {
    async fn run(
        &self,
        task: &TaskArgs,
        agent: Option<&NamedAgent>,
        ctx: &ToolContext,
    ) -> Result<ToolOutcome, ToolError> {
        let child = self.prepare(task, agent, ctx).await?;
        let (id, mut info) = (child.id.clone(), child.info.clone());
        let parent = &self.parent;
        parent.show(&self.caller, Update::Subagent(Box::new(info.clone())));
        parent.show(&self.caller, message(&ctx.call_id, &id, Sent::Task, task.prompt.clone()));
        let ended = drive(child, parent, task, ctx).await;
        info.ended = Some(match &ended.result {
            Ok(stop) if !ended.timed_out => Ok(*stop),
            Ok(_) => Err("it did not finish in time ([subagents] timeout_secs)".to_owned()),
            Err(err) => Err(err.to_string()),
        });
        let outcome = report(ended, &parent.config.subagents, &id);
        parent.show(&self.caller, message(&ctx.call_id, &id, Sent::Report, outcome.output.clone()));
        parent.show(&self.caller, Update::Subagent(Box::new(info)));
        Ok(outcome)
    }
}

impl Spawner {
    /// Everything before the sub-agent's turn: the limits, its model and tools, its stored
    /// session, its system prompt, its host and its turn's setup.
    async fn prepare(
        &self,
        task: &TaskArgs,
        agent: Option<&NamedAgent>,
        ctx: &ToolContext,
    ) -> Result<Child, ToolError> {
        let caller = ctx.caller.as_ref().ok_or_else(|| refuse("a sub-agent needs its caller's permissions".into()))?;
        let parent = &self.parent;
        parent.admit()?;
        let config = &parent.config;
        let depth = self.depth + 1;
        let name = agent.map_or(task::NAME, |agent| agent.name.as_str());
        // The model writes the description: one line, so it cannot hide what follows it.
        let description = crate::tools::one_line(&task.description);
        let who = match agent {
            Some(agent) => format!("Sub-agent {}: {description}", agent.name),
            None => format!("Sub-agent: {description}"),
        };
        let model = self.model(agent)?;
        let id = SessionId::generate();
        // Only the session's own turn presents a plan to the user; a sub-agent reports to it.
        let tools = self.tools(agent, depth, &id).withhold(
            crate::tools::EXIT_PLAN,
            "a sub-agent does not present plans; put the plan in your report, which your caller reviews",
        );

        let mut row = SessionRow::new(id.clone(), parent.cwd.clone(), model.reference.clone(), now_ms());
        row.title = Some(description.chars().take(80).collect());
        row.parent_id = Some(parent.session.clone());
        row.subagent = Some(name.to_owned());
        row.rules = caller.rules.iter().filter(|rule| rule.source == Scope::Session).cloned().collect();
        let info = SubagentInfo {
            child: id.clone(),
            title: description.chars().take(80).collect(),
            agent: name.to_owned(),
            cwd: Some(parent.cwd.clone()),
            ended: None,
        };
        tracing::info!(parent = %parent.session, child = %id, agent = name, depth, "starting a sub-agent");
        let stored = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(refuse("Cancelled before the sub-agent started.".into())),
            stored = parent.store.commit(Write::InsertSession(Box::new(row))) => stored,
        };
        stored.map_err(|err| refuse(format!("The sub-agent's session could not be stored: {err}")))?;

        let system = tokio::select! {
            () = ctx.cancel.cancelled() => return Err(refuse("Cancelled before the sub-agent started.".into())),
            system = setup::system(config, Path::new(&parent.cwd), tools.specs(), Some(role(depth, agent)), None) => system,
        };
        let host: Arc<dyn crate::tools::Host> =
            Arc::new(NamedHost { inner: Arc::clone(&ctx.host), who, card: ctx.call_id.clone() });
        let (updates, shown) = mpsc::unbounded_channel();
        let wire = Some((Arc::clone(&parent.shown), parent.session.clone()));
        let sink = Arc::new(ChildSink { updates, host: Arc::clone(&host), child: id.clone(), shown: wire });
        let status = Arc::new(watch::Sender::new(Status::Busy));
        let recorder = StoreRecorder::new(id.clone(), parent.cwd.clone(), parent.store.clone(), sink, status);
        let mut limits = config.limits.clone();
        limits.max_rounds = config.subagents.max_rounds;
        // `drive` enforces the sub-agent's own time limit, so it can say which one it was.
        limits.timeout = None;
        let setup = Setup {
            config: Arc::clone(config),
            model,
            summaries: None,
            system: Arc::new(system),
            tools: Arc::new(tools),
            workspace: ctx.workspace.clone(),
            host,
            mode: caller.mode.clone(),
            switch: None,
            process: Arc::clone(&ctx.process),
            // Its own jobs, killed when it ends: none outlives the call that started it.
            jobs: crate::tools::Jobs::start(config.jobs),
            // Its parent's servers: the same files, the same roots.
            lsp: ctx.lsp.clone(),
            // Its parent's rules file: a rule it adds reaches the parent's jobs and servers too.
            rulebook: ctx.rulebook.clone(),
            limits,
            thought: None,
            spent: 0.0,
            context_used: 0,
            confined: caller.confined,
        };
        Ok(Child { id, info, setup, recorder, rules: caller.rules.clone(), shown })
    }

    /// The model of the named agent, else `[subagents] model`, else the session's.
    fn model(&self, agent: Option<&NamedAgent>) -> Result<Arc<Model>, ToolError> {
        let parent = &self.parent;
        let reference = agent
            .and_then(|agent| agent.model.clone())
            .or_else(|| parent.config.subagents.model.clone())
            .unwrap_or_else(|| parent.model.clone());
        Model::resolve(&parent.config, &reference).map_err(|err| match agent {
            Some(agent) => refuse(format!(
                "The agent `{}` ({}) asks for the model {reference}, which cannot be used: {err}",
                agent.name,
                agent.path.display()
            )),
            None => refuse(format!("The sub-agent's model {reference} cannot be used: {err}")),
        })
    }

    /// The parent's tools, cut to what a named agent lists, with `task` where it may nest.
    fn tools(&self, agent: Option<&NamedAgent>, depth: u32, child: &SessionId) -> Registry {
        let parent = &self.parent;
        let Some((agent, allowed)) = agent.and_then(|agent| agent.tools.as_ref().map(|tools| (agent, tools))) else {
            return with_task(&self.base, &self.base, parent, depth, child.clone());
        };
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
        if listed(task::NAME) {
            with_task(&cut, &cut, parent, depth, child.clone())
        } else {
            cut.withhold(task::NAME, &why)
        }
    }
}

/// Runs the sub-agent's turn inside the call: its progress shown on the call's card at most
/// every [`progress::EVERY`], stopped at `[subagents] timeout_secs`.
async fn drive(child: Child, parent: &Parent, task: &TaskArgs, ctx: &ToolContext) -> Ended {
    let Child { id, setup, mut recorder, mut rules, mut shown, .. } = child;
    let mut history: Vec<Message> = Vec::new();
    let cancel = ctx.cancel.child_token();
    // `session/cancel` on the sub-agent's own id reaches this token alone.
    let _running = parent.running.enter(id.clone(), cancel.clone());
    let run = agent::Run::child(ctx.user_wait.clone(), Arc::clone(&ctx.images.read))
        .hooked(parent.hooks.clone())
        .traced(ctx.trace.clone())
        .cached_as(id.as_str());
    let turn = setup.turn(&mut history, &mut recorder, &mut rules, cancel.clone(), run);
    // The child's turn takes its session's lease with its prompt. It is given back when the
    // child is over, and also if this call is dropped before (the parent's cancel grace or the
    // call's hard stop ran out) or panics.
    let lease = parent.store.release_on_drop(id.clone());
    let deadline = tokio::time::Instant::now() + parent.config.subagents.timeout;
    let (result, timed_out, mut progress) = watch_turn(turn, task, &mut shown, &cancel, deadline, ctx, &id).await;
    setup.jobs.close().await;
    drop(lease);
    // Its turn ended with a flush: every update it committed is in the channel by now, the
    // notice of a limit that stopped it included.
    while let Ok(update) = shown.try_recv() {
        progress.fold(update);
    }
    // Its rows are committed: its cost includes its own sub-agents'.
    let cost = match parent.store.session(&id).await {
        Ok(Some(row)) => row.cost_usd,
        _ => crate::history::cost(&history),
    };
    tracing::info!(child = %id, ?result, timed_out, cost, "the sub-agent ended");
    Ended { result, timed_out, history, progress, cost }
}

/// Runs `turn`, folding its updates into the card and cancelling it at `deadline`.
async fn watch_turn(
    turn: agent::Turn<'_>,
    task: &TaskArgs,
    shown: &mut mpsc::UnboundedReceiver<Update>,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
    ctx: &ToolContext,
    child: &SessionId,
) -> (Result<StopReason, agent::TurnError>, bool, Progress) {
    let mut timed_out = false;
    let mut progress = Progress::of(child);
    if let Some(to) = &ctx.progress {
        // The card links the sub-agent's session from the start.
        let _ = to.send(progress.content());
    }
    let mut dirty = false;
    let mut last_shown = tokio::time::Instant::now() - progress::EVERY;
    let running = agent::run_turn(turn, vec![Part::Text { text: task.prompt.clone() }]);
    tokio::pin!(running);
    let result = loop {
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
    };
    (result, timed_out, progress)
}

/// The call's result: the sub-agent's answer, or why it has none (failed, with its last words).
fn report(ended: Ended, settings: &crate::config::Subagents, child: &SessionId) -> ToolOutcome {
    let Ended { result, timed_out, history, progress, cost } = ended;
    let link = ToolContent::Session { session_id: child.as_str().to_owned() };
    let answer = last_text(&history);
    let rounds = history.iter().filter(|message| {
        message.role == Role::Assistant && !message.parts.iter().any(|part| matches!(part, Part::Notice { .. }))
    });
    let failed = |why: String| {
        let output = match answer.as_deref() {
            Some(text) => format!("{why}\n\nIts last words:\n{text}"),
            None => why,
        };
        ToolOutcome {
            content: vec![link.clone(), ToolContent::Text { text: output.clone() }],
            output,
            failed: true,
            cost,
            ..ToolOutcome::default()
        }
    };
    match result {
        _ if timed_out => failed(format!(
            "The sub-agent did not finish within {} s ([subagents] timeout_secs) and was stopped.",
            settings.timeout.as_secs()
        )),
        Ok(StopReason::EndTurn) => {
            let output = answer.clone().unwrap_or_else(|| "The sub-agent ended without an answer.".to_owned());
            ToolOutcome {
                content: vec![link, ToolContent::Text { text: output.clone() }],
                output,
                cost,
                ..ToolOutcome::default()
            }
        }
        Ok(StopReason::MaxTurnRequests) if rounds.count() >= settings.max_rounds as usize => failed(format!(
            "The sub-agent stopped at its limit of {} model requests ([subagents] max_rounds) before it finished.",
            settings.max_rounds
        )),
        Ok(StopReason::MaxTurnRequests) => failed(format!(
            "The sub-agent stopped at a limit before it finished: {}",
            progress.notice().unwrap_or("no reason was given")
        )),
        Ok(StopReason::MaxTokens) => failed("The sub-agent's answer was cut off at the model's output limit.".into()),
        Ok(StopReason::Refusal) => failed("The sub-agent's model refused the task.".into()),
        Ok(StopReason::Cancelled) => failed("The sub-agent was cancelled.".into()),
        Err(err) => failed(format!("The sub-agent failed: {err}")),
    }
}

//! The actor's model turns: starting one on its own task with the history and rules lent to it
//! (its tool registry is built there: the built-ins, the MCP tools ready in time, `task`), and
//! taking them back when it ends (updating status, cost and context). The turn's recorder takes
//! the session's lease with the prompt; when a turn, `/compact` or `/rewind` ends, the lease is
//! given back and the prompt answered once that release is committed. Settings a headless run
//! changes for its prompt (`--model`, `--mode`: `Command::SetForTurn`) are in effect at once and
//! stored with the prompt, held by the turn's recorder like its notices, so a run the lease
//! refuses changes nothing stored.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{Actor, Reply, Running, TurnOutcome, Work};
use crate::agent::compact::{self, CompactError};
use crate::agent::{self, AgentEvent, RecordError, Recorder, StopReason, TurnError};
use crate::history::view::context_used;
use crate::history::{Message, Part};
use crate::ids::MessageId;
use crate::llm::catalog::ThoughtLevel;
use crate::session::recorder::StoreRecorder;
use crate::session::setup::{self, Models, Setup};
use crate::session::subagent;
use crate::session::{SessionError, Status, TurnEnd, title};
use crate::store::{StoreError, Write};
use crate::trace::TraceContext;

impl Actor {
    /// Waits for a running turn to end and answers its prompt.
    pub(super) async fn finish_turn(&mut self) {
        if let Some(handle) = self.turn.take() {
            let outcome = handle.await;
            self.turn_ended(outcome).await;
        }
    }

    pub(super) async fn turn_ended(&mut self, outcome: Result<TurnOutcome, tokio::task::JoinError>) {
        // Whether the turn's prompt was stored; unknown if its task panicked.
        let mut stored = None;
        let result = match outcome {
            Ok(TurnOutcome { history, rules, checkpoints, result, claimed }) => {
                stored = Some(claimed);
                if let Some(mut tracker) = checkpoints {
                    if tracker.take_stored() {
                        let settings = tracker.settings();
                        let trim = Write::TrimCheckpoints {
                            session_id: self.row.id.clone(),
                            session_bytes: settings.session_bytes,
                            total_bytes: settings.total_bytes,
                        };
                        self.services.store.submit(trim, None);
                    }
                    self.checkpoints = Some(tracker);
                }
                let before = self.running.as_ref().map_or(history.len(), |running| running.history_len);
                let own = history.iter().skip(before).filter_map(|m| m.meta.cost).sum::<f64>();
                // The store adds sub-agents' costs to this row too, and another process may
                // have titled the session: the row is the truth.
                match self.services.store.session(&self.row.id).await {
                    Ok(Some(row)) => {
                        self.row.cost_usd = row.cost_usd;
                        self.row.title = row.title;
                    }
                    _ => self.row.cost_usd += own,
                }
                self.context_used = context_used(&history);
                self.history = Some(history);
                self.rules = with_attached(rules, &self.rules);
                self.publish_rules();
                result.map_err(SessionError::from)
            }
            Err(err) => {
                // The turn task panicked; what it committed is the truth, so reread it.
                tracing::error!(session = %self.row.id, %err, "turn task failed");
                self.history = Some(self.services.store.messages(&self.row.id).await.unwrap_or_default());
                // Its rules as it last had them (each added one is stored), as `/permissions` listed them.
                let last = self.running.as_ref().and_then(|running| running.rules.as_ref());
                if let Some(turned) = last.map(|live| live.borrow().clone()) {
                    self.rules = with_attached(turned, &self.rules);
                    self.publish_rules();
                }
                Err(SessionError::Turn(TurnError::Internal(format!("the turn stopped unexpectedly: {err}"))))
            }
        };
        // In a store shared by replicas, a prompt the lease refused goes to the replica running
        // the session's turn, and the client's request waits for its answer from there; the
        // turn's end below answers a reply nobody awaits.
        if let Err(refused @ SessionError::Store(StoreError::Leased(_))) = &result
            && let Some(running) = self.running.as_mut()
            && let Some(parts) = running.handing.take()
        {
            let (unawaited, _) = tokio::sync::oneshot::channel();
            let reply = std::mem::replace(&mut running.reply, unawaited);
            // A prompt cancelled or withdrawn before its refusal is not handed on.
            if running.cancel.is_cancelled() {
                let _ = reply.send(Ok(StopReason::Cancelled.into()));
            } else {
                let ticket = running.ticket;
                self.hand_off(ticket, parts, reply, refused.clone()).await;
            }
        }
        self.services.status.send_replace(match &result {
            // A prompt another process's turn refused did not run: nothing failed here.
            Ok(_) | Err(SessionError::Store(StoreError::Leased(_))) => Status::Idle,
            Err(err) => Status::Error(err.to_string()),
        });
        // A turn that failed (a bad key, a server down) would fail the title request too: the
        // title waits for a turn that works. A prompt whose claim was refused was not stored
        // (even if its client cancelled it first and is answered `cancelled`): nothing asks a
        // model to title the session after it.
        let worked = result.is_ok() && stored == Some(true);
        if stored == Some(false) && self.running.as_ref().is_some_and(|running| running.titling) {
            self.title_pending = None;
        }
        // The lease goes back however the turn ended, and the prompt is answered once that is
        // committed: a client told the turn is over may prompt from another process at once. A
        // release that failed is the writer's to try again; the turn's answer stands.
        let release = Write::ReleaseLease { session_id: self.row.id.clone() };
        let session = self.row.id.clone();
        let (reply, steered, trace) = match self.running.take() {
            Some(running) => (Some(running.reply), running.steered, running.trace),
            None => (None, Vec::new(), None),
        };
        // Prompts steered into the turn are answered with it; those it did not take run next,
        // unless the session is closing, or another replica took the lease over while this one
        // stalled and closed the turn: it answered the prompts handed here as cancelled, so
        // nothing queued behind the turn runs here (a prompt its client was told was cancelled
        // would run after all).
        let (joined, left) = super::steer::settle(steered);
        let fenced = match &result {
            Err(err @ SessionError::Turn(TurnError::Record(RecordError::Fenced(_)))) => Some(err.clone()),
            Ok(_) | Err(_) => None,
        };
        if self.closing {
            for queued in left {
                let _ = queued.reply.send(Ok(StopReason::Cancelled.into()));
            }
        } else if let Some(err) = &fenced {
            for queued in left.into_iter().chain(self.queue.drain(..)) {
                let _ = queued.reply.send(Err(err.clone()));
            }
        } else if !left.is_empty() {
            self.tell(
                "The turn ended before a steered prompt could join it; that prompt is queued and runs next.".into(),
            );
            for queued in left.into_iter().rev() {
                self.queue.push_front(queued);
            }
        }
        self.services.store.submit(
            release,
            Some(Box::new(move |released| {
                if let Err(err) = released {
                    tracing::warn!(%session, %err, "the session's lease was not given back yet; it is tried again");
                }
                for reply in joined {
                    let _ = reply.send(result.clone());
                }
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
            })),
        );
        if worked && let Some(prompt) = self.title_pending.take() {
            title::spawn(&self.services, &self.row, prompt, trace);
        }
        self.start_next();
    }

    /// Starts the queued work in order until something is running or the queue is empty.
    pub(super) fn start_next(&mut self) {
        while self.running.is_none() && self.history.is_some() && !self.closing {
            let Some(queued) = self.queue.pop_front() else {
                // Nothing queued, nothing running: no prompt handed here is still to run.
                self.forget_handed();
                return;
            };
            match queued.work {
                Work::Prompt(parts) => self.spawn_turn(queued.ticket, queued.trace, parts, None, queued.reply),
                Work::Command(parts, only) => {
                    self.spawn_turn(queued.ticket, queued.trace, parts, Some(only), queued.reply);
                }
                Work::Slash(slash) => self.run_queued(queued.ticket, queued.trace, slash, queued.reply),
            }
            // Work that took no lease with them (a revocation, a fork, a model that could not
            // be used) leaves the unsaved settings to be stored now.
            self.save_unsaved();
        }
    }

    /// Takes the history and the session's models for work that runs on its own task. On
    /// failure `reply` is answered and the history stays.
    fn lend(&mut self, reply: Reply<TurnEnd>) -> Option<(Vec<Message>, Models, Reply<TurnEnd>)> {
        let Some(history) = self.history.take() else {
            let _ = reply.send(Err(SessionError::Turn(TurnError::Internal("the history is lent out".into()))));
            return None;
        };
        match self.models() {
            Ok(models) => Some((history, models, reply)),
            Err(err) => {
                self.history = Some(history);
                let _ = reply.send(Err(err));
                None
            }
        }
    }

    /// The session's models, resolved at their first use and again only after a model change
    /// (or a login or logout that changed their provider's key).
    pub(super) fn models(&mut self) -> Result<Models, SessionError> {
        if let Some(models) = self.models.as_ref().filter(|models| models.is_current(&self.services.config)) {
            return Ok(models.clone());
        }
        let models = Models::resolve(&self.services.config, &self.row.model)?;
        self.models = Some(models.clone());
        Ok(models)
    }

    /// A recorder for a turn (or `/compact`, `/rewind`): it holds what it records, and the unsaved
    /// settings, until its claim takes the lease, and drops them if the claim is refused.
    /// The prompt of `ticket`, if another replica handed it, is run only while still this
    /// replica's (`StoreRecorder::for_command`).
    pub(super) fn turn_recorder(&mut self, ticket: u64, title: Option<String>) -> StoreRecorder {
        let command = self.run_handed(ticket);
        self.recorder().for_turn(title).for_command(command).with_held(std::mem::take(&mut self.unsaved))
    }

    /// Whether the session is a principal's of `cairn serve --auth`, whose file tools and `@file`
    /// mentions reach only its workspace (`permissions::beyond_confinement`).
    pub(super) fn confined(&self) -> bool {
        self.row.owner.is_some()
    }

    /// The session's hooks, read again: the set so far while no file changed.
    pub(super) fn hooks_now(&mut self, workspace: &crate::tools::Workspace) -> Arc<crate::hooks::Hooks> {
        let (cwd, roots, id) = (self.root.as_path(), workspace.roots().to_vec(), self.row.id.to_string());
        let hooks = crate::hooks::Hooks::load(&self.services.config, cwd, roots, &id, self.hooks.as_ref());
        self.hooks = Some(Arc::clone(&hooks));
        hooks
    }

    /// What `/hooks` says: the hooks as the next turn would read them.
    pub(super) fn hooks_text(&mut self) -> String {
        let workspace = setup::workspace(&self.services.config, &self.root, &self.directories);
        self.hooks_now(&workspace).describe()
    }

    /// A recorder for this session's next piece of work.
    pub(super) fn recorder(&self) -> StoreRecorder {
        StoreRecorder::new(
            self.row.id.clone(),
            self.row.cwd.clone(),
            self.services.store.clone(),
            Arc::clone(&self.services.sink),
            Arc::clone(&self.services.status),
        )
    }

    /// Starts a model turn for `parts` on its own task, lending it the history and rules. Its
    /// model requests, and its log lines, carry `trace`.
    fn spawn_turn(
        &mut self,
        ticket: u64,
        trace: Option<TraceContext>,
        parts: Vec<Part>,
        only: Option<Box<super::custom::Only>>,
        reply: Reply<TurnEnd>,
    ) {
        let Some((mut history, models, reply)) = self.lend(reply) else { return };
        tracing::trace!(target: "cairn::timing", session = %self.row.id, "turn spawned");
        let config = Arc::clone(&self.services.config);
        // A first prompt titles the session; the title is written with the prompt.
        let title = self.row.title.is_none().then(|| title::first_line(&parts)).flatten();
        if let Some(title) = &title {
            self.row.title = Some(title.clone());
            self.title_pending = Some(title::prompt_text(&parts));
        }
        let cancel = CancellationToken::new();
        // Kept to hand to the replica running a turn in the session, if there is one.
        let handing = (self.remote.is_some() && only.is_none()).then(|| parts.clone());
        let titling = title.is_some();
        // A cancel before the claim was sent withdraws the prompt: nothing of it is stored.
        let mut recorder = self.turn_recorder(ticket, title).withdrawn_by(cancel.clone());
        self.services.status.send_replace(Status::Busy);
        let system = self.system.clone();
        let warn = !std::mem::replace(&mut self.system_warned, true);
        let workspace = setup::workspace(&config, &self.root, &self.directories);
        let hooks = self.hooks_now(&workspace);
        let host = self.services.sink.host(&self.row.id);
        let (mode, switch) = (self.mode.subscribe(), Some(self.mode.clone()));
        let mut rules = std::mem::take(&mut self.rules);
        self.rules.clone_from(&rules);
        // What `/permissions` lists while the turn runs: its rules as they grow.
        let (shown_rules, listed) = tokio::sync::watch::channel(rules.clone());
        recorder = recorder.showing_rules(shown_rules);
        // Only a level the user chose is sent; otherwise the provider's default applies.
        let thought = self.row.thought_level.as_deref().and_then(ThoughtLevel::parse);
        let (spent, context_used, history_len) = (self.row.cost_usd, self.context_used, history.len());
        let token = cancel.clone();
        let servers = self.servers_for_turn();
        let (store, session, project) = (self.services.store.clone(), self.row.id.clone(), self.row.cwd.clone());
        let watch = (Arc::clone(&self.services.sink), Arc::clone(&self.services.children));
        let jobs = self.jobs.clone();
        self.revoked.retain(super::slash::Revoked::pending);
        let revoked: Vec<crate::permissions::Rule> = self.revoked.iter().map(|revoked| revoked.rule.clone()).collect();
        let rulebook = self.rulebook.clone();
        let lsp = self.lsp.clone();
        // Every model turn can be steered: the session's choice is made as each prompt arrives.
        let (steer, steering) = tokio::sync::mpsc::unbounded_channel();
        let (span, traced) = (crate::trace::span(trace.as_ref()), trace.clone());
        let cache_key = self.row.id.to_string();
        let confined = self.confined();
        let mut checkpoints = self.take_checkpoints();
        let (store_for_checkpoints, session_id) = (store.clone(), session.clone());
        // The turn's first write, its claim of the session, is sent now and commits while the
        // turn is set up: nothing the turn records is shown before it (the recorder holds it).
        // Another replica's turn that just ended is shown whole first: the claim is sent once
        // this replica's clients were shown the session's log as it is now.
        // Sub-agents ask the session's model, not the one a command holds its turn to.
        let for_subagents = models.main.reference.clone();
        let main = only.as_ref().and_then(|only| only.model()).unwrap_or(models.main);
        let prompt = agent::user_message(parts, &main.reference);
        recorder.claim_early(prompt.clone(), self.caught_up());
        let turn = async move {
            if let Some(tracker) = checkpoints.as_mut() {
                crate::session::restore::load(&store_for_checkpoints, &session_id, tracker).await;
            }
            let system = system.await;
            // Read beside the parent's set-up: the turn's first text waits for both.
            let fresh = fresh_project_rules(&store, &project, &mut rules, &revoked, rulebook.as_deref());
            let parent = subagent::Parent::new(
                store.clone(),
                Arc::clone(&config),
                session,
                project.clone(),
                for_subagents,
                watch,
            );
            let ((), mut parent) = tokio::join!(fresh, parent);
            recorder.rules_now(&rules);
            parent.hooks = Some(Arc::clone(&hooks));
            // A command from a file holds its turn, and the sub-agents it starts, to its tools,
            // and its turn to its model.
            let cut =
                |tools: &crate::tools::Registry| only.as_ref().map_or_else(|| tools.clone(), |only| only.cut(tools));
            let tools = setup::session_tools(servers.as_ref(), &config, parent, &token, &mut recorder, &cut).await;
            for warning in system.warnings.iter().filter(|_| warn) {
                let text = format!("Project instructions: {warning}.");
                recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
            }
            let setup = Setup {
                limits: config.limits.clone(),
                process: Arc::clone(&config.process),
                jobs,
                lsp,
                rulebook,
                config,
                model: main,
                summaries: Some(models.summaries),
                system,
                tools,
                workspace,
                host,
                mode,
                switch,
                thought,
                spent,
                context_used,
                confined,
            };
            let run = agent::Run::steered(agent::Steering::new(steering))
                .traced(traced)
                .cached_as(&cache_key)
                .hooked(Some(hooks));
            let mut turn = setup.turn(&mut history, &mut recorder, &mut rules, token, run);
            turn.tools.checkpoints = checkpoints.as_mut();
            tracing::trace!(target: "cairn::timing", session = %cache_key, "turn set up");
            let result = agent::run_prompt(turn, prompt).await;
            // What the turn's own requests used, counted as they were recorded.
            let result = result.map(|stop| TurnEnd { stop, usage: recorder.used() });
            TurnOutcome { history, rules, checkpoints, result, claimed: recorder.claimed() }
        };
        self.turn = Some(tokio::spawn(turn.instrument(span)));
        let steer = Some(steer);
        self.running = Some(Running {
            ticket,
            trace,
            history_len,
            cancel,
            reply,
            handing,
            titling,
            steer,
            steered: Vec::new(),
            rules: Some(listed),
        });
    }

    /// `/compact`: a compaction with no kept tail, run like a turn (it holds the history, and
    /// a cancel stops it); its summary requests carry `trace`.
    pub(super) fn spawn_compaction(
        &mut self,
        ticket: u64,
        trace: Option<TraceContext>,
        instructions: Option<String>,
        reply: Reply<TurnEnd>,
    ) {
        let Some((mut history, models, reply)) = self.lend(reply) else { return };
        let config = Arc::clone(&self.services.config);
        let mut recorder = self.turn_recorder(ticket, None);
        self.services.status.send_replace(Status::Busy);
        let cancel = CancellationToken::new();
        let token = cancel.clone();
        let (context_used, spent, rules) = (self.context_used, self.row.cost_usd, self.rules.clone());
        let history_len = history.len();
        let (span, traced) = (crate::trace::span(trace.as_ref()), trace.clone());
        let workspace = setup::workspace(&config, &self.root, &self.directories);
        let (hooks, host, mode) =
            (self.hooks_now(&workspace), self.services.sink.host(&self.row.id), *self.mode.borrow());
        let compaction = async move {
            // Like a turn, a compaction holds the session's lease, and works on the history as
            // stored.
            let context_used = match recorder.claim(&mut history, None).await {
                Ok(false) => context_used,
                Ok(true) => crate::history::view::context_used(&history),
                Err(err) => {
                    return TurnOutcome { history, rules, checkpoints: None, result: Err(err.into()), claimed: false };
                }
            };
            if !pre_compact(&hooks, host.as_ref(), mode, instructions.as_deref(), &token, &mut recorder).await {
                let flushed = recorder.flush().await.map_err(TurnError::from);
                let result = flushed.map(|()| TurnEnd { stop: StopReason::EndTurn, usage: recorder.used() });
                return TurnOutcome { history, rules, checkpoints: None, result, claimed: true };
            }
            let summarizer = setup::summarizer(&config, &models.summaries);
            let info = &models.main.info;
            let job = compact::Job {
                history: &mut history,
                recorder: &mut recorder,
                cancel: &token,
                window: info.context_window,
                max_output: info.max_output,
                context_used,
                auto: false,
                instructions,
                spent,
                trace: traced.as_ref(),
            };
            let result = match compact::run(&summarizer, job).await {
                Ok(_)
                | Err(
                    CompactError::NothingToDo | CompactError::Model(_) | CompactError::Empty | CompactError::Timeout(_),
                ) => Ok(StopReason::EndTurn),
                Err(CompactError::Cancelled) => Ok(StopReason::Cancelled),
            };
            let flushed = recorder.flush().await;
            let result = match (result, flushed) {
                (Ok(_), Err(err)) => Err(err.into()),
                (result, _) => result.map(|stop| TurnEnd { stop, usage: recorder.used() }),
            };
            TurnOutcome { history, rules, checkpoints: None, result, claimed: true }
        };
        self.turn = Some(tokio::spawn(compaction.instrument(span)));
        self.running = Some(Running::unsteered(ticket, trace, history_len, cancel, reply));
    }
}

/// `PreCompact` before `/compact`; `false` when a hook blocked it (the notice says so).
async fn pre_compact(
    hooks: &crate::hooks::Hooks,
    host: &dyn crate::tools::Host,
    mode: crate::permissions::Mode,
    instructions: Option<&str>,
    cancel: &CancellationToken,
    recorder: &mut StoreRecorder,
) -> bool {
    use crate::hooks::{Event, HookEvent};
    if !hooks.any(HookEvent::PreCompact) {
        return true;
    }
    let fields = [("trigger", "manual"), ("custom_instructions", instructions.unwrap_or_default())];
    let fields = fields.into_iter().map(|(key, value)| (key.to_owned(), value.into())).collect();
    let event = Event { kind: HookEvent::PreCompact, names: vec!["manual"], fields };
    let fired = hooks.fire(event, crate::hooks::permission_mode(mode), host.permissions(), cancel).await;
    let mut said = fired.problems.clone();
    let blocked = fired.block_reason();
    if let Some(reason) = &blocked {
        said.push(format!("A PreCompact hook blocked the compaction: {reason}"));
    }
    if !said.is_empty() {
        recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: said.join("\n") });
    }
    blocked.is_none()
}

/// Adds to `rules` the project's rules stored now: another session of the project (in this
/// cairn, another, or on another replica) may have kept a rule for every session in it since
/// this one read them. The session's running jobs and servers get them too (as the project's,
/// which only a revoke of the project's rule takes back). Only added, and none this session
/// revoked whose removal may not be written yet (`revoked`): the store's reads do not wait for
/// its writes. A store that cannot be read leaves the rules as they were.
async fn fresh_project_rules(
    store: &crate::store::Store,
    project: &str,
    rules: &mut Vec<crate::permissions::Rule>,
    revoked: &[crate::permissions::Rule],
    book: Option<&crate::process::Rulebook>,
) {
    match store.project_rules(project).await {
        Ok(fresh) => {
            let new: Vec<_> =
                fresh.into_iter().filter(|rule| !rules.contains(rule) && !revoked.contains(rule)).collect();
            if new.is_empty() {
                return;
            }
            if let Some(book) = book {
                book.add_project(&crate::permissions::rejected_programs(&new));
            }
            rules.extend(new);
        }
        Err(err) => {
            tracing::warn!(%err, "project permission rules could not be read again: the turn keeps those read before")
        }
    }
}

/// The session's rules once a turn lent `turned` (its rules, as it ended or as they are now)
/// and the actor's copy is `kept`: the turn's, then the rules given for this run that an attach
/// brought while the turn ran.
pub(super) fn with_attached(
    turned: Vec<crate::permissions::Rule>,
    kept: &[crate::permissions::Rule],
) -> Vec<crate::permissions::Rule> {
    let attached: Vec<_> = kept
        .iter()
        .filter(|rule| rule.source == crate::permissions::Scope::Run && !turned.contains(rule))
        .cloned()
        .collect();
    let mut rules = turned;
    rules.extend(attached);
    rules
}

impl Running {
    /// Work that is no model turn (`/compact`, `/rewind`): nothing steers into it, nothing is
    /// handed on, and the session's rules are the actor's.
    pub(super) fn unsteered(
        ticket: u64,
        trace: Option<TraceContext>,
        history_len: usize,
        cancel: CancellationToken,
        reply: Reply<TurnEnd>,
    ) -> Self {
        Self {
            ticket,
            trace,
            history_len,
            cancel,
            reply,
            handing: None,
            titling: false,
            steer: None,
            steered: Vec::new(),
            rules: None,
        }
    }
}

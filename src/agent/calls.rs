//! The Executing and Confirming states: running the model's tool calls under the permissions.
//!
//! Calls run in the order the model made them. A run of leading read-only calls that need no
//! question runs concurrently; writes and shell commands run one at a time; a run of `task`
//! calls goes to Dispatching (`dispatch`). [`run`] is the one runner of such a batch for both,
//! each call with its own progress channel, whose content its card shows while it runs. A call
//! that must ask moves the turn to Confirming, which asks the editor and comes back with the
//! answer (with nobody to ask, the call is refused, saying which mode would allow it); leaving
//! plan mode is the plan review instead (`review`). Every state
//! change of a call goes through [`CallState::advance`] and is recorded, so the editor sees
//! pending → in progress → completed/failed. Results reach the model in call order because they
//! live in the calls' parts. A call's failure is its result, which the model reads
//! (`ToolError::Tell`), unless it is fatal (`ToolError::Fatal`): then the step ends with the
//! turn, with that error, once the batch's results are recorded, and the calls after it are
//! not run.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::Turn;
use super::choices::{self, Choice};
pub(super) use super::context::context;
use super::events::{AgentEvent, Phase};
use super::state::{After, CallQueue, DoneReason, Question, QueuedCall, TurnError, TurnState};
use crate::history::{CallState, Part, ToolContent, ToolPart};
use crate::ids::MessageId;
use crate::permissions::{
    self, Action, Decision, HookAnswer, Mode, Permission, PermissionRequest, Rule, Scope, Subject,
};
use crate::telemetry::spans::{Decision as Decided, Outcome};
use crate::tools::host::{HostError, PermissionAnswer};
use crate::tools::{Access, Caller, Fatal, Invocation, ToolContext, ToolError, ToolOutcome};

/// After a cancel, how long running tools get to stop on their own (and clean up) before they
/// are dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// A tool's own time limit plus this margin is the hard stop for it.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

const DENIED_BY_USER: &str = "The user denied this tool call. Do not retry it without asking the user first.";

/// Runs the next calls of the queue, or asks about the first one.
pub async fn executing(turn: &mut Turn<'_>, mut queue: CallQueue) -> TurnState {
    // Every call has run: so has the step.
    let Some(head) = queue.calls.front() else { return TurnState::StepEnd(After::NextStep) };
    let index = head.index;
    if let Some((tool, left)) = head.invocation.as_ref().ok().and_then(|call| cooling(turn, call.name())) {
        queue.calls.pop_front();
        let why = format!(
            "{tool} is paused for {left} more requests because it was called repeatedly with similar arguments; try a different approach"
        );
        fail(turn, &queue.message, index, why);
        return TurnState::Executing(queue);
    }
    let invocation = match &head.invocation {
        Ok(invocation) => invocation.clone(),
        Err(ToolError::Tell(why)) => {
            let why = why.clone();
            queue.calls.pop_front();
            fail(turn, &queue.message, index, why);
            return TurnState::Executing(queue);
        }
        Err(ToolError::Fatal(fatal)) => {
            let fatal = fatal.clone();
            queue.calls.pop_front();
            fail(turn, &queue.message, index, fatal.to_string());
            return halted(turn, &queue, Halt::Fatal(fatal));
        }
    };
    if let Some(stop) = super::hooked::first(turn, &mut queue).await {
        return halted(turn, &queue, Halt::Hook(stop));
    }
    let Some(head) = queue.calls.front() else { return TurnState::StepEnd(After::NextStep) };
    let (verdict, request) = judged(turn, head);
    let review = request.as_ref().is_some_and(|request| request.subject == Subject::Plan);
    match verdict {
        // Leaving plan mode asks the user about the plan, even where nobody can answer.
        Decision::Ask(_) if review => super::review::reviewing(turn, queue).await,
        Decision::Deny(why) => {
            queue.calls.pop_front();
            turn.run.otel.decided(index, Decided::Deny);
            fail(turn, &queue.message, index, format!("Permission denied: {why}."));
            TurnState::Executing(queue)
        }
        Decision::Ask(why) if turn.tools.host.permissions().is_none() => {
            queue.calls.pop_front();
            turn.run.otel.decided(index, Decided::Deny);
            let why = format!(
                "this call needs the user's permission ({why}) and there is nobody to ask; \
                 run with --mode accept-edits or --mode bypass to allow it"
            );
            fail(turn, &queue.message, index, format!("Permission denied: {why}."));
            TurnState::Executing(queue)
        }
        Decision::Ask(why) => match request {
            Some(request) => TurnState::Confirming(queue, Box::new(Question { request, why })),
            None => TurnState::StepEnd(After::End(DoneReason::Error(TurnError::Internal(
                "a question about nothing".into(),
            )))),
        },
        Decision::Allow => {
            let access = invocation.access();
            queue.calls.pop_front();
            turn.run.otel.decided(index, Decided::Allow);
            // Each call runs on the target it was allowed on, and fails if that changed since.
            let mut batch = vec![(index, invocation.judged_on(request.as_ref()))];
            // Reads run beside the reads that follow them, sub-agents beside the sub-agents.
            if matches!(access, Access::ReadOnly | Access::Delegate) {
                while super::hooked::first(turn, &mut queue).await.is_none()
                    && let Some(next) = queue.calls.front()
                {
                    let Ok(next_invocation) = &next.invocation else { break };
                    if next_invocation.access() != access {
                        break;
                    }
                    let (verdict, request) = judged(turn, next);
                    if verdict != Decision::Allow {
                        break;
                    }
                    turn.run.otel.decided(next.index, Decided::Allow);
                    batch.push((next.index, next_invocation.judged_on(request.as_ref())));
                    queue.calls.pop_front();
                }
            }
            if access == Access::Delegate {
                return TurnState::Dispatching(queue, batch);
            }
            let at_once = batch.len();
            match run(turn, &queue.message, batch, at_once).await {
                Ok(()) => TurnState::Executing(queue),
                Err(halt) => halted(turn, &queue, halt),
            }
        }
    }
}

/// Asks the user about the first queued call, then goes back to executing. The question shows
/// the call's card with what it would do (the diff of an edit, the command line) and why cairn
/// asks; the "always" options offer exactly the rule that would be remembered, and only when a
/// rule may cover the call at all.
pub async fn confirming(turn: &mut Turn<'_>, mut queue: CallQueue, question: Question) -> TurnState {
    let Some(head) = queue.calls.front_mut() else { return TurnState::StepEnd(After::NextStep) };
    let Ok(invocation) = head.invocation.clone() else { return TurnState::Executing(queue) };
    let index = head.index;
    let Question { request, why } = question;
    let ctx = context(turn, turn.cancel.child_token(), None, call_id(turn, &queue.message, index).unwrap_or_default());
    let preview = match invocation.preview(&ctx).await {
        Ok(preview) => preview,
        // The call cannot succeed (an edit whose text is not there): nothing to ask about, when
        // the model may read the file anyway. Otherwise the failure would tell it what the file
        // holds without anyone asked: ask, with no diff.
        Err(ToolError::Tell(why)) if readable_unasked(turn, &invocation) => {
            queue.calls.pop_front();
            fail(turn, &queue.message, index, why);
            return TurnState::Executing(queue);
        }
        Err(ToolError::Tell(_)) => Vec::new(),
        Err(ToolError::Fatal(fatal)) => {
            queue.calls.pop_front();
            fail(turn, &queue.message, index, fatal.to_string());
            return halted(turn, &queue, Halt::Fatal(fatal));
        }
    };
    let Some(part) = change(turn, &queue.message, index, |tool| tool.state.advance(CallState::Suspended).is_ok())
    else {
        return TurnState::Executing(queue);
    };
    // The card reaches the editor before the question about it.
    if let Err(err) = turn.recorder.flush().await {
        return TurnState::StepEnd(After::End(DoneReason::Error(err.into())));
    }
    let rules: &[Rule] = turn.tools.rules;
    let allow = permissions::rule_for(&request, Action::Allow, Scope::Session, rules);
    let deny = permissions::rule_for(&request, Action::Deny, Scope::Session, rules);
    let remember = turn.tools.remember;
    let options = choices::options(allow.as_ref(), deny.as_ref(), remember);
    let mut shown = part;
    shown.content = preview;
    let mut said = format!("cairn asks because {why}.");
    if let Some(meaning) = choices::meaning(allow.as_ref(), deny.as_ref(), remember) {
        said = format!("{said}\n\n{meaning}");
    }
    shown.content.push(ToolContent::Text { text: said });
    super::hooked::asking(turn, invocation.name()).await;
    let host = std::sync::Arc::clone(&turn.tools.host);
    let waiting = turn.run.user_wait.hold();
    let asked = async {
        match host.permissions() {
            Some(user) => user.request_permission(&shown, &options).await,
            None => Err(HostError::unavailable()),
        }
    };
    let answer = tokio::select! {
        biased;
        () = turn.cancel.cancelled() => None,
        answer = asked => Some(answer),
    };
    drop(waiting);
    let chosen = match answer {
        None | Some(Ok(PermissionAnswer::Cancelled)) if turn.cancel.is_cancelled() => {
            cancel_all(turn, &queue);
            return TurnState::StepEnd(After::End(DoneReason::UserAbort));
        }
        None | Some(Ok(PermissionAnswer::Cancelled)) => Choice::RejectOnce,
        Some(Ok(PermissionAnswer::Selected(option))) => Choice::offered(&option, &options).unwrap_or_else(|| {
            let option: String = option.chars().take(80).collect();
            tracing::warn!(%option, "the editor chose an option cairn did not offer; treating it as a rejection");
            Choice::RejectOnce
        }),
        Some(Err(err)) => {
            tracing::warn!(%err, "the permission request failed; treating it as a rejection");
            Choice::RejectOnce
        }
    };
    let allowed = choices::allows(chosen);
    turn.run.otel.decided(index, if allowed { Decided::UserAllow } else { Decided::UserDeny });
    if let Some(rule) = choices::remembered(chosen, allow, deny) {
        turn.tools.rules.push(rule.clone());
        // Added, not replaced: a sub-agent shares its parent's file.
        if let Some(book) = &turn.tools.rulebook {
            book.add(&crate::permissions::rejected_programs(std::slice::from_ref(&rule)));
        }
        turn.recorder.record(AgentEvent::RuleAdded(rule));
    }
    change(turn, &queue.message, index, |tool| tool.state.advance(CallState::Resuming).is_ok());
    if allowed {
        if let Some(head) = queue.calls.front_mut() {
            head.approved = Some(request.target);
        }
    } else {
        queue.calls.pop_front();
        fail(turn, &queue.message, index, DENIED_BY_USER.to_owned());
    }
    TurnState::Executing(queue)
}

/// Whether the model may read what this call's path holds without a question.
fn readable_unasked(turn: &Turn<'_>, invocation: &Invocation) -> bool {
    let mode: Mode = *turn.tools.mode.borrow();
    invocation
        .read_request(&turn.tools.workspace)
        .is_some_and(|request| permissions::decide(&request, mode, turn.tools.rules) == Decision::Allow)
}

/// The tool's cooldown, if loop detection took it away for a while.
fn cooling(turn: &Turn<'_>, name: &str) -> Option<(String, u32)> {
    turn.run.cooldowns.iter().find(|(tool, _)| tool == name).cloned()
}

/// What the permissions say about a queued call now (the mode may have changed), with the
/// request it was made about (which a question then shows, and whose target the call then runs
/// on). An approval holds only while the call's target is the one the user saw.
fn judged(turn: &Turn<'_>, call: &QueuedCall) -> (Decision, Option<PermissionRequest>) {
    let Ok(invocation) = &call.invocation else { return (Decision::Allow, None) };
    let mode: Mode = *turn.tools.mode.borrow();
    let answer = call.hooked.as_ref().and_then(|hooked| hooked.answer.as_ref());
    match invocation.permission(&turn.tools.workspace) {
        Some(request) if call.approved.as_deref() == Some(request.target.as_str()) => (Decision::Allow, Some(request)),
        Some(request) => match answer {
            Some(answer) => (permissions::with_hook(unguarded(turn, &request, mode), answer, &request), Some(request)),
            None => (unguarded(turn, &request, mode), Some(request)),
        },
        // A call that needs no permission is asked about as another program's tool would be.
        None if call.approved.is_none() && answer.is_some_and(|answer| *answer != HookAnswer::Allow) => {
            let request = PermissionRequest::for_tool(invocation.name(), "cairn", true);
            (permissions::with_hook(Decision::Allow, answer.unwrap_or(&HookAnswer::Allow), &request), Some(request))
        }
        None => (Decision::Allow, None),
    }
}

/// The decision on a request. Accept-edits lets commands write the workspace because the kernel
/// keeps its guarded places read-only and its secrets hidden; where it cannot (no user or mount
/// namespace), only a line that just reads goes through unasked: any other is judged as in ask
/// mode, and asks even where a rule covers it.
fn unguarded(turn: &Turn<'_>, request: &PermissionRequest, mode: Mode) -> Decision {
    if turn.tools.confined
        && let Some(refused) = permissions::beyond_confinement(request)
    {
        return refused;
    }
    let guards_missing =
        mode == Mode::AcceptEdits && request.permission == Permission::Bash && turn.tools.process.guards_missing();
    if !guards_missing || request.reads_only() {
        return permissions::decide(request, mode, turn.tools.rules);
    }
    match permissions::decide(request, Mode::Ask, turn.tools.rules) {
        Decision::Allow => Decision::Ask(
            "local commands run without a namespace here, so one that may write can change git hooks or tool \
             configuration; it asks in accept-edits mode"
                .into(),
        ),
        decision => decision,
    }
}

/// The id of the call whose part is at `index` of `message`.
pub(super) fn call_id(turn: &Turn<'_>, message: &MessageId, index: u32) -> Option<String> {
    let owner = turn.history.iter().rev().find(|m| m.id == *message)?;
    match owner.parts.get(index as usize) {
        Some(Part::Tool(tool)) => Some(tool.call_id.clone()),
        _ => None,
    }
}

/// Changes one call's part with `edit` (which says whether it changed anything) and records it.
pub(super) fn change(
    turn: &mut Turn<'_>,
    message: &MessageId,
    index: u32,
    edit: impl FnOnce(&mut ToolPart) -> bool,
) -> Option<ToolPart> {
    let owner = turn.history.iter_mut().rev().find(|m| m.id == *message)?;
    let Some(Part::Tool(tool)) = owner.parts.get_mut(index as usize) else { return None };
    if !edit(tool) {
        tracing::warn!(call = %tool.call_id, state = ?tool.state, "ignored an illegal tool call transition");
        return None;
    }
    let part = tool.clone();
    turn.recorder.record(AgentEvent::PartUpdated { message: message.clone(), index, part: Part::Tool(part.clone()) });
    Some(part)
}

fn fail(turn: &mut Turn<'_>, message: &MessageId, index: u32, why: String) {
    let failed = change(turn, message, index, |tool| {
        let moved = tool.state.advance(CallState::Failed).is_ok();
        tool.output = Some(why);
        moved
    });
    if let Some(tool) = failed {
        // The model spells a call's name: one no tool has may quote anything it read.
        let known = turn.tools.registry.names().any(|name| name == tool.name);
        let name = if known { tool.name.as_str() } else { "unknown" };
        turn.run.otel.call_end(index, name, &tool.call_id, Outcome::NotRun);
    }
}

/// Why a batch of calls ends the turn.
pub(super) enum Halt {
    /// The user cancelled the turn (or its time ran out) while the calls ran.
    Cancelled,
    /// A call failed in a way that ends the turn.
    Fatal(Fatal),
    /// A hook said the turn stops (`"continue": false`), saying why.
    Hook(String),
}

/// The step ends with the turn, for `halt`: the calls not run are shown as such.
pub(super) fn halted(turn: &mut Turn<'_>, queue: &CallQueue, halt: Halt) -> TurnState {
    match halt {
        Halt::Cancelled => {
            cancel_all(turn, queue);
            TurnState::StepEnd(After::End(DoneReason::UserAbort))
        }
        Halt::Fatal(fatal) => {
            tracing::warn!(%fatal, "a tool call ended the turn");
            abandon(turn, queue, NOT_RUN);
            TurnState::StepEnd(After::End(DoneReason::Error(fatal.into())))
        }
        Halt::Hook(why) => {
            abandon(turn, queue, &format!("Not run: a hook stopped the turn ({why})."));
            TurnState::StepEnd(After::End(DoneReason::ModelStop(super::state::ModelStop::EndTurn)))
        }
    }
}

const NOT_RUN: &str = "Not run: an earlier call of this answer failed in a way that ended the turn.";

/// Marks every call not yet finished as cancelled.
pub(super) fn cancel_all(turn: &mut Turn<'_>, queue: &CallQueue) {
    abandon(turn, queue, "Cancelled by the user.");
}

/// Marks every call not yet finished as cancelled, saying `why`.
pub(super) fn abandon(turn: &mut Turn<'_>, queue: &CallQueue, why: &str) {
    let indexes: Vec<u32> = match turn.history.iter().rev().find(|m| m.id == queue.message) {
        Some(message) => message
            .parts
            .iter()
            .enumerate()
            .filter(|(_, part)| matches!(part, Part::Tool(tool) if !tool.state.is_terminal()))
            .filter_map(|(i, _)| u32::try_from(i).ok())
            .collect(),
        None => return,
    };
    for index in indexes {
        change(turn, &queue.message, index, |tool| {
            let moved = tool.state.advance(CallState::Cancelled).is_ok();
            if moved {
                tool.output = Some(why.to_owned());
            }
            moved
        });
    }
}

/// Runs a batch of allowed calls side by side, at most `at_once` at a time, and records their
/// results in call order. Each call shows its own progress. `Err` if the turn was cancelled
/// meanwhile, or a call failed in a way that ends it (the first such, once every result of
/// the batch is recorded).
pub(super) async fn run(
    turn: &mut Turn<'_>,
    message: &MessageId,
    batch: Vec<(u32, Invocation)>,
    at_once: usize,
) -> Result<(), Halt> {
    for (index, _) in &batch {
        turn.phase(Phase::BeforeTool);
        change(turn, message, *index, |tool| tool.state.advance(CallState::Running).is_ok());
    }
    // A call of another kind may speak to the user (a question on its card): the card must be
    // shown first. A failed write is the turn's failure, reported when it ends.
    if batch.iter().any(|(_, invocation)| invocation.access() == Access::Other) {
        let _shown = turn.recorder.flush().await;
    }
    // Nothing changes that a checkpoint does not cover.
    let around = match super::captured::before(turn, message, &batch).await {
        Ok(around) => around,
        Err(why) => {
            let why = format!(
                "Not run: the files it may change could not be checkpointed first ({why}), so nothing was changed."
            );
            for (index, _) in &batch {
                fail(turn, message, *index, why.clone());
            }
            return Ok(());
        }
    };
    let cancel = turn.cancel.child_token();
    let default_timeout = turn.limits.tool_timeout;
    let mut receivers = Vec::with_capacity(batch.len());
    let mut contexts = Vec::with_capacity(batch.len());
    let mut spans = Vec::with_capacity(batch.len());
    for (position, (index, invocation)) in batch.iter().enumerate() {
        let (progress_tx, progress_rx) = mpsc::unbounded_channel::<Vec<ToolContent>>();
        receivers.push(Box::pin(futures::stream::unfold(progress_rx, move |mut rx| async move {
            rx.recv().await.map(|content| ((position, content), rx))
        })));
        let id = call_id(turn, message, *index).unwrap_or_default();
        spans.push(turn.run.otel.call_start(*index, invocation.name(), &id));
        let mut ctx = context(turn, cancel.clone(), Some(progress_tx), id);
        ctx.judged = invocation.judged().map(str::to_owned);
        if invocation.access() == Access::Delegate {
            ctx.caller = Some(Caller {
                mode: turn.tools.mode.clone(),
                rules: turn.tools.rules.clone(),
                confined: turn.tools.confined,
            });
        }
        contexts.push(ctx);
    }
    let mut progress = futures::stream::select_all(receivers);
    let runs: Vec<_> = batch
        .iter()
        .zip(&contexts)
        .zip(spans)
        .enumerate()
        .map(|(position, (((_, invocation), ctx), span))| {
            tracing::Instrument::instrument(run_one(position, invocation, ctx, default_timeout), span)
        })
        .collect();
    let runs = futures::stream::iter(runs).buffer_unordered(at_once.max(1)).collect::<Vec<_>>();
    tokio::pin!(runs);
    let mut progress_open = !batch.is_empty();
    let finished = loop {
        tokio::select! {
            finished = &mut runs => break Some(finished),
            () = turn.cancel.cancelled() => break tokio::time::timeout(CANCEL_GRACE, &mut runs).await.ok(),
            shown = progress.next(), if progress_open => match shown {
                Some((position, content)) => {
                    if let Some((index, _)) = batch.get(position) {
                        change(turn, message, *index, |tool| {
                            tool.content = content;
                            true
                        });
                    }
                }
                None => progress_open = false,
            },
        }
    };
    let cancelled = turn.cancel.is_cancelled();
    let mut results: Vec<Option<Result<ToolOutcome, ToolError>>> = batch.iter().map(|_| None).collect();
    for (position, result) in finished.unwrap_or_default() {
        if let Some(slot) = results.get_mut(position) {
            *slot = Some(result);
        }
    }
    let mut fatal = None;
    for ((index, _), result) in batch.iter().zip(results) {
        turn.phase(Phase::AfterTool);
        match result {
            Some(result) if !cancelled => {
                let outcome = match &result {
                    Ok(outcome) if !outcome.failed => Outcome::Success,
                    Ok(_) | Err(_) => Outcome::Failed,
                };
                turn.run.otel.call_end(*index, "", "", outcome);
                if let Some(ended) = record_result(turn, message, *index, result) {
                    fatal.get_or_insert(ended);
                }
            }
            _ => {
                turn.run.otel.call_end(*index, "", "", Outcome::Cancelled);
                change(turn, message, *index, |tool| {
                    tool.output = Some("Cancelled by the user; the tool was stopped.".to_owned());
                    tool.state.advance(CallState::Cancelled).is_ok()
                });
            }
        }
    }
    let ran: Vec<u32> = batch.iter().map(|(index, _)| *index).collect();
    let stop = if cancelled { None } else { super::hooked::after(turn, message, &ran).await };
    // After the PostToolUse hooks: what they change (a formatter's pass) is the call's doing too.
    if let Some(around) = around {
        super::captured::after(turn, around).await;
    }
    match (fatal, stop) {
        _ if cancelled => Err(Halt::Cancelled),
        (Some(fatal), _) => Err(Halt::Fatal(fatal)),
        (None, Some(stop)) => Err(Halt::Hook(stop)),
        (None, None) => Ok(()),
    }
}

/// One call of a batch, stopped at its time limit; `position` tags its result.
async fn run_one(
    position: usize,
    invocation: &Invocation,
    ctx: &ToolContext,
    default_timeout: Duration,
) -> (usize, Result<ToolOutcome, ToolError>) {
    // An edit's checks (`[checks]`, `[lsp]`) have limits of their own, on top of the tool's.
    let limit = invocation.timeout(default_timeout) + crate::tools::check_allowance(ctx, invocation.access());
    let result = match tokio::time::timeout(limit + TIMEOUT_MARGIN, invocation.run(ctx)).await {
        Ok(result) => result,
        Err(_) => {
            Err(ToolError::Tell(format!("The tool did not finish within {} s and was stopped.", limit.as_secs())))
        }
    };
    (position, result)
}

/// Records a call's result; a failure that ends the turn is recorded like any other, and
/// given back.
fn record_result(
    turn: &mut Turn<'_>,
    message: &MessageId,
    index: u32,
    result: Result<ToolOutcome, ToolError>,
) -> Option<Fatal> {
    let mut reminders = Vec::new();
    let mut spent = 0.0;
    let mut fatal = None;
    change(turn, message, index, |tool| match result {
        Ok(outcome) => {
            if let Some(reminder) = outcome.reminder {
                reminders.push(reminder);
            }
            spent += outcome.cost;
            let to = if outcome.failed { CallState::Failed } else { CallState::Succeeded };
            tool.output = Some(outcome.output);
            tool.images = outcome.images;
            if !outcome.content.is_empty() || tool.content.is_empty() {
                tool.content = outcome.content;
            }
            tool.plan = outcome.plan;
            tool.state.advance(to).is_ok()
        }
        Err(err) => {
            let why = err.to_string();
            if let ToolError::Fatal(ended) = err {
                fatal = Some(ended);
            }
            tool.content = vec![ToolContent::Text { text: why.clone() }];
            tool.output = Some(why);
            tool.state.advance(CallState::Failed).is_ok()
        }
    });
    for reminder in reminders {
        turn.remind(reminder);
    }
    turn.charge(spent);
    fatal
}

//! The turn state machine: from a user prompt to a [`StopReason`].
//!
//! [`run_turn`] records the prompt, then drives a [`TurnState`] through one handler per state
//! (`steps`, `calls` with the answers its questions offer in `choices` and the plan review in
//! `review`, `dispatch`, and here)
//! until it reaches `Done`. Each step is a stretch of states from StepStart (counted, with the
//! step start phase) to StepEnd (checkpoint, then the stop conditions of `stop` and the loop
//! guard of `loops`), which every ending inside a step goes through. The driver owns the
//! run-level phases ([`Phase`]): run start, step start, before inference (the Preparing state:
//! prompts steered into the turn join (`steer`), compaction at the threshold, then the step's
//! [`Request`] with reminders and tools on cooldown), after inference, step end and run end,
//! which always comes. Between every two states of a step it checks cancellation; the turn's
//! deadline cancels it too, its clock stopped while the turn waits for the user. The session's
//! spending grows only through `Turn::charge` and is reported, with the context in use, as usage
//! updates. Everything the turn produces leaves through the [`Recorder`]; `agent` imports
//! neither `acp`, `session` nor `store` (the wire protocol, the sessions, the database).

mod calls;
mod captured;
mod choices;
pub mod compact;
mod context;
mod dispatch;
pub mod events;
pub mod hooked;
mod loops;
pub mod prompt;
mod retry;
mod review;
mod searched;
pub mod state;
mod steer;
mod steps;
pub mod stop;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::MessageId;
use crate::llm::catalog::{ModelInfo, ThoughtLevel};
use crate::llm::retry::RetryPolicy;
use crate::llm::{LlmError, Provider};
use crate::permissions::{Mode, Rule, Scope};
use crate::tools::{Host, Registry, Workspace};
use crate::trace::TraceContext;

pub use events::{AgentEvent, Phase, RecordError, Recorder, StreamKind};
use loops::{LoopGuard, Verdict};
pub use state::{After, DoneReason, ModelStop, Opening, Request, TurnError, TurnState, Why};
pub use steer::{Steered, Steering};
pub use stop::StopReason;
use stop::{Stats, Stop};

/// Everything one turn works with. The session actor lends it its history and rules for the turn.
pub struct Turn<'a> {
    pub provider: &'a dyn Provider,
    /// The model name the provider knows.
    pub model: String,
    /// `provider/model`, stored on each message.
    pub model_ref: String,
    /// The session's system prompt, the same bytes for every turn of the session.
    pub system: Arc<prompt::SystemPrompt>,
    pub history: &'a mut Vec<Message>,
    pub recorder: &'a mut dyn Recorder,
    /// Cancelled by `session/cancel`, `session/close` or shutdown; every await races it.
    pub cancel: CancellationToken,
    pub limits: Limits,
    pub tools: Toolbox<'a>,
    /// The model's window, output limit and prices.
    pub info: ModelInfo,
    /// The session's reasoning level, for models that reason.
    pub thought: Option<ThoughtLevel>,
    /// What the session has cost so far (USD), for `usage_update`; grows only through
    /// `Turn::charge`.
    pub spent: f64,
    /// The context in use (the provider's count after the last step, or a compaction's estimate).
    pub context_used: u64,
    /// Who writes summaries when the context fills up; `None` turns compaction off.
    pub summarizer: Option<compact::Summarizer<'a>>,
    /// What the run keeps between its steps; `Run::default()` for a new turn.
    pub run: Run,
}

/// What one run keeps between its steps; it starts empty with each prompt.
#[derive(Default)]
pub struct Run {
    stats: Stats,
    guard: LoopGuard,
    /// Notes for the model, sent once with the next request.
    reminders: Vec<String>,
    /// Tools taken away for repeating themselves, with the requests they still sit out.
    cooldowns: Vec<(String, u32)>,
    /// Answers cut off inside a tool call that were asked to continue.
    continuations: u32,
    /// The step under way.
    step: Step,
    /// An automatic compaction failed in this turn; do not try again until the next prompt.
    compaction_failed: bool,
    /// A request refused as too long was compacted and retried once.
    overflow_retried: bool,
    /// Where prompts sent while the turn runs arrive (`busy_prompt = "steer"`); `None` for
    /// turns nobody can steer (sub-agents, headless runs).
    steering: Option<Steering>,
    /// Held while the turn waits for the user; its deadline stops meanwhile.
    user_wait: crate::tools::host::UserWait,
    /// The images the turn's tool calls have read (bounded per turn).
    images_read: Arc<crate::tools::ImagesRead>,
    /// The client's trace context of the prompt that started the turn, which its model
    /// requests (summaries included) carry; prompts steered into it do not change it.
    trace: Option<TraceContext>,
    /// The session's id, sent as the requests' prompt cache key ([`ModelRequest::cache_key`]).
    cache_key: Option<String>,
    /// The session's hooks; `None` runs none.
    hooks: Option<Arc<crate::hooks::Hooks>>,
    /// How many times a `Stop` hook sent the model on in this turn (`stop_hook_active` when
    /// not 0; at `hooked::MOST_STOP_BLOCKS` the turn ends however they answer).
    stop_hook_blocks: u32,
    /// A sub-agent's run: its tool calls fire the session's hooks, its prompt and its end do not.
    subagent: bool,
    /// The turn's exported spans and metrics (inert without telemetry).
    otel: crate::telemetry::spans::TurnSpans,
}

/// What one step keeps: it starts anew in the StepStart state.
#[derive(Default)]
struct Step {
    /// History length when the step began: the step's messages come after it.
    from: usize,
    /// A compaction was tried in this step (never twice in one step).
    compacted: bool,
}

impl Run {
    /// A new turn's run that takes the prompts steered into it.
    pub fn steered(steering: Steering) -> Self {
        Self { steering: Some(steering), ..Self::default() }
    }

    /// A sub-agent's run, inside a call of its parent's turn: the user's answers to its
    /// questions stop the parent's clock too, and its image reads count toward the parent's.
    pub fn child(user_wait: crate::tools::host::UserWait, images_read: Arc<crate::tools::ImagesRead>) -> Self {
        Self { user_wait, images_read, subagent: true, ..Self::default() }
    }

    /// This run, its model requests carrying `trace` (see [`crate::trace`]).
    pub fn traced(self, trace: Option<TraceContext>) -> Self {
        Self { trace, ..self }
    }

    /// This run, firing the session's `hooks`.
    pub fn hooked(self, hooks: Option<Arc<crate::hooks::Hooks>>) -> Self {
        Self { hooks, ..self }
    }

    /// This run, its model requests asking for the prompt cache of the session `id`.
    pub fn cached_as(self, id: &str) -> Self {
        Self { cache_key: Some(id.to_owned()), ..self }
    }
}

impl Turn<'_> {
    /// Queues a note for the model; it goes out with the next request only.
    pub fn remind(&mut self, text: impl Into<String>) {
        self.run.reminders.push(text.into());
    }

    fn phase(&mut self, phase: Phase) {
        self.recorder.record(AgentEvent::Phase(phase));
    }

    /// Tells the user when `count` images of a prompt cannot reach the model in use: each
    /// request then carries a placeholder for them (the history keeps them, for a model that
    /// takes images).
    fn note_unseen(&mut self, count: usize) {
        if count == 0 || self.info.images {
            return;
        }
        let (images, them) = if count == 1 { ("the image", "it") } else { ("the images", "them") };
        let text = format!(
            "{model} cannot see images, so {images} in this prompt {was} left out (the model is only told \
             {what} there). Switch to a model that takes images to show {them}; if {model} does take images, \
             set `images = true` under [models.\"{model}\"] in config.toml.",
            model = self.model_ref,
            was = if count == 1 { "was" } else { "were" },
            what = if count == 1 { "one was" } else { "some were" },
        );
        self.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy { retries: self.limits.retries, base: self.limits.retry_base }
    }

    /// Adds what a step, a summary or a tool's model requests cost to the session's spending.
    fn charge(&mut self, cost: f64) {
        self.spent += cost;
    }

    /// Tells the editor how full the context is and what the session has cost so far.
    fn report_usage(&mut self) {
        let cost = self.info.shown_spend(self.spent);
        self.recorder.record(AgentEvent::ContextUsage {
            used: self.context_used,
            size: self.info.context_window,
            cost,
        });
    }
}

/// What tool calls run with: where, through which editor, and under which permissions.
pub struct Toolbox<'a> {
    pub workspace: Workspace,
    pub host: Arc<dyn Host>,
    /// The session's mode; it may change while the turn runs.
    pub mode: watch::Receiver<Mode>,
    /// Where the turn changes the session's mode (a plan approved); `None` in a sub-agent,
    /// which never changes its parent's.
    pub switch: Option<watch::Sender<Mode>>,
    /// Session and project rules; "always" answers add to them.
    pub rules: &'a mut Vec<Rule>,
    /// Where the session's lasting processes find its rejected programs as they change: an
    /// "always" answer that rejects one is published there (a sub-agent's go to its parent's;
    /// `None`: processes keep the rules they start with).
    pub rulebook: Option<Arc<crate::process::Rulebook>>,
    /// Where an "always allow" answer keeps its rule (`[permissions] remember`).
    pub remember: Scope,
    /// How local commands are started (environment, sandbox, supervisor).
    pub process: Arc<crate::process::ProcessPolicy>,
    /// The tools the model may call.
    pub registry: Arc<Registry>,
    /// The session's background jobs.
    pub jobs: crate::tools::Jobs,
    /// The session's language servers.
    pub lsp: crate::tools::Lsp,
    /// The session's file checkpoints, lent for the turn; `None` takes none (sub-agents, whose
    /// changes the parent's call captures, or checkpoints turned off).
    pub checkpoints: Option<&'a mut crate::tools::checkpoint::Tracker>,
    /// The session is a principal's of `cairn serve --auth`, who is not the user the server
    /// runs as: its file tools reach only its workspace (a path outside it, a secret or one that
    /// cannot be judged is refused in every mode, bypass too), since the principal answers its
    /// own questions.
    pub confined: bool,
}

/// The user's message a turn for `prompt` starts with, asked of `model`.
pub fn user_message(prompt: Vec<Part>, model: &str) -> Message {
    Message::new(Role::User, prompt, MessageMeta { model: Some(model.to_owned()), ..MessageMeta::default() })
}

/// Runs one turn for `prompt` to its end. The prompt is committed before the model is called
/// (a prompt the recorder refuses ends the turn with that error, recording nothing), and every
/// update of the turn is flushed before this returns.
pub async fn run_turn(turn: Turn<'_>, prompt: Vec<Part>) -> Result<StopReason, TurnError> {
    let message = user_message(prompt, &turn.model_ref);
    run_prompt(turn, message).await
}

/// [`run_turn`] for a user's message made already ([`user_message`]): one whose claim the
/// recorder may have sent while the turn was set up.
pub async fn run_prompt(mut turn: Turn<'_>, user_message: Message) -> Result<StopReason, TurnError> {
    // Handlers race `turn.cancel`; it fires on the user's cancel or at the turn's deadline, and
    // `user` tells the two apart.
    let user = std::mem::replace(&mut turn.cancel, CancellationToken::new());
    turn.cancel = user.child_token();
    let _deadline =
        turn.limits.timeout.map(|limit| Deadline::arm(limit, turn.cancel.clone(), turn.run.user_wait.watch()));
    turn.phase(Phase::RunStart);
    // A sub-agent's prompt is the model's writing (it may quote what it read), not the user's.
    let subagent = turn.run.subagent;
    let text = || (!subagent).then(|| crate::history::texts(&user_message.parts).collect::<Vec<_>>().join("\n"));
    // A sub-agent's turn is a child of its parent's call (the span it runs in), not of the
    // client's span, though its requests carry the client's trace.
    let client = turn.run.trace.as_ref().filter(|_| !subagent);
    turn.run.otel.start(client, &turn.model_ref, turn.run.cache_key.as_deref(), text);
    let unseen = images_in(&user_message);
    let resumed = !turn.history.is_empty();
    let prompt = turn.run.hooks.is_some().then(|| user_message.clone());
    let mut state = match turn.recorder.begin(turn.history, user_message).await {
        Ok(reread) => {
            if reread {
                turn.context_used = crate::history::view::context_used(turn.history);
            }
            turn.note_unseen(unseen);
            match prompt {
                Some(prompt) => match hooked::prompted(&mut turn, &prompt, resumed).await {
                    Some(reason) => TurnState::Done(reason),
                    None => TurnState::StepStart(Opening::Fresh),
                },
                None => TurnState::StepStart(Opening::Fresh),
            }
        }
        Err(err) => TurnState::Done(DoneReason::Error(err.into())),
    };
    loop {
        // Between two states of a step: calls that will not run now are shown cancelled, not
        // left pending, and the turn ends at once (a stream sees the cancel itself).
        if turn.cancel.is_cancelled()
            && !matches!(state, TurnState::Streaming(_) | TurnState::StepEnd(_) | TurnState::Done(_))
        {
            if let TurnState::Executing(queue) | TurnState::Confirming(queue, _) | TurnState::Dispatching(queue, _) =
                &state
            {
                calls::cancel_all(&mut turn, queue);
            }
            state = TurnState::Done(DoneReason::UserAbort);
        }
        tracing::debug!(?state, "turn state");
        state = match state {
            TurnState::StepStart(opening) => {
                step_start(&mut turn);
                prepare(&mut turn, opening).await
            }
            TurnState::Preparing => prepare(&mut turn, Opening::Fresh).await,
            TurnState::Sampling(request) => steps::sampling(&mut turn, request).await,
            TurnState::Compacting(why) => compacting(&mut turn, why).await,
            TurnState::Streaming(streaming) => {
                let next = steps::streaming(&mut turn, streaming).await;
                if !matches!(next, TurnState::Sampling(_)) {
                    turn.phase(Phase::AfterInference);
                }
                next
            }
            TurnState::Executing(queue) => calls::executing(&mut turn, queue).await,
            TurnState::Confirming(queue, question) => calls::confirming(&mut turn, queue, *question).await,
            TurnState::Dispatching(queue, batch) => dispatch::dispatching(&mut turn, queue, batch).await,
            TurnState::StepEnd(after) => step_end(&mut turn, after).await,
            TurnState::Done(reason) => return run_end(&mut turn, &user, reason).await,
        };
    }
}

/// The StepStart state: the step is counted, and its messages start here.
fn step_start(turn: &mut Turn<'_>) {
    turn.run.stats.rounds += 1;
    turn.run.step = Step { from: turn.history.len(), compacted: false };
    turn.run.otel.step_start();
    turn.phase(Phase::StepStart);
}

/// The Preparing state (also the rest of StepStart): prompts steered into the turn join before
/// its next request is prepared. If the prompt a step was opened for was withdrawn meanwhile,
/// the turn ends as the model ended it.
async fn prepare(turn: &mut Turn<'_>, opening: Opening) -> TurnState {
    match steer::join(turn).await {
        Ok(0) if opening == Opening::ForSteered => {
            TurnState::StepEnd(After::End(DoneReason::ModelStop(ModelStop::EndTurn)))
        }
        Ok(_) => preparing(turn),
        Err(err) => TurnState::StepEnd(After::End(DoneReason::Error(err.into()))),
    }
}

/// The Preparing state: goes to Compacting first when the context in use has reached the
/// threshold; otherwise prepares the step's request: the tools not on cooldown, and the
/// reminders, which are sent this once. The conversation itself is the model's view of the
/// history (from the latest compaction marker), borrowed when the request is sent.
fn preparing(turn: &mut Turn<'_>) -> TurnState {
    turn.phase(Phase::BeforeInference);
    if let Some(summarizer) = &turn.summarizer
        && summarizer.settings.auto
        && !turn.run.step.compacted
        && !turn.run.compaction_failed
        && turn.context_used
            >= compact::usable(turn.info.context_window, turn.info.max_output, summarizer.settings.reserve_tokens)
    {
        return TurnState::Compacting(Why::Threshold);
    }
    // The system prompt stays the same bytes whatever the mode: plan mode is said with each request.
    if *turn.tools.mode.borrow() == Mode::Plan {
        turn.remind(prompt::PLAN_MODE);
    }
    let cooling: Vec<String> = turn.run.cooldowns.iter().map(|(tool, _)| tool.clone()).collect();
    turn.run.cooldowns.retain_mut(|(_, left)| {
        *left = left.saturating_sub(1);
        *left > 0
    });
    let reminder = (!turn.run.reminders.is_empty()).then(|| {
        let text = std::mem::take(&mut turn.run.reminders).join("\n\n");
        Message::new(Role::User, vec![Part::Text { text }], MessageMeta::default())
    });
    TurnState::Sampling(Box::new(Request { reminder, cooling, attempts: 0 }))
}

/// The Compacting state: one compaction, then the step's request is prepared again.
async fn compacting(turn: &mut Turn<'_>, why: Why) -> TurnState {
    turn.run.step.compacted = true;
    if turn.summarizer.is_none() {
        return TurnState::Preparing;
    }
    if !hooked::compacting(turn).await {
        turn.run.compaction_failed = true;
        if let Why::Overflow(detail) = why {
            return TurnState::StepEnd(After::End(DoneReason::Error(LlmError::ContextTooLong { detail }.into())));
        }
        return TurnState::Preparing;
    }
    let Some(summarizer) = &turn.summarizer else { return TurnState::Preparing };
    let job = compact::Job {
        history: turn.history,
        recorder: turn.recorder,
        cancel: &turn.cancel,
        window: turn.info.context_window,
        max_output: turn.info.max_output,
        // A refused request held at least a full window, whatever the last step counted.
        context_used: match why {
            Why::Overflow(_) => turn.context_used.max(turn.info.context_window),
            Why::Threshold => turn.context_used,
        },
        auto: true,
        instructions: None,
        spent: turn.spent,
        trace: turn.run.trace.as_ref(),
    };
    tracing::info!(?why, context = turn.context_used, "compacting");
    let threshold = compact::usable(turn.info.context_window, turn.info.max_output, summarizer.settings.reserve_tokens);
    match compact::run(summarizer, job).await {
        Ok(compacted) => {
            turn.context_used = compacted.compaction.tokens_after;
            turn.charge(compacted.cost);
            // Not enough freed: do not summarize again at every step of this turn.
            turn.run.compaction_failed = compacted.compaction.tokens_after >= threshold;
        }
        Err(compact::CompactError::Cancelled) => return TurnState::StepEnd(After::End(DoneReason::UserAbort)),
        Err(err) => {
            turn.run.compaction_failed = true;
            if let Why::Overflow(detail) = why {
                // Sending the same request again would only be refused again.
                tracing::warn!(%err, "the request is too long and could not be compacted");
                let err = LlmError::ContextTooLong { detail };
                return TurnState::StepEnd(After::End(DoneReason::Error(err.into())));
            }
        }
    }
    TurnState::Preparing
}

/// The StepEnd state: commit the step (the checkpoint), then let the stop conditions and the
/// loop guard decide whether the turn goes on to another step.
async fn step_end(turn: &mut Turn<'_>, after: After) -> TurnState {
    turn.run.otel.step_end();
    turn.phase(Phase::StepEnd);
    if let Err(err) = turn.recorder.flush().await {
        return TurnState::Done(DoneReason::Error(err.into()));
    }
    // The model is done, but the user said more meanwhile: the turn goes on with it, unless a
    // limit says otherwise (then it ends as the model ended it, and the text runs next).
    let after = match after {
        After::End(DoneReason::ModelStop(ModelStop::EndTurn)) if !steer::pending(turn) => hooked::stopping(turn).await,
        after => after,
    };
    let next = match after {
        After::End(DoneReason::ModelStop(ModelStop::EndTurn)) if steer::pending(turn) => Opening::ForSteered,
        After::End(reason) => return TurnState::Done(reason),
        After::NextStep => Opening::Fresh,
    };
    let step: Vec<&Message> =
        turn.history.iter().skip(turn.run.step.from).filter(|m| m.role == Role::Assistant).collect();
    for message in &step {
        turn.run.stats.add_step(message);
    }
    if let Some(stop) = turn.run.stats.check(&turn.limits, step.last().copied()) {
        return TurnState::Done(if next == Opening::ForSteered {
            DoneReason::ModelStop(ModelStop::EndTurn)
        } else {
            DoneReason::Stopped(stop)
        });
    }
    let calls: Vec<(String, serde_json::Value)> = step
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|part| match part {
            // The provider's own searches are not calls the model repeats here.
            Part::Tool(tool) if !tool.hosted => {
                Some((tool.name.clone(), serde_json::from_str(&tool.input).unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    match turn.run.guard.observe(turn.limits.loop_detection, calls) {
        Verdict::Fine => {}
        Verdict::Warn { tool, count } => turn.remind(format!(
            "[System Notice — Warning] You have called {tool} {count} times with similar parameters. Try a different approach."
        )),
        Verdict::Cooldown { tool, count } => {
            let rounds = turn.limits.loop_detection.cooldown_rounds;
            turn.remind(format!(
                "[System Notice — Loop] You have called {tool} {count} times with similar parameters. {tool} is unavailable for the next {rounds} requests. Change your approach, or stop and ask the user."
            ));
            turn.run.cooldowns.retain(|(name, _)| *name != tool);
            turn.run.cooldowns.push((tool, rounds));
        }
        Verdict::Stop { tool, count } => return TurnState::Done(DoneReason::Stopped(Stop::Loop { tool, count })),
    }
    TurnState::StepStart(next)
}

/// The end of every run: say which limit stopped it, commit everything, answer the prompt.
async fn run_end(turn: &mut Turn<'_>, user: &CancellationToken, reason: DoneReason) -> Result<StopReason, TurnError> {
    // An interruption nobody asked for was the deadline.
    let reason = match (reason, turn.cancel.is_cancelled() && !user.is_cancelled(), turn.limits.timeout) {
        (DoneReason::UserAbort | DoneReason::Error(_), true, Some(limit)) => DoneReason::Stopped(Stop::Timeout(limit)),
        (reason, _, _) => reason,
    };
    if let DoneReason::Stopped(stop) = &reason {
        tracing::info!(?stop, "turn stopped by a limit");
        turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: stop.message() });
    }
    turn.phase(Phase::RunEnd);
    let flushed = turn.recorder.flush().await;
    let result = match (reason.into_result(user.is_cancelled()), flushed) {
        (Ok(_), Err(err)) => Err(err.into()),
        (result, _) => result,
    };
    turn.run.otel.end(result.as_ref().map_or("error", StopReason::name));
    result
}

/// How many images a message shows the model.
fn images_in(message: &Message) -> usize {
    message.parts.iter().filter(|part| part.image().is_some()).count()
}

/// Cancels the turn's token when its time is up; disarmed when dropped.
struct Deadline(tokio::task::JoinHandle<()>);

impl Deadline {
    /// Cancels `token` once the turn has run for `limit`, not counting the time it waits for
    /// the user (while `waits` is above zero).
    fn arm(limit: std::time::Duration, token: CancellationToken, mut waits: watch::Receiver<usize>) -> Self {
        Self(tokio::spawn(async move {
            let mut end = tokio::time::Instant::now() + limit;
            loop {
                if *waits.borrow_and_update() > 0 {
                    let paused = tokio::time::Instant::now();
                    // Nobody is left to end the wait (the turn is over): nothing to time.
                    if waits.wait_for(|waits| *waits == 0).await.is_err() {
                        return;
                    }
                    end += paused.elapsed();
                    continue;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(end) => break,
                    changed = waits.changed() => if changed.is_err() {
                        // No wait can start any more: only the clock is left.
                        tokio::time::sleep_until(end).await;
                        break;
                    },
                }
            }
            tracing::info!(?limit, "the turn reached its time limit");
            token.cancel();
        }))
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        self.0.abort();
    }
}

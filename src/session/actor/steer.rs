//! Steering from the actor's side: a prompt sent while a model turn runs, in a session that
//! steers (`[session] busy_prompt = "steer"`, or its `steer` option, kept in the session's
//! metadata as its `busy_prompt`), is handed to that turn instead of the queue, and answered
//! with the turn's stop reason when the turn ends.
//!
//! Only a plain prompt steers, only into a model turn that is not cancelled, and only while
//! nothing waits in the queue (so nothing sent earlier is overtaken); anything else queues as
//! before. The turn tells each prompt when it joins. A prompt that had not joined when its turn
//! ended (a limit, an error, a `$/cancel_request` of the turn's own prompt, or simply too late)
//! goes to the front of the queue and runs next, as a queued prompt would have. `session/cancel`
//! treats it as the queued prompt it then is: answered `cancelled`. One that joined is part of
//! the turn: it is answered with the turn, `cancelled` included, and withdrawing it
//! (`$/cancel_request`) cancels the turn, as withdrawing the turn's own prompt does. Whether a
//! prompt joined is settled by closing its signal: after that the turn can no longer take it.
//! A prompt that joins leaves the turn on its own trace context; one that runs next runs on
//! the context it came with.

use tokio::sync::oneshot;

use super::{Actor, Queued, Reply, Steering, Work};
use crate::agent::{Steered, StopReason};
use crate::config::BusyPrompt;
use crate::history::Part;
use crate::session::TurnEnd;
use crate::trace::TraceContext;

/// A prompt handed to the running turn, until the turn ends.
pub(super) struct Joining {
    ticket: u64,
    /// Kept to run it next if it does not join.
    parts: Vec<Part>,
    /// The trace context it came with: the one it runs on if it runs next.
    trace: Option<TraceContext>,
    joined: oneshot::Receiver<()>,
    /// Whether it joined, once settled: the signal can be read only once.
    verdict: Option<bool>,
    reply: Reply<TurnEnd>,
}

impl Joining {
    /// Whether the prompt joined its turn; from now on it cannot. The same answer every time.
    fn settle(&mut self) -> bool {
        if let Some(joined) = self.verdict {
            return joined;
        }
        self.joined.close();
        let joined = self.joined.try_recv().is_ok();
        self.verdict = Some(joined);
        joined
    }
}

/// The prompts of an ended turn: the replies of those that joined it, and the others as
/// queued prompts, in the order they were sent. A prompt settled before (by a cancel or a
/// withdrawal) keeps the verdict it had then.
pub(super) fn settle(steered: Vec<Joining>) -> (Vec<Reply<TurnEnd>>, Vec<Queued>) {
    let mut joined = Vec::new();
    let mut left = Vec::new();
    for mut joining in steered {
        if joining.settle() {
            joined.push(joining.reply);
        } else {
            let (ticket, trace) = (joining.ticket, joining.trace);
            left.push(Queued { ticket, trace, work: Work::Prompt(joining.parts), reply: joining.reply });
        }
    }
    (joined, left)
}

impl Actor {
    /// Whether prompts sent while a turn runs join it.
    pub(super) fn steers(&self) -> bool {
        let chosen = self.row.busy_prompt.as_deref().and_then(BusyPrompt::parse);
        chosen.unwrap_or(self.services.config.busy_prompt) == BusyPrompt::Steer
    }

    /// A plain prompt: steered into the running turn when the session steers and that turn
    /// can take it, queued otherwise.
    pub(super) fn prompt(&mut self, ticket: u64, trace: Option<TraceContext>, parts: Vec<Part>, reply: Reply<TurnEnd>) {
        let steers = self.steers() && self.queue.is_empty();
        let Some(running) = self.running.as_mut().filter(|running| steers && !running.cancel.is_cancelled()) else {
            return self.enqueue(Queued { ticket, trace, work: Work::Prompt(parts), reply });
        };
        let Some(steer) = &running.steer else {
            return self.enqueue(Queued { ticket, trace, work: Work::Prompt(parts), reply });
        };
        let (signal, joined) = oneshot::channel();
        if steer.send(Steered { parts: parts.clone(), joined: signal }).is_err() {
            // The turn is ending: the prompt runs after it.
            return self.enqueue(Queued { ticket, trace, work: Work::Prompt(parts), reply });
        }
        running.steered.push(Joining { ticket, trace, parts, joined, verdict: None, reply });
        self.tell("This prompt joins the running turn before its next model request.".to_owned());
    }

    /// `_session/steering`: the prompt joins the running model turn whatever the session's
    /// `steer` setting (the client asked for exactly that), or, when none can take it, runs as
    /// a turn of its own, unless nothing runs and the client asked to be told instead. Its
    /// updates reach the client as any turn's do; nobody waits for its stop reason.
    pub(super) fn steer_now(
        &mut self,
        ticket: u64,
        trace: Option<TraceContext>,
        parts: Vec<Part>,
        start_if_idle: bool,
    ) -> Steering {
        let (reply, _unheard) = oneshot::channel();
        if self.running.is_none() && self.queue.is_empty() && !start_if_idle {
            return Steering::PromptRequired;
        }
        let steer = self
            .running
            .as_ref()
            .filter(|running| !running.cancel.is_cancelled() && self.queue.is_empty())
            .and_then(|running| running.steer.clone());
        let Some(steer) = steer else {
            self.enqueue(Queued { ticket, trace, work: Work::Prompt(parts), reply });
            return Steering::StartedNewTurn;
        };
        let (signal, joined) = oneshot::channel();
        if steer.send(Steered { parts: parts.clone(), joined: signal }).is_err() {
            self.enqueue(Queued { ticket, trace, work: Work::Prompt(parts), reply });
            return Steering::StartedNewTurn;
        }
        if let Some(running) = self.running.as_mut() {
            running.steered.push(Joining { ticket, trace, parts, joined, verdict: None, reply });
        }
        Steering::Injected
    }

    /// `$/cancel_request` for a prompt handed to the running turn: one not joined yet is
    /// answered `cancelled`; one that joined cancels the turn it is part of. Answers whether
    /// `ticket` was such a prompt.
    pub(super) fn withdraw_steered(&mut self, ticket: u64) -> bool {
        let Some(running) = self.running.as_mut() else { return false };
        let Some(at) = running.steered.iter().position(|joining| joining.ticket == ticket) else { return false };
        if running.steered[at].settle() {
            running.cancel.cancel();
        } else {
            let joining = running.steered.remove(at);
            let _ = joining.reply.send(Ok(StopReason::Cancelled.into()));
        }
        true
    }

    /// `session/cancel`: the prompts that have not joined the running turn are answered
    /// `cancelled` like the queued ones; those that joined end with the turn.
    pub(super) fn cancel_steered(&mut self) {
        let Some(running) = self.running.as_mut() else { return };
        for mut joining in std::mem::take(&mut running.steered) {
            if joining.settle() {
                running.steered.push(joining);
            } else {
                let _ = joining.reply.send(Ok(StopReason::Cancelled.into()));
            }
        }
    }
}

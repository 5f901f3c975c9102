//! The Dispatching state: the turn waits for its sub-agents.
//!
//! Executing hands over a run of allowed `task` calls ([`crate::tools::Access::Delegate`]);
//! they run side by side, at most `[subagents] max_concurrent` at a time, each with its own
//! progress channel (the child's tool calls and latest text become the call's content), and
//! each with what its child inherits: the session's mode watch and a copy of the rules. A
//! child's failure or limit is that call's failed result; a cancel reaches every child through
//! the call's token, a child of the turn's. Then the turn goes back to Executing for the rest
//! of the queue (an empty one ends the step).

use super::Turn;
use super::calls;
use super::state::{CallQueue, TurnState};
use crate::tools::Invocation;

/// Runs the batch of sub-agents, then goes back to executing the rest of the queue.
pub async fn dispatching(turn: &mut Turn<'_>, queue: CallQueue, batch: Vec<(u32, Invocation)>) -> TurnState {
    let at_once = turn.limits.tasks_at_once;
    tracing::debug!(tasks = batch.len(), at_once, "dispatching sub-agents");
    match calls::run(turn, &queue.message, batch, at_once).await {
        Ok(()) => TurnState::Executing(queue),
        Err(halt) => calls::halted(turn, &queue, halt),
    }
}

//! A sub-agent as a client that takes sub-agents sees it again when its parent is loaded: from
//! the parent's stored `task` call (its `session` content names the sub-agent) the announcement
//! and the messages of the task and the report ([`shown_again`]), then the sub-agent's own
//! conversation read from the store under its own id, and its sub-agents' in turn
//! ([`replay_children`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::agent::StopReason;
use crate::history::{CallState, Message, Part, ToolContent, ToolPart};
use crate::ids::SessionId;
use crate::session::{SessionMessage, SubagentInfo, Update, UpdateSink};
use crate::store::Store;

/// The sub-agent a stored call ran, if it ran one.
fn child_of(tool: &ToolPart) -> Option<SessionId> {
    tool.content.iter().find_map(|content| match content {
        ToolContent::Session { session_id } => Some(SessionId::from_string(session_id.clone())),
        ToolContent::Text { .. }
        | ToolContent::Diff { .. }
        | ToolContent::Terminal { .. }
        | ToolContent::Image { .. } => None,
    })
}

/// What goes before and after a stored `task` call's card on a load: the sub-agent announced as
/// it ended and the task it was given; the report it gave. Nothing for any other call.
pub fn shown_again(tool: &ToolPart) -> (Vec<Update>, Vec<Update>) {
    let Some(child) = child_of(tool) else { return (Vec::new(), Vec::new()) };
    let input: serde_json::Value = serde_json::from_str(&tool.input).unwrap_or_default();
    let text = |field: &str| input[field].as_str().unwrap_or_default().to_owned();
    let ended = match tool.state {
        CallState::Succeeded => Some(Ok(StopReason::EndTurn)),
        CallState::Cancelled => Some(Ok(StopReason::Cancelled)),
        CallState::Failed => Some(Err(tool.output.clone().unwrap_or_else(|| "it failed".to_owned()))),
        CallState::New | CallState::Suspended | CallState::Resuming | CallState::Running => None,
    };
    let agent = input["agent"].as_str().unwrap_or(crate::tools::task::NAME).to_owned();
    let info = SubagentInfo { child: child.clone(), title: text("description"), agent, cwd: None, ended };
    let before = vec![Update::Subagent(Box::new(info)), message(&tool.call_id, &child, Sent::Task, text("prompt"))];
    let after =
        tool.output.clone().map(|report| message(&tool.call_id, &child, Sent::Report, report)).into_iter().collect();
    (before, after)
}

/// Which way a `task` call's message to its sub-agent went.
pub(super) enum Sent {
    /// The task, to the sub-agent.
    Task,
    /// Its report, from the sub-agent.
    Report,
}

/// A `task` call's message to or from its sub-agent `child`, as the parent's transcript has it,
/// named after the call (`call_id`): the same live and on a load.
pub(super) fn message(call_id: &str, child: &SessionId, sent: Sent, text: String) -> Update {
    let (suffix, from, to) = match sent {
        Sent::Task => ("task", None, Some(child.clone())),
        Sent::Report => ("report", Some(child.clone()), None),
    };
    Update::SessionMessage(Box::new(SessionMessage { id: format!("{call_id}.{suffix}"), from, to, text }))
}

/// Sends, after `session`'s replay, the stored conversation of every sub-agent its `messages`
/// ran, under each one's id, and theirs in turn; through `sink`, routed with `session`.
pub async fn replay_children(store: &Store, sink: &Arc<dyn UpdateSink>, session: &SessionId, messages: &[Message]) {
    let mut seen = HashSet::new();
    let mut pending: Vec<SessionId> = children(messages).collect();
    while let Some(child) = pending.pop() {
        if !seen.insert(child.clone()) {
            continue;
        }
        let history = match store.messages(&child).await {
            Ok(history) => history,
            Err(err) => {
                tracing::warn!(%session, %child, %err, "a sub-agent's conversation could not be read for the replay");
                continue;
            }
        };
        for update in super::super::replay(&history) {
            sink.send(session, Update::Elsewhere { session: child.clone(), update: Box::new(update) });
        }
        pending.extend(children(&history));
    }
}

/// The sub-agents the `task` calls of `messages` ran, in order.
fn children(messages: &[Message]) -> impl Iterator<Item = SessionId> + '_ {
    messages.iter().flat_map(|message| &message.parts).filter_map(|part| match part {
        Part::Tool(tool) => child_of(tool),
        _ => None,
    })
}

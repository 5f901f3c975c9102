//! The turn's hooks (`crate::hooks`), fired at their points: `SessionStart` and
//! `UserPromptSubmit` once the prompt is recorded, `PreToolUse` before a call is judged (its
//! answer taken in by `permissions::with_hook`), `PostToolUse` after a batch's results are
//! recorded, `Notification` before a permission question, `Stop` when the model ends the turn,
//! `PreCompact` before an automatic compaction.
//!
//! What a hook says reaches the model as a reminder with the next request (context, a blocked
//! stop's reason) or in a call's result (a deny's reason, `PostToolUse` feedback), and the user
//! as a notice (a blocked prompt, a stop, every hook that failed, hung or printed what cannot
//! be read). A turn without hooks pays nothing here.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::Turn;
use super::events::AgentEvent;
use super::state::{After, CallQueue, DoneReason, ModelStop, QueuedCall};
use crate::history::{Message, Part, ToolPart};
use crate::hooks::{Event, Fired, HookEvent, Verdict, claude_name, tool_names};
use crate::ids::MessageId;
use crate::permissions::HookAnswer;

/// What the `PreToolUse` hooks said about a call.
#[derive(Clone, Debug, Default)]
pub struct Before {
    pub answer: Option<HookAnswer>,
    /// `"continue": false`: the turn stops, with this reason.
    pub stop: Option<String>,
}

/// Fires `kind` (matched against `names`) with `fields`, telling the user what went wrong.
async fn fire(turn: &mut Turn<'_>, kind: HookEvent, names: Vec<&str>, fields: Map<String, Value>) -> Fired {
    let Some(hooks) = turn.run.hooks.clone().filter(|hooks| hooks.any(kind)) else { return Fired::default() };
    let mode = crate::hooks::permission_mode(*turn.tools.mode.borrow());
    let host = Arc::clone(&turn.tools.host);
    let fired = hooks.fire(Event { kind, names, fields }, mode, host.permissions(), &turn.cancel).await;
    if !fired.problems.is_empty() {
        turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: fired.problems.join("\n") });
    }
    if let Some(why) = &fired.stop {
        let text = format!("A {} hook stopped the turn: {why}", kind.name());
        turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
    }
    fired
}

fn fields(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(key, value)| (key.to_owned(), value)).collect()
}

/// `SessionStart` (the session's first turn in this process) and `UserPromptSubmit`, once the
/// prompt is recorded. `Some` ends the turn before the model is asked: a hook blocked the
/// prompt or stopped the turn.
pub(super) async fn prompted(turn: &mut Turn<'_>, prompt: &Message, resumed: bool) -> Option<DoneReason> {
    let hooks = turn.run.hooks.clone().filter(|_| !turn.run.subagent)?;
    if hooks.first_start() {
        let source = if resumed { "resume" } else { "startup" };
        let started = fire(turn, HookEvent::SessionStart, vec![source], fields(vec![("source", source.into())])).await;
        remind(turn, HookEvent::SessionStart, &started.context);
    }
    let text: String = crate::history::texts(&prompt.parts).collect::<Vec<_>>().join("\n");
    let submitted = fire(turn, HookEvent::UserPromptSubmit, Vec::new(), fields(vec![("prompt", text.into())])).await;
    if let Some(reason) = submitted.block_reason() {
        let text = format!("A UserPromptSubmit hook blocked this prompt; the model was not asked: {reason}");
        turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
        return Some(DoneReason::ModelStop(ModelStop::EndTurn));
    }
    if submitted.stop.is_some() {
        return Some(DoneReason::ModelStop(ModelStop::EndTurn));
    }
    remind(turn, HookEvent::UserPromptSubmit, &submitted.context);
    None
}

fn remind(turn: &mut Turn<'_>, kind: HookEvent, context: &[String]) {
    for text in context {
        turn.remind(format!("[{} hook] {text}", kind.name()));
    }
}

/// The call's part, found in the history.
fn part<'t>(turn: &'t Turn<'_>, message: &MessageId, index: u32) -> Option<&'t ToolPart> {
    let owner = turn.history.iter().rev().find(|m| m.id == *message)?;
    match owner.parts.get(index as usize) {
        Some(Part::Tool(tool)) => Some(tool),
        _ => None,
    }
}

/// A call's name and its input as a hook reads it: the model's arguments, with `file_path`
/// (absolute, as Claude Code's tools name it) beside a `path`.
fn tool_fields(turn: &Turn<'_>, tool: &ToolPart) -> Vec<(&'static str, Value)> {
    let mut input: Value = serde_json::from_str(&tool.input).unwrap_or_else(|_| json!({}));
    if let Some(object) = input.as_object_mut()
        && let Some(path) = object.get("path").and_then(Value::as_str)
        && !object.contains_key("file_path")
    {
        let absolute = turn.tools.workspace.cwd().join(path);
        object.insert("file_path".into(), absolute.to_string_lossy().into_owned().into());
    }
    let name = claude_name(&tool.name).unwrap_or(&tool.name);
    vec![
        ("tool_name", name.into()),
        ("cairn_tool_name", tool.name.clone().into()),
        ("tool_input", input),
        ("tool_use_id", tool.call_id.clone().into()),
    ]
}

/// `PreToolUse` for a queued call.
pub(super) async fn before(turn: &mut Turn<'_>, message: &MessageId, call: &QueuedCall) -> Before {
    if !turn.run.hooks.as_ref().is_some_and(|hooks| hooks.any(HookEvent::PreToolUse)) {
        return Before::default();
    }
    let Some(tool) = part(turn, message, call.index).cloned() else { return Before::default() };
    let pairs = tool_fields(turn, &tool);
    let fired = fire(turn, HookEvent::PreToolUse, tool_names(&tool.name), fields(pairs)).await;
    remind(turn, HookEvent::PreToolUse, &fired.context);
    let answer = fired.verdict.map(|verdict| match verdict {
        Verdict::Allow => HookAnswer::Allow,
        Verdict::Ask(why) => HookAnswer::Ask(why),
        Verdict::Deny(why) => HookAnswer::Deny(why),
    });
    Before { answer, stop: fired.stop }
}

/// Runs the `PreToolUse` hooks of the queue's first call, once; `Some` when they stopped the
/// turn (a call that would join a batch then stays queued, and the batch ends before it).
pub(super) async fn first(turn: &mut Turn<'_>, queue: &mut CallQueue) -> Option<String> {
    let message = queue.message.clone();
    let call = queue.calls.front_mut()?;
    if call.hooked.is_none() && call.invocation.is_ok() {
        call.hooked = Some(before(turn, &message, call).await);
    }
    call.hooked.as_ref().and_then(|hooked| hooked.stop.clone())
}

/// `PostToolUse` for each call of a finished batch: what a hook gives back (a block's reason,
/// context) is added to the call's result for the model. `Some` when a hook stopped the turn.
pub(super) async fn after(turn: &mut Turn<'_>, message: &MessageId, indexes: &[u32]) -> Option<String> {
    if !turn.run.hooks.as_ref().is_some_and(|hooks| hooks.any(HookEvent::PostToolUse)) {
        return None;
    }
    let mut stop = None;
    for &index in indexes {
        let Some(tool) = part(turn, message, index).cloned() else { continue };
        if !tool.state.is_terminal() {
            continue;
        }
        let mut pairs = tool_fields(turn, &tool);
        let failed = tool.state == crate::history::CallState::Failed;
        pairs.push(("tool_response", json!({ "output": tool.output, "is_error": failed })));
        let fired = fire(turn, HookEvent::PostToolUse, tool_names(&tool.name), fields(pairs)).await;
        let said: Vec<String> = fired.blocks.iter().chain(&fired.context).cloned().collect();
        if !said.is_empty() {
            super::calls::change(turn, message, index, |tool| {
                let output = tool.output.get_or_insert_with(String::new);
                output.push_str(&format!("\n\n[PostToolUse hook] {}", said.join("\n")));
                true
            });
        }
        stop = stop.or(fired.stop);
    }
    stop
}

/// `Notification` before the user is asked about `tool`.
pub(super) async fn asking(turn: &mut Turn<'_>, tool: &str) {
    let text = format!("cairn needs your permission to use {}", claude_name(tool).unwrap_or(tool));
    let pairs = vec![("message", text.into()), ("notification_type", "permission_prompt".into())];
    fire(turn, HookEvent::Notification, vec!["permission_prompt"], fields(pairs)).await;
}

/// How many times `Stop` hooks may send the model on in one turn: a hook that blocks every
/// stop (ignoring `stop_hook_active`) ends the turn there, even with no `[limits] max_rounds`.
pub const MOST_STOP_BLOCKS: u32 = 8;

/// `Stop`, when the model ended the turn: a hook that blocks it sends the model on with its
/// reason (`stop_hook_active` is then true for the next `Stop`), at most [`MOST_STOP_BLOCKS`]
/// times a turn.
pub(super) async fn stopping(turn: &mut Turn<'_>) -> After {
    let ended = After::End(DoneReason::ModelStop(ModelStop::EndTurn));
    if turn.run.subagent || !turn.run.hooks.as_ref().is_some_and(|hooks| hooks.any(HookEvent::Stop)) {
        return ended;
    }
    let active = turn.run.stop_hook_blocks > 0;
    let fired = fire(turn, HookEvent::Stop, Vec::new(), fields(vec![("stop_hook_active", active.into())])).await;
    match fired.block_reason() {
        Some(reason) if fired.stop.is_none() && turn.run.stop_hook_blocks >= MOST_STOP_BLOCKS => {
            let text = format!(
                "A Stop hook blocked the end of this turn {MOST_STOP_BLOCKS} times; the turn ends here. It said: {reason}"
            );
            turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
            ended
        }
        Some(reason) if fired.stop.is_none() => {
            turn.run.stop_hook_blocks += 1;
            turn.remind(format!("[Stop hook] The turn is not over: {reason}"));
            After::NextStep
        }
        _ => ended,
    }
}

/// `PreCompact` before an automatic compaction; `false` when a hook blocked it.
pub(super) async fn compacting(turn: &mut Turn<'_>) -> bool {
    if turn.run.subagent || !turn.run.hooks.as_ref().is_some_and(|hooks| hooks.any(HookEvent::PreCompact)) {
        return true;
    }
    let pairs = vec![("trigger", "auto".into()), ("custom_instructions", "".into())];
    let fired = fire(turn, HookEvent::PreCompact, vec!["auto"], fields(pairs)).await;
    match fired.block_reason() {
        Some(reason) => {
            let text = format!("A PreCompact hook blocked the compaction: {reason}");
            turn.recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
            false
        }
        None => true,
    }
}

//! The plan review: what an `exit_plan` call becomes in plan mode, where the permission engine
//! asks about it (`permissions::Subject::Plan`) and no one else may.
//!
//! The plan (the tool's preview) goes on the call's card and into the call's part as its
//! document, which the recorder shows as the session's plan document and the store keeps, so a
//! load shows it again; it reaches the editor before the question. The user is then asked, as a
//! permission question with the plan on the card, to implement it in ask mode, to implement it
//! accepting edits, or to keep planning. An approval switches the session's mode (the actor
//! sees the change, stores it and tells the client) and the turn goes on in that mode. "Keep
//! planning" asks what to change where the editor takes a typed answer (a form) and gives those
//! words to the model, and the turn goes on planning; without words, as when the question is
//! dismissed or fails, the session stays in plan mode and the turn ends, the user's next prompt
//! being the answer. With nobody to ask (a headless run) the plan is shown and the turn ends.
//! The review finishes the call itself: the tool's own `run` is never reached.

use super::Turn;
use super::calls::{abandon, call_id, cancel_all, change, context};
use super::state::{After, CallQueue, DoneReason, ModelStop, TurnError, TurnState};
use crate::history::{CallState, ToolContent};
use crate::permissions::Mode;
use crate::tools::host::{HostError, OptionKind, PermissionAnswer, PermissionOption, Question, Reply};

/// The answers the review offers, by option id.
const ACCEPT_EDITS: &str = "implement_accept_edits";
const ASK: &str = "implement_ask";
const KEEP_PLANNING: &str = "keep_planning";

/// What the card says about the options, for clients that show options by their kind alone.
const OPTIONS_MEANING: &str = "Implement this plan? \"Yes, and accept edits\" switches the session to \
     accept-edits mode; \"Yes, and ask before edits\" to ask mode, where each edit and command asks; \
     \"No, keep planning\" stays in plan mode, and you can say what to change.";

const NOT_RUN: &str = "Not run: the plan review ended the turn.";
const NOT_RUN_AFTER_APPROVAL: &str =
    "Not run: written before the plan was approved; call it again if the plan still needs it.";

/// How the review ended for the model, and what the turn does next.
struct Verdict {
    state: CallState,
    /// The call's result for the model.
    output: String,
    /// The line the card shows under the plan.
    shown: String,
    then: Then,
}

/// What the turn does after the review.
enum Then {
    /// Runs the calls the model wrote after `exit_plan` (it goes on planning).
    Calls,
    /// Goes back to the model without them: written before the user's answer, they would run in
    /// a mode the model did not plan them for (the plan was approved).
    Model,
    /// Ends, leaving them unrun.
    End,
}

/// Reviews the plan of the first queued call (an `exit_plan` in plan mode) with the user.
pub(super) async fn reviewing(turn: &mut Turn<'_>, mut queue: CallQueue) -> TurnState {
    let Some(head) = queue.calls.pop_front() else { return TurnState::StepEnd(After::NextStep) };
    let (index, message) = (head.index, queue.message.clone());
    let Ok(invocation) = head.invocation else { return TurnState::Executing(queue) };
    let id = call_id(turn, &message, index).unwrap_or_default();
    let ctx = context(turn, turn.cancel.child_token(), None, id.clone());
    let preview = match invocation.preview(&ctx).await {
        Ok(preview) => preview,
        Err(err) => {
            let why = err.to_string();
            change(turn, &message, index, |tool| tool.state.advance(CallState::Failed).is_ok() && set(tool, why));
            return TurnState::Executing(queue);
        }
    };
    let plan = preview
        .iter()
        .filter_map(|content| match content {
            ToolContent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let user = std::sync::Arc::clone(&turn.tools.host);
    let Some(permissions) = user.permissions() else {
        // Nobody to ask: the plan is what this run gives.
        change(turn, &message, index, |tool| {
            tool.content = preview.clone();
            tool.document = Some(plan.clone());
            tool.state.advance(CallState::Running).is_ok()
        });
        let verdict = Verdict {
            state: CallState::Succeeded,
            output: "The plan was shown to the user, who reviews it outside this run; nothing was changed, and \
                     the session stays in plan mode. The run ends here."
                .into(),
            shown: "Shown for review; this run cannot ask.".into(),
            then: Then::End,
        };
        return finish(turn, queue, index, &preview, verdict);
    };
    let Some(part) = change(turn, &message, index, |tool| {
        tool.content = preview.clone();
        tool.document = Some(plan.clone());
        tool.state.advance(CallState::Suspended).is_ok()
    }) else {
        return TurnState::Executing(queue);
    };
    // The plan document and the card reach the editor before the question about them.
    if let Err(err) = turn.recorder.flush().await {
        return TurnState::StepEnd(After::End(DoneReason::Error(TurnError::from(err))));
    }
    let mut shown = part;
    shown.content.push(ToolContent::Text { text: OPTIONS_MEANING.into() });
    let option = |id: &'static str, label: &str, kind| PermissionOption { id: id.into(), label: label.into(), kind };
    let options = [
        option(ACCEPT_EDITS, "Yes, and accept edits", OptionKind::AllowAlways),
        option(ASK, "Yes, and ask before edits", OptionKind::AllowOnce),
        option(KEEP_PLANNING, "No, keep planning", OptionKind::RejectOnce),
    ];
    let waiting = turn.run.user_wait.hold();
    let answer = tokio::select! {
        biased;
        () = turn.cancel.cancelled() => None,
        answer = permissions.request_permission(&shown, &options) => Some(answer),
    };
    let chosen = match answer {
        None | Some(Ok(PermissionAnswer::Cancelled)) if turn.cancel.is_cancelled() => {
            drop(waiting);
            cancel_all(turn, &queue);
            return TurnState::StepEnd(After::End(DoneReason::UserAbort));
        }
        Some(Ok(PermissionAnswer::Selected(option))) => Some(option),
        None | Some(Ok(PermissionAnswer::Cancelled)) => None,
        Some(Err(err)) => {
            tracing::warn!(%err, "the plan review failed; the session stays in plan mode");
            None
        }
    };
    let verdict = match chosen.as_deref() {
        Some(ACCEPT_EDITS) => approve(turn, Mode::AcceptEdits),
        Some(ASK) => approve(turn, Mode::Ask),
        Some(KEEP_PLANNING) => {
            let asked = Question { text: "What should change in the plan?".into(), choices: Vec::new(), typed: true };
            let words = tokio::select! {
                biased;
                () = turn.cancel.cancelled() => Err(HostError::gone()),
                reply = async {
                    match user.questions() {
                        Some(questions) => questions.ask(&id, &asked).await,
                        None => Err(HostError::unavailable()),
                    }
                } => reply,
            };
            keep_planning(match words {
                Ok(Reply::Answered { choice, text }) => text.or(choice),
                Ok(Reply::Declined | Reply::Dismissed) | Err(_) => None,
            })
        }
        Some(other) => {
            let other: String = other.chars().take(80).collect();
            tracing::warn!(option = %other, "the editor chose an option the plan review did not offer");
            unanswered()
        }
        None => unanswered(),
    };
    drop(waiting);
    if turn.cancel.is_cancelled() {
        cancel_all(turn, &queue);
        return TurnState::StepEnd(After::End(DoneReason::UserAbort));
    }
    change(turn, &message, index, |tool| tool.state.advance(CallState::Resuming).is_ok());
    change(turn, &message, index, |tool| tool.state.advance(CallState::Running).is_ok());
    finish(turn, queue, index, &preview, verdict)
}

/// The plan approved: the session leaves plan mode for `mode`, and the model implements it.
fn approve(turn: &mut Turn<'_>, mode: Mode) -> Verdict {
    match &turn.tools.switch {
        Some(switch) => {
            switch.send_replace(mode);
        }
        None => tracing::warn!("a plan was approved where the mode cannot change; it stays as it is"),
    }
    Verdict {
        state: CallState::Succeeded,
        output: format!(
            "The user approved the plan. The session is now in {} mode ({}). Implement the plan now, step by \
             step, keeping to it; track the steps with `todo`, and say so if the plan must change.",
            mode.id(),
            mode.description().to_lowercase()
        ),
        shown: format!("Approved: implementing in {} mode.", mode.id()),
        then: Then::Model,
    }
}

/// "Keep planning", with the user's words if they typed any.
fn keep_planning(words: Option<String>) -> Verdict {
    match words.filter(|words| !words.trim().is_empty()) {
        Some(words) => Verdict {
            state: CallState::Failed,
            output: format!(
                "The user wants to keep planning; the session stays in plan mode. What the user wants changed:\n\n\
                 {words}\n\nRevise the plan accordingly (read more first if you need to), then present the whole \
                 revised plan with `exit_plan`."
            ),
            shown: format!("Keep planning: {words}"),
            then: Then::Calls,
        },
        None => Verdict {
            state: CallState::Failed,
            output: "The user chose to keep planning without saying yet what to change; the session stays in \
                     plan mode. Their next message says what to change."
                .into(),
            shown: "Keep planning.".into(),
            then: Then::End,
        },
    }
}

/// The question was dismissed, failed, or answered with something it did not offer.
fn unanswered() -> Verdict {
    Verdict {
        state: CallState::Failed,
        output: "The plan review got no answer; the session stays in plan mode and nothing was changed. The \
                 user's next message says how to go on."
            .into(),
        shown: "No answer; still planning.".into(),
        then: Then::End,
    }
}

/// Records the call's end; a review that ends the turn leaves the calls after it unrun.
fn finish(turn: &mut Turn<'_>, queue: CallQueue, index: u32, plan: &[ToolContent], verdict: Verdict) -> TurnState {
    let Verdict { state, output, shown, then } = verdict;
    change(turn, &queue.message, index, |tool| {
        tool.content = plan.to_vec();
        tool.content.push(ToolContent::Text { text: shown });
        tool.state.advance(state).is_ok() && set(tool, output)
    });
    match then {
        Then::Calls => TurnState::Executing(queue),
        Then::Model => {
            abandon(turn, &queue, NOT_RUN_AFTER_APPROVAL);
            TurnState::Executing(CallQueue { message: queue.message, calls: Default::default() })
        }
        Then::End => {
            abandon(turn, &queue, NOT_RUN);
            TurnState::StepEnd(After::End(DoneReason::ModelStop(ModelStop::EndTurn)))
        }
    }
}

/// Sets the call's result for the model; always `true`, for `change`.
fn set(tool: &mut crate::history::ToolPart, output: String) -> bool {
    tool.output = Some(output);
    true
}

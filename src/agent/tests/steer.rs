//! Steering as specs: a prompt sent while the turn runs joins it at the next step boundary,
//! once, after the step's tool results; a turn the model ended goes on for it; a limit still
//! ends the turn, leaving the prompt to the session.

use super::*;

fn roles_and_texts(history: &[Message]) -> Vec<(Role, String)> {
    history.iter().map(|m| (m.role, crate::history::texts(&m.parts).collect::<Vec<_>>().join(""))).collect()
}

fn steered(outcome: &Outcome) -> Vec<String> {
    outcome
        .events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Steered(message) => Some(crate::history::texts(&message.parts).collect()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_prompt_sent_during_a_tool_step_joins_after_the_tool_results_and_is_sent_once() {
    let setup = Setup {
        script: vec![ok(glob_call("a")), ok(text("done"))],
        steer_at: vec![(0, "also look at the docs")],
        ..Setup::default()
    };
    let outcome = drive(setup).await;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert_eq!(outcome.joined, [true]);
    assert_eq!(steered(&outcome), ["also look at the docs"], "recorded once, where it joined");
    let roles: Vec<Role> = outcome.history.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User, Role::Assistant], "after the tool step");
    assert!(outcome.history[1].parts.iter().any(|part| matches!(part, Part::Tool(_))), "the call and its result");
    assert_eq!(outcome.sent.len(), 2);
    assert!(!outcome.sent[0].texts.iter().any(|t| t.contains("docs")), "not before it was sent");
    let second = &outcome.sent[1].texts;
    assert_eq!(second.last().map(String::as_str), Some("also look at the docs"), "last, after the results");
    assert_eq!(second.iter().filter(|t| t.contains("docs")).count(), 1, "once");
}

#[tokio::test]
async fn a_turn_the_model_ended_samples_again_for_steered_text() {
    let setup = Setup {
        script: vec![ok(text("first answer")), ok(text("second answer"))],
        steer_at: vec![(0, "one more thing"), (0, "and another")],
        ..Setup::default()
    };
    let outcome = drive(setup).await;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert_eq!(outcome.joined, [true, true]);
    assert_eq!(
        roles_and_texts(&outcome.history),
        [
            (Role::User, "go".to_owned()),
            (Role::Assistant, "first answer".to_owned()),
            (Role::User, "one more thing".to_owned()),
            (Role::User, "and another".to_owned()),
            (Role::Assistant, "second answer".to_owned()),
        ]
    );
    assert_eq!(outcome.sent.len(), 2);
    assert_eq!(outcome.phases().iter().filter(|p| **p == Phase::StepStart).count(), 2);
}

#[tokio::test]
async fn a_limit_still_ends_the_turn_and_the_steered_text_does_not_join() {
    // The model ended the turn; going on would pass the limit: it ends as the model ended it.
    let limits = Limits { max_rounds: 1, ..Limits::default() };
    let setup = Setup { script: vec![ok(text("done"))], limits, steer_at: vec![(0, "more")], ..Setup::default() };
    let outcome = drive(setup).await;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert!(outcome.notices().is_empty(), "no limit is blamed: {:?}", outcome.notices());
    assert_eq!(outcome.joined, [false], "the session runs it next");
    assert!(steered(&outcome).is_empty());

    // A tool step at the limit stops the turn as before.
    let limits = Limits { max_rounds: 1, ..Limits::default() };
    let setup = Setup { script: vec![ok(glob_call("a"))], limits, steer_at: vec![(0, "more")], ..Setup::default() };
    let outcome = drive(setup).await;
    assert_eq!(outcome.result, Ok(StopReason::MaxTurnRequests));
    assert_eq!(outcome.joined, [false]);
}

//! Checkpoints around calls: what a call may change is captured and stored before it runs, what
//! it changed after; a capture that cannot be stored keeps the call from running.

use super::*;
use crate::tools::checkpoint::{By, State};

/// The checkpoints the turn recorded: by whom, and each file's path and whether it exists.
fn captures(outcome: &Outcome) -> Vec<(By, Vec<(String, bool)>)> {
    outcome
        .events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::Checkpoint { capture, .. } => Some((
                capture.by,
                capture
                    .entries
                    .iter()
                    .map(|entry| (entry.path.display().to_string(), entry.state != State::Missing))
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_write_is_captured_before_and_after_and_its_content_is_stored_first() {
    let script = vec![ok(calls(&[("w", "write", r#"{"path":"a.txt","content":"hi\n"}"#)])), ok(text("done"))];
    let setup = Setup { script, mode: Mode::Bypass, checkpoints: Some(Disk::Fine), ..Setup::default() };
    let outcome = drive(setup).await;
    assert_eq!(outcome.call("w").unwrap().state, crate::history::CallState::Succeeded);
    assert_eq!(
        captures(&outcome),
        [(By::Seen, vec![("a.txt".into(), false)]), (By::Made, vec![("a.txt".into(), true)])],
        "absent before, present after"
    );
    let blobs = outcome.events.iter().position(|event| matches!(event, AgentEvent::Blobs(_))).unwrap();
    let made = outcome.events.iter().rposition(|event| matches!(event, AgentEvent::Checkpoint { .. })).unwrap();
    assert!(blobs < made, "the content is recorded before the capture that names it");
}

#[tokio::test]
async fn a_command_is_captured_around_unless_it_only_reads() {
    let script = vec![
        ok(calls(&[("r", "bash", r#"{"command":"cat missing.txt; ls"}"#)])),
        ok(calls(&[("c", "bash", r#"{"command":"echo made > made.txt"}"#)])),
        ok(text("done")),
    ];
    let setup = Setup { script, mode: Mode::Bypass, checkpoints: Some(Disk::Fine), ..Setup::default() };
    let outcome = drive(setup).await;
    assert_eq!(captures(&outcome), [(By::Made, vec![("made.txt".into(), true)])], "an empty workspace: nothing seen");
}

#[tokio::test]
async fn a_capture_that_cannot_be_stored_keeps_the_call_from_running() {
    let script = vec![ok(calls(&[("w", "write", r#"{"path":"a.txt","content":"hi\n"}"#)])), ok(text("done"))];
    let setup = Setup { script, mode: Mode::Bypass, checkpoints: Some(Disk::Full), ..Setup::default() };
    let outcome = drive(setup).await;
    let call = outcome.call("w").unwrap();
    assert_eq!(call.state, crate::history::CallState::Failed);
    let output = call.output.as_deref().unwrap();
    assert!(output.starts_with("Not run: the files it may change could not be checkpointed first"), "{output}");
    assert!(output.contains("disk is full"), "{output}");
    assert!(!outcome.dir.path().join("a.txt").exists(), "nothing changed uncaptured");
}

//! The hub's specs: numbering, keeping and resuming a session's stream, per process and by a
//! shared event log's numbers.

use super::*;
use crate::ids::MessageId;

/// A connection's wire: what it was sent, with numbers.
#[derive(Default)]
struct Wire(Mutex<Vec<(Option<u64>, String)>>);

impl UpdateSink for Wire {
    fn send(&self, _session: &SessionId, update: Update) {
        self.0.lock().unwrap().push((None, text(&update)));
    }
    fn send_numbered(&self, _session: &SessionId, seq: u64, update: Update) {
        self.0.lock().unwrap().push((Some(seq), text(&update)));
    }
    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::new(crate::tools::NoEditor)
    }
}

fn text(update: &Update) -> String {
    match update {
        Update::AgentText { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}

fn chunk(text: &str) -> Update {
    Update::AgentText { message: MessageId::generate(), text: text.into() }
}

#[test]
fn a_resume_refused_for_a_session_the_hub_never_saw_leaves_nothing_behind() {
    let hub = Hub::new();
    let viewer = hub.viewer(Arc::new(Wire::default()));
    let made_up = SessionId::from_string("ses_made_up".repeat(1000));
    assert!(matches!(hub.resume(&made_up, &viewer, 5), Err(ResumeError::Ahead { last: 0, .. })));
    assert!(hub.lock().is_empty());
}

#[test]
fn a_resume_sends_what_was_missed_once_then_the_live_stream() {
    let hub = Hub::new();
    let session = SessionId::generate();
    let (wire, other) = (Arc::new(Wire::default()), Arc::new(Wire::default()));
    let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
    hub.attach(&session, &viewer);
    hub.send(&session, chunk("a"));
    hub.send(&session, chunk("b"));
    hub.detach(&viewer);
    hub.send(&session, chunk("c"));
    let again = hub.viewer(Arc::clone(&other) as Arc<dyn UpdateSink>);
    assert_eq!(hub.resume(&session, &again, 1), Ok(3));
    hub.send(&session, chunk("d"));
    let seen = |wire: &Wire| wire.0.lock().unwrap().clone();
    assert_eq!(seen(&wire), [(Some(1), "a".to_owned()), (Some(2), "b".to_owned())]);
    assert_eq!(seen(&other), [(Some(2), "b".into()), (Some(3), "c".into()), (Some(4), "d".into())]);
    assert_eq!(
        hub.resume(&session, &again, 9),
        Err(ResumeError::Ahead { session: session.clone(), after: 9, last: 4 })
    );
}

#[test]
fn a_sub_agents_updates_reach_the_viewers_unnumbered_and_take_no_room_in_the_stream() {
    let hub = Hub::new();
    let session = SessionId::generate();
    let wire = Arc::new(Wire::default());
    let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
    hub.attach(&session, &viewer);
    hub.send(&session, chunk("a"));
    let child = SessionId::generate();
    for _ in 0..KEPT + 10 {
        hub.send(&session, Update::Elsewhere { session: child.clone(), update: Box::new(chunk("child")) });
    }
    hub.send(&session, chunk("b"));
    let seen = wire.0.lock().unwrap().clone();
    assert_eq!(seen.len(), KEPT + 12);
    assert_eq!((seen[0].0, seen[KEPT + 11].0), (Some(1), Some(2)), "the session's numbers run on");
    assert!(seen[1..=KEPT + 10].iter().all(|(seq, _)| seq.is_none()));
    let again = hub.viewer(Arc::new(Wire::default()) as Arc<dyn UpdateSink>);
    assert_eq!(hub.resume(&session, &again, 0), Ok(2), "the session's own updates are all still kept");
}

#[test]
fn only_the_latest_updates_are_kept_and_only_so_many_unviewed_streams() {
    let hub = Hub::new();
    let session = SessionId::generate();
    for i in 0..KEPT + 10 {
        hub.send(&session, chunk(&i.to_string()));
    }
    let viewer = hub.viewer(Arc::new(Wire::default()) as Arc<dyn UpdateSink>);
    let too_old = hub.resume(&session, &viewer, 5);
    assert_eq!(too_old, Err(ResumeError::TooOld { session: session.clone(), after: 5, oldest: 11 }));
    assert_eq!(hub.resume(&session, &viewer, 10), Ok((KEPT + 10) as u64));

    for _ in 0..UNVIEWED_KEPT + 5 {
        hub.send(&SessionId::generate(), chunk("x"));
    }
    assert!(hub.lock().len() <= UNVIEWED_KEPT + 1, "the viewed session and the latest unviewed ones");
    assert!(hub.views(&session, &viewer), "a viewed stream is never forgotten");
}

/// A hub of a server whose store keeps an event log shared by replicas.
fn shared_hub() -> Arc<Hub> {
    let hub = Hub::new();
    hub.logged.store(true, Ordering::Relaxed);
    hub
}

/// A row of the session's log showing `update`.
fn row(seq: i64, update: &Update) -> crate::store::pg::events::Event {
    let body = update.to_event().unwrap();
    crate::store::pg::events::Event { seq, epoch: 1, origin: "host-a:1:a".into(), body }
}

fn usage() -> Update {
    Update::Usage { used: 1, size: 2, cost: None }
}

#[test]
fn on_a_shared_log_updates_carry_their_logs_numbers_and_those_it_does_not_keep_go_unnumbered() {
    let hub = shared_hub();
    let session = SessionId::generate();
    let wire = Arc::new(Wire::default());
    let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
    hub.attach(&session, &viewer);
    // Rows 1 to 3 were the prompt, shown on another replica: the numbers go on from the log's.
    hub.send_logged(&session, 4, chunk("a"));
    hub.send(&session, usage());
    hub.send_logged(&session, 7, chunk("b"));
    // A row before one already numbered (a follower behind a turn started here).
    hub.send_logged(&session, 6, chunk("late"));
    let seen = wire.0.lock().unwrap().clone();
    assert_eq!(seen, [(Some(4), "a".to_owned()), (None, text(&usage())), (Some(7), "b".into()), (None, "late".into())]);
}

#[test]
fn a_resume_from_the_log_sends_what_was_missed_then_only_what_comes_after_it_each_once() {
    let hub = shared_hub();
    let session = SessionId::generate();
    hub.send_logged(&session, 1, chunk("a"));
    let wire = Arc::new(Wire::default());
    let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
    let resume = hub.resume_from_log(&session, &viewer);
    // While the log is read: a row the read holds, an update the log does not keep, and a row
    // committed after the read.
    let (b, c) = (chunk("b"), chunk("c"));
    hub.send_logged(&session, 3, c.clone());
    hub.send(&session, usage());
    hub.send_logged(&session, 4, chunk("d"));
    assert_eq!(resume.send(1, Missed::Rows(vec![row(2, &b), row(3, &c)])), Ok(3));
    hub.send_logged(&session, 3, c);
    hub.send_logged(&session, 5, chunk("e"));
    let seen = wire.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (None, text(&usage())),
            (Some(2), "b".to_owned()),
            (Some(3), "c".into()),
            (Some(4), "d".into()),
            (Some(5), "e".into())
        ]
    );
    assert!(hub.views(&session, &viewer));
}

#[test]
fn a_resume_from_the_log_that_cannot_give_everything_leaves_the_connection_as_it_was() {
    let hub = shared_hub();
    let session = SessionId::generate();
    let wire = Arc::new(Wire::default());
    let viewer = hub.viewer(Arc::clone(&wire) as Arc<dyn UpdateSink>);
    let resume = hub.resume_from_log(&session, &viewer);
    hub.send_logged(&session, 9, chunk("x"));
    let too_old = resume.send(2, Missed::Pruned { oldest: 5 });
    assert_eq!(too_old, Err(ResumeError::TooOld { session: session.clone(), after: 2, oldest: 5 }));
    let resume = hub.resume_from_log(&session, &viewer);
    let ahead = resume.send(12, Missed::Ahead { last: 9 });
    assert_eq!(ahead, Err(ResumeError::Ahead { session: session.clone(), after: 12, last: 9 }));
    assert!(!hub.views(&session, &viewer), "a connection that did not view the session does not");
    assert!(wire.0.lock().unwrap().is_empty(), "nor is it sent what came meanwhile");
}

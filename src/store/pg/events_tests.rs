//! A session's event log followed from another replica: every event once and in order, for a
//! subscriber there from the start and one joining mid-turn, whatever happens to the wake-ups;
//! and what a client that resumes after a number missed, or why it cannot all be given.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::Client;

use super::events::{self, Append, Appended, Event, Follower};
use super::lease::{self, Lease};
use super::tests::{fresh, took};
use super::{PgError, PgTarget, Prepared};
use crate::ids::SessionId;

const POLL: Duration = Duration::from_millis(250);

async fn take(client: &Client, target: &PgTarget, session: &SessionId, holder: &str, ttl: Duration) -> Lease {
    took(lease::take(client, target, session, holder, ttl).await.unwrap())
}

/// Appends `count` events from `next`, commits, and wakes the followers if `wake`.
async fn write(client: &mut Client, target: &PgTarget, lease: &Lease, next: &mut i64, count: usize, wake: bool) {
    let bodies: Vec<String> = (0..count).map(|n| format!("{{\"chunk\":{}}}", *next + n as i64)).collect();
    let tx = client.transaction().await.unwrap();
    events::append(&tx, target, &[Append { lease, first_seq: *next, bodies: &bodies, chunks: &[] }]).await.unwrap();
    tx.commit().await.unwrap();
    *next += count as i64;
    if wake {
        events::notify(client, &Prepared::default(), target, std::slice::from_ref(&lease.session)).await.unwrap();
    }
}

/// The next `count` events, waiting at most 20 s for all of them.
async fn receive(events: &mut mpsc::Receiver<Event>, count: usize) -> Vec<Event> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < count {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(event)) => got.push(event),
            Ok(None) => panic!("the follow ended after {} events", got.len()),
            Err(_) => panic!("only {} of {count} events came", got.len()),
        }
    }
    got
}

fn seqs(events: &[Event]) -> Vec<i64> {
    events.iter().map(|event| event.seq).collect()
}

#[tokio::test]
async fn a_follower_elsewhere_gets_every_event_once_in_order_and_a_late_joiner_gets_the_rest() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let follower = Follower::start(target.clone(), "follower:1:f".into(), POLL).await.unwrap();
    let mut early = follower.follow(&session, 0);
    let mut next = 1;
    let mut late = None;
    for batch in 0..100 {
        write(&mut writer, &target, &lease, &mut next, 1 + batch % 4, true).await;
        if batch == 50 {
            // A client attaching mid-turn: its replay ends at the log's last seq, and it follows
            // from there.
            let replayed = events::last_seq(&writer, &target, &session).await.unwrap();
            late = Some((replayed, follower.follow(&session, replayed)));
        }
    }
    let total = usize::try_from(next - 1).unwrap();
    let got = receive(&mut early, total).await;
    assert_eq!(seqs(&got), (1..next).collect::<Vec<_>>());
    assert!(got.iter().all(|event| event.epoch == 1 && event.body == format!("{{\"chunk\":{}}}", event.seq)));
    let (replayed, mut late) = late.unwrap();
    let got = receive(&mut late, total - usize::try_from(replayed).unwrap()).await;
    assert_eq!(seqs(&got), (replayed + 1..next).collect::<Vec<_>>(), "the rest, from where its replay ended");
    tokio::time::sleep(POLL * 2).await;
    assert!(early.try_recv().is_err() && late.try_recv().is_err(), "nothing twice");
}

#[tokio::test]
async fn events_committed_without_a_wake_up_still_come_with_the_next_poll() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let follower = Follower::start(target.clone(), "follower:1:f".into(), POLL).await.unwrap();
    let mut events = follower.follow(&session, 0);
    let mut next = 1;
    write(&mut writer, &target, &lease, &mut next, 3, false).await;
    assert_eq!(seqs(&receive(&mut events, 3).await), [1, 2, 3]);
}

#[tokio::test]
async fn a_replica_whose_lease_was_taken_over_appends_nothing() {
    let (target, mut writer) = fresh().await;
    let mut paused = target.connect().await.unwrap();
    let session = SessionId::generate();
    let old = take(&paused, &target, &session, "a", Duration::from_millis(100)).await;
    let mut next = 1;
    write(&mut paused, &target, &old, &mut next, 2, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = take(&writer, &target, &session, "b", Duration::from_secs(60)).await;
    let continued = events::last_seq(&writer, &target, &session).await.unwrap();
    assert_eq!(continued, 2, "the new holder continues the log");

    let tx = paused.transaction().await.unwrap();
    let late = ["late".to_owned()];
    let err = events::append(&tx, &target, &[Append { lease: &old, first_seq: 3, bodies: &late, chunks: &[] }])
        .await
        .unwrap_err();
    assert!(matches!(err, PgError::Fenced { epoch: 1, .. }), "{err}");
    drop(tx);
    // A batch with one fenced session among live ones writes nothing at all.
    let other = take(&paused, &target, &SessionId::generate(), "a", Duration::from_secs(60)).await;
    let tx = paused.transaction().await.unwrap();
    let batch = [
        Append { lease: &other, first_seq: 1, bodies: &late, chunks: &[] },
        Append { lease: &old, first_seq: 3, bodies: &late, chunks: &[] },
    ];
    let err = events::append(&tx, &target, &batch).await.unwrap_err();
    assert!(matches!(&err, PgError::Fenced { session: fenced, .. } if fenced == session.as_str()), "{err}");
    tx.commit().await.unwrap();
    let mut next = continued + 1;
    write(&mut writer, &target, &new, &mut next, 1, true).await;
    let rows = writer.query("SELECT seq, epoch FROM session_events ORDER BY seq", &[]).await.unwrap();
    let rows: Vec<(i64, i64)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    assert_eq!(rows, [(1, 1), (2, 1), (3, 2)]);
}

#[tokio::test]
async fn a_storm_of_wake_ups_and_a_subscriber_that_reads_late_lose_nothing_and_repeat_nothing() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let follower = Follower::start(target.clone(), "follower:1:f".into(), POLL).await.unwrap();
    let mut events = follower.follow(&session, 0);
    let stranger = target.connect().await.unwrap();
    let mut next = 1;
    for round in 0..30 {
        // Wake-ups for other sessions, for every session, and garbage, between the writes.
        for _ in 0..50 {
            events::notify(&stranger, &Prepared::default(), &target, &[SessionId::generate()]).await.unwrap();
        }
        events::notify(&stranger, &Prepared::default(), &target, &[]).await.unwrap();
        stranger.execute("SELECT pg_notify('cairn_events', ',,,')", &[]).await.unwrap();
        // More than a subscriber's queue holds, unread until the end.
        write(&mut writer, &target, &lease, &mut next, 40 + round, true).await;
    }
    let total = usize::try_from(next - 1).unwrap();
    assert!(total > 1024);
    let got = receive(&mut events, total).await;
    assert_eq!(seqs(&got), (1..next).collect::<Vec<_>>());
    tokio::time::sleep(POLL * 2).await;
    assert!(events.try_recv().is_err(), "nothing twice");
}

#[tokio::test]
async fn a_subscriber_that_goes_away_is_forgotten_and_the_others_go_on() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let follower = Follower::start(target.clone(), "follower:1:f".into(), POLL).await.unwrap();
    drop(follower.follow(&session, 0));
    let other = SessionId::generate();
    let other_lease = take(&writer, &target, &other, "a", Duration::from_secs(60)).await;
    let mut kept = follower.follow(&other, 0);
    let (mut next, mut other_next) = (1, 1);
    write(&mut writer, &target, &lease, &mut next, 5, true).await;
    write(&mut writer, &target, &other_lease, &mut other_next, 2, true).await;
    assert_eq!(seqs(&receive(&mut kept, 2).await), [1, 2]);
}

#[tokio::test]
async fn a_follower_behind_rows_pruned_before_it_read_them_goes_on_from_the_rows_left() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &lease, &mut next, 5, true).await;
    // Rows 2..4 grew old while this follower had only forwarded row 1, and were pruned.
    writer.execute("UPDATE session_events SET created_at = now() - interval '1 hour'", &[]).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    super::prune::prune_once(&writer, &target, Duration::from_secs(900), 100, &stop).await.unwrap();
    let follower = Follower::start(target.clone(), "follower:1:f".into(), POLL).await.unwrap();
    let mut events = follower.follow(&session, 1);
    write(&mut writer, &target, &lease, &mut next, 2, true).await;
    assert_eq!(seqs(&receive(&mut events, 3).await), [5, 6, 7], "never stuck at the gap");
}

/// The rows `lease`'s holder committed as `seqs`, as that replica's writer tells its follower.
fn own(lease: &Lease, seqs: std::ops::Range<i64>) -> Vec<Appended> {
    vec![Appended { session: lease.session.clone(), seqs, epoch: lease.epoch }]
}

#[tokio::test]
async fn the_writers_own_rows_are_passed_at_once_without_reading_them_and_rows_before_them_are_read_first() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let me = "here:1:h";
    // No poll in the test's time: only a new follow and what the writer says make it read.
    let follower = Follower::start(target.clone(), me.into(), Duration::from_secs(600)).await.unwrap();
    let mut events = follower.follow(&session, 0);
    // Its first read done before anything is written (were it later, it would read the rows
    // below itself: the same events).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = take(&writer, &target, &session, "there:2:t", Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &before, &mut next, 2, false).await;
    lease::release(&writer, &target, &before).await.unwrap();
    let mine = take(&writer, &target, &session, me, Duration::from_secs(60)).await;

    // This replica's rows after another replica's that the follow has not read: it reads them
    // all, every row once and in order.
    write(&mut writer, &target, &mine, &mut next, 3, false).await;
    follower.own_rows().committed(own(&mine, 3..6));
    let got = receive(&mut events, 5).await;
    assert_eq!(seqs(&got), [1, 2, 3, 4, 5]);
    assert_eq!(got[3].body, "{\"chunk\":4}", "read from the log");

    // Once the follow has forwarded everything before them, this replica's rows are passed at
    // once: one row, the last, stands for them, read from nowhere.
    write(&mut writer, &target, &mine, &mut next, 3, false).await;
    follower.own_rows().committed(own(&mine, 6..9));
    let got = receive(&mut events, 1).await;
    assert_eq!(got, [Event { seq: 8, epoch: mine.epoch, origin: me.to_owned(), body: String::new() }]);

    // A wake-up this replica's writer sent reads nothing (its rows come as above); another's does.
    write(&mut writer, &target, &mine, &mut next, 2, false).await;
    events::notify_from(&writer, &Prepared::default(), &target, Some(me), std::slice::from_ref(&session))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(events.try_recv().is_err(), "its own wake-up is skipped");
    events::notify(&writer, &Prepared::default(), &target, std::slice::from_ref(&session)).await.unwrap();
    assert_eq!(seqs(&receive(&mut events, 2).await), [9, 10]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(events.try_recv().is_err(), "nothing twice");
}

#[tokio::test]
async fn of_a_session_followed_three_times_the_follow_that_went_away_is_forgotten_and_the_others_get_every_row() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let me = "here:1:h";
    let follower = Follower::start(target.clone(), me.into(), Duration::from_secs(600)).await.unwrap();
    let gone = follower.follow(&session, 0);
    let mut kept = follower.follow(&session, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(gone);
    let mine = take(&writer, &target, &session, me, Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &mine, &mut next, 3, false).await;
    follower.own_rows().committed(own(&mine, 1..4));
    assert_eq!(seqs(&receive(&mut kept, 1).await), [3], "this replica's rows, passed");

    write(&mut writer, &target, &mine, &mut next, 2, false).await;
    follower.own_rows().committed(own(&mine, 4..6));
    // Passed as one, or read from the log by the round the gone follow's closing started.
    let mut got = seqs(&receive(&mut kept, 1).await);
    while got.last() != Some(&5) {
        got.extend(seqs(&receive(&mut kept, 1).await));
    }
    assert!(got == [5] || got == [4, 5], "every row once, in order: {got:?}");
    // A follow of the same session starting later reads what it missed, then gets this
    // replica's rows passed as the one kept does.
    let mut later = follower.follow(&session, 3);
    assert_eq!(seqs(&receive(&mut later, 2).await), [4, 5], "read from the log");
    write(&mut writer, &target, &mine, &mut next, 2, false).await;
    follower.own_rows().committed(own(&mine, 6..8));
    assert_eq!(seqs(&receive(&mut kept, 1).await), [7]);
    assert_eq!(seqs(&receive(&mut later, 1).await), [7]);
    let other = take(&writer, &target, &SessionId::generate(), "there:2:t", Duration::from_secs(60)).await;
    write(&mut writer, &target, &other, &mut 1, 1, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(kept.try_recv().is_err() && later.try_recv().is_err(), "nothing twice, nothing of another session");
}

#[tokio::test]
async fn what_a_client_missed_is_every_row_after_its_number_unless_one_of_them_was_pruned() {
    use super::events::Missed;
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    assert_eq!(events::missed(&writer, &target, &session, 0, 100).await.unwrap(), Missed::Rows(Vec::new()));
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &lease, &mut next, 10, false).await;
    let missed = |after| {
        let (writer, target, session) = (&writer, &target, &session);
        async move { events::missed(writer, target, session, after, 100).await.unwrap() }
    };
    let Missed::Rows(rows) = missed(6).await else { panic!("nothing pruned yet") };
    assert_eq!(seqs(&rows), [7, 8, 9, 10]);
    assert_eq!(missed(10).await, Missed::Rows(Vec::new()), "it saw everything");
    assert_eq!(missed(12).await, Missed::Ahead { last: 10 });
    // Pruned: the oldest rows, and one in the middle an older row outlived.
    let gone: &[i64] = &[1, 2, 3, 5, 6];
    writer
        .execute("DELETE FROM session_events WHERE session_id = $1 AND seq = ANY($2)", &[&session.as_str(), &gone])
        .await
        .unwrap();
    assert_eq!(missed(0).await, Missed::Pruned { oldest: 7 });
    assert_eq!(missed(4).await, Missed::Pruned { oldest: 7 }, "its own row is still there, but 5 and 6 are not");
    let Missed::Rows(rows) = missed(6).await else { panic!("7 on are all there") };
    assert_eq!(seqs(&rows), [7, 8, 9, 10]);
}

#[tokio::test]
async fn a_client_further_behind_than_a_resume_gives_is_told_to_load_from_where_one_could_start() {
    use super::events::Missed;
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &lease, &mut next, 10, false).await;
    let missed = |after| {
        let (writer, target, session) = (&writer, &target, &session);
        async move { events::missed(writer, target, session, after, 4).await.unwrap() }
    };
    assert_eq!(missed(5).await, Missed::Pruned { oldest: 7 }, "five rows missed, four given at most");
    assert_eq!(missed(0).await, Missed::Pruned { oldest: 7 });
    let Missed::Rows(rows) = missed(6).await else { panic!("four rows are given") };
    assert_eq!(seqs(&rows), [7, 8, 9, 10]);
    assert_eq!(missed(9).await, Missed::Rows(vec![rows[3].clone()]));
}

/// A replica starting to follow a long session reads its open questions through the questions'
/// own indexes, not the session's thousands of streamed rows.
#[tokio::test]
async fn open_questions_of_a_long_session_are_read_from_the_question_rows_alone() {
    let (target, mut writer) = fresh().await;
    let session = SessionId::generate();
    let lease = take(&writer, &target, &session, "a", Duration::from_secs(60)).await;
    let mut next = 1;
    write(&mut writer, &target, &lease, &mut next, 5_000, false).await;
    let questions = [r#"{"asked":{"id":"q1"}}"#, r#"{"asked":{"id":"q2"}}"#, r#"{"closed":{"id":"q1"}}"#];
    let bodies: Vec<String> = questions.iter().map(|body| (*body).to_owned()).collect();
    let tx = writer.transaction().await.unwrap();
    events::append(&tx, &target, &[Append { lease: &lease, first_seq: next, bodies: &bodies, chunks: &[] }])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    writer.batch_execute("ANALYZE session_events").await.unwrap();

    let open = events::open_questions(&writer, &session, next + 2).await.unwrap();
    assert_eq!(open.iter().map(|event| event.body.as_str()).collect::<Vec<_>>(), [questions[1]]);
    let explain = format!("EXPLAIN {}", super::late::OPEN);
    let plan = writer.query(&explain, &[&session.as_str(), &(next + 2)]).await.unwrap();
    let plan: Vec<String> = plan.iter().map(|row| row.get(0)).collect();
    assert!(plan.iter().any(|line| line.contains("session_events_asked")), "{plan:#?}");
}

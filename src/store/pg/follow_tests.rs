//! Following a turn from another replica through the event log: what the turn's replica shows
//! is logged in the same transaction as the rows it shows, and a client on another replica that
//! loads the session mid-turn and follows from the `seq` its load reached gets every later
//! update exactly once and in order, nothing the load already showed; each row names the replica
//! that showed it.

use std::time::Duration;

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, Write};

/// A take of `id`'s lease with no prompt, after this replica's own last turn.
fn take(id: &SessionId) -> Write {
    Write::TakeLease { session_id: id.clone(), last: LastTurn::Ours, prompt: None, title: None, command: None }
}

async fn replica(url: &str, name: &str) -> Store {
    Store::open_postgres_as(url, name, Duration::from_secs(30)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_another_replica_loads_mid_turn_and_follows_every_later_update_once_in_order() {
    let url = super::fixture::database().await;
    let (a, b) = (replica(&url, "host-a:1:a").await, replica(&url, "host-b:2:b").await);
    assert!(a.logs_events());
    let id = SessionId::generate();
    a.submit(
        Write::InsertSession(Box::new(SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))),
        None,
    );
    let prompt = Message::new(Role::User, vec![Part::Text { text: "go".into() }], MessageMeta::default());
    a.commit(Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::Ours,
        prompt: Some(prompt),
        title: None,
        command: None,
    })
    .await
    .unwrap();
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message_id = answer.id.clone();
    a.submit(Write::InsertMessage { session_id: id.clone(), message: answer }, None);
    let part = Part::Text { text: String::new() };
    a.submit(Write::OpenPart { session_id: id.clone(), message_id: message_id.clone(), index: 0, part }, None);

    let chunks: Vec<String> = (0..300).map(|n| format!("<{n}>")).collect();
    let mut loaded = None;
    for (n, chunk) in chunks.iter().enumerate() {
        let write = Write::AppendPart { message_id: message_id.clone(), index: 0, delta: chunk.clone() };
        a.submit_shown(write, vec![chunk.clone()], None);
        if n % 20 == 19 {
            a.flush().await.unwrap();
        }
        if n == 150 {
            // A client of b loads the session while the turn streams on a.
            loaded = Some(b.messages_at_seq(&id).await.unwrap());
        }
    }
    a.submit(Write::ClosePart { message_id: message_id.clone(), index: 0 }, None);
    a.flush().await.unwrap();

    let (messages, seq) = loaded.unwrap();
    let seen = match messages.get(1).and_then(|answer| answer.parts.first()) {
        Some(Part::Text { text }) => text.clone(),
        None => String::new(),
        Some(other) => panic!("{other:?}"),
    };
    let count = usize::try_from(seq).unwrap();
    assert_eq!(seen, chunks[..count].concat(), "the load shows exactly the chunks its seq counts");

    let mut events = b.follow(&id, seq).unwrap();
    let mut followed = Vec::new();
    while followed.len() < chunks.len() - count {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
        assert_eq!(event.seq, seq + 1 + i64::try_from(followed.len()).unwrap(), "in order, none missed or repeated");
        followed.push(event.body);
    }
    assert_eq!(seen + &followed.concat(), chunks.concat(), "the load and the follow together show the turn once");
    assert!(
        tokio::time::timeout(Duration::from_millis(600), events.recv()).await.is_err(),
        "nothing more: no event twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_logs_and_a_new_holder_continues_the_numbering() {
    let url = super::fixture::database().await;
    let (a, b) = (replica(&url, "host-a:1:a").await, replica(&url, "host-b:2:b").await);
    let id = SessionId::generate();
    a.submit(
        Write::InsertSession(Box::new(SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))),
        None,
    );
    let note =
        |text: &str| Message::new(Role::Assistant, vec![Part::Notice { text: text.into() }], MessageMeta::default());
    // Without the lease nothing is logged: the rows are written, no event.
    a.submit_shown(Write::InsertMessage { session_id: id.clone(), message: note("idle") }, vec!["idle".into()], None);
    a.flush().await.unwrap();
    assert_eq!(b.messages_at_seq(&id).await.unwrap().1, 0);

    a.commit(take(&id)).await.unwrap();
    a.submit_shown(Write::InsertMessage { session_id: id.clone(), message: note("one") }, vec!["one".into()], None);
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let (_, mark) = b.messages_and_last_turn(&id).await.unwrap();
    b.commit(Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::By(mark),
        prompt: None,
        title: None,
        command: None,
    })
    .await
    .unwrap();
    b.submit_shown(Write::InsertMessage { session_id: id.clone(), message: note("two") }, vec!["two".into()], None);
    b.flush().await.unwrap();

    let c = replica(&url, "host-c:3:c").await;
    let mut events = c.follow(&id, 0).unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
        got.push((event.seq, event.epoch, event.body, event.origin));
    }
    assert_eq!(got, [(1, 1, "one".into(), "host-a:1:a".into()), (2, 2, "two".into(), "host-b:2:b".into())]);
    // Each row names the replica whose clients were shown it as it committed.
    assert_eq!((a.replica(), b.replica()), (Some("host-a:1:a"), Some("host-b:2:b")));
    assert_eq!(a.messages_at_seq(&id).await.unwrap().0.len(), 3, "every row is stored, logged or not");
}

/// On this runtime's one thread, the writer runs only once the test awaits: every write
/// submitted before is in its first batch.
#[tokio::test]
async fn an_answer_opened_streamed_and_closed_within_one_batch_is_logged_whole() {
    let url = super::fixture::database().await;
    let (a, c) = (replica(&url, "host-a:1:a").await, replica(&url, "host-c:3:c").await);
    let id = SessionId::generate();
    a.submit(
        Write::InsertSession(Box::new(SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))),
        None,
    );
    a.commit(take(&id)).await.unwrap();
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message_id = answer.id.clone();
    a.submit(Write::InsertMessage { session_id: id.clone(), message: answer }, None);
    let part = Part::Text { text: String::new() };
    a.submit(Write::OpenPart { session_id: id.clone(), message_id: message_id.clone(), index: 0, part }, None);
    for chunk in ["fast ", "answer"] {
        let write = Write::AppendPart { message_id: message_id.clone(), index: 0, delta: chunk.into() };
        a.submit_shown(write, vec![chunk.into()], None);
    }
    a.submit(Write::ClosePart { message_id, index: 0 }, None);
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();

    let mut events = c.follow(&id, 0).unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
        got.push(event.body);
    }
    assert_eq!(got, ["fast ", "answer"], "every chunk the answer showed is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_starting_after_a_question_was_asked_gets_the_questions_still_open_first() {
    use crate::store::pg::events::{ASKED, CLOSED};
    let url = super::fixture::database().await;
    let (a, b) = (replica(&url, "host-a:1:a").await, replica(&url, "host-b:2:b").await);
    let id = SessionId::generate();
    a.submit(
        Write::InsertSession(Box::new(SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))),
        None,
    );
    a.commit(take(&id)).await.unwrap();
    let asked = |q: &str| format!("{ASKED}{{\"id\":\"{q}\",\"asked\":{{}}}}}}");
    let closed = |q: &str| format!("{CLOSED}{{\"id\":\"{q}\"}}}}");
    let show = |body: String| a.submit_shown(Write::Show { session_id: id.clone() }, vec![body], None);
    show(asked("q1"));
    show(asked("q2"));
    show(closed("q1"));
    show("{\"update\":\"chunk\"}".into());
    a.flush().await.unwrap();

    // b's client opens the session now: the log is at 4, and q2 is still open.
    let mut events = b.follow(&id, 4).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
    assert_eq!((first.seq, first.body.as_str(), first.origin.as_str()), (2, asked("q2").as_str(), "host-a:1:a"));
    show(closed("q2"));
    a.flush().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(30), events.recv()).await.unwrap().unwrap();
    assert_eq!((next.seq, next.body), (5, closed("q2")), "then the log from where it starts");

    // Once the turn is over, nothing it asked is open, closed or not.
    show(asked("q3"));
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    a.commit(take(&id)).await.unwrap();
    show("{\"update\":\"late\"}".into());
    a.flush().await.unwrap();
    let mut after = b.follow(&id, 6).unwrap();
    let late = tokio::time::timeout(Duration::from_secs(30), after.recv()).await.unwrap().unwrap();
    assert_eq!(late.seq, 7, "the next turn's row, never q3");
}

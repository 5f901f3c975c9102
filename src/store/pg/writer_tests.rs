//! The PostgreSQL writer under attack: a long turn keeps its lease however busy the writer is,
//! another replica's rewind or delete waits for a running turn, a lease statement that fails
//! never lets the rest of its batch pass for committed, and a take whose prompt cannot be
//! stored leaves no lease behind in memory; a setting stored by a replica holding no lease is
//! logged only while nobody holds it, numbered in with the holders' rows, a take with no prompt
//! included; a take for a handed command answered meanwhile takes nothing; a part's streamed
//! pieces go with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, StoreError, Write};

use super::{PgError, PgTarget, fixture};

async fn store(url: &str, me: &str, ttl: Duration) -> Store {
    Store::open_postgres_as(url, me, ttl).await.unwrap()
}

fn user(text: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: text.into() }], MessageMeta::default())
}

async fn new_session(store: &Store) -> SessionId {
    let id = SessionId::generate();
    let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    id
}

/// An answer of the session's with its first part, a text starting as `text`, open to chunks.
async fn open_answer(store: &Store, id: &SessionId, text: &str) -> MessageId {
    let reply = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message = reply.id.clone();
    store.commit(Write::InsertMessage { session_id: id.clone(), message: reply }).await.unwrap();
    let part = Part::Text { text: text.into() };
    store
        .commit(Write::OpenPart { session_id: id.clone(), message_id: message.clone(), index: 0, part })
        .await
        .unwrap();
    message
}

fn take(id: &SessionId, prompt: Option<Message>) -> Write {
    Write::TakeLease { session_id: id.clone(), last: LastTurn::Ours, prompt, title: None, command: None }
}

/// A turn that streams without a pause longer than the heartbeat still renews its lease: its
/// own sweeper must not take it for a dead replica's and cut the turn off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streaming_longer_than_its_lease_keeps_it() {
    let url = fixture::database().await;
    // Streamed for well over a lease's life; a stall of most of a lease on a loaded machine
    // still leaves it renewed in time.
    let ttl = Duration::from_secs(2);
    let a = store(&url, "host-a:1:a", ttl).await;
    let id = new_session(&a).await;
    a.commit(take(&id, Some(user("go")))).await.unwrap();
    let message = open_answer(&a, &id, "").await;
    let failures = Arc::new(Mutex::new(Vec::new()));
    let started = std::time::Instant::now();
    while started.elapsed() < ttl * 5 / 2 {
        let failures = failures.clone();
        let chunk = Write::AppendPart { message_id: message.clone(), index: 0, delta: "x".into() };
        a.submit(
            chunk,
            Some(Box::new(move |result| {
                if let Err(err) = result {
                    failures.lock().unwrap().push(err);
                }
            })),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.flush().await.unwrap();
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "{} chunks failed, the first: {:?}", failures.len(), failures.first());
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    let holder = b.held_elsewhere(&id).await.unwrap();
    assert!(holder.is_some_and(|holder| holder.host == "host-a"), "a's lease still runs");
    let parts: Vec<Part> = b.messages(&id).await.unwrap().into_iter().flat_map(|message| message.parts).collect();
    assert!(!parts.iter().any(|part| matches!(part, Part::Notice { .. })), "the turn was not cut off: {parts:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// A rewind, a delete or a delete of an unprompted session from another replica waits for the
/// turn running there (the session's own, or a sub-agent's below it), and leaves its lease be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replicas_rewind_or_delete_is_refused_while_a_turn_runs() {
    let url = fixture::database().await;
    let ttl = Duration::from_secs(30);
    let (a, b) = (store(&url, "host-a:1:a", ttl).await, store(&url, "host-b:2:b", ttl).await);
    let id = new_session(&a).await;
    let prompt = user("first");
    let first = prompt.id.clone();
    a.commit(take(&id, Some(prompt))).await.unwrap();

    let hidden = b.commit(Write::HideFrom { session_id: id.clone(), from: first.clone() }).await.unwrap_err();
    assert!(matches!(hidden, StoreError::Leased(_)), "{hidden:?}");
    let deleted = b.commit(Write::DeleteSession { id: id.clone() }).await.unwrap_err();
    assert!(matches!(deleted, StoreError::Leased(_)), "{deleted:?}");
    assert_eq!(b.messages(&id).await.unwrap().len(), 1, "nothing hidden or deleted");
    assert!(b.held_elsewhere(&id).await.unwrap().is_some(), "a's lease stands");

    // An unprompted session whose lease a holds stays, quietly.
    let fresh = new_session(&a).await;
    a.commit(take(&fresh, None)).await.unwrap();
    b.commit(Write::DeleteUnprompted { id: fresh.clone() }).await.unwrap();
    assert!(b.session(&fresh).await.unwrap().is_some());

    // A sub-agent's turn holds the session above it.
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let child = SessionId::generate();
    let mut row = SessionRow::new(child.clone(), "/w".into(), "openai/m".into(), now_ms());
    row.parent_id = Some(id.clone());
    row.subagent = Some("explore".into());
    a.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    a.commit(take(&child, Some(user("look")))).await.unwrap();
    let deleted = b.commit(Write::DeleteSession { id: id.clone() }).await.unwrap_err();
    assert!(matches!(deleted, StoreError::Leased(_)), "{deleted:?}");
    assert!(b.session(&child).await.unwrap().is_some());

    // Once the turn ended, the delete goes through.
    a.commit(Write::ReleaseLease { session_id: child.clone() }).await.unwrap();
    b.commit(Write::DeleteSession { id: id.clone() }).await.unwrap();
    assert!(b.session(&id).await.unwrap().is_none() && b.session(&child).await.unwrap().is_none());
    a.shutdown().await;
    b.shutdown().await;
}

/// A take whose lease statement fails (here: a lock held elsewhere past `lock_timeout`) aborts
/// the transaction: the writes queued with it must not be answered as committed when they were
/// rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_lease_statement_never_passes_its_batch_off_as_committed() {
    let url = fixture::database().await;
    let impatient = format!("{url}?options=-c%20lock_timeout%3D300");
    let a = store(&impatient, "host-a:1:a", Duration::from_secs(30)).await;
    let (id, other) = (new_session(&a).await, new_session(&a).await);
    a.commit(take(&id, None)).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();

    let mut blocker = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let locked = blocker.transaction().await.unwrap();
    locked.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR UPDATE", &[&id.as_str()]).await.unwrap();

    let results = Arc::new(Mutex::new(Vec::new()));
    let message = user("kept?");
    for write in [Write::InsertMessage { session_id: other.clone(), message }, take(&id, None)] {
        let results = results.clone();
        a.submit(write, Some(Box::new(move |result| results.lock().unwrap().push(result))));
    }
    a.flush().await.unwrap();
    drop(locked);
    let results = results.lock().unwrap().clone();
    let stored = a.messages(&other).await.unwrap().len();
    assert!(results[1].is_err(), "the take failed: {results:?}");
    assert_eq!(results[0].is_ok(), stored == 1, "answered {:?} but {stored} message(s) stored", results[0]);
    a.shutdown().await;
}

/// A take whose prompt cannot be stored (its id is taken) fails whole: this replica does not go
/// on believing it holds the lease, so the session's later writes are not fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_fails_leaves_no_lease_held_in_memory() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let (id, other) = (new_session(&a).await, new_session(&a).await);
    let prompt = user("once");
    a.commit(Write::InsertMessage { session_id: other.clone(), message: prompt.clone() }).await.unwrap();
    let failed = a.commit(take(&id, Some(prompt))).await.unwrap_err();
    assert!(matches!(failed, StoreError::Postgres(PgError::Query { .. })), "{failed:?}");
    let written = a.commit(Write::InsertMessage { session_id: id.clone(), message: user("after") }).await;
    assert_eq!(written, Ok(()), "a session this replica never took is not fenced");
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "no lease was left");
    a.shutdown().await;
    b.shutdown().await;
}

/// Chunks of a part whose session is deleted in the same batch are dropped with it, as SQLite
/// forgets them: they never fail the other sessions' writes of the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_of_a_deleted_sessions_part_fail_nothing_else_in_their_batch() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let (id, other) = (new_session(&a).await, new_session(&a).await);
    let message = open_answer(&a, &id, "").await;

    // The writer waits in a snapshot while the three writes are queued: they make one batch.
    let (go, wait) = std::sync::mpsc::channel::<()>();
    a.snapshot(
        &other,
        Box::new(move |_| {
            let _ = wait.recv();
        }),
    );
    let results = Arc::new(Mutex::new(Vec::new()));
    let writes = [
        Write::AppendPart { message_id: message, index: 0, delta: "late".into() },
        Write::DeleteSession { id: id.clone() },
        Write::InsertMessage { session_id: other.clone(), message: user("kept") },
    ];
    for write in writes {
        let results = results.clone();
        a.submit(write, Some(Box::new(move |result| results.lock().unwrap().push(result))));
    }
    go.send(()).unwrap();
    a.flush().await.unwrap();
    let results = results.lock().unwrap().clone();
    assert!(results[1..].iter().all(Result::is_ok), "{results:?}");
    assert_eq!(a.messages(&other).await.unwrap().len(), 1, "the other session's message went in");
    assert!(a.session(&id).await.unwrap().is_none());
    a.shutdown().await;
}

/// A release that fails (here: the lease row locked elsewhere past `lock_timeout`) is tried
/// again with the next batch, as `Write::ReleaseLease` promises, rather than the lease being
/// renewed for as long as the replica lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_failed_is_tried_again_with_the_next_batch() {
    let url = fixture::database().await;
    let impatient = format!("{url}?options=-c%20lock_timeout%3D300");
    let a = store(&impatient, "host-a:1:a", Duration::from_secs(30)).await;
    let id = new_session(&a).await;
    a.commit(take(&id, Some(user("go")))).await.unwrap();

    let mut blocker = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let locked = blocker.transaction().await.unwrap();
    locked.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR UPDATE", &[&id.as_str()]).await.unwrap();
    let failed = a.commit(Write::ReleaseLease { session_id: id.clone() }).await;
    assert!(failed.is_err(), "{failed:?}");
    locked.rollback().await.unwrap();

    a.flush().await.unwrap();
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "the lease was given back");
    a.shutdown().await;
    b.shutdown().await;
}

/// Holds the writer in a snapshot while `writes` are queued, so they make one batch; their
/// results in order.
async fn one_batch(store: &Store, writes: Vec<Write>) -> Vec<Result<(), StoreError>> {
    let (go, wait) = std::sync::mpsc::channel::<()>();
    store.snapshot(
        &SessionId::generate(),
        Box::new(move |_| {
            let _ = wait.recv();
        }),
    );
    let results = Arc::new(Mutex::new(Vec::new()));
    for write in writes {
        let results = results.clone();
        store.submit(write, Some(Box::new(move |result| results.lock().unwrap().push(result))));
    }
    go.send(()).unwrap();
    store.flush().await.unwrap();
    results.lock().unwrap().clone()
}

/// A turn that ends as the next begins, both in one batch: the new turn's lease is held (so
/// renewed, fenced and released at its end), and a take with its release in one batch leaves
/// none behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_and_a_take_in_one_batch_leave_the_lease_as_the_last_says() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    let id = new_session(&a).await;
    a.commit(take(&id, Some(user("first")))).await.unwrap();
    let results = one_batch(&a, vec![Write::ReleaseLease { session_id: id.clone() }, take(&id, None)]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "the second turn's release let it go");

    let results = one_batch(&a, vec![take(&id, None), Write::ReleaseLease { session_id: id.clone() }]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "taken and given back");
    a.shutdown().await;
    b.shutdown().await;
}

/// Once the turn that lost its lease ended, this replica's other writes of the session (a
/// client archiving or titling it) are not refused as fenced forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_turn_was_taken_over_takes_other_writes_once_that_turn_ended() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    let id = new_session(&a).await;
    a.commit(take(&id, Some(user("first")))).await.unwrap();
    let client = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let lapse = "UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1";
    client.execute(lapse, &[&id.as_str()]).await.unwrap();
    let (_, mark) = b.messages_and_last_turn(&id).await.unwrap();
    let again =
        Write::TakeLease { session_id: id.clone(), last: LastTurn::By(mark), prompt: None, title: None, command: None };
    b.commit(again).await.unwrap();
    let late = a.commit(Write::InsertMessage { session_id: id.clone(), message: user("late") }).await.unwrap_err();
    assert!(matches!(late, StoreError::Postgres(PgError::Fenced { .. })), "{late:?}");

    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "b's lease stands (b is not elsewhere to b)");
    assert!(a.held_elsewhere(&id).await.unwrap().is_some(), "a's release did not touch b's lease");
    a.commit(Write::SetArchived { id: id.clone(), archived: true }).await.unwrap();
    assert!(a.session(&id).await.unwrap().unwrap().archived_at.is_some());
    a.shutdown().await;
    b.shutdown().await;
}

/// A model's streamed text with a NUL in it (PostgreSQL's text cannot hold one) fails nothing
/// else of its batch; it is kept as U+FFFD, the rest of its text as it came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_nul_fails_nothing_else_in_its_batch() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let (id, other) = (new_session(&a).await, new_session(&a).await);
    let message = open_answer(&a, &id, "<").await;
    let writes = vec![
        Write::AppendPart { message_id: message.clone(), index: 0, delta: "a\0b".into() },
        Write::InsertMessage { session_id: other.clone(), message: user("kept") },
    ];
    let results = one_batch(&a, writes).await;
    assert!(results[1].is_ok(), "{results:?}");
    assert_eq!(a.messages(&other).await.unwrap().len(), 1);
    let parts: Vec<Part> = a.messages(&id).await.unwrap().into_iter().flat_map(|message| message.parts).collect();
    let [Part::Text { text }] = parts.as_slice() else { panic!("{parts:?}") };
    assert_eq!(text, "<a\u{fffd}b", "the NUL is kept as U+FFFD");
    a.shutdown().await;
}

/// Submits `write`, which shows `shown`; the `seq` the first of them got in the session's log.
async fn logged(store: &Store, write: Write, shown: &[&str]) -> Option<i64> {
    let (told, result) = tokio::sync::oneshot::channel();
    let shown = shown.iter().map(|body| (*body).to_owned()).collect();
    store.submit_logged(write, shown, Box::new(move |logged| drop(told.send(logged))));
    result.await.unwrap().unwrap()
}

fn steer(id: &SessionId) -> Write {
    let (kept, value) = crate::settings::Setting::Steer(true).kept();
    Write::SetSessionSetting { id: id.clone(), kept, value }
}

/// A setting changed on a replica holding no lease of the session is logged after the log's
/// last row while nobody holds the lease (never prompted, or released), and the next holder
/// numbers on after it; while another replica holds the lease it is not logged at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_stored_while_nobody_holds_the_lease_is_logged_and_the_next_holder_numbers_after_it() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    let id = new_session(&a).await;

    assert_eq!(logged(&b, steer(&id), &["{\"setting\":1}"]).await, Some(1), "never prompted: b logs it");
    assert_eq!(logged(&a, take(&id, Some(user("go"))), &["{\"prompt\":2}"]).await, Some(2), "a numbers after it");
    assert_eq!(logged(&b, steer(&id), &["{\"setting\":3}"]).await, None, "a holds the lease: b logs nothing");
    assert_eq!(logged(&a, Write::Show { session_id: id.clone() }, &["{\"turn\":3}"]).await, Some(3));
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert_eq!(logged(&b, steer(&id), &["{\"setting\":4}"]).await, Some(4), "released: b logs it again");
    assert_eq!(logged(&a, take(&id, Some(user("again"))), &["{\"prompt\":5}"]).await, Some(5));

    let Some(super::events::Missed::Rows(rows)) = b.missed(&id, 0).await.unwrap() else { panic!("the log's rows") };
    let rows: Vec<(i64, &str, &str)> =
        rows.iter().map(|row| (row.seq, row.origin.as_str(), row.body.as_str())).collect();
    assert_eq!(
        rows,
        [
            (1, "host-b:2:b", "{\"setting\":1}"),
            (2, "host-a:1:a", "{\"prompt\":2}"),
            (3, "host-a:1:a", "{\"turn\":3}"),
            (4, "host-b:2:b", "{\"setting\":4}"),
            (5, "host-a:1:a", "{\"prompt\":5}"),
        ]
    );
}

/// A lease take with no prompt (`/compact`, `/rewind`) that comes while another replica logs a
/// settings change (nobody holding the lease: its transaction holds the session's row) waits
/// for that change and numbers its holder's rows on after it, never at the same `seq`, which
/// would fail the holder's batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_without_a_prompt_numbers_on_after_a_setting_logged_while_it_was_taken() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let id = new_session(&a).await;
    let connect = || async {
        let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        db
    };
    let (b, watch) = (connect().await, connect().await);
    // b's change as its writer makes it: the session's row first, then the log's next row.
    b.batch_execute("BEGIN").await.unwrap();
    b.execute("UPDATE sessions SET mode = 'bypass' WHERE id = $1", &[&id.as_str()]).await.unwrap();
    let append = "INSERT INTO session_events (session_id, seq, epoch, body, origin)
                  VALUES ($1, 1, 0, '{\"setting\":1}', 'host-b:2:b')";
    b.execute(append, &[&id.as_str()]).await.unwrap();

    let (took, taken) = tokio::sync::oneshot::channel();
    a.submit(take(&id, None), Some(Box::new(move |result| drop(took.send(result)))));
    let (told, shown) = tokio::sync::oneshot::channel();
    let show = Write::Show { session_id: id.clone() };
    a.submit_logged(show, vec!["{\"turn\":2}".into()], Box::new(move |logged| drop(told.send(logged))));
    while !fixture::one_waits(&watch).await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.batch_execute("COMMIT").await.unwrap();

    assert!(taken.await.unwrap().is_ok(), "a took the lease");
    let shown = shown.await.unwrap();
    assert!(matches!(shown, Ok(Some(2))), "a's row numbered after b's, not at the same seq: {shown:?}");
    a.shutdown().await;
}

/// A replica that stalled after taking a handed prompt wakes to find it answered `cancelled`
/// by another's sweeper: the take for the prompt's turn is refused and takes nothing, while a
/// command still its own is taken with its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_for_a_handed_command_answered_meanwhile_is_refused_and_takes_nothing() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(60)).await;
    let id = new_session(&a).await;
    let (database, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let command = |answer: Option<&'static str>| {
        let (database, id) = (&database, id.clone());
        async move {
            let row = database
                .query_one(
                    "INSERT INTO session_commands (session_id, sender, body, taken_by, taken_at, answer, answered_at)
                     VALUES ($1, 'host-b:2:b', '{}', 'host-a:1:a', now(), $2::text, CASE WHEN $2::text IS NULL THEN NULL ELSE now() END)
                     RETURNING id",
                    &[&id.as_str(), &answer],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    let answered = command(Some(super::sweeper::CANCELLED)).await;
    let handed = |command: i64| Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::Ours,
        prompt: Some(user("handed")),
        title: None,
        command: Some(command),
    };
    assert_eq!(a.commit(handed(answered)).await, Err(StoreError::CommandAnswered(answered)));
    let leases: i64 = database.query_one("SELECT count(*) FROM session_leases", &[]).await.unwrap().get(0);
    assert_eq!(leases, 0, "the refused take took no lease");
    assert!(a.messages(&id).await.unwrap().is_empty(), "and stored no prompt");

    let waiting = command(None).await;
    a.commit(handed(waiting)).await.unwrap();
    assert_eq!(a.messages(&id).await.unwrap().len(), 1, "a command still its own runs");
}

/// A streamed part's pieces go with their part, as a key's cascade took them: once the
/// session is deleted none of its pieces is left in `part_pieces`, and a part written whole
/// again drops its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parts_pieces_go_with_it_when_its_session_is_deleted_or_the_part_rewritten() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let client = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let pieces = "SELECT count(*) FROM part_pieces WHERE message_id = $1";
    let (id, kept) = (new_session(&a).await, new_session(&a).await);
    let (message, other) = (open_answer(&a, &id, "").await, open_answer(&a, &kept, "").await);
    for (part, text) in [(&message, "gone"), (&other, "kept")] {
        a.commit(Write::AppendPart { message_id: part.clone(), index: 0, delta: text.into() }).await.unwrap();
        a.commit(Write::AppendPart { message_id: part.clone(), index: 0, delta: "!".into() }).await.unwrap();
    }
    let count = |message: &MessageId| {
        let client = &client;
        let message = message.as_str().to_owned();
        async move { client.query_one(pieces, &[&message]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!((count(&message).await, count(&other).await), (2, 2), "each chunk is a piece");
    a.commit(Write::DeleteSession { id: id.clone() }).await.unwrap();
    assert_eq!(count(&message).await, 0, "the deleted session's pieces went with it");
    assert_eq!(count(&other).await, 2, "another session's were left");
    let whole = Part::Text { text: "whole".into() };
    a.commit(Write::PutPart { session_id: kept.clone(), message_id: other.clone(), index: 0, part: whole })
        .await
        .unwrap();
    assert_eq!(count(&other).await, 0, "a part written whole drops its pieces");
    a.shutdown().await;
}

/// A setting changed in the batch that ends one turn of this replica's and takes the lease for
/// the next (a queued prompt starting as the last turn ends) goes into the session's log like
/// the new turn's own rows: that replica holds the lease once the batch commits, so nobody
/// else logs the change nor is handed it, and the other replicas' clients would never be
/// shown it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_between_a_release_and_the_next_take_in_one_batch_is_logged() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a", Duration::from_secs(30)).await;
    let b = store(&url, "host-b:2:b", Duration::from_secs(30)).await;
    let id = new_session(&a).await;
    a.commit(take(&id, Some(user("one")))).await.unwrap();
    let connect = || async {
        let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        db
    };
    let (locker, watch) = (connect().await, connect().await);
    // a's writer waits on the session's row with a title, so the next three writes queue
    // behind it and go in one batch.
    locker.batch_execute("BEGIN").await.unwrap();
    locker.execute("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", &[&id.as_str()]).await.unwrap();
    let title = Write::SetSessionTitle { id: id.clone(), title: "t".into(), by: crate::store::TitleBy::Client };
    a.submit(title, None);
    while !fixture::one_waits(&watch).await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.submit(Write::ReleaseLease { session_id: id.clone() }, None);
    let (told, set) = tokio::sync::oneshot::channel();
    a.submit_logged(
        steer(&id),
        vec!["{\"setting\":\"steer\"}".into()],
        Box::new(move |logged| drop(told.send(logged))),
    );
    a.submit(take(&id, Some(user("two"))), None);
    locker.batch_execute("COMMIT").await.unwrap();
    let set = set.await.unwrap();
    assert!(matches!(set, Ok(Some(_))), "the change is logged: {set:?}");
    a.flush().await.unwrap();

    let Some(super::events::Missed::Rows(rows)) = b.missed(&id, 0).await.unwrap() else { panic!("the log's rows") };
    assert!(rows.iter().any(|row| row.body.contains("setting")), "another replica reads it");
    // The new turn's writer numbers on after it.
    let last = rows.last().map(|row| row.seq);
    let next = logged(&a, Write::Show { session_id: id.clone() }, &["{\"turn\":\"next\"}"]).await;
    assert_eq!(next, last.map(|last| last + 1));
    a.shutdown().await;
}

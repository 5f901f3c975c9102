//! PostgreSQL lost mid-turn: a batch queued while the database is down commits once it is
//! back within the bound, each chunk once; past the bound its writes fail saying the connection
//! was lost, and nothing of them is stored; a COMMIT whose answer was lost is looked up, never
//! run twice; and the store reads and writes again once the database is back.
//!
//! The stopping tests run a server of their own ([`fixture::Private`]): the process's shared
//! server must never stop.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::history::{Part, Role};
use crate::ids::{MessageId, SessionId};
use crate::store::{Backend, Store, StoreError, Write};

use super::regain::went_in;
use super::streams_tests::streaming;
use super::{PgError, PgTarget, Postgres, Tuning, fixture};

/// In a URL that trust ignores: no error may show it.
const PASSWORD: &str = "never-shown-pw";

/// A store whose batches wait `regain_within` for a lost connection.
async fn store(url: &str, regain_within: Duration) -> Store {
    let target = PgTarget::parse(url).unwrap();
    let tuning = Tuning { regain_within, ..Tuning::for_tests(std::time::Duration::from_secs(15)) };
    let backend = Postgres::open(target, "host-a:1:a".into(), tuning).await.unwrap();
    Store { backend: Arc::new(Backend::Postgres(backend)) }
}

/// Queues a chunk per text, each shown as an update (so logged as an event); the receiver
/// answers each one's result, in order.
fn stream(store: &Store, message: &MessageId, texts: &[&str]) -> mpsc::UnboundedReceiver<Result<(), StoreError>> {
    let (answers, answered) = mpsc::unbounded_channel();
    for text in texts {
        let answers = answers.clone();
        let chunk = Write::AppendPart { message_id: message.clone(), index: 0, delta: (*text).into() };
        let shown = vec![format!("{{\"update\":\"agent_text\",\"data\":{{\"text\":\"{text}\"}}}}")];
        store.submit_shown(chunk, shown, Some(Box::new(move |result| drop(answers.send(result)))));
    }
    answered
}

async fn results(mut answered: mpsc::UnboundedReceiver<Result<(), StoreError>>) -> Vec<Result<(), StoreError>> {
    let mut all = Vec::new();
    while let Some(result) = answered.recv().await {
        all.push(result);
    }
    all
}

/// The streamed answer's text as stored, read on the reader's connection.
async fn stored_text(store: &Store, id: &SessionId) -> String {
    let messages = store.messages(id).await.unwrap();
    messages
        .iter()
        .filter(|message| message.role == Role::Assistant)
        .flat_map(|message| &message.parts)
        .map(|part| match part {
            Part::Text { text } => text.as_str(),
            _ => "",
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_queued_while_postgres_is_down_commits_once_it_is_back_each_chunk_once() {
    let server = fixture::Private::start();
    let url = server.database(PASSWORD).await;
    // A bound far longer than a restart takes on a loaded machine.
    let store = store(&url, Duration::from_secs(120)).await;
    let (id, message) = streaming(&store, "").await;
    let before = stream(&store, &message, &["one ", "two "]);
    store.flush().await.unwrap();

    server.stop();
    let during = stream(&store, &message, &["three ", "four ", "five "]);
    // Let the writer meet the dead connection and start trying again (a pause, not a check).
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.resume();
    store.flush().await.unwrap();

    let answered: Vec<_> = [results(before).await, results(during).await].concat();
    assert!(answered.iter().all(Result::is_ok), "every chunk committed: {answered:?}");
    assert_eq!(stored_text(&store, &id).await, "one two three four five ", "each chunk once, in order");
    store.commit(Write::ReleaseLease { session_id: id }).await.unwrap();
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_the_writes_fail_saying_the_connection_was_lost_and_nothing_of_them_is_stored() {
    let server = fixture::Private::start();
    let url = server.database(PASSWORD).await;
    let store = store(&url, Duration::from_secs(1)).await;
    let (id, message) = streaming(&store, "").await;
    store.commit(Write::AppendPart { message_id: message.clone(), index: 0, delta: "kept ".into() }).await.unwrap();

    server.stop();
    let lost = stream(&store, &message, &["lost ", "too "]);
    let err = store.flush().await.unwrap_err();
    let answered = results(lost).await;
    assert_eq!(answered.len(), 2);
    assert!(
        answered
            .iter()
            .all(|result| result.as_ref().is_err_and(|err| matches!(err, StoreError::Postgres(PgError::Lost { .. })))),
        "{answered:?}"
    );
    let StoreError::Postgres(PgError::Lost { at, .. }) = &err else { panic!("not a lost connection: {err:?}") };
    let said = err.to_string();
    assert!(said.contains(at.as_str()) && at.ends_with("/cairn"), "names the database: {said}");
    assert!(
        said.contains("was lost and not regained") && said.contains("nothing of these writes was stored"),
        "{said}"
    );
    assert!(!said.contains(PASSWORD), "never the password: {said}");

    // Back: the store writes and reads again, and the lost chunks are nowhere.
    server.resume();
    store.commit(Write::AppendPart { message_id: message.clone(), index: 0, delta: "after".into() }).await.unwrap();
    assert_eq!(stored_text(&store, &id).await, "kept after");
    assert!(store.session(&id).await.unwrap().is_some());
    store.commit(Write::ReleaseLease { session_id: id }).await.unwrap();
    store.shutdown().await;
}

/// The connection lost after the server committed but before its answer arrived: the writer
/// finds the batch's stamp on its new connection and counts it committed; run again, its
/// chunks would be stored twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_commit_answer_was_lost_is_found_committed_and_not_run_again() {
    let url = fixture::database().await;
    let store = store(&url, Duration::from_secs(60)).await;
    let (id, message) = streaming(&store, "").await;
    match &*store.backend {
        Backend::Postgres(db) => db.lose_next_commit(),
        Backend::Sqlite(_) => panic!("a PostgreSQL store"),
    }
    let answered = stream(&store, &message, &["once ", "only"]);
    store.flush().await.unwrap();
    let answered = results(answered).await;
    assert!(answered.iter().all(Result::is_ok), "{answered:?}");
    assert_eq!(stored_text(&store, &id).await, "once only");
    // The writer's memory followed the commit: the part is still open, and the session's event
    // log is numbered on from the batch's events (a stale number would collide with them).
    let more = stream(&store, &message, &["!"]);
    store.flush().await.unwrap();
    assert!(results(more).await.iter().all(Result::is_ok));
    let (_, seq) = store.messages_at_seq(&id).await.unwrap();
    assert_eq!(seq, 3, "one event per chunk, each once");
    assert_eq!(stored_text(&store, &id).await, "once only!");
    store.commit(Write::ReleaseLease { session_id: id }).await.unwrap();
    store.shutdown().await;
}

#[test]
fn a_batch_counts_as_committed_only_once_the_writers_row_has_reached_its_number() {
    assert!(!went_in(1, None), "no batch of this replica ever committed");
    assert!(!went_in(7, Some(6)), "the previous batch was the last to commit");
    assert!(went_in(7, Some(7)));
}

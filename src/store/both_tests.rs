//! The store's specs that hold for both backends, each run once against SQLite and once against
//! PostgreSQL (a private server this test process starts, see `pg::fixture`): a turn's rows
//! round trip, callbacks come after the commit and in order, a snapshot joins the writer's
//! order, a bad write fails alone, a session's lease keeps a turn to one process, titles,
//! rewinds and deletes. The specs of file checkpoints, listings, tokens and owners, and of
//! imports, exports, forks and project rules are in the `both_*_tests.rs` files beside it,
//! its child modules, using its pairs of stores and its `on_both!`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::history::{MessageMeta, Part};
use crate::history::{Role, Usage};
use crate::ids::now_ms;

/// Two processes (or replicas) sharing one database.
struct Pair {
    a: Store,
    b: Store,
    /// Where the database is, to open another store on it.
    at: At,
    _dir: Option<tempfile::TempDir>,
}

/// A pair's database.
enum At {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Pair {
    /// Another process (or replica) opening the database now.
    async fn open_another(&self) -> Store {
        match &self.at {
            At::Sqlite(path) => Store::open_as(path, Holder::this_process().sibling(), lease::HEARTBEAT_EVERY).unwrap(),
            At::Postgres(url) => Store::open_postgres_as(url, "host-c:3:c", Duration::from_secs(30)).await.unwrap(),
        }
    }
}

/// The PostgreSQL pair's database, for a spec that reaches below the store.
async fn postgres_with_url() -> (Pair, String) {
    let url = pg::fixture::database().await;
    let ttl = Duration::from_secs(30);
    let a = Store::open_postgres_as(&url, "host-a:1:a", ttl).await.unwrap();
    let b = Store::open_postgres_as(&url, "host-b:2:b", ttl).await.unwrap();
    (Pair { a, b, at: At::Postgres(url.clone()), _dir: None }, url)
}

fn sqlite() -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let me = Holder::this_process();
    let a = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    let b = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    Pair { a, b, at: At::Sqlite(path), _dir: Some(dir) }
}

async fn postgres() -> Pair {
    postgres_with_url().await.0
}

/// Each spec named runs once per backend, in a module of its name.
macro_rules! on_both {
    ($($spec:ident),* $(,)?) => {$(
        mod $spec {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$spec(super::sqlite()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$spec(super::postgres().await).await;
            }
        }
    )*};
}

on_both!(
    a_turn_round_trips_with_its_streamed_text_and_usage,
    callbacks_follow_the_commit_in_queue_order_and_a_snapshot_sits_between,
    a_bad_write_fails_alone_and_the_rest_of_its_batch_commits,
    a_turn_runs_in_one_process_at_a_time,
    a_client_title_stands_and_a_rewind_and_a_delete_hold,
);

fn new_session(store: &Store) -> SessionId {
    let id = SessionId::generate();
    store.submit(
        Write::InsertSession(Box::new(SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))),
        None,
    );
    id
}

fn user(text: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: text.into() }], MessageMeta::default())
}

async fn take(store: &Store, id: &SessionId, last: LastTurn, prompt: &str) -> Result<(), StoreError> {
    store
        .commit(Write::TakeLease {
            session_id: id.clone(),
            last,
            prompt: Some(user(prompt)),
            title: Some(prompt.into()),
            command: None,
        })
        .await
}

async fn a_turn_round_trips_with_its_streamed_text_and_usage(pair: Pair) {
    let store = pair.a;
    let id = new_session(&store);
    take(&store, &id, LastTurn::Ours, "hello").await.unwrap();
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message_id = answer.id.clone();
    store.submit(Write::InsertMessage { session_id: id.clone(), message: answer }, None);
    let open = |index, part| Write::OpenPart { session_id: id.clone(), message_id: message_id.clone(), index, part };
    store.submit(open(0, Part::Reasoning { text: String::new(), signature: None }), None);
    store.submit(Write::AppendPart { message_id: message_id.clone(), index: 0, delta: "thinking".into() }, None);
    store.submit(Write::ClosePart { message_id: message_id.clone(), index: 0 }, None);
    store.submit(open(1, Part::Text { text: "He".into() }), None);
    let mut expected = String::from("He");
    for n in 0..300 {
        let delta = format!("llo {n}, ");
        expected.push_str(&delta);
        store.submit(Write::AppendPart { message_id: message_id.clone(), index: 1, delta }, None);
        if n % 50 == 0 {
            store.flush().await.unwrap();
        }
    }
    store.submit(Write::ClosePart { message_id: message_id.clone(), index: 1 }, None);
    let usage = Usage { input: 10, output: 20, reasoning: 5, cache_read: 3, cache_write: 1 };
    let meta = MessageMeta { usage: Some(usage), cost: Some(0.25), ..MessageMeta::default() };
    store
        .commit(Write::FinishMessage { session_id: id.clone(), message_id: message_id.clone(), meta: meta.clone() })
        .await
        .unwrap();

    let messages = store.messages(&id).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].parts, [Part::Text { text: "hello".into() }]);
    assert_eq!(messages[1].role, Role::Assistant);
    assert_eq!(
        messages[1].parts,
        [Part::Reasoning { text: "thinking".into(), signature: None }, Part::Text { text: expected }]
    );
    assert_eq!(messages[1].meta, meta);
    let row = store.session(&id).await.unwrap().unwrap();
    assert_eq!(row.title.as_deref(), Some("hello"));
    assert!((row.cost_usd - 0.25).abs() < 1e-9, "{}", row.cost_usd);
    // Another process reads the same.
    assert_eq!(pair.b.messages(&id).await.unwrap(), messages);
}

async fn callbacks_follow_the_commit_in_queue_order_and_a_snapshot_sits_between(pair: Pair) {
    let store = pair.a;
    let id = new_session(&store);
    take(&store, &id, LastTurn::Ours, "go").await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer = Message::new(Role::Assistant, vec![Part::Text { text: "x".into() }], MessageMeta::default());
    let (first, reader) = (seen.clone(), pair.b.clone());
    let check = id.clone();
    store.submit(
        Write::InsertMessage { session_id: id.clone(), message: answer },
        Some(Box::new(move |result| {
            result.unwrap();
            first.lock().unwrap().push("inserted");
        })),
    );
    let (snap, (tx, rx)) = (seen.clone(), tokio::sync::oneshot::channel());
    store.snapshot(
        &id,
        Box::new(move |messages| {
            snap.lock().unwrap().push("snapshot");
            let _ = tx.send(messages.unwrap().0.len());
        }),
    );
    let last = seen.clone();
    store.submit(
        Write::InsertMessage { session_id: id.clone(), message: user("again") },
        Some(Box::new(move |result| {
            result.unwrap();
            last.lock().unwrap().push("again");
        })),
    );
    assert_eq!(rx.await.unwrap(), 2, "the snapshot saw what came before it, not after");
    store.flush().await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["inserted", "snapshot", "again"]);
    assert_eq!(reader.messages(&check).await.unwrap().len(), 3, "committed before it was called back");
}

async fn a_bad_write_fails_alone_and_the_rest_of_its_batch_commits(pair: Pair) {
    let store = pair.a;
    let id = new_session(&store);
    let results = Arc::new(Mutex::new(Vec::new()));
    for (n, session) in [id.clone(), SessionId::generate(), id.clone()].into_iter().enumerate() {
        let results = results.clone();
        store.submit(
            Write::InsertMessage { session_id: session, message: user(&format!("m{n}")) },
            Some(Box::new(move |result| results.lock().unwrap().push(result.is_ok()))),
        );
    }
    store.flush().await.unwrap();
    assert_eq!(*results.lock().unwrap(), [true, false, true], "a message for no session fails, and only it");
    assert_eq!(store.messages(&id).await.unwrap().len(), 2);
}

async fn a_turn_runs_in_one_process_at_a_time(pair: Pair) {
    let (a, b) = (pair.a, pair.b);
    let id = new_session(&a);
    a.flush().await.unwrap();
    let (_, mark) = b.messages_and_last_turn(&id).await.unwrap();
    take(&a, &id, LastTurn::Ours, "first").await.unwrap();
    let refused = take(&b, &id, LastTurn::By(mark.clone()), "second").await.unwrap_err();
    assert!(matches!(refused, StoreError::Leased(_)), "{refused:?}");
    assert!(b.held_elsewhere(&id).await.unwrap().is_some());
    assert_eq!(a.messages(&id).await.unwrap().len(), 1, "the refused take wrote nothing");
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_none());
    // b's copy of the history is older than a's turn: read it again first.
    let moved = take(&b, &id, LastTurn::By(mark), "second").await.unwrap_err();
    assert!(matches!(moved, StoreError::LeaseMoved { .. }), "{moved:?}");
    let (history, mark) = b.messages_and_last_turn(&id).await.unwrap();
    assert_eq!(history.len(), 1);
    take(&b, &id, LastTurn::By(mark), "second").await.unwrap();
    assert_eq!(a.messages(&id).await.unwrap().len(), 2);
}

async fn a_client_title_stands_and_a_rewind_and_a_delete_hold(pair: Pair) {
    let store = pair.a;
    let id = new_session(&store);
    let title = |title: &str, by| Write::SetSessionTitle { id: id.clone(), title: title.into(), by };
    store.commit(title("mine", TitleBy::Client)).await.unwrap();
    let kept = store.commit(title("the model's", TitleBy::Model)).await.unwrap_err();
    assert_eq!(kept, StoreError::TitleKept(id.clone()));
    assert_eq!(store.session(&id).await.unwrap().unwrap().title.as_deref(), Some("mine"));

    let (one, two) = (user("one"), user("two"));
    let from = two.id.clone();
    store.submit(Write::InsertMessage { session_id: id.clone(), message: one }, None);
    store.submit(Write::InsertMessage { session_id: id.clone(), message: two }, None);
    store.commit(Write::HideFrom { session_id: id.clone(), from }).await.unwrap();
    let left: Vec<Part> = store.messages(&id).await.unwrap().into_iter().flat_map(|message| message.parts).collect();
    assert_eq!(left, [Part::Text { text: "one".into() }]);

    store.commit(Write::DeleteSession { id: id.clone() }).await.unwrap();
    assert_eq!(store.session(&id).await.unwrap(), None);
    assert!(store.messages(&id).await.unwrap().is_empty());
}

/// A replica paused past its lease (`kill -STOP`) wakes to find the session taken over: its
/// writes are refused as fenced and nothing of them is stored, until it takes the lease again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_lease_was_taken_over_writes_nothing() {
    let (pair, url) = postgres_with_url().await;
    let (a, b) = (pair.a, pair.b);
    let id = new_session(&a);
    take(&a, &id, LastTurn::Ours, "first").await.unwrap();
    // a stalls past its lease: what its expiry says once the time went by.
    let client = pg::PgTarget::parse(&url).unwrap().connect().await.unwrap();
    client
        .execute(
            "UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1",
            &[&id.as_str()],
        )
        .await
        .unwrap();
    let (_, mark) = b.messages_and_last_turn(&id).await.unwrap();
    take(&b, &id, LastTurn::By(mark), "second").await.unwrap();

    let late = a.commit(Write::InsertMessage { session_id: id.clone(), message: user("late") }).await.unwrap_err();
    assert!(matches!(late, StoreError::Postgres(pg::PgError::Fenced { .. })), "{late:?}");
    let texts: Vec<Part> = b.messages(&id).await.unwrap().into_iter().flat_map(|message| message.parts).collect();
    assert_eq!(texts, [Part::Text { text: "first".into() }, Part::Text { text: "second".into() }]);
    let epoch: i64 = client
        .query_one("SELECT epoch FROM session_leases WHERE session_id = $1", &[&id.as_str()])
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 2, "b's take fenced a's epoch 1");
}

#[path = "both_checkpoints_tests.rs"]
mod checkpoints;

#[path = "both_transfer_tests.rs"]
mod transfer;

#[path = "both_listing_tests.rs"]
mod listing;

#[path = "both_tokens_tests.rs"]
mod tokens;

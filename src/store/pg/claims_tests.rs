//! A batch's claims taken together (`claims.rs`): many prompts in one batch each take their
//! session's lease once, at the next epoch, with their prompt and title, while the ones refused
//! (another replica's lease, a stale history, a lease lost meanwhile) are refused alone and
//! change nothing; a claim whose session an earlier write of the batch touched keeps its place,
//! and one right after its session's release logs what it shows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, StoreError, Write};

use super::{PgError, PgTarget, fixture};

pub(super) async fn store(url: &str, me: &str) -> Store {
    Store::open_postgres_as(url, me, Duration::from_secs(30)).await.unwrap()
}

pub(super) fn user(text: &str) -> Message {
    let parts = vec![Part::Text { text: text.into() }, Part::Text { text: format!("{text}, again") }];
    Message::new(Role::User, parts, MessageMeta::default())
}

fn row(id: &SessionId) -> SessionRow {
    SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms())
}

pub(super) async fn new_session(store: &Store) -> SessionId {
    let id = SessionId::generate();
    store.commit(Write::InsertSession(Box::new(row(&id)))).await.unwrap();
    id
}

fn claim(id: &SessionId, last: LastTurn, prompt: &str, title: Option<&str>) -> Write {
    Write::TakeLease {
        session_id: id.clone(),
        last,
        prompt: Some(user(prompt)),
        title: title.map(str::to_owned),
        command: None,
    }
}

/// Holds the writer in a snapshot while `writes` are queued, so they make one batch; their
/// results in order.
pub(super) async fn one_batch(store: &Store, writes: Vec<Write>) -> Vec<Result<(), StoreError>> {
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

async fn epoch(client: &tokio_postgres::Client, id: &SessionId) -> (String, i64) {
    let row = client
        .query_one("SELECT holder, epoch FROM session_leases WHERE session_id = $1", &[&id.as_str()])
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

pub(super) fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|message| &message.parts)
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// Claims of many sessions in one batch: each free session's lease is taken at the next epoch
/// with its prompt (every part, in order) and its title where it had none; the session another
/// replica holds, the one whose caller's history is stale and the one this replica lost are
/// refused, with nothing of theirs written and their leases as they were; the rest of the batch
/// goes in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_in_one_batch_each_take_their_lease_once_and_the_refused_change_nothing() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let b = store(&url, "host-b:2:b").await;
    let client = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let fresh: Vec<SessionId> = futures::future::join_all((0..5).map(|_| new_session(&a))).await;
    let (again, held, stale, lost, titled) = (
        new_session(&a).await,
        new_session(&a).await,
        new_session(&a).await,
        new_session(&a).await,
        new_session(&a).await,
    );
    a.commit(Write::SetSessionTitle { id: titled.clone(), title: "kept".into(), by: crate::store::TitleBy::Client })
        .await
        .unwrap();
    // `again` had a turn here before; `held` runs on b; `stale` had a turn on b since a read it;
    // `lost` was a's until b took it over.
    a.commit(claim(&again, LastTurn::Ours, "before", None)).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: again.clone() }).await.unwrap();
    b.commit(claim(&held, LastTurn::Ours, "b's", None)).await.unwrap();
    let (_, old_mark) = a.messages_and_last_turn(&stale).await.unwrap();
    b.commit(claim(&stale, LastTurn::Ours, "b's", None)).await.unwrap();
    b.commit(Write::ReleaseLease { session_id: stale.clone() }).await.unwrap();
    a.commit(claim(&lost, LastTurn::Ours, "a's", None)).await.unwrap();
    let lapse = "UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1";
    client.execute(lapse, &[&lost.as_str()]).await.unwrap();
    let (_, mark) = b.messages_and_last_turn(&lost).await.unwrap();
    b.commit(Write::TakeLease {
        session_id: lost.clone(),
        last: LastTurn::By(mark),
        prompt: None,
        title: None,
        command: None,
    })
    .await
    .unwrap();
    let before = [epoch(&client, &held).await, epoch(&client, &stale).await, epoch(&client, &lost).await];

    let other = new_session(&a).await;
    let mut writes: Vec<Write> =
        fresh.iter().enumerate().map(|(n, id)| claim(id, LastTurn::Ours, &format!("p{n}"), Some("new"))).collect();
    writes.push(Write::InsertMessage { session_id: other.clone(), message: user("kept") });
    writes.push(claim(&again, LastTurn::Ours, "after", Some("new")));
    writes.push(claim(&held, LastTurn::Ours, "refused", None));
    writes.push(claim(&stale, LastTurn::By(old_mark), "refused", None));
    writes.push(claim(&lost, LastTurn::Ours, "refused", None));
    writes.push(claim(&titled, LastTurn::Ours, "titled", Some("not this")));
    let results = one_batch(&a, writes).await;

    assert!(results[..7].iter().all(Result::is_ok), "{results:?}");
    assert!(matches!(&results[7], Err(StoreError::Leased(holder)) if holder.host == "host-b"), "{:?}", results[7]);
    assert!(matches!(&results[8], Err(StoreError::LeaseMoved { .. })), "{:?}", results[8]);
    assert!(matches!(&results[9], Err(StoreError::Postgres(PgError::Fenced { .. }))), "{:?}", results[9]);
    assert!(results[10].is_ok(), "{:?}", results[10]);
    for (n, id) in fresh.iter().enumerate() {
        assert_eq!(epoch(&client, id).await, ("host-a:1:a".to_owned(), 1), "a first take is epoch 1");
        assert_eq!(texts(&a.messages(id).await.unwrap()), [format!("p{n}"), format!("p{n}, again")]);
        assert_eq!(a.session(id).await.unwrap().unwrap().title.as_deref(), Some("new"));
        assert!(b.held_elsewhere(id).await.unwrap().is_some(), "b sees a's lease on {id}");
    }
    assert_eq!(epoch(&client, &again).await, ("host-a:1:a".to_owned(), 2), "a take after a release is the next epoch");
    assert_eq!(texts(&a.messages(&again).await.unwrap()), ["before", "before, again", "after", "after, again"]);
    assert_eq!(a.session(&titled).await.unwrap().unwrap().title.as_deref(), Some("kept"), "a title is not replaced");
    assert_eq!(texts(&a.messages(&other).await.unwrap()), ["kept", "kept, again"]);
    let after = [epoch(&client, &held).await, epoch(&client, &stale).await, epoch(&client, &lost).await];
    assert_eq!(after, before, "the refused claims left their leases as they were");
    for (id, left) in [(&held, 1), (&stale, 1), (&lost, 1)] {
        assert_eq!(a.messages(id).await.unwrap().len(), left, "nothing of the refused claim on {id} was written");
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A session made and claimed in one batch, and one claimed twice with a release between,
/// keep their order: the claims whose session the batch touched before run in their place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_after_its_sessions_earlier_writes_in_the_batch_runs_in_its_place() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let client = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let (made, twice) = (SessionId::generate(), new_session(&a).await);
    let writes = vec![
        claim(&twice, LastTurn::Ours, "one", None),
        Write::InsertSession(Box::new(row(&made))),
        claim(&made, LastTurn::Ours, "made", Some("made")),
        Write::ReleaseLease { session_id: twice.clone() },
        claim(&twice, LastTurn::Ours, "two", None),
    ];
    let results = one_batch(&a, writes).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(epoch(&client, &made).await.1, 1);
    assert_eq!(a.session(&made).await.unwrap().unwrap().title.as_deref(), Some("made"));
    assert_eq!(epoch(&client, &twice).await.1, 2, "taken, released and taken again");
    assert_eq!(texts(&a.messages(&twice).await.unwrap()), ["one", "one, again", "two", "two, again"]);
    let b = store(&url, "host-b:2:b").await;
    assert!(b.held_elsewhere(&twice).await.unwrap().is_some(), "the second take holds it");
    a.shutdown().await;
    b.shutdown().await;
}

/// A turn's release and the next turn's claim in one batch (a queued prompt starting as the
/// last turn ends): what the claim shows, its prompt, is logged for the other replicas'
/// followers like any claim's, numbered after the last turn's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_right_after_its_sessions_release_in_one_batch_logs_what_it_shows() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let id = new_session(&a).await;
    a.commit(claim(&id, LastTurn::Ours, "one", None)).await.unwrap();
    a.submit_shown(Write::Show { session_id: id.clone() }, vec!["first turn".into()], None);
    a.flush().await.unwrap();
    let before = a.last_logged(&id).await.unwrap();

    let (go, wait) = std::sync::mpsc::channel::<()>();
    a.snapshot(
        &SessionId::generate(),
        Box::new(move |_| {
            let _ = wait.recv();
        }),
    );
    a.submit(Write::ReleaseLease { session_id: id.clone() }, None);
    a.submit_shown(claim(&id, LastTurn::Ours, "two", None), vec!["the prompt two".into()], None);
    go.send(()).unwrap();
    a.flush().await.unwrap();

    let client = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let rows = client
        .query(
            "SELECT seq, body FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq",
            &[&id.as_str(), &before],
        )
        .await
        .unwrap();
    let logged: Vec<(i64, String)> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
    assert_eq!(logged, [(before + 1, "the prompt two".to_owned())], "the second turn's prompt is logged next");
    a.shutdown().await;
}

/// A claim whose caller read the history after another replica's take, made while that
/// replica's lease still runs (its client prompted there meanwhile), is refused as held
/// without waiting for that replica's batch in flight, which holds the lease row `FOR SHARE`
/// (`lease::lock_for_takes`: "a lease another replica holds live is left alone"): a claim's
/// take must never put the whole writer behind another replica's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_session_another_replica_holds_live_never_waits_for_that_replicas_batch() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let b = store(&url, "host-b:2:b").await;
    let id = new_session(&a).await;
    b.commit(claim(&id, LastTurn::Ours, "b's", None)).await.unwrap();
    let (_, mark) = a.messages_and_last_turn(&id).await.unwrap();
    assert!(mark.is_some(), "b's take is the session's last turn");

    // b's writer in the middle of a batch of the session: its fence holds the lease row.
    let mut inflight = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let batch = inflight.transaction().await.unwrap();
    batch.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR SHARE", &[&id.as_str()]).await.unwrap();
    let batch_pid: i32 = batch.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);

    let claiming = {
        let (a, id) = (a.clone(), id.clone());
        tokio::spawn(async move { a.commit(claim(&id, LastTurn::By(mark), "a's", None)).await })
    };
    let watcher = PgTarget::parse(&url).unwrap().connect().await.unwrap();
    let mut waited = false;
    while !claiming.is_finished() {
        let blocked: i64 = watcher
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", &[&batch_pid])
            .await
            .unwrap()
            .get(0);
        if blocked > 0 {
            waited = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    batch.commit().await.unwrap();
    let result = claiming.await.unwrap();
    assert!(matches!(&result, Err(StoreError::Leased(holder)) if holder.host == "host-b"), "{result:?}");
    assert!(!waited, "a's writer waited for b's batch to end before refusing a claim b's live lease refuses");
    assert_eq!(texts(&a.messages(&id).await.unwrap()), ["b's", "b's, again"]);
    a.shutdown().await;
    b.shutdown().await;
}

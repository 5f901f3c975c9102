//! The order in which a replica's writes and the sweeper lock a session's rows: the lease
//! first, then the session, then its commands. A take that locked them in another order could
//! wait on the sweeper while holding what the sweeper waits for, and PostgreSQL would end one
//! of the two as deadlocked: a `/compact` or handed prompt failing, or a dead replica's turn
//! left open a sweep longer.

use std::time::Duration;

use tokio_postgres::Client;

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, Write};

use super::fixture;

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// A session whose lease a dead replica left lapsed, and a command handed to `taker`, which it
/// took: what a sweeper and a take by `taker` race for. The command's id.
async fn lapsed_with_command(store: &Store, database: &Client, taker: &str) -> (SessionId, i64) {
    let id = SessionId::generate();
    let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    database
        .execute(
            "INSERT INTO session_leases (session_id, holder, epoch, taken_at, expires_at)
             VALUES ($1, 'host-d:9:dead', 1, now() - interval '2 minutes', now() - interval '1 minute')",
            &[&id.as_str()],
        )
        .await
        .unwrap();
    let command = database
        .query_one(
            "INSERT INTO session_commands (session_id, sender, body, taken_by, taken_at)
             VALUES ($1, 'host-b:2:b', '{}', $2, now()) RETURNING id",
            &[&id.as_str(), &taker],
        )
        .await
        .unwrap()
        .get(0);
    (id, command)
}

/// A sweeper that locked a lapsed lease (as `lease::sweep` does) goes on to lock the session's
/// row and its commands (as closing the turn does) while a take of the same lease, with no
/// prompt or for a handed prompt, waits: the take waits at the lease, holding nothing the
/// sweeper needs, and runs once the sweeper is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_racing_the_sweeper_waits_at_the_lease_holding_nothing_it_needs() {
    let url = fixture::database().await;
    let me = "host-a:1:a";
    let a = Store::open_postgres_as(&url, me, Duration::from_secs(60)).await.unwrap();
    let (database, watch) = (connect(&url).await, connect(&url).await);
    let prompt = Message::new(Role::User, vec![Part::Text { text: "handed".into() }], MessageMeta::default());
    for prompt in [None, Some(prompt)] {
        let (id, command) = lapsed_with_command(&a, &database, me).await;
        let mut sweeper = connect(&url).await;
        let tx = sweeper.transaction().await.unwrap();
        // The sweeper looks for a deadlock long before the take does: one would fail its
        // statements below, rather than the take's batch, which the writer runs again.
        tx.batch_execute("SET LOCAL lock_timeout = '5s'; SET LOCAL deadlock_timeout = '100ms'").await.unwrap();
        tx.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR UPDATE", &[&id.as_str()]).await.unwrap();

        let (took, mut taken) = tokio::sync::oneshot::channel();
        let with_prompt = prompt.is_some();
        let take = Write::TakeLease {
            session_id: id.clone(),
            last: LastTurn::By(Some("epoch 1".into())),
            prompt,
            title: None,
            command: Some(command),
        };
        a.submit(take, Some(Box::new(move |result| drop(took.send(result)))));
        let waiting =
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()";
        while watch.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) < 1 {
            if let Ok(result) = taken.try_recv() {
                panic!("the take waits for the lease the sweeper locked: {result:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let session = tx.execute("SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE", &[&id.as_str()]).await;
        assert!(session.is_ok(), "the sweeper locks the session's row (prompt: {with_prompt}): {session:?}");
        let commands = tx.execute("SELECT 1 FROM session_commands WHERE id = $1 FOR UPDATE", &[&command]).await;
        assert!(commands.is_ok(), "and its commands (prompt: {with_prompt}): {commands:?}");
        tx.rollback().await.unwrap();

        let taken = taken.await.unwrap();
        assert!(taken.is_ok(), "the take runs once the sweeper is done (prompt: {with_prompt}): {taken:?}");
        a.commit(Write::ReleaseLease { session_id: id }).await.unwrap();
    }
    a.shutdown().await;
}

//! The order in which a replica's writes and the sweeper lock a session's rows: the lease
//! first (a batch locks those of its takes at its start), then the session, then its commands;
//! and a lease another replica holds live is never waited for. A take that locked them in
//! another order could wait on the sweeper, or on another replica's batch, while holding what
//! that one waits for, and PostgreSQL would end one of the two as deadlocked: a `/compact` or
//! a handed prompt failing, a batch of another replica's writes failing, or a dead replica's
//! turn left open a sweep longer.

use std::time::Duration;

use tokio_postgres::Client;

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, Write};

use super::fixture::{self, one_waits};

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn new_session(store: &Store) -> SessionId {
    let id = SessionId::generate();
    let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    id
}

/// Gives `id`'s lease, at epoch 1, to `holder`: live for a minute, or lapsed a minute ago.
async fn leased(database: &Client, id: &SessionId, holder: &str, live: bool) {
    let (taken, expires) = match live {
        true => ("now()", "now() + interval '1 minute'"),
        false => ("now() - interval '2 minutes'", "now() - interval '1 minute'"),
    };
    let insert = format!(
        "INSERT INTO session_leases (session_id, holder, epoch, taken_at, expires_at) VALUES ($1, $2, 1, {taken}, {expires})"
    );
    database.execute(&insert, &[&id.as_str(), &holder]).await.unwrap();
}

/// What another transaction (a sweeper, another replica's batch) sets to find a deadlock long
/// before the writer under test does: one would fail its statements, rather than the writer's
/// batch, which the writer runs again.
const FIRST_TO_SEE_A_DEADLOCK: &str = "SET LOCAL lock_timeout = '5s'; SET LOCAL deadlock_timeout = '100ms'";

/// A session whose lease a dead replica left lapsed, and a command handed to `taker`, which it
/// took: what a sweeper and a take by `taker` race for. The command's id.
async fn lapsed_with_command(store: &Store, database: &Client, taker: &str) -> (SessionId, i64) {
    let id = new_session(store).await;
    leased(database, &id, "host-d:9:dead", false).await;
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
        tx.batch_execute(FIRST_TO_SEE_A_DEADLOCK).await.unwrap();
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
        while !one_waits(&watch).await {
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

/// A's take of `theirs`, a session B holds live while B's batch runs (it fenced `theirs`),
/// submitted after a write of A's own session so both go in one batch (`take` makes it, `what`
/// names it); then B's batch goes on to take A's session alone (a `/compact` there). A's take
/// is refused as leased without waiting for B's batch, B's never deadlocks with A's, and
/// nothing of the refused take is written.
async fn refused_without_waiting_for_the_holders_batch(take: impl FnOnce(&SessionId) -> Write, what: &str) {
    let url = fixture::database().await;
    let me = "host-a:1:a";
    let a = Store::open_postgres_as(&url, me, Duration::from_secs(60)).await.unwrap();
    let (database, watch) = (connect(&url).await, connect(&url).await);
    let mut b = connect(&url).await;
    let (mine, theirs) = (new_session(&a).await, new_session(&a).await);
    // A holds `mine`.
    let own = Write::TakeLease {
        session_id: mine.clone(),
        last: LastTurn::By(None),
        prompt: None,
        title: None,
        command: None,
    };
    a.commit(own).await.unwrap();
    // B holds `theirs`, live.
    leased(&database, &theirs, "host-b:2:b", true).await;
    // B's batch is running: it fenced `theirs`.
    let tx = b.transaction().await.unwrap();
    tx.batch_execute(FIRST_TO_SEE_A_DEADLOCK).await.unwrap();
    tx.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR SHARE", &[&theirs.as_str()]).await.unwrap();

    // A's batch: a write of `mine` (fenced FOR SHARE), then the take of `theirs`.
    a.submit(Write::Show { session_id: mine.clone() }, None);
    let (took, mut taken) = tokio::sync::oneshot::channel();
    a.submit(take(&theirs), Some(Box::new(move |result| drop(took.send(result)))));
    let started = std::time::Instant::now();
    let mut refused = None;
    let mut waited = false;
    while refused.is_none() && !waited {
        if let Ok(result) = taken.try_recv() {
            refused = Some(result);
        } else if one_waits(&watch).await {
            waited = true;
        } else {
            assert!(started.elapsed() < Duration::from_secs(10), "neither answered nor waiting");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // B's batch goes on to take `mine` alone.
    let other = tx.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR UPDATE", &[&mine.as_str()]).await;
    let code = other.as_ref().err().and_then(|err| err.code().cloned());
    let _ = tx.rollback().await;
    let refused = match refused {
        Some(result) => result,
        None => taken.await.unwrap(),
    };
    assert_ne!(
        code,
        Some(tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED),
        "B's batch and A's deadlock, PostgreSQL failed B's: {other:?}"
    );
    assert!(!waited, "A's {what} of a session B holds waited for B's running batch");
    assert!(matches!(refused, Err(crate::store::StoreError::Leased(_))), "{refused:?}");
    assert!(a.messages(&theirs).await.unwrap().is_empty(), "nothing of the refused {what} was written");
    a.shutdown().await;
}

/// A take (a `/compact`) of a session whose lease another replica holds live is refused as
/// leased without waiting for that replica's running batch, which holds the lease `FOR SHARE`:
/// waiting, it would hold its own batch's fences meanwhile, and a holder whose batch took one of
/// this replica's sessions alone would deadlock with it.
// current_thread: the writer runs only when the test awaits, so the two writes submitted
// back to back go in one batch.
#[tokio::test]
async fn a_take_of_a_lease_another_replica_holds_live_is_refused_without_waiting_for_its_batch() {
    let take = |theirs: &SessionId| Write::TakeLease {
        session_id: theirs.clone(),
        last: LastTurn::By(Some("epoch 1".into())),
        prompt: None,
        title: None,
        command: None,
    };
    refused_without_waiting_for_the_holders_batch(take, "take").await;
}

/// A batch that changes a session's row (a mode set just before a `/compact`, both in one
/// batch) and then takes its lease has locked the lease first all the same, at the batch's
/// start: the sweeper closing a dead replica's turn (lease, then session) finds the session's
/// row free, and the take waits for the lease.
#[tokio::test]
async fn a_batch_changing_a_sessions_row_before_taking_its_lease_locks_the_lease_first() {
    let url = fixture::database().await;
    let me = "host-a:1:a";
    let a = Store::open_postgres_as(&url, me, Duration::from_secs(60)).await.unwrap();
    let (database, watch) = (connect(&url).await, connect(&url).await);
    let id = new_session(&a).await;
    leased(&database, &id, "host-d:9:dead", false).await;
    let mut sweeper = connect(&url).await;
    let tx = sweeper.transaction().await.unwrap();
    tx.batch_execute(FIRST_TO_SEE_A_DEADLOCK).await.unwrap();
    tx.execute("SELECT 1 FROM session_leases WHERE session_id = $1 FOR UPDATE", &[&id.as_str()]).await.unwrap();

    // One batch: the mode, then the take (not first: its session was touched before it).
    a.submit(
        Write::SetSessionSetting { id: id.clone(), kept: crate::settings::Kept::Column("mode"), value: "plan".into() },
        None,
    );
    let (took, taken) = tokio::sync::oneshot::channel();
    let take = Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::By(Some("epoch 1".into())),
        prompt: None,
        title: None,
        command: None,
    };
    a.submit(take, Some(Box::new(move |result| drop(took.send(result)))));
    let started = std::time::Instant::now();
    while !one_waits(&watch).await {
        assert!(started.elapsed() < Duration::from_secs(10), "nothing waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let session = tx.execute("SELECT 1 FROM sessions WHERE id = $1 FOR NO KEY UPDATE", &[&id.as_str()]).await;
    let code = session.as_ref().err().and_then(|err| err.code().cloned());
    let _ = tx.rollback().await;
    let taken = taken.await.unwrap();
    assert_ne!(
        code,
        Some(tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED),
        "the sweeper deadlocked with the batch"
    );
    assert!(session.is_ok(), "the sweeper locks the session's row: {session:?}");
    assert!(taken.is_ok(), "the take runs once the sweeper is done: {taken:?}");
    a.shutdown().await;
}

/// The same for a turn's claim (a take with its prompt, which goes first with the batch's
/// other claims, `claims::take_all`): a claim whose caller's mark is the epoch B holds live is
/// refused as leased without waiting for B's running batch, so B's batch, going on to take
/// one of A's sessions alone, never deadlocks with A's.
#[tokio::test]
async fn a_claim_of_a_lease_another_replica_holds_live_is_refused_without_waiting_for_its_batch() {
    let claim = |theirs: &SessionId| Write::TakeLease {
        session_id: theirs.clone(),
        last: LastTurn::By(Some("epoch 1".into())),
        prompt: Some(Message::new(Role::User, vec![Part::Text { text: "here".into() }], MessageMeta::default())),
        title: Some("a's title".into()),
        command: None,
    };
    refused_without_waiting_for_the_holders_batch(claim, "claim").await;
}

//! The PostgreSQL backend against a private server (`fixture`): migrations when replicas start
//! together, the lease's takes, lapses and fencing, and errors that never show a password.

use std::time::Duration;

use tokio_postgres::Client;

use super::lease::{self, Lease, Taken};
use super::migrate::{self, LATEST};
use super::{PgError, PgTarget, fixture};
use crate::ids::SessionId;

/// A migrated database of its own, and a connection to it.
pub(super) async fn fresh() -> (PgTarget, Client) {
    let target = PgTarget::parse(&fixture::database().await).unwrap();
    let mut client = target.connect().await.unwrap();
    migrate::to_latest(&mut client, &target).await.unwrap();
    (target, client)
}

/// The lease a take got, or the test fails naming who holds it.
pub(super) fn took(taken: Taken) -> Lease {
    match taken {
        Taken::Took(lease) => lease,
        Taken::Held { holder, .. } => panic!("held by {holder}"),
    }
}

#[tokio::test]
async fn replicas_starting_together_migrate_once_and_later_starts_find_it_done() {
    let target = PgTarget::parse(&fixture::database().await).unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(target.connect().await.unwrap());
    }
    let found = futures::future::join_all(clients.iter_mut().map(|client| migrate::to_latest(client, &target))).await;
    let mut found: Vec<i64> = found.into_iter().map(Result::unwrap).collect();
    found.sort_unstable();
    assert_eq!(found, [0, LATEST, LATEST], "one migrated, the others found it done");
    let stamps: i64 = clients[0].query_one("SELECT count(*) FROM cairn_schema", &[]).await.unwrap().get(0);
    assert_eq!(stamps, LATEST);
    assert_eq!(migrate::to_latest(&mut clients[1], &target).await.unwrap(), LATEST);
}

#[tokio::test]
async fn a_database_stamped_newer_is_refused_and_left_alone() {
    let (target, mut client) = fresh().await;
    client.execute("INSERT INTO cairn_schema (version) VALUES ($1)", &[&(LATEST + 1)]).await.unwrap();
    client.batch_execute("CREATE TABLE from_the_future (x int)").await.unwrap();
    let err = migrate::to_latest(&mut client, &target).await.unwrap_err();
    assert!(matches!(err, PgError::TooNew { found, .. } if found == LATEST + 1), "{err}");
    assert!(err.to_string().contains("upgrade this replica"), "{err}");
    let left: i64 = client.query_one("SELECT count(*) FROM from_the_future", &[]).await.unwrap().get(0);
    assert_eq!(left, 0);
}

#[tokio::test]
async fn of_replicas_racing_for_one_lease_exactly_one_takes_it_and_the_others_learn_who() {
    let (target, _client) = fresh().await;
    let session = SessionId::generate();
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(target.connect().await.unwrap());
    }
    let holders: Vec<String> = (0..8).map(|n| format!("replica-{n}")).collect();
    let takes = clients
        .iter()
        .zip(&holders)
        .map(|(client, holder)| lease::take(client, &target, &session, holder, Duration::from_secs(60)));
    let outcomes: Vec<Taken> = futures::future::join_all(takes).await.into_iter().map(Result::unwrap).collect();
    let winners: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|taken| match taken {
            Taken::Took(lease) => Some(lease),
            Taken::Held { .. } => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(winners[0].epoch, 1);
    for taken in &outcomes {
        if let Taken::Held { holder, taken_ms, expires_ms } = taken {
            assert_eq!(holder, &winners[0].holder);
            assert!(expires_ms - taken_ms >= 59_000, "{taken:?}");
        }
    }
}

#[tokio::test]
async fn a_lapsed_lease_goes_to_the_next_taker_with_the_next_epoch_and_its_old_holder_writes_nothing() {
    let (target, mut client) = fresh().await;
    let mut paused = target.connect().await.unwrap();
    client.batch_execute("CREATE TABLE probe (epoch bigint)").await.unwrap();
    let session = SessionId::generate();
    let first = took(lease::take(&paused, &target, &session, "a", Duration::from_millis(100)).await.unwrap());
    // Replica `a` stops beating (kill -STOP); its lease lapses on the database's clock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = took(lease::take(&client, &target, &session, "b", Duration::from_secs(60)).await.unwrap());
    assert_eq!((first.epoch, second.epoch), (1, 2));

    // `a` wakes up (kill -CONT): its heartbeat and its write are both refused.
    assert!(!lease::renew(&paused, &target, &first, Duration::from_secs(60)).await.unwrap());
    let tx = paused.transaction().await.unwrap();
    assert!(!lease::fence(&tx, &target, &first).await.unwrap(), "the old epoch is fenced off");
    drop(tx);
    assert!(!lease::release(&paused, &target, &first).await.unwrap(), "nor can it release b's lease");

    let tx = client.transaction().await.unwrap();
    assert!(lease::fence(&tx, &target, &second).await.unwrap());
    tx.execute("INSERT INTO probe VALUES ($1)", &[&second.epoch]).await.unwrap();
    tx.commit().await.unwrap();
    let epochs: Vec<i64> =
        client.query("SELECT epoch FROM probe", &[]).await.unwrap().iter().map(|row| row.get(0)).collect();
    assert_eq!(epochs, [2], "one writer per epoch");
}

#[tokio::test]
async fn a_takeover_waits_for_the_write_in_flight_and_then_sees_it() {
    let (target, mut client) = fresh().await;
    client.batch_execute("CREATE TABLE probe (epoch bigint)").await.unwrap();
    let taker = target.connect().await.unwrap();
    let session = SessionId::generate();
    let first = took(lease::take(&client, &target, &session, "a", Duration::from_millis(100)).await.unwrap());
    let tx = client.transaction().await.unwrap();
    assert!(lease::fence(&tx, &target, &first).await.unwrap());
    tx.execute("INSERT INTO probe VALUES ($1)", &[&first.epoch]).await.unwrap();
    // The lease lapses while the write is still open: a takeover must wait for it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let session_b = session.clone();
    let target_b = target.clone();
    let takeover = tokio::spawn(async move {
        let taken = lease::take(&taker, &target_b, &session_b, "b", Duration::from_secs(60)).await.unwrap();
        let seen: i64 = taker.query_one("SELECT count(*) FROM probe", &[]).await.unwrap().get(0);
        (taken, seen)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!takeover.is_finished(), "the takeover went ahead of a fenced write still open");
    tx.commit().await.unwrap();
    let (taken, seen) = takeover.await.unwrap();
    assert_eq!(took(taken).epoch, 2);
    assert_eq!(seen, 1, "the new holder reads what the old one committed");
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once_and_a_held_one_is_kept_by_renewing() {
    let (target, client) = fresh().await;
    let session = SessionId::generate();
    let ttl = Duration::from_secs(60);
    let lease = took(lease::take(&client, &target, &session, "a", ttl).await.unwrap());
    for _ in 0..4 {
        assert!(lease::renew(&client, &target, &lease, ttl).await.unwrap());
    }
    let refused = lease::take(&client, &target, &session, "b", ttl).await.unwrap();
    assert!(matches!(&refused, Taken::Held { holder, .. } if holder == "a"), "{refused:?}");
    assert!(lease::release(&client, &target, &lease).await.unwrap());
    assert_eq!(took(lease::take(&client, &target, &session, "b", ttl).await.unwrap()).epoch, 2);
    // The same holder taking again (its next turn) gets a new epoch too.
    assert_eq!(took(lease::take(&client, &target, &session, "b", ttl).await.unwrap()).epoch, 3);
}

#[tokio::test]
async fn a_lease_that_lapsed_unreleased_is_swept_once_and_live_or_released_ones_never() {
    let (target, client) = fresh().await;
    let short = Duration::from_millis(100);
    let [dead, released, live] = [(); 3].map(|()| SessionId::generate());
    let died = took(lease::take(&client, &target, &dead, "a", short).await.unwrap());
    let done = took(lease::take(&client, &target, &released, "a", short).await.unwrap());
    assert!(lease::release(&client, &target, &done).await.unwrap());
    took(lease::take(&client, &target, &live, "a", Duration::from_secs(60)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let ttl = Duration::from_secs(60);
    assert!(
        lease::sweep(&client, &target, "patient", Duration::from_secs(60), ttl).await.unwrap().is_empty(),
        "a lease that lapsed within the grace is left alone"
    );

    // Three replicas sweep at once.
    let mut sweepers = Vec::new();
    for _ in 0..3 {
        sweepers.push(target.connect().await.unwrap());
    }
    let grace = Duration::from_millis(200);
    let sweeps = sweepers.iter().enumerate().map(|(n, sweeper)| {
        let name = format!("sweeper-{n}");
        let target = target.clone();
        async move { lease::sweep(sweeper, &target, &name, grace, ttl).await.unwrap() }
    });
    let swept: Vec<lease::Swept> = futures::future::join_all(sweeps).await.into_iter().flatten().collect();
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!((&swept[0].lease.session, swept[0].lease.epoch), (&dead, died.epoch + 1));
    assert_eq!(swept[0].dead, "a", "the sweep names the holder that died");
    assert!(!lease::renew(&client, &target, &died, ttl).await.unwrap(), "the dead holder is fenced");
    assert!(lease::sweep(&client, &target, "late", grace, ttl).await.unwrap().is_empty());

    // Once the sweeper closed the turn and let the lease go, it is never swept again.
    assert!(lease::release(&client, &target, &swept[0].lease).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(lease::sweep(&client, &target, "later", grace, ttl).await.unwrap().is_empty());
}

#[tokio::test]
async fn errors_name_the_database_but_never_its_password() {
    let target = PgTarget::parse("postgres://cairn:hunter2@127.0.0.1:1/sessions").unwrap();
    assert_eq!(target.to_string(), "cairn@127.0.0.1:1/sessions");
    assert!(!format!("{target:?}").contains("hunter2"));
    let err = target.connect().await.unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("cannot connect to PostgreSQL at cairn@127.0.0.1:1/sessions: "), "{text}");
    assert!(!text.contains("hunter2"), "{text}");

    let url = fixture::database().await;
    let wrong =
        PgTarget::parse(&url.replace("postgres@", "postgres:hunter2@").replace("/cairn_t", "/missing_t")).unwrap();
    let err = wrong.connect().await.unwrap_err().to_string();
    assert!(err.contains("does not exist") && !err.contains("hunter2"), "{err}");

    for bad in ["postgres://u:hunter2@host:notaport/db", "postgres://u:hunter2@/db", "host=' sslmode=x"] {
        let err = PgTarget::parse(bad).unwrap_err().to_string();
        assert!(err.starts_with("the PostgreSQL URL is malformed") && !err.contains("hunter2"), "{bad}: {err}");
    }
}

#[tokio::test]
async fn a_replica_paused_inside_a_transaction_keeps_its_lease_from_being_swept_no_longer_than_its_limit() {
    let (target, client) = fresh().await;
    let session = SessionId::generate();
    took(lease::take(&client, &target, &session, "paused", Duration::from_millis(100)).await.unwrap());
    // The paused replica's batch had fenced its lease (`FOR SHARE`) when it stopped.
    let mut limited = target.clone();
    limited.limit_idle_transactions(Duration::from_millis(300));
    let mut paused = limited.connect().await.unwrap();
    let batch = paused.transaction().await.unwrap();
    batch.query("SELECT 1 FROM session_leases WHERE session_id = $1 FOR SHARE", &[&session.as_str()]).await.unwrap();

    let ttl = Duration::from_secs(60);
    let mut swept = Vec::new();
    for _ in 0..100 {
        swept = lease::sweep(&client, &target, "sweeper", Duration::ZERO, ttl).await.unwrap();
        if !swept.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(swept.len(), 1, "the lease was swept once the paused transaction was ended");
    assert_eq!(swept[0].dead, "paused");
    assert!(batch.query("SELECT 1", &[]).await.is_err(), "the paused replica's connection was ended");
}

/// What a connection cairn made says of a setting.
async fn shown(target: &PgTarget, setting: &str) -> String {
    let client = target.connect().await.unwrap();
    client.query_one(&format!("SHOW {setting}"), &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn cairns_connections_never_compile_a_statement_unless_the_url_asks_for_it() {
    let url = fixture::database().await;
    let mut target = PgTarget::parse(&url).unwrap();
    assert_eq!(shown(&target, "jit").await, "off");
    target.limit_idle_transactions(Duration::from_secs(15));
    assert_eq!(shown(&target, "jit").await, "off", "the idle limit keeps it");
    assert_eq!(shown(&target, "idle_in_transaction_session_timeout").await, "15s");

    let asked = PgTarget::parse(&format!("{url}?options=-c%20jit%3Don%20-c%20work_mem%3D8MB")).unwrap();
    assert_eq!(shown(&asked, "jit").await, "on", "the URL's own setting wins");
    assert_eq!(shown(&asked, "work_mem").await, "8MB");
}

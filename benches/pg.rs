//! What PostgreSQL's event log costs and how fast another replica sees it: `cargo bench --bench
//! pg`.
//!
//! Starts a private PostgreSQL (the store tests' fixture, `fsync` off: these figures are the
//! statements' and the follower's, not a disk's) and prints, with nothing asserted but that every
//! event arrived exactly once and in order:
//! - batched appends: events per second written by one replica, each batch one transaction
//!   (one statement fences every session, one `unnest` inserts every event) and one NOTIFY;
//! - commit → another replica: how long after its batch committed a follower on its own LISTEN
//!   connection hands each event over, with many sessions streaming at once.
//!
//! - chunks per second through the whole store on each backend, SQLite against PostgreSQL (there
//!   with every chunk's update logged as an event too), 20 sessions streaming;
//! - pruning a backlog of old event rows (1,000 sessions'), a batch of 10,000 rows per statement
//!   as the store does: each statement's time (how long it holds its row locks) and the rate.
//!
//! `CAIRN_PG_CHUNKS` sets the chunks (default 20,000), `CAIRN_PG_SESSIONS` sets the sessions
//! streaming at once (default 200), `CAIRN_PG_BATCHES` the writer's batches (default 500),
//! `CAIRN_PG_PRUNED` the old rows pruned (default 500,000).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../src/store/pg/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::time::{Duration, Instant};

use cairn::history::{Message, MessageMeta, Part, Role};
use cairn::ids::SessionId;
use cairn::store::pg::events::{self, Append, Follower};
use cairn::store::pg::lease::{self, Lease, Taken};
use cairn::store::pg::{PgTarget, migrate, prune};
use cairn::store::{LastTurn, SessionRow, Store, Write};

fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() as f64 - 1.0) * q).round() as usize]
}

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let sessions = setting("CAIRN_PG_SESSIONS", 200);
    let batches = setting("CAIRN_PG_BATCHES", 500);
    let target = PgTarget::parse(&fixture::database().await).unwrap();
    let mut writer = target.connect().await.unwrap();
    migrate::to_latest(&mut writer, &target).await.unwrap();
    let mut leases: Vec<Lease> = Vec::new();
    for _ in 0..sessions {
        let session = SessionId::generate();
        match lease::take(&writer, &target, &session, "bench", Duration::from_secs(600)).await.unwrap() {
            Taken::Took(lease) => leases.push(lease),
            Taken::Held { .. } => unreachable!(),
        }
    }
    let follower = Follower::start(target.clone(), "follower:1:f".into(), Duration::from_millis(250)).await.unwrap();

    // Each batch carries one event for a tenth of the sessions, in turn, as a writer's 25 ms
    // batches would when that many sessions stream at once. An event's body is the instant its
    // transaction began, in nanoseconds since `origin`; each session's receiver notes how long
    // after that it had the event, and checks the order.
    let origin = Instant::now();
    let (lags, mut measured) = tokio::sync::mpsc::unbounded_channel::<f64>();
    for lease in &leases {
        let mut stream = follower.follow(&lease.session, 0);
        let lags = lags.clone();
        tokio::spawn(async move {
            let mut expected = 1;
            while let Some(event) = stream.recv().await {
                assert_eq!(event.seq, expected, "out of order or repeated");
                expected += 1;
                let stamp: u128 = event.body.parse().unwrap();
                let lag = origin.elapsed().as_nanos().saturating_sub(stamp) as f64 / 1e6;
                let _ = lags.send(lag);
            }
        });
    }
    drop(lags);
    let per_batch = (sessions / 10).max(1);
    let mut next = vec![1_i64; sessions];
    let started = Instant::now();
    let mut written = 0_usize;
    for batch in 0..batches {
        let chosen: Vec<usize> = (0..per_batch).map(|n| (batch * per_batch + n) % sessions).collect();
        let tx = writer.transaction().await.unwrap();
        let stamp = [origin.elapsed().as_nanos().to_string()];
        let batch: Vec<Append<'_>> = chosen
            .iter()
            .map(|&index| Append { lease: &leases[index], first_seq: next[index], bodies: &stamp, chunks: &[] })
            .collect();
        events::append(&tx, &target, &batch).await.unwrap();
        tx.commit().await.unwrap();
        for &index in &chosen {
            next[index] += 1;
        }
        let woken: Vec<SessionId> = chosen.iter().map(|&index| leases[index].session.clone()).collect();
        events::notify(&writer, &cairn::store::pg::Prepared::default(), &target, &woken).await.unwrap();
        written += chosen.len();
    }
    let elapsed = started.elapsed();
    println!(
        "batched appends: {written} events in {batches} transactions of {per_batch} sessions each: {:.0} events/s, {:.0} transactions/s",
        written as f64 / elapsed.as_secs_f64(),
        batches as f64 / elapsed.as_secs_f64()
    );
    let mut samples = Vec::with_capacity(written);
    while samples.len() < written {
        match tokio::time::timeout(Duration::from_secs(10), measured.recv()).await {
            Ok(Some(lag)) => samples.push(lag),
            _ => panic!("only {} of {written} events reached the follower", samples.len()),
        }
    }
    println!(
        "append → another replica's subscriber, {sessions} sessions streaming: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        quantile(&mut samples, 0.5),
        quantile(&mut samples, 0.9),
        quantile(&mut samples, 0.99),
        quantile(&mut samples, 1.0)
    );
    drop(follower);

    // The same turns through the whole store, on each backend: a writer batches what comes.
    let chunks = setting("CAIRN_PG_CHUNKS", 20_000);
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open(&dir.path().join("cairn.db")).unwrap();
    let rate = streamed(&sqlite, chunks, false).await;
    println!("store, SQLite: {chunks} chunks over 20 sessions: {rate:.0} chunks/s");
    sqlite.shutdown().await;
    let postgres = Store::open_postgres(&fixture::database().await, Duration::from_secs(15), Duration::from_secs(900))
        .await
        .unwrap();
    let rate = streamed(&postgres, chunks, true).await;
    println!(
        "store, PostgreSQL (each chunk also logged as an event): {chunks} chunks over 20 sessions: {rate:.0} chunks/s"
    );
    postgres.shutdown().await;

    pruned(setting("CAIRN_PG_PRUNED", 500_000) as i64).await;
}

/// Prunes `rows` hour-old rows of 1,000 sessions (plus each one's newest, kept), one batch of
/// [`prune::BATCH`] at a time as the store's pass runs them, and prints each statement's time.
async fn pruned(rows: i64) {
    let target = PgTarget::parse(&fixture::database().await).unwrap();
    let mut client = target.connect().await.unwrap();
    migrate::to_latest(&mut client, &target).await.unwrap();
    client
        .execute(
            "INSERT INTO session_events (session_id, seq, epoch, body, created_at)
             SELECT 's' || (n % 1000), n / 1000 + 1, 1,
                    '{\"update\":\"agent_text\",\"data\":{\"text\":\"chunk \"}}',
                    now() - interval '1 hour'
             FROM generate_series(0, $1::bigint + 999) AS n",
            &[&rows],
        )
        .await
        .unwrap();
    client.batch_execute("VACUUM ANALYZE session_events").await.unwrap();
    // A stopped pass runs one batch: each call here is one statement.
    let one = tokio_util::sync::CancellationToken::new();
    one.cancel();
    let kept = Duration::from_secs(900);
    let mut times = Vec::new();
    let mut deleted = 0;
    let started = Instant::now();
    loop {
        let began = Instant::now();
        let count = prune::prune_once(&client, &target, kept, prune::BATCH, &one).await.unwrap();
        times.push(began.elapsed().as_secs_f64() * 1000.0);
        deleted += count;
        if count < prune::BATCH as u64 {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(deleted, rows as u64, "every old row but each session's newest");
    println!(
        "prune: {deleted} rows of 1,000 sessions in {} statements of {}: {:.0} rows/s; a statement p50 {:.1} ms, max {:.1} ms",
        times.len(),
        prune::BATCH,
        deleted as f64 / elapsed,
        quantile(&mut times, 0.5),
        quantile(&mut times, 1.0)
    );
}

/// Streams `chunks` text chunks over 20 sessions' turns (each chunk its own write, with its
/// update logged when `logged`) and answers chunks per second, from the first chunk to the
/// last one's commit.
async fn streamed(store: &Store, chunks: usize, logged: bool) -> f64 {
    let mut parts = Vec::new();
    for _ in 0..20 {
        let id = SessionId::generate();
        let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), cairn::ids::now_ms());
        store.submit(Write::InsertSession(Box::new(row)), None);
        let prompt = Message::new(Role::User, vec![Part::Text { text: "go".into() }], MessageMeta::default());
        store
            .commit(Write::TakeLease {
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
        store.submit(Write::InsertMessage { session_id: id.clone(), message: answer }, None);
        let part = Part::Text { text: String::new() };
        store
            .commit(Write::OpenPart { session_id: id.clone(), message_id: message_id.clone(), index: 0, part })
            .await
            .unwrap();
        parts.push((id, message_id));
    }
    let started = Instant::now();
    for n in 0..chunks {
        let (_, message_id) = &parts[n % parts.len()];
        let delta = format!("chunk {n} ");
        let shown = if logged {
            vec![format!("{{\"update\":\"agent_text\",\"data\":{{\"text\":\"{delta}\"}}}}")]
        } else {
            Vec::new()
        };
        store.submit_shown(Write::AppendPart { message_id: message_id.clone(), index: 0, delta }, shown, None);
    }
    store.flush().await.unwrap();
    let rate = chunks as f64 / started.elapsed().as_secs_f64();
    for (id, _) in parts {
        store.commit(Write::ReleaseLease { session_id: id }).await.unwrap();
    }
    rate
}

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
//! `CAIRN_PG_SESSIONS` sets the sessions streaming at once (default 200), `CAIRN_PG_BATCHES` the
//! writer's batches (default 500).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../src/store/pg/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::time::{Duration, Instant};

use cairn::ids::SessionId;
use cairn::store::pg::events::{self, Append, Follower};
use cairn::store::pg::lease::{self, Lease, Taken};
use cairn::store::pg::{PgTarget, migrate};

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
    let follower = Follower::start(target.clone(), Duration::from_millis(250)).await.unwrap();

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
            .map(|&index| Append { lease: &leases[index], first_seq: next[index], bodies: &stamp })
            .collect();
        events::append(&tx, &target, &batch).await.unwrap();
        tx.commit().await.unwrap();
        for &index in &chosen {
            next[index] += 1;
        }
        let woken: Vec<SessionId> = chosen.iter().map(|&index| leases[index].session.clone()).collect();
        events::notify(&writer, &target, &woken).await.unwrap();
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
}

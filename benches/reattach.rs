//! What a `session/load` costs the sessions that are streaming: `cargo bench --bench reattach`.
//!
//! A load reads its snapshot on the store's writer thread and queues the replay from there, so
//! the replay and the live stream meet exactly; meanwhile no session's writes are committed or
//! shown. Drives the real binary over pipes against the integration tests' mock model server:
//! one session streams a tick a millisecond while a stored 10,000-message session is loaded in
//! the same process, and the figures are the load's own time and the longest gap between two
//! ticks of the streaming session that spans the load, as the client sees them (the replay's
//! 10,000 lines go through the same pipe). Then the streaming session itself is loaded (a short
//! history). First, for comparison, what the snapshot itself takes on the writer thread, and the
//! same load in a fresh process with nothing streaming.
//! Prints median, p90 and max; nothing asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use cairn::store::Store;

use support::{Agent, Reply, TestEnv};

const SAMPLES: usize = 20;

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {} |",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

fn is_tick(message: &Value, session: &str) -> bool {
    message["params"]["sessionId"] == session && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

/// Loads `target` while `streaming` streams: the load's time, and the longest gap between two
/// ticks of `streaming` from the last one before the request to the first one after the answer.
async fn load_during_stream(agent: &mut Agent, env: &TestEnv, target: &str, streaming: &str) -> (Duration, Duration) {
    let mut last_tick = loop {
        if is_tick(&agent.recv().await, streaming) {
            break Instant::now();
        }
    };
    let started = Instant::now();
    let id = agent.request("session/load", json!({"sessionId": target, "cwd": env.cwd(), "mcpServers": []})).await;
    let mut gap = Duration::ZERO;
    let mut took = None;
    loop {
        let message = agent.recv().await;
        let now = Instant::now();
        if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
            took = Some(now - started);
        } else if is_tick(&message, streaming) {
            gap = gap.max(now - last_tick);
            last_tick = now;
            if took.is_some() {
                return (took.unwrap_or_default(), gap);
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    let stored = support::seed_long_session(&env, 10_000).await;

    println!("| figure | median | p90 | max | samples |");
    println!("|---|---|---|---|---|");
    // What a load holds the writer for, less serializing the replay: the snapshot's read and the
    // replay's updates, on an idle store.
    {
        let store = Store::open(&env.database()).unwrap();
        let mut held = Vec::new();
        for _ in 0..10 {
            let (done, replayed) = tokio::sync::oneshot::channel();
            let started = Instant::now();
            store.snapshot(
                &stored,
                Box::new(move |messages| {
                    let (messages, _) = messages.unwrap();
                    let _ = done.send(cairn::session::replay(&messages).count());
                }),
            );
            assert_eq!(replayed.await.unwrap(), 10_000);
            held.push(started.elapsed());
        }
        stats("snapshot of a 10,000-message session: read and replay built, on the writer thread", held);
        store.shutdown().await;
    }
    // A cold load, for comparison: the session is restored, then its snapshot read and sent.
    let mut cold = Vec::new();
    for _ in 0..10 {
        let mut agent = env.ready().await;
        let started = Instant::now();
        let id = agent.request("session/load", json!({"sessionId": stored, "cwd": env.cwd(), "mcpServers": []})).await;
        agent.response(id).await;
        cold.push(started.elapsed());
        agent.close_stdin();
        agent.wait_exit().await;
    }
    stats("session/load of a 10,000-message session in a fresh process", cold);

    let mut agent = env.ready().await;
    let streaming = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::endless(Duration::from_millis(1)));
    let prompt = agent.prompt(&streaming, "Count").await;

    // The stream's own gaps, with nothing loaded: the baseline.
    let mut quiet = Vec::new();
    let mut last = None;
    while quiet.len() < 200 {
        if is_tick(&agent.recv().await, &streaming) {
            let now = Instant::now();
            if let Some(before) = last.replace(now) {
                quiet.push(now - before);
            }
        }
    }
    stats("gap between two ticks of a stream, nothing loaded", quiet);

    let (mut loads, mut gaps) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let (took, gap) = load_during_stream(&mut agent, &env, stored.as_str(), &streaming).await;
        loads.push(took);
        gaps.push(gap);
    }
    stats("session/load of a 10,000-message session while another streams", loads);
    stats("longest gap in the other session's stream across that load", gaps);

    let (mut loads, mut gaps) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let (took, gap) = load_during_stream(&mut agent, &env, &streaming, &streaming).await;
        loads.push(took);
        gaps.push(gap);
    }
    stats("session/load of the streaming session itself (mid-turn)", loads);
    stats("longest gap in its stream across that load", gaps);

    agent.notify("session/cancel", json!({"sessionId": streaming})).await;
    agent.response(prompt).await;
    agent.close_stdin();
    agent.wait_exit().await;
}

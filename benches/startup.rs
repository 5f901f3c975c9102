//! What an editor waits for at the start: spawn → `initialize` answered, and a new session's
//! first prompt against its second, each in a fresh process: `cargo bench --bench startup`.
//!
//! The first prompt of a process is the one a user types after opening the agent panel; it pays
//! for whatever is built lazily (the HTTP client, its TLS setup, the connection to the model
//! server) unless the session warmed it in the background. Nothing here asserts: the numbers go
//! to BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use support::{Reply, TestEnv};

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| {name} | {:.2} ms | {:.2} ms | {} |", ms(at(0.5)), ms(at(0.9)), samples.len());
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    println!("| figure | median | p90 | samples |");
    println!("|---|---|---|---|");

    let mut spawn = Vec::new();
    let mut first = Vec::new();
    let mut second = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let mut agent = env.spawn().await;
        agent.initialize().await;
        spawn.push(started.elapsed());
        let session = agent.new_session(&env.cwd()).await;
        // The user reads the panel before typing; the session may use that time.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for samples in [&mut first, &mut second] {
            env.mock.push(Reply::text(&["Hi", " there"]));
            let started = Instant::now();
            let id = agent.prompt(&session, "hello").await;
            agent.next_chunk().await;
            samples.push(started.elapsed());
            agent.response(id).await;
        }
        agent.close_stdin();
        agent.wait_exit().await;
    }
    stats("spawn → initialize response", spawn);
    stats("first prompt of a process → first text", first);
    stats("second prompt → first text", second);
}

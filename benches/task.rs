//! What a `task` costs over a plain tool call: `cargo bench --bench task`.
//!
//! Drives the real binary over pipes against the integration tests' mock model server (which
//! answers at once), in bypass mode so nothing asks. A baseline turn is a model step calling
//! `glob`, then a step answering; a task turn is the same with `task` instead, whose child
//! answers in one step of its own. The difference is a sub-agent's added latency: its session
//! row, its system prompt (project instructions, git), one more model request, its commits and
//! its progress. Also four tasks in one answer against one. Prints median, p90 and max.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;

use support::{Agent, Reply, TestEnv};

const SAMPLES: usize = 60;

fn stats(name: &str, mut samples: Vec<Duration>) -> Duration {
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
    at(0.5)
}

async fn timed_turn(agent: &mut Agent, session: &str, text: &str) -> Duration {
    let started = Instant::now();
    let id = agent.prompt(session, text).await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    started.elapsed()
}

fn task(id: String, marker: &str) -> (String, &'static str, serde_json::Value) {
    (id, "task", json!({"description": "bench", "prompt": marker}))
}

fn reply(calls: &[(String, &'static str, serde_json::Value)]) -> Reply {
    let calls: Vec<(&str, &str, serde_json::Value)> =
        calls.iter().map(|(id, name, args)| (id.as_str(), *name, args.clone())).collect();
    Reply::tool_calls(&calls)
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    std::fs::write(env.workspace().join("a.txt"), "a\n").unwrap();
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    println!("| figure | median | p90 | max | samples |");
    println!("|---|---|---|---|---|");

    let mut plain = Vec::new();
    let mut one = Vec::new();
    let mut four = Vec::new();
    let mut sequential = Vec::new();
    for round in 0..SAMPLES + 5 {
        env.mock.push(Reply::tool_calls(&[(&format!("g{round}"), "glob", json!({"pattern": "*.txt"}))]));
        env.mock.push(Reply::text(&["done"]));
        let baseline = timed_turn(&mut agent, &session, "plain").await;

        let marker = format!("CHILD-{round}");
        env.mock.push(reply(&[task(format!("t{round}"), &marker)]));
        env.mock.push(Reply::text(&["done"]));
        env.mock.route(&marker, Reply::text(&["child answer"]));
        let tasked = timed_turn(&mut agent, &session, "one task").await;

        let markers: Vec<String> = (0..4).map(|n| format!("FOUR-{round}-{n}")).collect();
        let calls: Vec<_> = markers.iter().enumerate().map(|(n, m)| task(format!("f{round}-{n}"), m)).collect();
        env.mock.push(reply(&calls));
        env.mock.push(Reply::text(&["done"]));
        for marker in &markers {
            env.mock.route(marker, Reply::text(&["child answer"]));
        }
        let parallel = timed_turn(&mut agent, &session, "four tasks").await;

        // The same four children, one answer each: what running them side by side saves.
        for n in 0..4 {
            let marker = format!("SEQ-{round}-{n}");
            env.mock.push(reply(&[task(format!("s{round}-{n}"), &marker)]));
            env.mock.route(&marker, Reply::text(&["child answer"]));
        }
        env.mock.push(Reply::text(&["done"]));
        let one_by_one = timed_turn(&mut agent, &session, "four tasks one by one").await;

        // The first rounds warm caches and the connection pool.
        if round >= 5 {
            plain.push(baseline);
            one.push(tasked);
            four.push(parallel);
            sequential.push(one_by_one);
        }
    }
    let base = stats("turn: glob, then answer (baseline)", plain);
    let with_task = stats("turn: one task (child answers in one step), then answer", one);
    stats("turn: four tasks in one answer, then answer", four);
    stats("turn: four tasks in four answers, then answer", sequential);
    println!();
    println!(
        "task overhead over a plain tool call (medians): {:.2} ms",
        (with_task.saturating_sub(base)).as_secs_f64() * 1e3
    );
}

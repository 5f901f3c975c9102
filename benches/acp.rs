//! The project's performance targets (start-up, latency, throughput, memory), measured on the
//! real binary over pipes: `cargo bench --bench acp`.
//!
//! Each figure drives `cairn` exactly as an editor would, against the mock model server of the
//! integration tests (answering at once unless said otherwise), and prints the median and p90 of
//! its samples. Nothing here asserts: the numbers go to BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::mock_llm::Long;
use support::{Reply, TestEnv};

fn stats(name: &str, target: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {} | {target} |",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    support::status_kib(pid, field).unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    // Logging is part of the product, but debug logs are not what an editor runs with.
    env.set_env("CAIRN_LOG", "warn");
    println!("| figure | median | p90 | max | samples | target |");
    println!("|---|---|---|---|---|---|");

    // Spawn → initialize response, peak RSS after initialize, exit after stdin EOF.
    let mut spawn = Vec::new();
    let mut exits = Vec::new();
    let mut peak = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let mut agent = env.spawn().await;
        agent.initialize().await;
        spawn.push(started.elapsed());
        let pid = agent.child.id().unwrap();
        peak.push(rss_kib(pid, "VmHWM:"));
        agent.close_stdin();
        exits.push(agent.wait_exit().await.1);
    }
    stats("spawn → initialize response", "≤ 10 ms", spawn);
    stats("exit after stdin EOF (idle)", "≤ 1 s", exits);

    // session/new.
    let mut agent = env.ready().await;
    let mut new = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        agent.new_session(&env.cwd()).await;
        new.push(started.elapsed());
    }
    stats("session/new", "≤ 5 ms", new);

    // Prompt → first text, model answering at once.
    let session = agent.new_session(&env.cwd()).await;
    let mut first = Vec::new();
    for _ in 0..100 {
        env.mock.push(Reply::text(&["Hi", " there"]));
        let started = Instant::now();
        let id = agent.prompt(&session, "hello").await;
        agent.next_chunk().await;
        first.push(started.elapsed());
        agent.response(id).await;
    }
    stats("prompt → first text", "≤ 5 ms", first);

    // Cancel → `cancelled` response, and cancel → model HTTP stream closed.
    let mut cancel = Vec::new();
    let mut closed = Vec::new();
    for round in 0..50 {
        env.mock.push(Reply::endless(Duration::from_millis(20)));
        let id = agent.prompt(&session, "go on").await;
        agent.next_chunk().await;
        let started = Instant::now();
        agent.notify("session/cancel", json!({"sessionId": session})).await;
        agent.response(id).await;
        cancel.push(started.elapsed());
        while env.mock.dropped() <= round {
            tokio::time::sleep(Duration::from_micros(50)).await;
        }
        closed.push(started.elapsed());
    }
    stats("session/cancel → cancelled response", "≤ 5 ms", cancel);
    stats("cancel → model HTTP stream closed", "≤ 50 ms", closed);
    let pid = agent.child.id().unwrap();
    let busy_peak = rss_kib(pid, "VmHWM:");

    // Exit after stdin EOF in the middle of a streaming turn.
    let mut exits = Vec::new();
    for _ in 0..10 {
        env.mock.push(Reply::endless(Duration::from_millis(5)));
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        agent.prompt(&session, "stream").await;
        agent.next_chunk().await;
        agent.close_stdin();
        exits.push(agent.wait_exit().await.1);
    }
    stats("exit after stdin EOF (mid-turn)", "≤ 1 s", exits);

    // Chunks relayed to stdout with per-chunk persistence.
    let chunks = 50_000;
    let deltas: Vec<String> = (0..chunks).map(|i| format!("w{i} ")).collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    let mut rates = Vec::new();
    for _ in 0..3 {
        env.mock.push(Reply::text(&deltas));
        let mut child = {
            let mut command = env.command();
            command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
            command.spawn().unwrap()
        };
        let mut stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
            .await
            .unwrap();
        let new = json!({"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd": env.cwd()}});
        stdin.write_all(format!("{new}\n").as_bytes()).await.unwrap();
        let mut session = String::new();
        while session.is_empty() {
            let line = lines.next_line().await.unwrap().unwrap();
            if let Some(at) = line.find("\"sessionId\":\"") {
                session = line[at + 13..].split('"').next().unwrap().to_owned();
            }
        }
        let prompt = json!({"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId": session, "prompt":[{"type":"text","text":"flood"}]}});
        stdin.write_all(format!("{prompt}\n").as_bytes()).await.unwrap();
        let mut seen = 0;
        let mut started = None;
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("agent_message_chunk") {
                seen += 1;
                started.get_or_insert_with(Instant::now);
            } else if line.contains("\"id\":3") {
                break;
            }
        }
        let took = started.unwrap().elapsed();
        assert_eq!(seen, chunks);
        rates.push(f64::from(chunks) / took.as_secs_f64());
        drop(stdin);
        let _ = child.wait().await;
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "| chunks relayed to stdout with per-chunk persistence | {:.0} /s | — | best {:.0} /s | 3 × {chunks} | ≥ 50,000 /s |",
        rates[1], rates[2]
    );

    // session/load of a 10,000-message session.
    let stored = support::seed_long_session(&env, 10_000).await;
    let mut loads = Vec::new();
    for _ in 0..10 {
        let mut agent = env.ready().await;
        let started = Instant::now();
        let id = agent.request("session/load", json!({"sessionId": stored, "cwd": env.cwd(), "mcpServers": []})).await;
        let (_, replay) = agent.response(id).await;
        loads.push(started.elapsed());
        assert_eq!(replay.len(), 10_001, "every message, then the usage_update");
        agent.close_stdin();
        agent.wait_exit().await;
    }
    stats("session/load of 10,000 messages", "≤ 300 ms", loads);

    // Tool round trip: from the end of the model's tool-call stream to the next model request.
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    std::fs::write(env.workspace().join("bench.txt"), "one\ntwo\nthree\n".repeat(100)).unwrap();
    for (name, arguments) in [("read", json!({"path": "bench.txt"})), ("bash", json!({"command": "true"}))] {
        let mut overhead = Vec::new();
        for _ in 0..50 {
            let (before, _) = env.mock.timeline();
            env.mock.push(Reply::tool_calls(&[("c1", name, arguments.clone())]));
            env.mock.push(Reply::text(&["ok"]));
            let id = agent.prompt(&session, "use the tool").await;
            agent.response(id).await;
            let (arrived, finished) = env.mock.timeline();
            let asked_again = arrived[before.len() + 1];
            let calls_sent = *finished.iter().rfind(|at| **at < asked_again).unwrap();
            overhead.push(asked_again - calls_sent);
        }
        let label = if name == "read" {
            "tool round trip, `read` of a 1,400-byte file"
        } else {
            "tool round trip, local `bash true`"
        };
        stats(label, "—", overhead);
    }

    // Cancel → the shell's whole process tree gone. The command runs in a PID namespace of its
    // own, so its pids are looked up from here by their arguments, not taken from `$!`.
    let mut gone = Vec::new();
    for round in 0..10 {
        let (background, foreground) = (format!("{}", 7100 + 2 * round), format!("{}", 7101 + 2 * round));
        let command = format!("sleep {background} & sleep {foreground}");
        env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
        let id = agent.prompt(&session, "run it").await;
        let pids = loop {
            let pids: Vec<String> = [&background, &foreground]
                .into_iter()
                .flat_map(|arg| support::running_with(&["sleep", arg.as_str()]))
                .collect();
            if pids.len() == 2 {
                break pids;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let started = Instant::now();
        agent.notify("session/cancel", json!({"sessionId": session})).await;
        while pids.iter().any(|pid| support::alive(pid)) {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        gone.push(started.elapsed());
        agent.response(id).await;
    }
    stats("cancel → shell process tree gone", "≤ 100 ms", gone);

    stalled_client(&env).await;
    reading_client(&env).await;

    peak.sort_unstable();
    println!(
        "| peak RSS (VmHWM) idle after initialize | {:.1} MB | {:.1} MB | {:.1} MB | {} | ≤ 15 MB |",
        peak[peak.len() / 2] as f64 / 1024.0,
        peak[peak.len() * 9 / 10] as f64 / 1024.0,
        peak[peak.len() - 1] as f64 / 1024.0,
        peak.len()
    );
    println!(
        "| peak RSS after 450 prompts and 50 cancels in one process | {:.1} MB | — | — | 1 | — |",
        busy_peak as f64 / 1024.0
    );
}

/// A client that stops reading stdout for 10 s while a 40 MB answer (40,000 deltas of 1,000
/// bytes, one text part) streams, then reads it all: cairn's peak RSS while held, how much of the
/// answer the model had sent by then, and what finishing took once the client read again.
async fn stalled_client(env: &TestEnv) {
    let answer = Long { chunks: 40_000, size: 1_000, thought_every: None };
    env.mock.push(Reply::long(answer));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let pid = agent.child.id().unwrap();
    let before = rss_kib(pid, "VmHWM:");
    agent.stop_reading();
    let sent_before = env.mock.streamed();
    let id = agent.prompt(&session, "a very long answer").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let held = rss_kib(pid, "VmHWM:");
    let sent = env.mock.streamed() - sent_before;
    let resumed = Instant::now();
    agent.resume_reading();
    let (response, _) = agent.response(id).await;
    let finished = resumed.elapsed();
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let end = rss_kib(pid, "VmHWM:");
    let total = env.mock.streamed() - sent_before;
    let mb = |kib: u64| kib as f64 / 1024.0;
    println!(
        "| peak RSS, client not reading for 10 s during a 40 MB answer (after session/new: {:.1} MB) | {:.1} MB | — | — | 1 | ≤ 64 MB |",
        mb(before),
        mb(held)
    );
    println!(
        "| model bytes sent in those 10 s (of {:.1} MB of SSE) | {:.1} MB | — | — | 1 | — |",
        total as f64 / 1e6,
        sent as f64 / 1e6
    );
    println!(
        "| client reads again → end of turn (the rest of the 40 MB) | {:.0} ms | — | — | 1 | — |",
        finished.as_secs_f64() * 1e3
    );
    println!("| peak RSS at the end of that turn (the whole answer in memory) | {:.1} MB | — | — | 1 | — |", mb(end));
    agent.close_stdin();
    agent.wait_exit().await;
}

/// Long answers to a client that reads all along, prompt → end of turn: the same 40 MB, and
/// 4 MB in token-sized deltas. Each is one text part, which the store rewrites once per batch.
async fn reading_client(env: &TestEnv) {
    let answers = [
        ("40 MB answer in 1,000-byte deltas", Long { chunks: 40_000, size: 1_000, thought_every: None }),
        ("4 MB answer in 20-byte deltas", Long { chunks: 200_000, size: 20, thought_every: None }),
    ];
    for (name, answer) in answers {
        env.mock.push(Reply::long(answer));
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        let started = Instant::now();
        let id = agent.prompt(&session, "a very long answer").await;
        let (response, _) = agent.response(id).await;
        let took = started.elapsed();
        assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
        println!(
            "| {name}, one part, client reading: prompt → end of turn | {:.0} ms | — | — | 1 | — |",
            took.as_secs_f64() * 1e3
        );
        agent.close_stdin();
        agent.wait_exit().await;
    }
}

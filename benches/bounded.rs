//! What big inputs cost: `cargo bench --bench bounded`.
//!
//! Each sample is a fresh `cairn` process driven over pipes against the mock model server, so its
//! peak RSS (VmHWM) is what that one operation cost on top of an idle agent: a `read` with
//! `limit 5` of a 1 GiB generated text file, at its start and deep into it, and a model request
//! answered with an HTTP error whose body is 64 MiB. Times are the tool round trip (end of the model's tool-call stream → the
//! next model request) and, for the error, prompt → error response. Nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Reply, TestEnv};

const SAMPLES: usize = 5;
const BIG_FILE: u64 = 1 << 30;
const ERROR_BODY: usize = 64 << 20;

fn vm_hwm_mb(pid: u32) -> f64 {
    support::status_kib(pid, "VmHWM:").unwrap_or(0) as f64 / 1024.0
}

fn median<T: Copy + PartialOrd>(mut samples: Vec<T>) -> (T, T) {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

/// A text file of `size` bytes: numbered log lines of about 100 bytes, written in 4 MiB blocks.
fn generate(path: &std::path::Path, size: u64) {
    let mut block = String::new();
    let mut n = 0u64;
    while block.len() < 4 << 20 {
        n += 1;
        block.push_str(&format!(
            "{n:>10} 2026-11-23T10:00:00Z INFO request served in 12 ms by worker 7, nothing to see\n"
        ));
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut written = 0u64;
    while written < size {
        file.write_all(block.as_bytes()).unwrap();
        written += block.len() as u64;
    }
    file.flush().unwrap();
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    let big = env.workspace().join("big.log");
    let started = Instant::now();
    generate(&big, BIG_FILE);
    let size = std::fs::metadata(&big).unwrap().len();
    eprintln!("generated {size} bytes in {:.1} s", started.elapsed().as_secs_f64());

    println!("| figure | median | max | samples |");
    println!("|---|---|---|---|");

    let mut idle = Vec::new();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (label, arguments) in [
        ("`read` limit 5 of a 1 GiB file", json!({"path": "big.log", "limit": 5})),
        (
            "`read` offset 10,000,000 limit 5 of it (83 % in)",
            json!({"path": "big.log", "offset": 10_000_000, "limit": 5}),
        ),
    ] {
        let (mut times, mut peaks) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            let mut agent = env.ready().await;
            let pid = agent.child.id().unwrap();
            let session = agent.new_session(&env.cwd()).await;
            idle.push(vm_hwm_mb(pid));
            let (before, _) = env.mock.timeline();
            env.mock.push(Reply::tool_calls(&[("c1", "read", arguments.clone())]));
            env.mock.push(Reply::text(&["ok"]));
            let id = agent.prompt(&session, "read the log").await;
            agent.response(id).await;
            let (arrived, finished) = env.mock.timeline();
            let asked_again = arrived[before.len() + 1];
            let calls_sent = *finished.iter().rfind(|at| **at < asked_again).unwrap();
            times.push(asked_again - calls_sent);
            peaks.push(vm_hwm_mb(pid));
            let requests = env.mock.requests();
            let messages = requests.last().unwrap()["messages"].as_array().unwrap();
            let tail = messages.last().unwrap()["content"].as_str().unwrap_or_default().to_owned();
            eprintln!("read answered: {:?}", tail.lines().last().unwrap_or_default());
            agent.close_stdin();
            agent.wait_exit().await;
        }
        let (time, worst) = median(times);
        println!("| {label}: tool round trip | {:.2} ms | {:.2} ms | {SAMPLES} |", ms(time), ms(worst));
        let (peak, worst) = median(peaks);
        println!("| {label}: agent peak RSS (VmHWM) | {peak:.1} MB | {worst:.1} MB | {SAMPLES} |");
    }

    let body = format!("upstream failure: {}", "x".repeat(ERROR_BODY));
    let (mut times, mut peaks) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        let mut agent = env.ready().await;
        let pid = agent.child.id().unwrap();
        let session = agent.new_session(&env.cwd()).await;
        env.mock.push(Reply::Status { status: 400, body: body.clone(), retry_after: None });
        let started = Instant::now();
        let id = agent.prompt(&session, "hello").await;
        let (response, _) = agent.response(id).await;
        times.push(started.elapsed());
        peaks.push(vm_hwm_mb(pid));
        assert!(response.get("error").is_some(), "{response}");
        agent.close_stdin();
        agent.wait_exit().await;
    }
    let (time, worst) = median(times);
    println!("| HTTP 400 with a 64 MiB body: prompt → error | {:.2} ms | {:.2} ms | {SAMPLES} |", ms(time), ms(worst));
    let (peak, worst) = median(peaks);
    println!("| HTTP 400 with a 64 MiB body: agent peak RSS (VmHWM) | {peak:.1} MB | {worst:.1} MB | {SAMPLES} |");
    let (peak, worst) = median(idle);
    println!("| for reference: agent peak RSS after session/new | {peak:.1} MB | {worst:.1} MB | {SAMPLES} |");
}

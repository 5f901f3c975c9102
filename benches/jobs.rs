//! What background jobs cost: `cargo bench --bench jobs`.
//!
//! Through the tools as a turn calls them, with the release `cairn` binary as supervisor in
//! `workspace-write` with the namespace (as a session runs them): job start → first output read
//! (`bash` with `background: true` running `echo ready; sleep 1000`, then `job_output` waiting
//! for `ready`), and a session's close with 8 jobs running (each a `sleep` with a `setsid`'d
//! daemon beside it) → every process gone (the close answered, then `/proc` scanned until none
//! of the 16 sleeps is left: one scan takes about a millisecond, which that row includes).
//! Prints medians and quantiles; nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::process::{Launcher, ProcessPolicy};
use cairn::tools::host::UserWait;
use cairn::tools::jobs::JobSettings;
use cairn::tools::{Fetching, Images, Jobs, NoEditor, Registry, ToolContext, Workspace};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const STARTS: usize = 50;
const CLOSES: usize = 20;
const JOBS: usize = 8;

fn context(cwd: &Path, process: &Arc<ProcessPolicy>, jobs: Jobs) -> ToolContext {
    ToolContext {
        workspace: Workspace::new(cwd, &[]),
        host: Arc::new(NoEditor),
        cancel: CancellationToken::new(),
        progress: None,
        process: Arc::clone(process),
        rejected: Vec::new(),
        rulebook: None,
        caller: None,
        call_id: "bench".into(),
        user_wait: UserWait::default(),
        images: Images::default(),
        read_rejections: Vec::new(),
        judged: None,
        trace: None,
        fetch: Fetching::default(),
        jobs,
        lsp: cairn::tools::Lsp::none(),
        checks: Arc::default(),
    }
}

async fn call(ctx: &ToolContext, name: &str, args: serde_json::Value) -> String {
    let registry = Registry::builtin();
    registry.parse(name, &args.to_string()).unwrap().run(ctx).await.unwrap().output
}

/// How many of `watched` (exact argument lists) run, from one scan of `/proc`.
fn running(watched: &[Vec<u8>]) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let pid = name.to_string_lossy();
            pid.bytes().all(|b| b.is_ascii_digit())
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| watched.contains(&line))
                && std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|status| !status.lines().any(|l| l.starts_with("State:") && l.contains('Z')))
        })
        .count()
}

fn sleep_args(seconds: &str) -> Vec<u8> {
    format!("sleep\0{seconds}\0").into_bytes()
}

fn at(samples: &[Duration], q: f64) -> f64 {
    samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

fn show(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{what}: median {:.2} ms, p90 {:.2} ms, max {:.2} ms ({} samples)",
        at(&samples, 0.5),
        at(&samples, 0.9),
        at(&samples, 1.0),
        samples.len()
    );
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let binary =
        std::env::var_os("CAIRN_RELEASE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn")), PathBuf::from);
    println!("Supervisor: {}", binary.display());
    let process = Arc::new(ProcessPolicy { launcher: Launcher::Supervisor(binary), ..ProcessPolicy::default() });
    let settings = JobSettings { max: JOBS, ..JobSettings::default() };

    let mut starts = Vec::with_capacity(STARTS);
    for i in 0..STARTS + 5 {
        let ctx = context(cwd, &process, Jobs::start(settings));
        let began = Instant::now();
        call(&ctx, "bash", json!({"command": "echo ready; exec sleep 1000", "background": true})).await;
        let read = call(&ctx, "job_output", json!({"job": 1, "wait_secs": 10, "pattern": "ready"})).await;
        let took = began.elapsed();
        assert!(read.starts_with("ready"), "{read}");
        ctx.jobs.close().await;
        if i >= 5 {
            starts.push(took);
        }
    }
    show("job start → first output read", starts);

    let (mut answered, mut gone) = (Vec::with_capacity(CLOSES), Vec::with_capacity(CLOSES));
    for round in 0..CLOSES {
        let ctx = context(cwd, &process, Jobs::start(settings));
        let mut watched = Vec::new();
        for job in 0..JOBS {
            let (main, daemon) = (format!("{}.{job}1", 2000 + round), format!("{}.{job}2", 2000 + round));
            let command = format!("(setsid sleep {daemon} &); exec sleep {main}");
            call(&ctx, "bash", json!({"command": command, "background": true})).await;
            watched.extend([sleep_args(&main), sleep_args(&daemon)]);
        }
        while running(&watched) < watched.len() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let began = Instant::now();
        ctx.jobs.close().await;
        answered.push(began.elapsed());
        while running(&watched) > 0 {}
        gone.push(began.elapsed());
    }
    show("close of a session with 8 jobs → answered (each job reaped)", answered);
    show("close of a session with 8 jobs → all 16 processes gone from /proc", gone);
}

//! What the process boundary costs a local command: `cargo bench --bench spawn`.
//!
//! Starts `bash -c true` through `ProcessPolicy::spawn` and waits for its end (output read to
//! the end, status collected), as the `bash` tool does: directly (how cairn started commands
//! before the supervisor), and through the release `cairn` binary as supervisor with the sandbox
//! off, in `workspace-write`, and in `workspace-write` without network. Prints median and p90;
//! nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn::process::{Launcher, ProcessPolicy, SandboxMode};
use tokio::io::AsyncReadExt;

const SAMPLES: usize = 300;

async fn once(policy: &ProcessPolicy, cwd: &std::path::Path) -> Duration {
    let started = Instant::now();
    let args = [OsStr::new("-c"), OsStr::new("true")];
    let mut local = policy.spawn(OsStr::new("bash"), &args, cwd, &[cwd.to_path_buf()]).unwrap();
    let (mut out, mut err) = (local.take_stdout().unwrap(), local.take_stderr().unwrap());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (read_out, read_err, status) = tokio::join!(out.read_to_end(&mut a), err.read_to_end(&mut b), local.wait());
    read_out.unwrap();
    read_err.unwrap();
    assert!(status.unwrap().success(), "{}", String::from_utf8_lossy(&b));
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let supervisor = Launcher::Supervisor(PathBuf::from(env!("CARGO_BIN_EXE_cairn")));
    let support = cairn::process::landlock_support();
    println!("Landlock on this kernel: {support:?}");
    let cases = [
        ("direct (no supervisor, no sandbox: before)", ProcessPolicy::default()),
        (
            "supervisor, sandbox off",
            ProcessPolicy { sandbox: SandboxMode::Off, launcher: supervisor.clone(), ..ProcessPolicy::default() },
        ),
        ("supervisor, workspace-write", ProcessPolicy { launcher: supervisor.clone(), ..ProcessPolicy::default() }),
        (
            "supervisor, workspace-write, network = false",
            ProcessPolicy { network: false, launcher: supervisor, ..ProcessPolicy::default() },
        ),
    ];
    println!("| local `bash -c true`, spawn to exit | median | p90 | samples |");
    println!("|---|---|---|---|");
    for (name, policy) in cases {
        for _ in 0..20 {
            once(&policy, dir.path()).await;
        }
        let mut samples = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            samples.push(once(&policy, dir.path()).await);
        }
        samples.sort();
        let ms = |at: f64| samples[((samples.len() as f64 - 1.0) * at).round() as usize].as_secs_f64() * 1e3;
        println!("| {name} | {:.2} ms | {:.2} ms | {SAMPLES} |", ms(0.5), ms(0.9));
    }
}

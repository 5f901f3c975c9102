//! What the process boundary costs a local command: `cargo bench --bench spawn`.
//!
//! Starts `bash -c true` through `ProcessPolicy::spawn` and waits for its end (output read to
//! the end, status collected), as the `bash` tool does: directly (how cairn started commands
//! before the supervisor), and through the release `cairn` binary as supervisor with the sandbox
//! off, in `workspace-write` without and with the namespace, without network, and with the exec
//! check (a rule rejecting `rm`). The workspace is a small repository with a `.env`, so the
//! namespace has places to bind and hide. Then the cost of one exec under the exec check (a
//! command that runs `/bin/true` 2,000 times, with and without the check, and one whose 20,000
//! execs fail in one process: the check's own time, without forks and the scheduler's placing of
//! them), and `cargo build` of a small crate in turns inside the sandbox and outside, then inside
//! without and with the check (the check's own share of a build). Prints medians and quantiles;
//! nothing here asserts.
//! `CAIRN_SPAWN_ROWS=exec` (or `build`) runs only the per-exec rows (or the `cargo build` rows).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn::process::{Confinement, Launcher, ProcessPolicy, SandboxMode};
use tokio::io::AsyncReadExt;

const SAMPLES: usize = 200;
const EXECS: usize = 2000;
/// Execs that fail in one process, for the check's own cost.
const FAILED_EXECS: usize = 20_000;
/// `cargo build` runs of each kind.
const BUILDS: usize = 31;
/// 2,000-exec commands of each kind.
const PAIRS: usize = 21;

/// The rules a command starts with, and the rules file it follows (as a background job does).
type Rules<'a> = (&'a [Vec<String>], Option<&'a Path>);

/// No rules, no file.
const NONE: Rules<'static> = (&[], None);

async fn once(policy: &ProcessPolicy, cwd: &Path, (rejected, rules): Rules<'_>, script: &str) -> Duration {
    let started = Instant::now();
    let args = [OsStr::new("-c"), OsStr::new(script)];
    let roots = [cwd.to_path_buf()];
    let confinement = Confinement { roots: &roots, rejected, rules };
    let mut local = policy.spawn(OsStr::new("bash"), &args, cwd, confinement).await.unwrap();
    let (mut out, mut err) = (local.take_stdout().unwrap(), local.take_stderr().unwrap());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (read_out, read_err, status) = tokio::join!(out.read_to_end(&mut a), err.read_to_end(&mut b), local.wait());
    read_out.unwrap();
    read_err.unwrap();
    assert!(status.unwrap().success(), "{}", String::from_utf8_lossy(&b));
    started.elapsed()
}

/// `a` and `b` taken in turns, `n` of each, so that the machine's drift (other work, the CPU's
/// clock) falls on both alike; pair by pair.
async fn paired(
    a: (&ProcessPolicy, Rules<'_>, &str),
    b: (&ProcessPolicy, Rules<'_>, &str),
    cwd: &Path,
    n: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    once(a.0, cwd, a.1, a.2).await;
    once(b.0, cwd, b.1, b.2).await;
    let (mut first, mut second) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        // Each side goes first in every other pair, so that going second weighs on both.
        if i % 2 == 0 {
            first.push(once(a.0, cwd, a.1, a.2).await);
            second.push(once(b.0, cwd, b.1, b.2).await);
        } else {
            second.push(once(b.0, cwd, b.1, b.2).await);
            first.push(once(a.0, cwd, a.1, a.2).await);
        }
    }
    (first, second)
}

/// Each pair's difference `b - a` in milliseconds, sorted: a pair's two samples were taken
/// back to back, so their difference carries less of the machine's drift than two medians do.
fn differences(a: &[Duration], b: &[Duration]) -> Vec<f64> {
    let mut differences: Vec<f64> = a.iter().zip(b).map(|(a, b)| (b.as_secs_f64() - a.as_secs_f64()) * 1e3).collect();
    differences.sort_by(f64::total_cmp);
    differences
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn sorted(mut samples: Vec<Duration>) -> Vec<Duration> {
    samples.sort();
    samples
}

async fn samples(policy: &ProcessPolicy, cwd: &Path, rejected: Rules<'_>, script: &str, n: usize) -> Vec<Duration> {
    for _ in 0..n.min(10) {
        once(policy, cwd, rejected, script).await;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        samples.push(once(policy, cwd, rejected, script).await);
    }
    samples.sort();
    samples
}

fn at(samples: &[Duration], quantile: f64) -> f64 {
    samples[((samples.len() as f64 - 1.0) * quantile).round() as usize].as_secs_f64() * 1e3
}

fn repository(dir: &Path) {
    std::fs::create_dir_all(dir.join(".git/objects")).unwrap();
    std::fs::write(dir.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(dir.join(".env"), "TOKEN=x\n").unwrap();
    std::fs::create_dir_all(dir.join(".vscode")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    repository(cwd);
    // The supervisor is the shipped build when one is named (`cargo build --release && cp
    // target/release/cairn /tmp/cairn-release`): this bench's own build (thin LTO, line tables)
    // starts slower, and every sandboxed command starts one.
    let binary =
        std::env::var_os("CAIRN_RELEASE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn")), PathBuf::from);
    println!("Supervisor: {}", binary.display());
    let supervisor = Launcher::Supervisor(binary);
    println!("Landlock on this kernel: {:?}", cairn::process::landlock_support());
    let base = ProcessPolicy { launcher: supervisor.clone(), ..ProcessPolicy::default() };
    let no_namespace = ProcessPolicy { namespace: false, ..base.clone() };
    let rm = vec![vec!["rm".to_owned()]];
    let cases: [(&str, ProcessPolicy, &[Vec<String>]); 6] = [
        ("direct (no supervisor, no sandbox)", ProcessPolicy::default(), &[]),
        ("supervisor, sandbox off", ProcessPolicy { sandbox: SandboxMode::Off, ..base.clone() }, &[]),
        ("supervisor, workspace-write, no namespace", no_namespace.clone(), &[]),
        ("supervisor, workspace-write, namespace", base.clone(), &[]),
        (
            "supervisor, workspace-write, namespace, network = false",
            ProcessPolicy { network: false, ..base.clone() },
            &[],
        ),
        ("supervisor, workspace-write, namespace, exec check (`bash:rm` rejected)", base.clone(), &rm),
    ];
    let rows = std::env::var("CAIRN_SPAWN_ROWS").unwrap_or_default();
    let wanted = |name: &str| rows.is_empty() || rows == name;
    if wanted("spawn") {
        println!("| local `bash -c true`, spawn to exit | median | p90 | samples |");
        println!("|---|---|---|---|");
        for (name, policy, rejected) in &cases {
            let taken = samples(policy, cwd, (rejected, None), "true", SAMPLES).await;
            println!("| {name} | {:.2} ms | {:.2} ms | {SAMPLES} |", at(&taken, 0.5), at(&taken, 0.9));
        }
    }
    if wanted("sockets") {
        // What finding the user's sockets adds to a spawn, in pairs against the same spawn
        // without it (the machine's noise is larger than the scan).
        let sockets = ProcessPolicy { sockets_before: Some(std::time::SystemTime::now()), ..base.clone() };
        let (without, with) = paired((&base, NONE, "true"), (&sockets, NONE, "true"), cwd, PAIRS * 5).await;
        let added = differences(&without, &with);
        println!();
        println!(
            "| finding sockets older than cairn in /tmp and /run, {} pairs | median added | p10 | p90 |",
            PAIRS * 5
        );
        println!("|---|---|---|---|");
        let quantile = |q: f64| added[((added.len() as f64 - 1.0) * q).round() as usize];
        println!(
            "| spawn with the scan minus spawn without | {:.3} ms | {:.3} ms | {:.3} ms |",
            quantile(0.5),
            quantile(0.1),
            quantile(0.9)
        );
    }
    if wanted("exec") {
        per_exec(&base, &rm, cwd).await;
    }
    if wanted("follow") {
        follow(&base, &rm, cwd).await;
    }
    if wanted("build") {
        cargo_build(&base, &rm).await;
    }
}

/// The exec check's cost for one exec: a command of 2,000 execs with and without it, in pairs.
async fn per_exec(base: &ProcessPolicy, rm: &[Vec<String>], cwd: &Path) {
    let loop_script = format!("for i in $(seq {EXECS}); do /bin/true; done");
    let (without, with) = paired((base, NONE, &loop_script), (base, (rm, None), &loop_script), cwd, PAIRS).await;
    let per_exec = differences(&without, &with).into_iter().map(|ms| ms * 1e3 / EXECS as f64).collect::<Vec<_>>();
    let (without, with) = (sorted(without), sorted(with));
    let per = |taken: &[Duration]| at(taken, 0.5) * 1e3 / EXECS as f64;
    println!();
    println!("| {EXECS} execs of `/bin/true` in one command, {PAIRS} pairs | median | per exec |");
    println!("|---|---|---|");
    println!("| without the exec check | {:.1} ms | {:.1} µs |", at(&without, 0.5), per(&without));
    println!("| with the exec check | {:.1} ms | {:.1} µs |", at(&with, 0.5), per(&with));
    println!(
        "| the check's cost per exec, median of the pairs' differences (q1, q3) | | {:.1} µs ({:.1}, {:.1}) |",
        quantile(&per_exec, 0.5),
        quantile(&per_exec, 0.25),
        quantile(&per_exec, 0.75)
    );

    // The same check without the fork, the new program and the scheduler's placing of them:
    // `exec` of a system file without execute permission fails after the check has judged it
    // (as it judges a system program: reached, known by its identity), and with `execfail` the
    // shell goes on to the next, all in one process.
    let failing =
        format!("shopt -s execfail; for i in $(seq {FAILED_EXECS}); do exec /etc/passwd 2>/dev/null; done; true");
    let (without, with) = paired((base, NONE, &failing), (base, (rm, None), &failing), cwd, PAIRS).await;
    let per_exec =
        differences(&without, &with).into_iter().map(|ms| ms * 1e3 / FAILED_EXECS as f64).collect::<Vec<_>>();
    println!(
        "| the time the check adds to one exec's call ({FAILED_EXECS} failing execs in one process), median of \
         the pairs' differences (q1, q3) | | {:.1} µs ({:.1}, {:.1}) |",
        quantile(&per_exec, 0.5),
        quantile(&per_exec, 0.25),
        quantile(&per_exec, 0.75)
    );
}

/// What following the session's rules file adds to one exec's call, as the failing execs of
/// [`per_exec`] measure it: a job before any rule (every exec is judged, with nothing to judge
/// it against) against no check, and with `bash:rm` rejected, following against not (one
/// `fstat` more).
async fn follow(base: &ProcessPolicy, rm: &[Vec<String>], cwd: &Path) {
    let failing =
        format!("shopt -s execfail; for i in $(seq {FAILED_EXECS}); do exec /etc/passwd 2>/dev/null; done; true");
    let book = tempfile::NamedTempFile::new().unwrap();
    let rows: [(&str, Rules<'_>, &str, &[Vec<String>]); 2] = [
        ("a job following its session's rules file, no rule yet, against no check", NONE, "", &[]),
        ("`bash:rm` rejected, following the rules file against not", (rm, None), "rm\n", rm),
    ];
    for (name, without, rules, rejected) in rows {
        std::fs::write(book.path(), rules).unwrap();
        let with = (rejected, Some(book.path()));
        let (plain, followed) = paired((base, without, &failing), (base, with, &failing), cwd, PAIRS).await;
        let per_exec =
            differences(&plain, &followed).into_iter().map(|ms| ms * 1e3 / FAILED_EXECS as f64).collect::<Vec<_>>();
        println!(
            "| {name}, per exec's call ({FAILED_EXECS} failing execs in one process), median of the pairs' \
             differences (q1, q3) | | {:.1} µs ({:.1}, {:.1}) |",
            quantile(&per_exec, 0.5),
            quantile(&per_exec, 0.25),
            quantile(&per_exec, 0.75)
        );
    }
}

/// `cargo build` of a small crate (no dependencies, a build script, a few modules) from clean:
/// outside the sandbox against inside it with the exec check, then inside without the check
/// against inside with it.
async fn cargo_build(sandboxed: &ProcessPolicy, rejected: &[Vec<String>]) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"small\"\nversion = \"0.1.0\"\nedition = \"2021\"\n")
        .unwrap();
    std::fs::write(root.join("build.rs"), "fn main() { println!(\"cargo:rerun-if-changed=build.rs\"); }\n").unwrap();
    let mut lib = String::new();
    for module in 0..8 {
        lib.push_str(&format!(
            "pub mod m{module} {{ pub fn f(x: u64) -> u64 {{ (0..x).map(|i| i * {module}).sum() }} }}\n"
        ));
    }
    std::fs::write(root.join("src/lib.rs"), lib).unwrap();
    repository(root);
    let script = "rm -rf target 2>/dev/null; cargo build --quiet --offline";
    let direct = ProcessPolicy { env: sandboxed.env.clone(), ..ProcessPolicy::default() };
    // `rm` is rejected inside: clean with find instead.
    let inside_script = "find target -delete 2>/dev/null; cargo build --quiet --offline";
    let (outside, inside) =
        paired((&direct, NONE, script), (sandboxed, (rejected, None), inside_script), root, BUILDS).await;
    println!();
    println!("| `cargo build` of a small crate, from clean | median | p90 | samples |");
    println!("|---|---|---|---|");
    row("outside the sandbox", &outside);
    row("sandbox, namespace and exec check", &inside);
    compared("against outside", &outside, &inside);
    // What the exec check alone adds: the same sandbox and namespace without and with it.
    let (unchecked, checked) =
        paired((sandboxed, NONE, inside_script), (sandboxed, (rejected, None), inside_script), root, BUILDS).await;
    row("sandbox and namespace, no exec check", &unchecked);
    row("sandbox, namespace and exec check", &checked);
    compared("the exec check alone", &unchecked, &checked);
}

fn row(name: &str, taken: &[Duration]) {
    let taken = sorted(taken.to_vec());
    println!("| {name} | {:.0} ms | {:.0} ms | {} |", at(&taken, 0.5), at(&taken, 0.9), taken.len());
}

/// `b` against `a`: the difference of their medians and the median of the pairs' own differences.
fn compared(what: &str, a: &[Duration], b: &[Duration]) {
    let mut relative: Vec<f64> =
        a.iter().zip(b).map(|(a, b)| (b.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0).collect();
    relative.sort_by(f64::total_cmp);
    let (a, b) = (sorted(a.to_vec()), sorted(b.to_vec()));
    println!("| {what}: difference of the medians | {:+.1} % | | |", (at(&b, 0.5) / at(&a, 0.5) - 1.0) * 100.0);
    println!(
        "| {what}: median of the pairs' differences (q1, q3) | {:+.1} % ({:+.1}, {:+.1}) | | |",
        quantile(&relative, 0.5),
        quantile(&relative, 0.25),
        quantile(&relative, 0.75)
    );
}

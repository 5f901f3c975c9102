//! What an editor waits for at the start: spawn → `initialize` answered (against a program that
//! only echoes one line, the floor of any process a client starts), and a new session's first
//! prompt against its second, each in a fresh process, with and without a pause after
//! `session/new`: `cargo bench --bench startup`. `CAIRN_RELEASE_BIN` and `CAIRN_BASELINE_BIN` add
//! rows for a copy of the shipped build and of an earlier one, timed in turns with each other.
//!
//! The first prompt of a process is the one a user types after opening the agent panel; a
//! scripted client (`cairn exec`, acpx) sends it right behind `session/new`. It pays for whatever
//! is built lazily (the HTTP client, its TLS setup, the connection to the model server) unless
//! that was built before. Nothing here asserts: the numbers go to BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::ffi::OsStr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Agent, Editor, Reply, TestEnv};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

const RUNS: usize = 60;

fn stats(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("| {name} | {:.2} ms | {:.2} ms | {} |", ms(at(0.5)), ms(at(0.9)), samples.len());
}

/// Spawns `command`, writes one `initialize` line and waits for the first line back: what a bare
/// client measures, for cairn and for the echo program alike.
async fn one_line(mut command: Command) -> Duration {
    let started = Instant::now();
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let request =
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#;
    stdin.write_all(format!("{request}\n").as_bytes()).await.unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).await.unwrap();
    let took = started.elapsed();
    assert!(line.contains("\"id\":1"), "no answer to initialize: {line}");
    drop(stdin);
    let _ = child.wait().await;
    took
}

/// First and second prompt → first text, each in a fresh process, `pause` after `session/new`:
/// for each of `binaries` (`None`: the one this bench built), a run of each in turn, so that a
/// machine slowing down or speeding up meanwhile weighs on all of them alike.
async fn prompts(env: &TestEnv, pause: Option<Duration>, binaries: &[Option<&OsStr>]) -> Vec<[Vec<Duration>; 2]> {
    let mut taken = vec![[Vec::new(), Vec::new()]; binaries.len()];
    for _ in 0..RUNS {
        for (binary, [first, second]) in binaries.iter().zip(&mut taken) {
            let mut agent = match binary {
                Some(binary) => {
                    let mut agent = Agent::spawn(command(env, binary), Editor::default()).await;
                    agent.initialize().await;
                    agent
                }
                None => env.ready().await,
            };
            let session = agent.new_session(&env.cwd()).await;
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
            for samples in [&mut *first, &mut *second] {
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
    }
    taken
}

/// `binary` with the agents' environment, in the workspace.
/// `binary` in `env`, with a database of its own: builds of different schema versions cannot
/// share one (the newer migrates it, and the older then refuses it).
fn command(env: &TestEnv, binary: &OsStr) -> Command {
    let mut command = Command::new(binary);
    let home = env.dir.path().join(format!("home-{:016x}", fnv(binary.as_encoded_bytes())));
    command.env_clear().envs(env.agent_env()).env("CAIRN_HOME", home).current_dir(env.workspace());
    command
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3))
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    println!("| figure | median | p90 | samples |");
    println!("|---|---|---|---|");

    // The binary this bench built (thin LTO, with line tables), the one that ships if it is
    // named (`cargo build --release && cp target/release/cairn /tmp/cairn-release` first, since
    // this bench's build then replaces target/release/cairn), and another to compare it with
    // (`CAIRN_BASELINE_BIN`, a copy of an earlier release build), timed in turns.
    let named: Vec<(&str, std::ffi::OsString)> =
        [("release build", "CAIRN_RELEASE_BIN"), ("baseline", "CAIRN_BASELINE_BIN")]
            .into_iter()
            .filter_map(|(name, variable)| Some((name, std::env::var_os(variable)?)))
            .collect();
    let (mut echo, mut spawn) = (Vec::new(), Vec::new());
    let mut others = vec![Vec::new(); named.len()];
    for _ in 0..RUNS {
        let mut floor = Command::new("head");
        floor.args(["-n", "1"]).env_clear().envs(env.agent_env());
        echo.push(one_line(floor).await);
        spawn.push(one_line(env.command()).await);
        for ((_, binary), taken) in named.iter().zip(&mut others) {
            taken.push(one_line(command(&env, binary)).await);
        }
    }
    stats("echo one line (`head -n 1`), the floor", echo);
    stats("spawn → initialize response (bare client)", spawn);
    for ((name, _), taken) in named.iter().zip(others) {
        stats(&format!("spawn → initialize response, {name} (bare client)"), taken);
    }

    for (pause, when) in [(Some(Duration::from_millis(50)), "50 ms after"), (None, "right after")] {
        let [[first, second]] = prompts(&env, pause, &[None]).await.try_into().unwrap();
        stats(&format!("first prompt → first text, {when} session/new"), first);
        stats(&format!("second prompt → first text, {when} session/new"), second);
    }
    let binaries: Vec<Option<&OsStr>> = named.iter().map(|(_, binary)| Some(binary.as_os_str())).collect();
    for ((name, _), [first, second]) in named.iter().zip(prompts(&env, None, &binaries).await) {
        stats(&format!("first prompt → first text, right after session/new, {name}"), first);
        stats(&format!("second prompt → first text, right after session/new, {name}"), second);
    }
}

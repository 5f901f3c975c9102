//! What MCP servers cost a session: `cargo build --release --example mcp_fixture && cargo bench --bench mcp`.
//!
//! With the fixture server (`examples/mcp_fixture.rs`, a release build found next to this
//! bench): how long `Servers::start` takes with 0 and with 5 stdio servers (it must not wait for
//! them), how long until all are ready (spawned, handshake done, tools listed), the first tool
//! call's round trip after that, later round trips, and `shutdown`. Then through the binary, as
//! an editor drives it: `session/new` with no servers and with 5 in `mcpServers`, and a prompt
//! whose model calls one MCP tool (the session's first prompt, and later ones). Prints median
//! and p90; nothing here asserts.
//!
//! Last, the CPU time this process (the MCP client) spends while a fixture server writes to
//! stderr as fast as it can (`mcp_fixture stderr-flood`), beside the server's own: `cargo bench
//! --bench mcp -- stderr` runs only that.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn::mcp::{McpSettings, Sandbox, ServerConfig, Servers};
use cairn::process::ChildEnv;
use tokio_util::sync::CancellationToken;

const SESSIONS: usize = 30;
/// session/new is measured more often: the two figures are compared.
const NEW_SESSIONS: usize = 100;
const CALLS: usize = 500;

fn fixture() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join("mcp_fixture");
    assert!(path.exists(), "{} is missing: run `cargo build --release --example mcp_fixture` first", path.display());
    path
}

fn configs(count: usize) -> Vec<ServerConfig> {
    let exe = fixture().to_string_lossy().into_owned();
    (0..count).map(|i| ServerConfig::stdio(format!("fx{i}"), exe.clone(), Vec::new())).collect()
}

fn echo() -> serde_json::Map<String, serde_json::Value> {
    serde_json::from_value(serde_json::json!({"text": "ping"})).unwrap()
}

struct Figures(Vec<Duration>);

impl Figures {
    fn row(mut self, name: &str) {
        self.0.sort();
        let at = |q: f64| self.0[((self.0.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3;
        println!("| {name} | {:.3} ms | {:.3} ms | {} |", at(0.5), at(0.9), self.0.len());
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().skip(1).any(|arg| arg == "stderr") {
        stderr_flood().await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let env = ChildEnv { path: Some(cairn::process::DEFAULT_PATH.into()), ..ChildEnv::default() };
    let settings = McpSettings::default();
    let cancel = CancellationToken::new();
    println!("| MCP, fixture server over stdio | median | p90 | samples |");
    println!("|---|---|---|---|");
    for count in [0, 5] {
        let (mut start, mut ready, mut first, mut shutdown) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..SESSIONS {
            let began = Instant::now();
            let (servers, _notices) = Servers::start(configs(count), &settings, sandbox(&env, dir.path()));
            start.push(began.elapsed());
            assert!(servers.ready(Duration::from_secs(10)).await, "{:?}", servers.status());
            ready.push(began.elapsed());
            if count > 0 {
                let called = Instant::now();
                servers.call("fx0", "echo", echo(), &cancel).await.unwrap();
                first.push(called.elapsed());
            }
            let stopping = Instant::now();
            servers.shutdown().await;
            shutdown.push(stopping.elapsed());
        }
        Figures(start).row(&format!("`Servers::start`, {count} servers"));
        Figures(ready).row(&format!("start → all ready (tools listed), {count} servers"));
        if count > 0 {
            Figures(first).row("first `echo` call after ready");
            Figures(shutdown).row(&format!("`shutdown` (stdin closed, exit awaited, group killed), {count} servers"));
        }
    }
    let (servers, _notices) = Servers::start(configs(1), &settings, sandbox(&env, dir.path()));
    assert!(servers.ready(Duration::from_secs(10)).await);
    let mut later = Vec::new();
    for _ in 0..CALLS {
        let called = Instant::now();
        servers.call("fx0", "echo", echo(), &cancel).await.unwrap();
        later.push(called.elapsed());
    }
    Figures(later).row("later `echo` calls, one at a time");
    servers.shutdown().await;
    through_the_binary().await;
    stderr_flood().await;
}

/// How long the flood is watched.
const FLOOD: Duration = Duration::from_secs(5);
/// Clock ticks per second of `/proc/*/stat` (`USER_HZ`, 100 on every Linux port).
const TICKS: f64 = 100.0;

/// User and system CPU time of process `pid` (`self` for this one), in seconds.
fn cpu(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    // utime and stime, fields 14 and 15 of the line (the 12th and 13th after the name).
    (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / TICKS
}

/// The pids of this process's children.
fn children() -> Vec<String> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path().join("children");
        pids.extend(std::fs::read_to_string(path).unwrap_or_default().split_whitespace().map(str::to_owned));
    }
    pids
}

/// Servers started directly (no supervisor), in `dir`, with `env`.
fn sandbox(env: &ChildEnv, dir: &std::path::Path) -> Sandbox {
    let policy = cairn::process::ProcessPolicy { env: env.clone(), ..Default::default() };
    Sandbox::new(&policy, vec![dir.to_path_buf()], Vec::new())
}

/// One server flooding stderr for [`FLOOD`]: the CPU time this process and the server spend.
async fn stderr_flood() {
    let dir = tempfile::tempdir().unwrap();
    let env = ChildEnv { path: Some(cairn::process::DEFAULT_PATH.into()), ..ChildEnv::default() };
    let exe = fixture().to_string_lossy().into_owned();
    let config = ServerConfig::stdio("noisy", exe, vec!["stderr-flood".to_owned()]);
    let (servers, _notices) = Servers::start(vec![config], &McpSettings::default(), sandbox(&env, dir.path()));
    assert!(servers.ready(Duration::from_secs(10)).await, "{:?}", servers.status());
    let server = children().pop().expect("the server is a child of this process");
    let (ours, theirs, began) = (cpu("self"), cpu(&server), Instant::now());
    tokio::time::sleep(FLOOD).await;
    let (ours, theirs, wall) = (cpu("self") - ours, cpu(&server) - theirs, began.elapsed().as_secs_f64());
    println!();
    println!("| a stdio server floods stderr for {} s | CPU time | of one core |", FLOOD.as_secs());
    println!("|---|---|---|");
    println!("| the client (this process) | {ours:.2} s | {:.0} % |", ours / wall * 100.0);
    println!("| the server | {theirs:.2} s | {:.0} % |", theirs / wall * 100.0);
    servers.shutdown().await;
}

/// `session/new` and a prompt with one MCP call, over pipes against the mock model.
async fn through_the_binary() {
    use serde_json::json;
    use support::{Reply, TestEnv};

    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    let exe = fixture();
    let five: Vec<serde_json::Value> =
        (0..5).map(|i| json!({"name": format!("fx{i}"), "command": exe, "args": [], "env": []})).collect();
    let mut agent = env.ready().await;
    for (servers, name) in
        [(json!([]), "`session/new`, no MCP servers"), (json!(five), "`session/new`, 5 stdio MCP servers")]
    {
        let mut new = Vec::new();
        for _ in 0..NEW_SESSIONS {
            let began = Instant::now();
            let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": servers})).await;
            new.push(began.elapsed());
            let session = result["sessionId"].as_str().unwrap().to_owned();
            agent.call("session/close", json!({"sessionId": session})).await;
            // The closed session's servers stop in the background; let them, so that each
            // sample measures one session/new and not the last one's cleanup.
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        Figures(new).row(name);
    }
    let (mut first, mut later) = (Vec::new(), Vec::new());
    for _ in 0..SESSIONS {
        let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": [five[0]]})).await;
        let session = result["sessionId"].as_str().unwrap().to_owned();
        agent.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
        for round in 0..3 {
            env.mock.push(Reply::tool_calls(&[("c", "mcp__fx0__echo", json!({"text": "ping"}))]));
            env.mock.push(Reply::text(&["ok"]));
            let began = Instant::now();
            let id = agent.prompt(&session, "call it").await;
            agent.response(id).await;
            if round == 0 { first.push(began.elapsed()) } else { later.push(began.elapsed()) }
        }
        agent.call("session/close", json!({"sessionId": session})).await;
    }
    Figures(first).row("prompt with one MCP call → end of turn, right after `session/new` (server starting)");
    Figures(later).row("prompt with one MCP call → end of turn, later prompts");
}

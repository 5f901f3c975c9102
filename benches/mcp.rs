//! What MCP servers cost a session: `cargo build --release --example mcp_fixture && cargo bench --bench mcp`.
//!
//! With the fixture server (`examples/mcp_fixture.rs`, a release build found next to this
//! bench): how long `Servers::start` takes with 0 and with 5 stdio servers (it must not wait for
//! them), how long until all are ready (spawned, handshake done, tools listed), the first tool
//! call's round trip after that, later round trips, and `shutdown`. Then through the binary, as
//! an editor drives it: `session/new` with no servers and with 5 in `mcpServers`, and a prompt
//! whose model calls one MCP tool (the session's first prompt, and later ones). Prints median
//! and p90; nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn::mcp::{McpSettings, ServerConfig, Servers};
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
            let (servers, _notices) = Servers::start(configs(count), &settings, &env, dir.path());
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
    let (servers, _notices) = Servers::start(configs(1), &settings, &env, dir.path());
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

//! What MCP servers cost a session: `cargo build --release --example mcp_fixture && cargo bench --bench mcp`.
//!
//! With the fixture server (`examples/mcp_fixture.rs`, a release build found next to this
//! bench): how long `Servers::start` takes with 0 and with 5 stdio servers (it must not wait for
//! them), how long until all are ready (spawned, handshake done, tools listed), the first tool
//! call's round trip after that, later round trips, and `shutdown`. Prints median and p90;
//! nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn::mcp::{McpSettings, ServerConfig, Servers};
use cairn::process::ChildEnv;
use tokio_util::sync::CancellationToken;

const SESSIONS: usize = 30;
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
}

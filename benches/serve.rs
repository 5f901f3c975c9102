//! What `cairn serve` costs and how far it goes: `cargo bench --bench serve`.
//!
//! Drives the real binary with WebSocket clients (tokio-tungstenite) against the mock model
//! server of the integration tests, and prints figures; nothing here asserts but that every
//! update arrived, in order:
//! - prompt → first text over WebSocket and over Streamable HTTP against stdio, the same mock,
//!   samples in turns;
//! - spawn → `initialize` of `cairn acp --server SOCKET` (the editor's bridge) against `cairn acp`;
//! - a second connection joining a streaming 1,000-update turn: its `session/load` answer time,
//!   and how far behind the first connection it sees each live chunk;
//! - many sessions streaming at once over 50 connections: prompt → first text, the server's
//!   memory, and its CPU per 1,000 chunks/s.
//!
//! `CAIRN_SERVE_SESSIONS` sets the sessions of the last figure (default 1,000);
//! `CAIRN_SERVE_ROWS=first,bridge,join,many` picks figures (all by default).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::served::{Client, Server};
use support::streamable::{Events, HttpClient, http_url};
use support::{Agent, Editor, Reply, TestEnv};

const SAMPLES: usize = 200;
const CONNECTIONS: usize = 50;

fn quantile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() as f64 - 1.0) * q).round() as usize]
}

/// A table row: `label`, the samples' median and p90 in ms.
fn row(label: &str, samples: &mut [f64]) {
    println!("| {label} | {:.2} ms | {:.2} ms |", quantile(samples, 0.5), quantile(samples, 0.9));
}

/// A table row of pair differences: `label`, their median, and (q1, q3), in ms.
fn difference_row(label: &str, differences: &mut [f64]) {
    let (median, q1, q3) = (quantile(differences, 0.5), quantile(differences, 0.25), quantile(differences, 0.75));
    println!("| {label}, median of pair differences (q1, q3) | {median:+.2} ms ({q1:+.2}, {q3:+.2}) | |");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn is_chunk(message: &Value) -> bool {
    message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

fn chunk_text(message: &Value) -> &str {
    message["params"]["update"]["content"]["text"].as_str().unwrap_or_default()
}

/// `/proc/PID/status` field in KiB, 0 once the process is gone.
fn status_kib(pid: u32, field: &str) -> u64 {
    support::status_kib(pid, field).unwrap_or(0)
}

/// User and system CPU time of a process so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = fields.get(11..13).map(|f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

#[tokio::main]
async fn main() {
    let env = TestEnv::new().await;
    let rows = std::env::var("CAIRN_SERVE_ROWS").unwrap_or_default();
    let wanted = |name: &str| rows.is_empty() || rows.split(',').any(|row| row == name);
    if wanted("first") {
        first_text_against_stdio(&env).await;
    }
    if wanted("bridge") {
        bridge_start(&env).await;
    }
    if wanted("join") {
        joining(&env).await;
    }
    if wanted("many") {
        let sessions = std::env::var("CAIRN_SERVE_SESSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
        many(&env, sessions).await;
    }
}

/// Reads (with `next`) until the first chunk of the answer to the prompt `id` sent at
/// `started`, then to its answer: the time to the chunk.
async fn first_text(started: Instant, id: i64, mut next: impl AsyncFnMut() -> Value) -> Duration {
    let mut first = None;
    loop {
        let message = next().await;
        if first.is_none() && is_chunk(&message) {
            first = Some(started.elapsed());
        }
        if message.get("method").is_none() && message["id"] == id {
            return first.expect("a chunk before the answer");
        }
    }
}

async fn ws_first_text(client: &mut Client, session: &str) -> Duration {
    let started = Instant::now();
    let id = client.prompt(session, "Hi").await;
    first_text(started, id, async || client.recv().await).await
}

async fn http_first_text(client: &mut HttpClient, events: &mut Events, session: &str) -> Duration {
    let started = Instant::now();
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": "Hi"}]});
    let id = client.request("session/prompt", prompt, Some(session)).await;
    first_text(started, id, async || events.recv().await.1).await
}

async fn stdio_first_text(agent: &mut Agent, session: &str) -> Duration {
    let started = Instant::now();
    let id = agent.prompt(session, "Hi").await;
    first_text(started, id, async || agent.recv().await).await
}

async fn first_text_against_stdio(env: &TestEnv) {
    for _ in 0..3 * (SAMPLES + 10) {
        env.mock.push(Reply::text(&["Hello", " there"]));
    }
    let server = Server::start(env).await;
    let mut client = server.client().await;
    let ws_session = client.new_session(&env.cwd()).await;
    let (mut http, _) = HttpClient::initialize(&http_url(&server.url)).await;
    let (_connection, http_session, mut http_events) = http.new_session(&env.cwd()).await;
    let mut agent = env.ready().await;
    let stdio_session = agent.new_session(&env.cwd()).await;
    for _ in 0..10 {
        ws_first_text(&mut client, &ws_session).await;
        http_first_text(&mut http, &mut http_events, &http_session).await;
        stdio_first_text(&mut agent, &stdio_session).await;
    }
    let (mut ws, mut over_http, mut stdio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut differences, mut http_differences) = (Vec::new(), Vec::new());
    for i in 0..SAMPLES {
        // Each in turn first, so that none always follows another.
        let (mut a, mut h, mut b) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for which in 0..3 {
            match (i + which) % 3 {
                0 => a = ws_first_text(&mut client, &ws_session).await,
                1 => h = http_first_text(&mut http, &mut http_events, &http_session).await,
                _ => b = stdio_first_text(&mut agent, &stdio_session).await,
            }
        }
        ws.push(ms(a));
        over_http.push(ms(h));
        stdio.push(ms(b));
        differences.push(ms(a) - ms(b));
        http_differences.push(ms(h) - ms(b));
    }
    println!("| prompt → first text, {SAMPLES} each in turns | median | p90 |");
    println!("|---|---|---|");
    row("stdio", &mut stdio);
    row("WebSocket (`cairn serve`)", &mut ws);
    difference_row("WebSocket − stdio", &mut differences);
    row("Streamable HTTP (POST, session's SSE)", &mut over_http);
    difference_row("Streamable HTTP − stdio", &mut http_differences);
    println!();
}

async fn spawn_to_initialize(env: &TestEnv, args: &[&str]) -> Duration {
    let mut command = env.command();
    command.args(args);
    let started = Instant::now();
    let mut agent = Agent::spawn(command, Editor::default()).await;
    agent.initialize().await;
    let taken = started.elapsed();
    agent.close_stdin();
    agent.wait_exit().await;
    taken
}

async fn bridge_start(env: &TestEnv) {
    let socket = env.dir.path().join("bench.sock");
    let socket = socket.to_str().unwrap().to_owned();
    let _server = Server::start_on(env, &socket, &[]).await;
    let bridge = ["acp", "--server", socket.as_str()];
    for _ in 0..5 {
        spawn_to_initialize(env, &["acp"]).await;
        spawn_to_initialize(env, &bridge).await;
    }
    let (mut direct, mut bridged, mut differences) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..100 {
        let (a, b) = if i % 2 == 0 {
            let a = spawn_to_initialize(env, &["acp"]).await;
            (a, spawn_to_initialize(env, &bridge).await)
        } else {
            let b = spawn_to_initialize(env, &bridge).await;
            (spawn_to_initialize(env, &["acp"]).await, b)
        };
        direct.push(ms(a));
        bridged.push(ms(b));
        differences.push(ms(b) - ms(a));
    }
    println!("| spawn → `initialize` answered, 100 each in turns | median | p90 |");
    println!("|---|---|---|");
    row("`cairn acp`", &mut direct);
    row("`cairn acp --server SOCKET` (the bridge)", &mut bridged);
    difference_row("bridge − direct", &mut differences);
    println!();
}

/// Reads `client` until `id` is answered, noting when each chunk of `session` arrived.
async fn timed_chunks(mut client: Client, id: Option<i64>, count: usize) -> (Client, HashMap<String, Instant>) {
    let mut seen = HashMap::new();
    loop {
        let message = client.recv().await;
        if is_chunk(&message) {
            seen.insert(chunk_text(&message).to_owned(), Instant::now());
        }
        let answered = id.is_some_and(|id| message.get("method").is_none() && message["id"] == id);
        if answered || (id.is_none() && seen.len() >= count) {
            return (client, seen);
        }
    }
}

async fn joining(env: &TestEnv) {
    const UPDATES: usize = 1000;
    let (mut loads, mut lags) = (Vec::new(), Vec::new());
    let server = Server::start(env).await;
    for _ in 0..5 {
        let pieces: Vec<String> = (0..UPDATES).map(|i| format!("<{i}>")).collect();
        let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
        env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(2)));
        let mut first = server.client().await;
        let session = first.new_session(&env.cwd()).await;
        let prompt = first.prompt(&session, "Count").await;
        // Half the turn streams before the second connection joins.
        let mut seen = 0;
        while seen < UPDATES / 2 {
            seen += usize::from(is_chunk(&first.recv().await));
        }
        let reading_first = tokio::spawn(timed_chunks(first, Some(prompt), UPDATES));
        let mut second = server.client().await;
        let asked = Instant::now();
        let load =
            second.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
        let (_, replayed) = second.response(load).await;
        loads.push(ms(asked.elapsed()));
        // A part still streaming is replayed as one chunk with its text so far.
        let replayed_pieces: usize =
            replayed.iter().filter(|m| is_chunk(m)).map(|m| chunk_text(m).matches('<').count()).sum();
        let reading_second = tokio::spawn(timed_chunks(second, None, UPDATES - replayed_pieces.min(UPDATES)));
        let (_, first_seen) = reading_first.await.unwrap();
        let (_, second_seen) = reading_second.await.unwrap();
        for (text, at) in &second_seen {
            if let Some(before) = first_seen.get(text) {
                lags.push(ms(at.saturating_duration_since(*before)));
            }
        }
    }
    println!("| a second connection joins a streaming {UPDATES}-update turn (5 turns) | median | p99 |");
    println!("|---|---|---|");
    println!(
        "| its `session/load` answered | {:.2} ms | {:.2} ms |",
        quantile(&mut loads, 0.5),
        quantile(&mut loads, 0.99)
    );
    println!(
        "| each live chunk, behind the first connection ({} chunks; p90 {:.3} ms) | {:.3} ms | {:.3} ms |",
        lags.len(),
        quantile(&mut lags, 0.9),
        quantile(&mut lags, 0.5),
        quantile(&mut lags, 0.99)
    );
    println!();
}

/// One connection's share of the sessions: creates them, waits for `go`, prompts them all, and
/// reads every answer, checking each session's chunks came whole and in order.
async fn share(
    server_url: String,
    cwd: String,
    sessions: usize,
    expected: String,
    go: std::sync::Arc<tokio::sync::Barrier>,
) -> Vec<f64> {
    let mut client = support::served::connect(&server_url).await;
    client.initialize().await;
    let mut ids = Vec::new();
    for _ in 0..sessions {
        ids.push(client.new_session(&cwd).await);
    }
    go.wait().await;
    let mut started = HashMap::new();
    let mut prompts = HashMap::new();
    for session in &ids {
        prompts.insert(client.prompt(session, "Count").await, session.clone());
        started.insert(session.clone(), Instant::now());
    }
    let mut text: HashMap<String, String> = HashMap::new();
    let mut first: Vec<f64> = Vec::new();
    let mut answered = 0;
    while answered < sessions {
        let message = client.recv().await;
        if is_chunk(&message) {
            let session = message["params"]["sessionId"].as_str().unwrap().to_owned();
            let joined = text.entry(session.clone()).or_default();
            if joined.is_empty() {
                first.push(ms(started[&session].elapsed()));
            }
            joined.push_str(chunk_text(&message));
        } else if message.get("method").is_none() && message["id"].as_i64().is_some_and(|id| prompts.contains_key(&id))
        {
            assert_eq!(message["result"]["stopReason"], "end_turn", "{message}");
            answered += 1;
        }
    }
    for session in &ids {
        assert_eq!(text.get(session), Some(&expected), "session {session}: every chunk, in order");
    }
    first
}

async fn many(env: &TestEnv, sessions: usize) {
    const PIECES: usize = 40;
    let pieces: Vec<String> = (0..PIECES).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    for _ in 0..sessions {
        env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(50)));
    }
    let server = Server::start(env).await;
    let pid = server.child.id().unwrap();
    let go = std::sync::Arc::new(tokio::sync::Barrier::new(CONNECTIONS + 1));
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let share_of = sessions / CONNECTIONS + usize::from(c < sessions % CONNECTIONS);
        tasks.push(tokio::spawn(share(server.url.clone(), env.cwd(), share_of, pieces.concat(), go.clone())));
    }
    go.wait().await;
    let idle = status_kib(pid, "VmRSS:");
    let (started, cpu_before) = (Instant::now(), cpu(pid));
    let mut first = Vec::new();
    for task in tasks {
        first.extend(task.await.unwrap());
    }
    let (wall, cpu_used) = (started.elapsed(), cpu(pid) - cpu_before);
    let chunks = sessions * PIECES;
    let rate = chunks as f64 / wall.as_secs_f64();
    println!(
        "| {sessions} sessions streaming at once over {CONNECTIONS} connections ({PIECES} chunks each, one every 50 ms) | |"
    );
    println!("|---|---|");
    println!("| every update delivered, in order | yes ({chunks} chunks) |");
    println!(
        "| prompt → first text, median / p99 (the mock waits 50 ms before each chunk, the first included) | {:.1} ms / {:.1} ms |",
        quantile(&mut first, 0.5),
        quantile(&mut first, 0.99)
    );
    println!("| chunks per second, through the server | {rate:.0} |");
    println!(
        "| server CPU per 1,000 chunks/s | {:.2} cores |",
        cpu_used.as_secs_f64() / wall.as_secs_f64() / (rate / 1000.0)
    );
    println!("| server RSS with the sessions open, before the prompts | {:.1} MB |", idle as f64 / 1024.0);
    println!("| server peak RSS (`VmHWM`) | {:.1} MB |", status_kib(pid, "VmHWM:") as f64 / 1024.0);
    println!("| server RSS after the turns | {:.1} MB |", status_kib(pid, "VmRSS:") as f64 / 1024.0);
}

//! Three `cairn serve` replicas on one PostgreSQL, as issue 22 asks: `cargo bench --bench
//! replicas`.
//!
//! Starts the store tests' private PostgreSQL (`fsync` off), three replicas on one database, and
//! a model server of its own whose every text chunk carries its number in the session and the
//! instant it was sent (`<n@µs since the epoch>`). Each session is created and prompted on its
//! home replica, so its turn runs there; two thirds are also loaded by a client of another
//! replica, which follows the turn from the `session_events` log. Clients are multiplexed: a few
//! WebSocket connections per replica, each holding many sessions. Prints, asserting nothing:
//! - order errors, gaps and duplicates on every connection, and whether what each saw is what a
//!   `session/load` shows afterwards;
//! - chunk sent by the model → received by a client of another replica (an upper bound of commit
//!   → remote client: the model sends before the replica commits), and prompt → first text;
//! - PostgreSQL's CPU (its processes' user and system time over the streaming, per second of
//!   wall time) and each replica's peak RSS (`VmHWM`);
//! - `kill -9` of a replica holding sessions with prompts handed from another replica: the time
//!   until every one of those prompts is answered (the lease's time to live plus a sweep);
//! - chunks per second through one replica on SQLite and on PostgreSQL, in the same run.
//!
//! `CAIRN_REPLICAS_SESSIONS` (default 1,000), `CAIRN_REPLICAS_SECS` (default 60; each session
//! streams 10 chunks a second that long), `CAIRN_REPLICAS_CONNECTIONS` (per replica, default
//! 10), `CAIRN_REPLICAS_KILLED` (sessions on the killed replica, default 20),
//! `CAIRN_REPLICAS_THROUGHPUT` (sessions of the store figure, default 50, 400 chunks each),
//! `CAIRN_REPLICAS_SPREAD_MS` (each connection spaces its prompts evenly over that long; default
//! 0, every prompt at once). `CAIRN_REPLICAS_KILLED=0` and `CAIRN_REPLICAS_THROUGHPUT=0` leave
//! out the `kill -9` and the store figures.
//!
//! To see where the time goes: `CAIRN_REPLICAS_LOG` is the replicas' `CAIRN_LOG` (default
//! `cairn=info`; `cairn=info,cairn::timing=trace` logs each turn's start step by step and each
//! writer batch's time), written to `replica-N.log` in the directory `CAIRN_REPLICAS_STDERR`
//! names after the streaming; and with `CAIRN_REPLICAS_STATEMENTS` set and the server started
//! with `CAIRN_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements"`, the statements that
//! took PostgreSQL's time over the streaming are printed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::too_many_arguments
)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

#[path = "../src/store/pg/fixture.rs"]
#[allow(dead_code)]
mod fixture;

#[path = "replicas/measure.rs"]
mod measure;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Barrier, mpsc, oneshot};

use support::TestEnv;
use support::served::{Client, Server, connect};

const REPLICAS: usize = 3;
/// Chunks per second of every session's turn.
const RATE: usize = 10;
/// How long a connection waits for a frame before it stops and reports what is missing (shorter
/// than the harness's own patience, which panics).
const IDLE: Duration = Duration::from_secs(8);

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn quantile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() as f64 - 1.0) * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn epoch_micros() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()
}

/// What the model does, named in the prompt's text: `bench:stamped:N` streams N stamped chunks,
/// the first at once and then one every 100 ms; `bench:fast:N`, N plain numbered chunks at once;
/// `bench:endless`, stamped chunks as `stamped` does until the connection closes. Title requests
/// get a title.
async fn complete(body: Bytes) -> axum::response::Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let system = json.pointer("/messages/0/content").and_then(Value::as_str).unwrap_or_default();
    let last_user = json["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default();
    let delta = |text: String| {
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
            .to_string()
    };
    let finish = vec![
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 5}}).to_string(),
        "[DONE]".to_owned(),
    ];
    let number = |marker: &str| {
        last_user.split(marker).nth(1).and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
    };
    let frames: futures::stream::BoxStream<'static, String> = if system.starts_with("You write short titles") {
        futures::stream::iter(std::iter::once(delta("Bench".to_owned())).chain(finish)).boxed()
    } else if let Some(count) = number("bench:fast:") {
        futures::stream::iter((0..count).map(move |i: usize| delta(format!("<{i}>"))).chain(finish)).boxed()
    } else {
        let count: usize = number("bench:stamped:").unwrap_or(usize::MAX);
        let stamped = futures::stream::unfold(0usize, move |i| {
            let delta = delta;
            async move {
                if i >= count {
                    return None;
                }
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(1000 / RATE as u64)).await;
                }
                Some((delta(format!("<{i}@{}>", epoch_micros())), i + 1))
            }
        });
        stamped.chain(futures::stream::iter(finish)).boxed()
    };
    let frames = frames.map(|data| Ok::<_, std::io::Error>(Bytes::from(format!("data: {data}\n\n"))));
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(frames))
        .unwrap()
}

/// Starts the model server; its base URL (ending in `/v1`).
async fn model() -> String {
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(complete));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/v1")
}

/// A test home whose replicas talk to `model`, on `store` (a PostgreSQL URL) or SQLite.
async fn home(model: &str, store: Option<&str>, extra: &str) -> TestEnv {
    let mut env = TestEnv::new().await;
    env.set_env("OPENAI_BASE_URL", model);
    env.set_env("CAIRN_LOG", &std::env::var("CAIRN_REPLICAS_LOG").unwrap_or_else(|_| "cairn=info".to_owned()));
    if let Some(url) = store {
        env.write_config(&format!("[store]\nurl = \"{url}\"\n{extra}"));
    }
    env
}

fn is_chunk(message: &Value) -> bool {
    message["method"] == "session/update" && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
}

fn chunk_text(message: &Value) -> &str {
    message["params"]["update"]["content"]["text"].as_str().unwrap_or_default()
}

fn session_of(message: &Value) -> String {
    message["params"]["sessionId"].as_str().unwrap_or_default().to_owned()
}

/// The `(number, sent µs)` of every stamped piece in `text`.
fn pieces(text: &str) -> Vec<(usize, Option<u128>)> {
    text.split('<')
        .skip(1)
        .filter_map(|piece| {
            let piece = piece.split('>').next()?;
            let (number, stamp) = piece.split_once('@').map_or((piece, None), |(n, s)| (n, Some(s)));
            Some((number.parse().ok()?, stamp.and_then(|s| s.parse().ok())))
        })
        .collect()
}

/// One session as one connection saw it.
#[derive(Default)]
struct Seen {
    numbers: Vec<usize>,
    text: String,
}

#[derive(Default)]
struct Errors {
    order: usize,
    gaps: usize,
    duplicates: usize,
}

impl Errors {
    /// Counts what is wrong with `numbers` against 0, 1, … `expected - 1`.
    fn count(&mut self, numbers: &[usize], expected: usize) {
        let mut distinct = HashSet::new();
        let mut highest = None;
        for &n in numbers {
            if !distinct.insert(n) {
                self.duplicates += 1;
            } else if highest.is_some_and(|h| n < h) {
                self.order += 1;
            }
            highest = highest.max(Some(n));
        }
        self.gaps += (0..expected).filter(|n| !distinct.contains(n)).count();
    }
}

/// What one connection brings back.
#[derive(Default)]
struct Report {
    seen: HashMap<String, Seen>,
    /// Chunk sent → received here, for sessions whose turn runs on another replica, ms.
    remote: Vec<f64>,
    first_text: Vec<f64>,
    unanswered: usize,
}

/// Reads `client` until every prompt in `prompts` is answered and every session in `followed`
/// has `expected` pieces, or nothing comes for [`IDLE`].
async fn read(
    client: &mut Client,
    mut to_prompt: std::collections::VecDeque<String>,
    gap: Duration,
    text: &str,
    followed: &HashSet<String>,
    expected: usize,
) -> Report {
    let (mut report, mut complete) = (Report::default(), HashSet::new());
    let (mut prompts, mut started) = (HashMap::new(), HashMap::new());
    let mut next_prompt = tokio::time::Instant::now() + gap;
    while !to_prompt.is_empty() || !prompts.is_empty() || complete.len() < followed.len() {
        // The next prompt is sent when its time comes, reading in between, so that no chunk waits
        // unread while prompts are spaced.
        let message = tokio::select! {
            () = tokio::time::sleep_until(next_prompt), if !to_prompt.is_empty() => None,
            read = tokio::time::timeout(IDLE, client.next()) => match read {
                Ok(Some(message)) => Some(message),
                Ok(None) | Err(_) => break,
            },
        };
        let Some(message) = message else {
            let session = to_prompt.pop_front().unwrap_or_default();
            started.insert(session.clone(), Instant::now());
            prompts.insert(client.prompt(&session, text).await, session);
            next_prompt += gap;
            continue;
        };
        if is_chunk(&message) {
            let (session, now) = (session_of(&message), epoch_micros());
            let seen = report.seen.entry(session.clone()).or_default();
            if seen.numbers.is_empty()
                && let Some(at) = started.get(&session)
            {
                report.first_text.push(ms(at.elapsed()));
            }
            seen.text.push_str(chunk_text(&message));
            for (number, stamp) in pieces(chunk_text(&message)) {
                seen.numbers.push(number);
                if followed.contains(&session)
                    && let Some(stamp) = stamp
                {
                    report.remote.push(now.saturating_sub(stamp) as f64 / 1e3);
                }
            }
            if followed.contains(&session) && seen.numbers.len() >= expected {
                complete.insert(session);
            }
        } else if message.get("method").is_none() {
            prompts.remove(&message["id"].as_i64().unwrap_or(-1));
        }
    }
    report.unanswered = prompts.len();
    report
}

/// One connection of the streaming run: creates `homes` sessions (sent back on `made`), loads
/// the sessions it is given to follow, waits for `go`, prompts its own and reads everything.
async fn connection(
    url: String,
    cwd: String,
    homes: usize,
    made: mpsc::UnboundedSender<(usize, Vec<String>)>,
    slot: usize,
    follow: oneshot::Receiver<Vec<String>>,
    go: Arc<Barrier>,
    expected: usize,
    spread: Duration,
) -> Report {
    let mut client = connect(&url).await;
    client.initialize().await;
    let mut own = Vec::new();
    for _ in 0..homes {
        own.push(client.new_session(&cwd).await);
    }
    made.send((slot, own.clone())).unwrap();
    let followed: HashSet<String> = follow.await.unwrap().into_iter().collect();
    for session in &followed {
        client.call("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})).await;
    }
    go.wait().await;
    let gap = spread / u32::try_from(own.len().max(1)).unwrap_or(1);
    read(&mut client, own.into(), gap, &format!("bench:stamped:{expected}"), &followed, expected).await
}

async fn streaming(model: &str, sessions: usize, secs: usize, per_replica: usize, killed: usize, spread: Duration) {
    let expected = secs * RATE;
    let url = fixture::database().await;
    let env = home(model, Some(&url), "").await;
    let mut servers = Vec::new();
    for _ in 0..REPLICAS {
        servers.push(Server::start(&env).await);
    }
    // Session i: home replica i % 3 on its connection (i / 3) % per_replica; followed from
    // replica (home + (i / 3) % 3) % 3 when that is another, on the same connection number.
    let slots = REPLICAS * per_replica;
    let slot_of = |replica: usize, i: usize| replica * per_replica + (i / REPLICAS) % per_replica;
    let mut homes = vec![0; slots];
    for i in 0..sessions {
        homes[slot_of(i % REPLICAS, i)] += 1;
    }
    let (made, mut made_rx) = mpsc::unbounded_channel();
    let go = Arc::new(Barrier::new(slots + 1));
    let (mut follow_tx, mut tasks) = (Vec::new(), Vec::new());
    for (slot, &count) in homes.iter().enumerate() {
        let (tx, rx) = oneshot::channel();
        follow_tx.push(Some(tx));
        let url = servers[slot / per_replica].url.clone();
        tasks.push(tokio::spawn(connection(
            url,
            env.cwd(),
            count,
            made.clone(),
            slot,
            rx,
            go.clone(),
            expected,
            spread,
        )));
    }
    let mut own: Vec<Vec<String>> = vec![Vec::new(); slots];
    for _ in 0..slots {
        let (slot, ids) = made_rx.recv().await.unwrap();
        own[slot] = ids;
    }
    // Hand each session to its follower, in the order its home connection made them.
    let mut follows: Vec<Vec<String>> = vec![Vec::new(); slots];
    let mut taken = vec![0; slots];
    let mut remote_sessions = HashSet::new();
    for i in 0..sessions {
        let home_replica = i % REPLICAS;
        let slot = slot_of(home_replica, i);
        let id = own[slot][taken[slot]].clone();
        taken[slot] += 1;
        let viewer = (home_replica + (i / REPLICAS) % REPLICAS) % REPLICAS;
        if viewer != home_replica {
            follows[slot_of(viewer, i)].push(id.clone());
            remote_sessions.insert(id);
        }
    }
    for (tx, list) in follow_tx.iter_mut().zip(follows) {
        tx.take().unwrap().send(list).unwrap();
    }
    let statements = measure::statements_reset(&url).await;
    go.wait().await;
    let (started, cpu_before) = (Instant::now(), measure::postgres_cpu());
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(task.await.unwrap());
    }
    let (wall, cpu_after) = (started.elapsed(), measure::postgres_cpu());
    let peaks: Vec<f64> =
        servers.iter().map(|s| measure::vm_kib(s.child.id().unwrap_or(0), "VmHWM:") as f64 / 1024.0).collect();

    let mut errors = Errors::default();
    let (mut remote, mut first) = (Vec::new(), Vec::new());
    let (mut views, mut chunks, mut unanswered) = (0, 0, 0);
    for report in &reports {
        for seen in report.seen.values() {
            errors.count(&seen.numbers, expected);
            views += 1;
            chunks += seen.numbers.len();
        }
        remote.extend_from_slice(&report.remote);
        first.extend_from_slice(&report.first_text);
        unanswered += report.unanswered;
    }
    // What each connection saw against what a load shows afterwards, from the third replica.
    let mut checker = servers[2].client().await;
    let mut differing = 0;
    let mut loaded_errors = Errors::default();
    for report in &reports {
        for (session, seen) in &report.seen {
            let id = checker
                .request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []}))
                .await;
            let (_, replayed) = checker.response(id).await;
            let text: String =
                replayed.iter().filter(|m| is_chunk(m) && session_of(m) == *session).map(chunk_text).collect();
            differing += usize::from(text != seen.text);
            loaded_errors.count(&pieces(&text).iter().map(|(n, _)| *n).collect::<Vec<_>>(), expected);
        }
    }
    println!(
        "| {sessions} sessions on {REPLICAS} replicas, {RATE} chunks/s each for {secs} s, {} followed from another replica, {slots} connections | |",
        remote_sessions.len()
    );
    println!("|---|---|");
    println!(
        "| order errors / gaps / duplicates, {views} views, {chunks} chunks received | {} / {} / {} |",
        errors.order, errors.gaps, errors.duplicates
    );
    println!(
        "| views whose text differs from a `session/load` afterwards; the loads' order errors / gaps / duplicates | {differing}; {} / {} / {} |",
        loaded_errors.order, loaded_errors.gaps, loaded_errors.duplicates
    );
    println!("| prompts unanswered | {unanswered} |");
    println!(
        "| model sent → client of another replica ({} chunks), p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
        remote.len(),
        quantile(&mut remote, 0.5),
        quantile(&mut remote, 0.99),
        quantile(&mut remote, 1.0)
    );
    println!(
        "| prompt → first text (the model sends its first chunk at once; prompts sent over {} ms), p50 / p99 | {:.1} / {:.1} ms |",
        spread.as_millis(),
        quantile(&mut first, 0.5),
        quantile(&mut first, 0.99)
    );
    measure::postgres_print(wall, &cpu_before, &cpu_after, sessions * RATE * secs);
    println!(
        "| replicas' peak RSS (`VmHWM`) | {} |",
        peaks.iter().map(|mb| format!("{mb:.1} MB")).collect::<Vec<_>>().join(", ")
    );
    println!();
    if let Some(client) = statements {
        measure::statements_print(&client, wall, sessions * RATE * secs, sessions).await;
    }
    if let Ok(dir) = std::env::var("CAIRN_REPLICAS_STDERR") {
        for (n, server) in servers.iter().enumerate() {
            std::fs::write(format!("{dir}/replica-{n}.log"), server.stderr()).unwrap();
        }
    }
    drop(checker);
    if killed > 0 {
        killing(&env, &mut servers, killed).await;
    }
}

/// Replica 0 runs `count` endless turns; replica 1's client follows them and sends a prompt to
/// each (handed to replica 0), and follows one endless turn of replica 2 so frames keep coming.
/// Then `kill -9` of replica 0, and the time until replica 1 answers every handed prompt.
async fn killing(env: &TestEnv, servers: &mut [Server], count: usize) {
    let open = |session: &str| json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []});
    let mut on_a = servers[0].client().await;
    let mut sessions = Vec::new();
    for _ in 0..count {
        sessions.push(on_a.new_session(&env.cwd()).await);
    }
    let mut on_c = servers[2].client().await;
    let beat = on_c.new_session(&env.cwd()).await;
    let mut on_b = servers[1].client().await;
    on_b.call("session/load", open(&beat)).await;
    for session in &sessions {
        on_b.call("session/load", open(session)).await;
    }
    on_c.prompt(&beat, "bench:endless").await;
    for session in &sessions {
        on_a.prompt(session, "bench:endless").await;
    }
    let mut streaming = HashSet::new();
    while streaming.len() < sessions.len() {
        let message = on_b.recv().await;
        if is_chunk(&message) && session_of(&message) != beat {
            streaming.insert(session_of(&message));
        }
    }
    let mut handed = HashMap::new();
    for session in &sessions {
        handed.insert(on_b.prompt(session, "bench:stamped:1").await, session.clone());
    }
    let line = "a prompt was handed to the replica running the session's turn";
    for _ in 0..400 {
        if servers[1].stderr().matches(line).count() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let handed_count = servers[1].stderr().matches(line).count();
    let pid = servers[0].child.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    let killed = Instant::now();
    let _ = servers[0].child.wait().await;
    let mut answers: HashMap<String, usize> = HashMap::new();
    while !handed.is_empty() {
        let Ok(Some(message)) = tokio::time::timeout(IDLE, on_b.next()).await else { break };
        if message.get("method").is_none() && handed.remove(&message["id"].as_i64().unwrap_or(-1)).is_some() {
            let said = message["result"]["stopReason"].as_str().map_or_else(|| "error".to_owned(), str::to_owned);
            *answers.entry(said).or_default() += 1;
        }
    }
    let recovered = killed.elapsed();
    let mut said: Vec<String> = answers.iter().map(|(how, n)| format!("{n} {how}")).collect();
    said.sort();
    println!(
        "| `kill -9` of a replica running {count} turns, a prompt to each handed from another ({handed_count} handed before the kill) | |"
    );
    println!("|---|---|");
    println!(
        "| kill → every handed prompt answered (`lease_ttl_secs` 15) | {:.2} s ({}; {} never answered) |",
        recovered.as_secs_f64(),
        said.join(", "),
        handed.len()
    );
    println!();
}

/// Chunks per second through one replica: `sessions` turns of `pieces` chunks sent at once,
/// over 10 connections, from the first prompt to the last answer.
async fn throughput(env: &TestEnv, sessions: usize, pieces: usize) -> (f64, usize) {
    const CONNECTIONS: usize = 10;
    let server = Server::start(env).await;
    let go = Arc::new(Barrier::new(CONNECTIONS + 1));
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let share = sessions / CONNECTIONS + usize::from(c < sessions % CONNECTIONS);
        let (url, cwd, go) = (server.url.clone(), env.cwd(), go.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = connect(&url).await;
            client.initialize().await;
            let mut own = Vec::new();
            for _ in 0..share {
                own.push(client.new_session(&cwd).await);
            }
            go.wait().await;
            let text = format!("bench:fast:{pieces}");
            let report = read(&mut client, own.into(), Duration::ZERO, &text, &HashSet::new(), pieces).await;
            let mut errors = Errors::default();
            for seen in report.seen.values() {
                errors.count(&seen.numbers, pieces);
            }
            errors.order + errors.gaps + errors.duplicates + report.unanswered
        }));
    }
    go.wait().await;
    let started = Instant::now();
    let mut wrong = 0;
    for task in tasks {
        wrong += task.await.unwrap();
    }
    ((sessions * pieces) as f64 / started.elapsed().as_secs_f64(), wrong)
}

#[tokio::main]
async fn main() {
    let sessions = setting("CAIRN_REPLICAS_SESSIONS", 1000);
    let secs = setting("CAIRN_REPLICAS_SECS", 60);
    let per_replica = setting("CAIRN_REPLICAS_CONNECTIONS", 10);
    let killed = setting("CAIRN_REPLICAS_KILLED", 20);
    let through = setting("CAIRN_REPLICAS_THROUGHPUT", 50);
    let model = model().await;
    let spread = Duration::from_millis(setting("CAIRN_REPLICAS_SPREAD_MS", 0) as u64);
    streaming(&model, sessions, secs, per_replica, killed, spread).await;

    const PIECES: usize = 400;
    if through == 0 {
        return;
    }
    let sqlite = throughput(&home(&model, None, "").await, through, PIECES).await;
    let pg = throughput(&home(&model, Some(&fixture::database().await), "").await, through, PIECES).await;
    println!("| one replica, {through} sessions × {PIECES} chunks sent at once, 10 connections | chunks/s |");
    println!("|---|---|");
    println!("| SQLite | {:.0} ({} wrong) |", sqlite.0, sqlite.1);
    println!("| PostgreSQL | {:.0} ({} wrong) |", pg.0, pg.1);
}

//! A server's life around its calls: a cancelled call reaches the server as
//! `notifications/cancelled`; shutting down, or dropping the last handle, kills the server and
//! what it started; the server runs in the session's directory with the scrubbed environment;
//! tools it adds later are offered; a server flooding its stderr goes on answering.

use std::path::Path;
use std::time::{Duration, Instant};

use cairn::mcp::{McpError, ServerState};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{PATH, fixture, start};

/// Waits up to 5 s for `check`.
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether process `pid` still runs (a zombie does not).
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()).map(str::to_owned))
        .is_some_and(|state| state != "Z" && state != "X")
}

#[tokio::test]
async fn a_cancelled_call_returns_at_once_and_the_server_is_told() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let config = fixture("fx", &[]).with_env(vec![("MCP_FIXTURE_CANCEL_LOG".into(), log.path().display().to_string())]);
    let session = start(vec![config]);
    session.ready().await;
    let cancel = CancellationToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        later.cancel();
    });
    let started = Instant::now();
    let err = session.servers.call("fx", "slow", serde_json::Map::new(), &cancel).await.unwrap_err();
    assert!(matches!(err, McpError::Cancelled { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    eventually("the server logs the cancellation", || {
        std::fs::read_to_string(log.path()).is_ok_and(|text| !text.is_empty())
    })
    .await;
    assert_eq!(
        session.call("fx", "echo", json!({"text": "still here"})).await.unwrap().model_text(),
        "echo: still here"
    );
}

async fn about(session: &super::Session) -> Value {
    let outcome = session.call("fx", "about", json!({})).await.unwrap();
    serde_json::from_str(&outcome.model_text()).unwrap()
}

#[tokio::test]
async fn shutdown_kills_the_server_and_what_it_started() {
    let session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    let about = about(&session).await;
    let (pid, sleeper) = (about["pid"].as_u64().unwrap(), about["sleeper"].as_u64().unwrap());
    assert!(alive(pid) && alive(sleeper));
    session.servers.shutdown().await;
    assert_eq!(session.state("fx"), ServerState::Stopped);
    eventually("the server and its sleep are gone", || !alive(pid) && !alive(sleeper)).await;
    let err = session.call("fx", "echo", json!({})).await.unwrap_err();
    assert!(matches!(err, McpError::Unavailable { .. }), "{err}");
}

#[tokio::test]
async fn dropping_the_last_handle_kills_the_server() {
    let session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    let about = about(&session).await;
    let (pid, sleeper) = (about["pid"].as_u64().unwrap(), about["sleeper"].as_u64().unwrap());
    let clone = session.servers.clone();
    drop(session);
    assert!(alive(pid), "a clone still holds the servers");
    drop(clone);
    eventually("the server and its sleep are gone", || !alive(pid) && !alive(sleeper)).await;
}

#[tokio::test]
async fn the_server_runs_in_the_session_directory_with_the_scrubbed_environment_and_its_own() {
    let config = fixture("fx", &[]).with_env(vec![("FIXTURE_SETTING".into(), "on".into())]);
    let session = start(vec![config]);
    session.ready().await;
    let about = about(&session).await;
    let env = about["env"].as_object().unwrap();
    assert!(!env.contains_key("HOME"), "removed like a provider key: {env:?}");
    assert_eq!(env["PATH"], PATH);
    assert_eq!(env["FIXTURE_SETTING"], "on");
    let cwd = about["cwd"].as_str().unwrap();
    assert_eq!(Path::new(cwd).canonicalize().unwrap(), session.dir.path().canonicalize().unwrap());
}

#[tokio::test]
async fn tools_added_later_are_offered() {
    let session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    assert!(!session.servers.tools().iter().any(|tool| tool.name == "grown"));
    session.call("fx", "grow", json!({})).await.unwrap();
    let servers = session.servers.clone();
    eventually("the new tool is listed", move || servers.tools().iter().any(|tool| tool.qualified == "mcp__fx__grown"))
        .await;
    assert_eq!(session.state("fx"), ServerState::Ready { tools: 10 });
}

#[tokio::test]
async fn a_server_flooding_stderr_goes_on_answering_calls() {
    let session = start(vec![fixture("noisy", &["stderr-flood"])]);
    session.ready().await;
    for round in 0..20 {
        let echo = session.call("noisy", "echo", json!({"text": round.to_string()})).await.unwrap();
        assert_eq!(echo.model_text(), format!("echo: {round}"));
    }
    assert_eq!(session.state("noisy"), ServerState::Ready { tools: 9 });
    session.servers.shutdown().await;
}

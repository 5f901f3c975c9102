//! Servers that fail: at start (a missing program, one that exits, one that writes garbage, one
//! whose tool list is a line over the limit, bad HTTP endpoints) and mid-call (a crash, the restart the next call makes, the limit of three
//! restarts). Each failure names the server and keeps the others working.

use std::time::{Duration, Instant};

use cairn::mcp::{McpError, McpSettings, ServerConfig, ServerState};
use serde_json::json;

use super::{fixture, http, start, start_with};

#[tokio::test]
async fn a_server_that_exits_at_start_reports_its_stderr_and_the_others_still_start() {
    let mut session = start(vec![fixture("broken", &["exit-at-start"]), fixture("fine", &[])]);
    session.ready().await;
    let ServerState::Failed { why, stderr, restarts_on_call } = session.state("broken") else {
        panic!("{:?}", session.servers.status())
    };
    assert!(why.contains("exited with status 1 before it finished the MCP handshake"), "{why}");
    assert_eq!(stderr, "fixture: starting\nfixture: cannot open the database");
    assert!(!restarts_on_call, "a server that never started is not retried");
    assert_eq!(session.state("fine"), ServerState::Ready { tools: 9 });
    let notices = session.drain();
    let told = notices.iter().find(|text| text.contains("`broken`")).unwrap();
    assert!(told.starts_with("MCP server `broken` failed to start: it exited with status 1"), "{told}");
    assert!(told.ends_with("Its stderr ends with:\nfixture: starting\nfixture: cannot open the database"), "{told}");
    let err = session.call("broken", "echo", json!({})).await.unwrap_err();
    assert!(matches!(err, McpError::Unavailable { .. }), "{err}");
    assert!(session.call("fine", "echo", json!({})).await.is_ok());
}

#[tokio::test]
async fn a_missing_program_fails_at_once_naming_it() {
    let started = Instant::now();
    let session = start(vec![ServerConfig::stdio("ghost", "/nonexistent/mcp-server", Vec::new())]);
    session.ready().await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let ServerState::Failed { why, .. } = session.state("ghost") else { panic!() };
    assert!(why.starts_with("cannot start `/nonexistent/mcp-server`: No such file or directory"), "{why}");
}

#[tokio::test]
async fn a_server_writing_garbage_fails_at_the_startup_timeout_and_says_what_it_wrote() {
    let settings = McpSettings { startup_timeout: Duration::from_secs(1) };
    let started = Instant::now();
    let session = start_with(vec![fixture("noisy", &["garbage"])], settings);
    session.ready().await;
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let ServerState::Failed { why, .. } = session.state("noisy") else { panic!() };
    assert!(why.starts_with("it did not finish the MCP handshake and tool list within 1 s"), "{why}");
    assert!(
        why.ends_with("it wrote to stdout what is not JSON-RPC: `Welcome to the fixture! Type HELP for help.`"),
        "{why}"
    );
}

#[tokio::test]
async fn a_tool_list_over_the_line_limit_fails_the_start_at_once_saying_its_size() {
    // Were the line only dropped, the server would stay starting until this timeout (the
    // session's `ready` gives up long before it).
    let settings = McpSettings { startup_timeout: Duration::from_secs(3600) };
    let mut session = start_with(vec![fixture("big", &["huge-list"]), fixture("fine", &[])], settings);
    session.ready().await;
    let ServerState::Failed { why, restarts_on_call, .. } = session.state("big") else {
        panic!("{:?}", session.servers.status())
    };
    let told = why.strip_prefix("it wrote a line of ").and_then(|rest| rest.split_once(" bytes to stdout, "));
    let Some((bytes, rest)) = told else { panic!("{why}") };
    let bytes: usize = bytes.parse().unwrap();
    assert!((super::fixture::HUGE_LIST..super::fixture::HUGE_LIST + 200).contains(&bytes), "the whole line: {why}");
    assert_eq!(rest, "more than the 16 MiB cairn reads as one MCP message, so its answer was dropped");
    assert!(!restarts_on_call);
    assert_eq!(session.state("fine"), ServerState::Ready { tools: 9 });
    let notices = session.drain();
    assert!(
        notices.iter().any(|text| text.starts_with("MCP server `big` failed to start: it wrote a line of ")),
        "{notices:?}"
    );
}

#[tokio::test]
async fn bad_http_endpoints_fail_with_a_reason() {
    let settings = McpSettings { startup_timeout: Duration::from_secs(5) };
    let (missing, refused) = (http::not_found().await, http::refused().await);
    let session = start_with(
        vec![ServerConfig::http("missing", missing, Vec::new()), ServerConfig::http("refused", refused, Vec::new())],
        settings,
    );
    session.ready().await;
    for (name, cause) in [("missing", "HTTP 404 Not Found"), ("refused", "Connection refused")] {
        let ServerState::Failed { why, .. } = session.state(name) else { panic!("{:?}", session.servers.status()) };
        assert!(why.starts_with("the MCP handshake failed: ") && why.contains(cause), "{name}: {why}");
    }
}

#[tokio::test]
async fn a_crash_mid_call_fails_that_call_and_the_next_call_restarts_the_server_three_times_at_most() {
    let mut session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    for round in 0..4 {
        let err = session.call("fx", "crash", json!({})).await.unwrap_err();
        let McpError::Crashed { server, tool, why } = &err else { panic!("{err}") };
        assert_eq!((server.as_str(), tool.as_str()), ("fx", "crash"));
        assert!(why.starts_with("it exited with status 3;"), "{why}");
        assert!(why.ends_with("Its stderr ends with:\nfixture: crashing on purpose"), "{why}");
        let status = &session.servers.status()[0];
        assert_eq!(status.restarts, round);
        if round < 3 {
            assert!(why.contains(&format!("the next call restarts it ({round} of 3 restarts used)")), "{why}");
            assert!(matches!(status.state, ServerState::Failed { restarts_on_call: true, .. }));
            assert!(!session.servers.tools().is_empty(), "its tools stay offered: a call restarts it");
        }
    }
    let ServerState::Failed { why, restarts_on_call, .. } = session.state("fx") else { panic!() };
    assert!(!restarts_on_call);
    assert!(why.contains("it was restarted 3 times, the most in one session, so it stays stopped"), "{why}");
    assert!(session.servers.tools().is_empty());
    let err = session.call("fx", "echo", json!({})).await.unwrap_err();
    assert!(matches!(err, McpError::Unavailable { .. }), "{err}");
    assert!(err.to_string().starts_with("MCP server `fx` is not available: it exited with status 3"), "{err}");
    let notices = session.drain();
    assert_eq!(notices.iter().filter(|text| text.starts_with("MCP server `fx` stopped: ")).count(), 4, "{notices:?}");
}

#[tokio::test]
async fn after_a_crash_the_restarted_server_answers() {
    let session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    assert!(session.call("fx", "crash", json!({})).await.is_err());
    let echo = session.call("fx", "echo", json!({"text": "back"})).await.unwrap();
    assert_eq!(echo.model_text(), "echo: back");
    let status = &session.servers.status()[0];
    assert_eq!((status.restarts, &status.state), (1, &ServerState::Ready { tools: 9 }));
}

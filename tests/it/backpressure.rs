//! Backpressure: a client that stops reading stdout holds the turn, and through it the model's
//! stream, instead of making cairn queue the answer in memory; once it reads again everything
//! arrives, in order, and is stored as it was streamed. A cancel reaches a turn held that way.

use std::time::Duration;

use serde_json::json;

use crate::support::mock_llm::Long;
use crate::support::{Agent, MockLlm, PATIENCE, Reply, TestEnv, text_of, updates};

/// A 40 MB answer in 10,000 deltas of 4,000 bytes. A short thought every 250 deltas splits it
/// into 1 MB text parts: the store rewrites an open part once per batch, which for one 40 MB part
/// would make this test slow for reasons that are not its subject.
const ANSWER: Long = Long { chunks: 10_000, size: 4_000, thought_every: Some(250) };
/// What cairn may use while its client does not read that answer: about 59 MiB on an idle
/// machine (the process's code and runtime, plus ~3 MB of queues), up to 66 MiB seen under load
/// (more threads, more allocator arenas). Had cairn queued the 40 MB answer, it would hold it
/// several times over (the text, its update, its JSON line): well past 100 MiB.
const PEAK_LIMIT_KIB: u64 = 80 * 1024;

/// A field of `/proc/<pid>/status` (`VmHWM:` is the peak RSS), in KiB.
fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|line| line.strip_prefix(field)).unwrap();
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// Keeps the client from reading until the model's answer stops moving (cairn no longer takes
/// it) or has been sent whole (nothing held it back); returns the bytes sent by then. This only
/// waits: nothing the tests assert depends on how long it took.
async fn hold_until_still(mock: &MockLlm) -> usize {
    let (mut last, mut still) = (0, 0);
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = mock.streamed();
        if mock.finished() > 0 {
            return sent;
        }
        still = if sent > 0 && sent == last { still + 1 } else { 0 };
        if still == 5 {
            return sent;
        }
        last = sent;
    }
    mock.streamed()
}

/// Reads until the answer to `id`; returns it and the session's answer text on the way.
async fn answer_and_text(agent: &mut Agent, session: &str, id: i64) -> (serde_json::Value, String) {
    let mut shown = String::new();
    loop {
        let message = agent.recv().await;
        if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
            return (message, shown);
        }
        let update = &message["params"]["update"];
        if message["params"]["sessionId"] == session && update["sessionUpdate"] == "agent_message_chunk" {
            shown.push_str(update["content"]["text"].as_str().unwrap());
        }
    }
}

/// The answer text `session/load` replays, in a new process.
async fn stored_text(env: &TestEnv, session: &str) -> String {
    let mut agent = env.ready().await;
    let load = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = agent.response(load).await;
    assert!(response.get("result").is_some(), "{response}");
    text_of(&updates(&replay, session), "agent_message_chunk")
}

/// Where `got` first differs from `want`, for a message that does not print 40 MB.
fn first_difference(got: &str, want: &str) -> String {
    let at = got.bytes().zip(want.bytes()).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    let around = |text: &str| text.get(at.saturating_sub(20)..(at + 40).min(text.len())).unwrap_or("").to_owned();
    format!(
        "{} bytes against {}; first difference at byte {at}: {:?} against {:?}",
        got.len(),
        want.len(),
        around(got),
        around(want)
    )
}

#[tokio::test]
async fn a_client_that_stops_reading_holds_the_model_stream_and_memory_stays_bounded() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::long(ANSWER));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let pid = agent.child.id().unwrap();

    agent.stop_reading();
    let id = agent.prompt(&session, "write a very long answer").await;
    let sent = hold_until_still(&env.mock).await;

    let peak = memory_kib(pid, "VmHWM:");
    assert!(
        peak <= PEAK_LIMIT_KIB,
        "cairn's peak RSS reached {peak} KiB (limit {PEAK_LIMIT_KIB}) while its client did not read"
    );
    // What the model got out is what TCP's buffers hold (a few MB, at most tcp_rmem's and
    // tcp_wmem's maxima) plus cairn's ~3 MB of queues, less than the 41 MB it has to send: had it
    // been able to send it all, nothing would have held it back.
    assert_eq!(env.mock.finished(), 0, "the model sent its whole answer while stdout was not read");
    assert!(env.mock.open() == 1 && sent > 0, "the answer is under way ({sent} bytes sent)");

    agent.resume_reading();
    let (response, shown) = answer_and_text(&mut agent, &session, id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let want = ANSWER.text();
    assert!(shown == want, "what the client was shown: {}", first_difference(&shown, &want));
    agent.close_stdin();
    agent.wait_exit().await;

    let stored = stored_text(&env, &session).await;
    assert!(stored == want, "what session/load replays: {}", first_difference(&stored, &want));
}

#[tokio::test]
async fn a_cancel_reaches_a_turn_held_by_a_client_that_does_not_read() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::long(ANSWER));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;

    agent.stop_reading();
    let id = agent.prompt(&session, "write a very long answer").await;
    hold_until_still(&env.mock).await;
    assert_eq!(env.mock.finished(), 0);

    // Still not reading: the held turn stops and lets go of the model's stream at once.
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    env.mock.wait_dropped(1, PATIENCE).await;

    agent.resume_reading();
    let (response, shown) = answer_and_text(&mut agent, &session, id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled", "{response}");
    let want = ANSWER.text();
    assert!(!shown.is_empty() && want.starts_with(&shown), "what was shown: {}", first_difference(&shown, &want));
    agent.close_stdin();
    agent.wait_exit().await;

    // Every chunk taken before the cancel was stored and shown; nothing else was.
    let stored = stored_text(&env, &session).await;
    assert!(stored == shown, "what session/load replays: {}", first_difference(&stored, &shown));
}

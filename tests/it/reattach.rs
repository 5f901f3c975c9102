//! A view reattached to a session that is streaming in the same process (an editor reopening
//! its tab mid-turn): `session/load` replays exactly what was sent before it and the live stream
//! goes on right after it; `session/resume` replays nothing and the stream goes on unbroken.
//!
//! The assertions hold whatever the timing: a slow machine only changes where in the stream the
//! loads land, never what must be true of each.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mock_llm::delta;
use crate::support::{Reply, TestEnv, updates};

/// Rounds of requests sent while the turn streams.
const ROUNDS: usize = 20;
/// `session/load`s sent at once in a round, followed by one `session/resume`.
const LOADS_AT_ONCE: usize = 3;

fn open_params(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
}

fn kind(update: &Value) -> &str {
    update["sessionUpdate"].as_str().unwrap_or_default()
}

fn text(update: &Value) -> &str {
    update["content"]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn load_mid_stream_replays_what_was_sent_and_the_stream_continues_right_after_it() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(1)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "Count").await;

    // Everything the editor got, in order.
    let mut seen: Vec<Value> = Vec::new();
    while !updates(&seen, &session).iter().any(|u| kind(u) == "agent_message_chunk") {
        seen.push(agent.recv().await);
    }
    for _ in 0..ROUNDS {
        let mut ids = Vec::new();
        for _ in 0..LOADS_AT_ONCE {
            ids.push(agent.request("session/load", open_params(&session, &env)).await);
        }
        ids.push(agent.request("session/resume", open_params(&session, &env)).await);
        let (answers, during) = agent.responses(&ids).await;
        assert!(answers.iter().all(|answer| answer["result"].is_object()), "{answers:?}");
        seen.extend(during);
    }
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, rest) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    seen.extend(rest);

    // What is stored at the end, as a load of the idle session shows it.
    let load = agent.request("session/load", open_params(&session, &env)).await;
    let (_, after) = agent.response(load).await;
    let stored: Vec<&Value> =
        updates(&after, &session).into_iter().filter(|u| kind(u) == "agent_message_chunk").collect();
    assert_eq!(stored.len(), 1, "one message, one part: {stored:?}");
    let (message, stored) = (stored[0]["messageId"].clone(), text(stored[0]).to_owned());
    assert!(stored.starts_with("tick 0 "), "{stored:?}");

    // A replay shows the user's prompt, then the reply so far as one chunk; the live chunks
    // are one tick each, and none but the first starts at tick 0. A resume replays nothing.
    let chunks = |kind_of: &str| -> Vec<usize> {
        (0..seen.len())
            .filter(|&i| seen[i]["params"]["sessionId"] == session.as_str())
            .filter(|&i| kind(&seen[i]["params"]["update"]) == kind_of)
            .collect()
    };
    let replays: Vec<usize> = chunks("agent_message_chunk")
        .into_iter()
        .filter(|&i| text(&seen[i]["params"]["update"]).starts_with("tick 0 "))
        .skip(1)
        .collect();
    assert_eq!(replays.len(), ROUNDS * LOADS_AT_ONCE, "each load, and only a load, replays the reply");
    assert_eq!(
        chunks("user_message_chunk").len(),
        ROUNDS * LOADS_AT_ONCE,
        "each load, and only a load, replays the prompt"
    );
    let live: Vec<(usize, &Value)> = chunks("agent_message_chunk")
        .into_iter()
        .filter(|i| !replays.contains(i))
        .map(|i| (i, &seen[i]["params"]["update"]))
        .collect();
    let whole: String = live.iter().map(|(_, u)| text(u)).collect();
    assert!(whole == stored, "the live stream ({}) is the stored message ({}), once", span(&whole), span(&stored));
    for (n, &at) in replays.iter().enumerate() {
        let replay = &seen[at]["params"]["update"];
        assert_eq!(replay["messageId"], message, "replay {n} names the live message");
        let before: String = live.iter().filter(|(i, _)| *i < at).map(|(_, u)| text(u)).collect();
        let after: String = live.iter().filter(|(i, _)| *i > at).map(|(_, u)| text(u)).collect();
        assert!(
            text(replay) == before,
            "replay {n} shows {} but {} were sent before it",
            span(text(replay)),
            span(&before)
        );
        assert!(
            format!("{}{after}", text(replay)) == stored,
            "replay {n} ({}) and what followed it ({}) are not the stored message ({})",
            span(text(replay)),
            span(&after),
            span(&stored)
        );
    }
}

#[tokio::test]
async fn load_while_a_call_is_being_written_shows_it_once_with_its_real_title() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "alpha\n").unwrap();
    // The call is named, then its arguments take a while to complete: loads land before it is
    // named, while it is written, and after it is shown.
    let mut events = vec![delta(json!({"content": "Reading. "}))];
    events.extend(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))]).events());
    env.mock.push(Reply::Stream { events, delay: Duration::from_millis(40) });
    env.mock.push(Reply::text(&["Done."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "Read the notes").await;
    agent.next_chunk().await;

    let mut seen: Vec<Value> = Vec::new();
    while !seen.iter().any(|m| m.get("id") == Some(&json!(prompt))) {
        let load = agent.request("session/load", open_params(&session, &env)).await;
        let (response, during) = agent.response(load).await;
        assert!(response["result"].is_object(), "{response}");
        seen.extend(during);
    }
    let answer = seen.iter().find(|m| m.get("id") == Some(&json!(prompt))).unwrap();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    // Each load opens a view: its replay (from the prompt on) and what follows, up to the next
    // load's replay. Within one, the call is announced at most once, before any change to it.
    let starts: Vec<usize> = (0..seen.len())
        .filter(|&i| seen[i]["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .chain([seen.len()])
        .collect();
    for (n, range) in starts.windows(2).enumerate() {
        let call: Vec<&Value> =
            updates(&seen[range[0]..range[1]], &session).into_iter().filter(|u| u["toolCallId"] == "c1").collect();
        let announced = call.iter().filter(|u| kind(u) == "tool_call").count();
        assert!(announced <= 1, "view {n} is told of the call once: {call:#?}");
        if let Some(first) = call.first() {
            assert_eq!(kind(first), "tool_call", "view {n} hears of the call before its changes: {call:#?}");
        }
    }
    // A call whose arguments are still being written is shown to no one, live or replayed.
    for update in updates(&seen, &session).into_iter().filter(|u| kind(u) == "tool_call") {
        assert_eq!(update["title"], "Read notes.txt", "{update:#}");
    }
    let last = updates(&seen, &session).into_iter().rfind(|u| u["toolCallId"] == "c1");
    assert_eq!(last.map(|u| &u["status"]), Some(&json!("completed")));
}

/// A short description of a run of ticks, for failure messages: its first and last tick and
/// how many there are.
fn span(text: &str) -> String {
    let ticks: Vec<&str> = text.split_whitespace().filter(|word| *word != "tick").collect();
    match (ticks.first(), ticks.last()) {
        (Some(first), Some(last)) => format!("ticks {first}..={last}, {} in all", ticks.len()),
        _ => "nothing".to_owned(),
    }
}

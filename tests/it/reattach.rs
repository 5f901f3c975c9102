//! A view reattached to a session that is streaming in the same process (an editor reopening
//! its tab mid-turn): what a client gets of the session after it sends `session/load` shows
//! every delta once (the replay holds what was shown before the request was read, and the live
//! stream goes on right after it); `session/resume` replays nothing.
//!
//! The assertions hold whatever the timing: a slow machine only changes where in the stream the
//! loads land, never what must be true of each.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mock_llm::{delta, finish};
use crate::support::{Reply, TestEnv, updates};

/// Sessions streaming at once in the process.
const SESSIONS: usize = 3;
/// Deltas of each session's answer, one per millisecond.
const DELTAS: usize = 1500;

fn open_params(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
}

fn kind(update: &Value) -> &str {
    update["sessionUpdate"].as_str().unwrap_or_default()
}

/// An answer that streams thinking and text in turns (each switch closes a part and opens
/// another), in deltas of 1 to 12 characters that each name their place, so any delta shown
/// twice, lost or out of order shows in the joined text.
fn answer(seed: u64) -> Reply {
    let mut state = seed.wrapping_add(1);
    let mut events = Vec::new();
    for i in 0..DELTAS {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let size = 1 + usize::try_from(state >> 60).unwrap() % 12;
        let piece = format!("{i}{}", ".".repeat(size)).chars().take(size).collect::<String>();
        let kind = if (i / 40 + seed as usize).is_multiple_of(3) { "reasoning_content" } else { "content" };
        events.push(delta(json!({ kind: format!("[{piece}]") })));
    }
    events.extend(finish("stop"));
    Reply::Stream { events, delay: Duration::from_millis(1) }
}

/// What a client shows of one session from a list of messages: the text of each message, by
/// message id and kind of chunk, joined in the order received.
fn shown(messages: &[Value], session: &str) -> BTreeMap<(String, String), String> {
    let mut out: BTreeMap<(String, String), String> = BTreeMap::new();
    for update in updates(messages, session) {
        if !kind(update).ends_with("_chunk") {
            continue;
        }
        let id = update["messageId"].as_str().expect("a chunk of a stored message names it").to_owned();
        let text = update["content"]["text"].as_str().unwrap_or_default();
        out.entry((id, kind(update).to_owned())).or_default().push_str(text);
    }
    out
}

// Where a load cuts the stream, as a client can see it: a request sent right behind the load and
// answered as soon as it is read (an unknown method) marks the point in the output where cairn
// had read the load. What was already on its way then came before it; everything of the session
// after that mark belongs to the view the load opens. Whatever the agent was doing when the
// request arrived, each such view must show each delta once, in order, and nothing else.
#[tokio::test]
async fn a_load_mid_stream_shows_every_delta_once_from_the_moment_it_is_read() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(agent.new_session(&env.cwd()).await);
    }
    let mut prompts: Vec<Value> = Vec::new();
    for (n, session) in sessions.iter().enumerate() {
        env.mock.push(answer(n as u64));
        prompts.push(json!(agent.prompt(session, "Go").await));
    }

    // Everything the client got, and where each load's view opened.
    let mut seen: Vec<Value> = Vec::new();
    let mut views: Vec<(usize, &str)> = Vec::new();
    let mut answered = 0;
    for (round, session) in sessions.iter().cycle().enumerate() {
        assert!(round < 5_000, "the turns never ended");
        if round % 4 == 3 {
            // A resume replays nothing (the prompt is shown only by replays) and opens no view.
            let resume = agent.request("session/resume", open_params(session, &env)).await;
            let (response, during) = agent.response(resume).await;
            assert!(response["result"].is_object(), "{response}");
            let replayed = updates(&during, session).into_iter().filter(|u| kind(u) == "user_message_chunk").count();
            assert_eq!(replayed, 0, "a resume replays nothing");
            answered += during.iter().filter(|m| m.get("method").is_none() && prompts.contains(&m["id"])).count();
            seen.extend(during);
        }
        // In one write: cairn reads the mark right after the load.
        let (load, mark) = (json!(format!("load-{round}")), json!(format!("mark-{round}")));
        let both = [
            json!({"jsonrpc": "2.0", "id": load, "method": "session/load", "params": open_params(session, &env)}),
            json!({"jsonrpc": "2.0", "id": mark, "method": "cairn/mark", "params": {}}),
        ];
        agent.send_raw(&format!("{}\n{}", both[0], both[1])).await;
        let sent = seen.len();
        let mut marked = None;
        loop {
            let message = agent.recv().await;
            if message.get("method").is_some() {
                seen.push(message);
                continue;
            }
            if message["id"] == mark {
                assert_eq!(message["error"]["code"], -32601, "{message}");
                marked = Some(seen.len());
            } else if message["id"] == load {
                assert!(message["result"].is_object(), "{message}");
                break;
            } else {
                answered += usize::from(prompts.contains(&message["id"]));
                seen.push(message);
            }
        }
        // The replay begins with the prompt (only replays show it; a load before the turn stored
        // its prompt replays nothing). A mark read late (cairn's reader was descheduled between
        // the two lines) opens the view no later than that, and no later than the answer.
        let replayed = (sent..seen.len()).find(|&at| {
            seen[at]["params"]["sessionId"] == session.as_str()
                && kind(&seen[at]["params"]["update"]) == "user_message_chunk"
        });
        views.push(([marked, replayed].into_iter().flatten().min().unwrap_or(seen.len()), session));
        if answered == prompts.len() {
            break;
        }
    }
    assert!(views.len() >= 3 * SESSIONS, "only {} loads landed mid-stream", views.len());
    for prompt in &seen {
        if prompt.get("method").is_none() && prompts.contains(&prompt["id"]) {
            assert_eq!(prompt["result"]["stopReason"], "end_turn", "{prompt}");
        }
    }

    // What each session stored, as a load of it idle shows it.
    let mut stored = BTreeMap::new();
    for session in &sessions {
        let load = agent.request("session/load", open_params(session, &env)).await;
        let (_, replay) = agent.response(load).await;
        let whole = shown(&replay, session);
        assert_eq!(whole.len(), 3, "a prompt and an answer of thinking and text: {:?}", whole.keys());
        stored.insert(session.as_str(), whole);
    }

    // A view lasts until the next load of its session opens another; the last ones see the turn
    // end. Each shows a beginning of every stored message (the replay, then the stream), and the
    // last ones show all of it.
    for (n, &(opened, session)) in views.iter().enumerate() {
        let next = views[n + 1..].iter().find(|(_, other)| *other == session).map(|(at, _)| *at);
        let view = shown(&seen[opened..next.unwrap_or(seen.len())], session);
        let whole = &stored[session];
        for ((message, chunks), text) in &view {
            let all = whole.get(&(message.clone(), chunks.clone())).map_or("", String::as_str);
            let same = text.chars().zip(all.chars()).take_while(|(a, b)| a == b).count();
            assert!(
                all.starts_with(text.as_str()),
                "view {n} of {session} shows {chunks} of {message} differently from what is stored, from \
                 character {same}: shown …{}, stored …{}",
                excerpt(text, same),
                excerpt(all, same)
            );
        }
        if next.is_none() {
            assert_eq!(&view, whole, "the last view of {session} shows all of it");
        }
    }
}

/// Up to 60 characters of `text` around character `at`.
fn excerpt(text: &str, at: usize) -> String {
    text.chars().skip(at.saturating_sub(20)).take(60).collect()
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

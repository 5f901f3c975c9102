//! Every update a session shows is either stored, names its message, and is shown again by
//! `session/load` in the same place, or is plainly ephemeral: no message id, never replayed.
//!
//! One session goes through everything that tells the user something besides the model's
//! answer: a retry, the immediate slash commands (`/status`, `/permissions`, `/model`, a model
//! switch), a command queued behind a turn, a prompt steered into a turn (joining it) and one
//! going back to the queue when its turn is cancelled, and a failed compaction. A second process
//! then loads it; what it replays must be what the first one showed, stored update for stored
//! update, for clients with and without notices and compaction updates. Turns are held at a
//! permission question, so nothing here depends on timing.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv, updates};

const CONFIG: &str = "[session]\nbusy_prompt = \"steer\"\n[limits]\nretry_base_ms = 10\n[compaction]\nretries = 0\n";
const JOINS: &str = "This prompt joins the running turn";
const QUEUED: &str = "is queued behind 1 turn";
const BACK: &str = "that prompt is queued and runs next";

fn write(id: &str, path: &str) -> Reply {
    Reply::tool_calls(&[(id, "write", json!({"path": path, "content": "x\n"}))])
}

/// The text an update shows, whatever its kind.
fn text(update: &Value) -> &str {
    update["content"]["text"].as_str().or_else(|| update["title"].as_str()).unwrap_or_default()
}

/// The message an update names: a chunk's `messageId`, or a stored notice's
/// `_meta.cairn.messageId`.
fn message_id(update: &Value) -> Option<&str> {
    update["messageId"].as_str().or_else(|| update["_meta"]["cairn"]["messageId"].as_str())
}

/// Reads on until an update of `session` says `said`; returns everything read.
async fn until_said(agent: &mut Agent, session: &str, said: &str) -> Vec<Value> {
    let mut read = Vec::new();
    loop {
        let message = agent.recv().await;
        let shown = message["params"]["sessionId"] == session && text(&message["params"]["update"]).contains(said);
        read.push(message);
        if shown {
            return read;
        }
    }
}

/// Reads on until the permission question of a held turn; returns it and everything read.
async fn until_question(agent: &mut Agent) -> (Value, Vec<Value>) {
    let mut read = Vec::new();
    loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            return (message, read);
        }
        read.push(message);
    }
}

/// Each stored message shown, in order: `(message id, kind)` and the text of its chunks joined.
type Messages = Vec<((String, String), String)>;

/// The stored part of what was shown: the messages, and each tool call with the status it
/// ended in. Every other update must be one that is never stored, without a message id.
fn stored(updates: &[&Value]) -> (Messages, BTreeMap<String, Value>) {
    let mut messages: Messages = Vec::new();
    let mut calls = BTreeMap::new();
    for update in updates {
        let kind = update["sessionUpdate"].as_str().unwrap_or_default();
        if kind.starts_with("tool_call") {
            calls.insert(update["toolCallId"].as_str().unwrap().to_owned(), update["status"].clone());
            continue;
        }
        let Some(id) = message_id(update) else {
            let ephemeral = [
                "agent_message_chunk",
                "notice",
                "usage_update",
                "config_option_update",
                "session_info_update",
                "available_commands_update",
                "compaction_update",
            ];
            assert!(ephemeral.contains(&kind), "an update of a stored kind without a message id: {update:#}");
            continue;
        };
        let key = (id.to_owned(), kind.to_owned());
        match messages.iter_mut().find(|(seen, _)| *seen == key) {
            Some((_, all)) => all.push_str(text(update)),
            None => messages.push((key, text(update).to_owned())),
        }
    }
    (messages, calls)
}

async fn live_and_replayed_agree(capabilities: Value) {
    let env = TestEnv::new().await;
    env.write_config(CONFIG);
    env.mock
        .push(Reply::status(503, "busy"))
        .push(write("c1", "a.txt"))
        .push(Reply::text(&["Wrote it, and hi."]))
        .push(Reply::status(400, "bad summary request"))
        .push(write("c2", "b.txt"))
        .push(Reply::text(&["Then done."]));
    let mut agent = Agent::spawn(env.command(), Default::default()).await;
    agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    let session = agent.new_session(&env.cwd()).await;
    let mut live: Vec<Value> = Vec::new();

    // A turn that is retried once, then held at its permission question.
    let first = agent.prompt(&session, "write a.txt").await;
    let (question, read) = until_question(&mut agent).await;
    live.extend(read);
    // The immediate commands answer at once; a prompt steers into the turn; a command queues.
    for command in ["/status", "/permissions", "/model", "/model openai/mock-model"] {
        let id = agent.prompt(&session, command).await;
        let (answer, read) = agent.response(id).await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{command}: {answer}");
        live.extend(read);
    }
    let steered = agent.prompt(&session, "then say hi").await;
    live.extend(until_said(&mut agent, &session, JOINS).await);
    let compact = agent.prompt(&session, "/compact").await;
    live.extend(until_said(&mut agent, &session, QUEUED).await);
    agent.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    // The steered prompt joins; then the compaction runs and fails.
    let (answers, read) = agent.responses(&[first, steered, compact]).await;
    live.extend(read);
    assert!(answers.iter().all(|answer| answer["result"]["stopReason"] == "end_turn"), "{answers:?}");

    // A prompt steered into a turn that is withdrawn before it could join goes back to the queue.
    let second = agent.prompt(&session, "write b.txt").await;
    let (_, read) = until_question(&mut agent).await;
    live.extend(read);
    let left = agent.prompt(&session, "and then").await;
    live.extend(until_said(&mut agent, &session, JOINS).await);
    agent.notify("$/cancel_request", json!({"requestId": second})).await;
    let (answers, read) = agent.responses(&[second, left]).await;
    live.extend(read);
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn", "{answers:?}");

    // Everything the client saw of the session, and what a new process replays of it.
    let shown = updates(&live, &session);
    for said in [JOINS, QUEUED, BACK, "Compaction failed", "retry 1 of 2", "Status:", "Model:"] {
        assert!(shown.iter().any(|u| text(u).contains(said)), "nothing said {said:?}: {shown:#?}");
    }
    agent.close_stdin();
    agent.wait_exit().await;
    let mut again = Agent::spawn(env.command(), Default::default()).await;
    again.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    let load = again.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = again.response(load).await;
    let replayed = updates(&replay, &session);

    // The client knows its own prompts; the others (a steered one joining) are shown live too.
    let (mut live_messages, live_calls) = stored(&shown);
    let (mut replayed_messages, replayed_calls) = stored(&replayed);
    let own = ["write a.txt", "write b.txt", "and then"];
    replayed_messages.retain(|((_, kind), text)| !(kind == "user_message_chunk" && own.contains(&text.as_str())));
    for ephemeral in [JOINS, QUEUED, BACK, "Status:", "Model:", "Remembered", "No remembered"] {
        assert!(!replayed.iter().any(|u| text(u).contains(ephemeral)), "{ephemeral:?} was replayed");
    }
    for messages in [&mut live_messages, &mut replayed_messages] {
        messages.retain(|(_, text)| !text.is_empty());
    }
    assert_eq!(replayed_messages, live_messages, "the replay shows the stored updates as they were shown, in order");
    assert_eq!(replayed_calls, live_calls, "each call as it ended");
    let failed = replayed_messages.iter().find(|(_, text)| text.starts_with("Compaction failed"));
    assert!(failed.is_some(), "the failed compaction is kept: {replayed_messages:#?}");
    if capabilities == json!({}) {
        // Shown as a message of its own, it ends with a blank line: a client that joins chunks
        // does not run it into the answer after it.
        let (_, said) = failed.unwrap();
        assert!(said.ends_with("\n\n"), "{said:?}");
    }
}

#[tokio::test]
async fn a_client_without_notices_is_shown_again_what_was_stored_and_nothing_else() {
    live_and_replayed_agree(json!({})).await;
}

#[tokio::test]
async fn a_client_with_notices_and_compaction_updates_is_shown_again_what_was_stored_and_nothing_else() {
    live_and_replayed_agree(json!({"session": {"notices": {}, "compaction": {}}})).await;
}

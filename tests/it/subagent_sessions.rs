//! Sub-agents as sessions of their own (ACP 1.20), through the official Rust client, which parses
//! every update with the SDK's types: a `task` child announced on its parent by `subagent_update`,
//! its own updates under its own id, the task and the report as `session_message`s, the card
//! linking the child's session, a load replaying it all, and `session/cancel` on the child's id
//! stopping the child alone. Clients without the capability see only the card, as before.

use std::time::Duration;

use serde_json::{Value, json};

use crate::subagents::{calls, task};
use crate::support::sdk;
use crate::support::{Reply, TestEnv};

/// The notifications of a transcript's step: `(sessionId, update)`.
fn notifications(step: &Value) -> Vec<(String, Value)> {
    step["updates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| (n["sessionId"].as_str().unwrap().to_owned(), n["update"].clone()))
        .collect()
}

fn script(env: &TestEnv, capabilities: Value, then_load: bool) -> Value {
    let mut steps = vec![
        json!({"new": {"cwd": env.cwd(), "mcpServers": []}}),
        json!({"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "PARENT: ask the child"}]}}),
    ];
    if then_load {
        steps.push(json!({"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}}));
    }
    json!({"initialize": {"protocolVersion": 1, "clientCapabilities": capabilities}, "steps": steps})
}

fn child_text(shown: &[(String, Value)], child: &str) -> String {
    shown
        .iter()
        .filter(|(session, update)| session == child && update["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|(_, update)| update["content"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_task_child_is_announced_streams_under_its_own_id_and_is_replayed_by_a_load() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "read the notes", "CHILD-A: say hello")])).push(Reply::text(&["Done."]));
    env.mock.route("CHILD-A", Reply::text(&["Hello ", "from the child."]));
    let transcript = sdk::run(&env, &script(&env, json!({"subagents": {}}), true), &["acp"]).await;
    let steps = &transcript["steps"];
    assert_eq!(steps[1]["response"]["stopReason"], "end_turn");
    let parent = steps[0]["response"]["sessionId"].as_str().unwrap().to_owned();

    let live = notifications(&steps[1]);
    let position = |found: &dyn Fn(&(String, Value)) -> bool| live.iter().position(found);
    let announced = live
        .iter()
        .find(|(session, u)| *session == parent && u["sessionUpdate"] == "subagent_update")
        .map(|(_, u)| u.clone())
        .expect("the child is announced on its parent");
    let child = announced["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(child, parent);
    assert_eq!(announced["title"], "read the notes");
    assert_eq!(announced["state"], json!({"state": "running"}));
    assert_eq!(announced["capabilities"], json!({"cancel": {}}), "the client may cancel it");
    assert_eq!(announced["cwd"], env.cwd());

    let first_child = position(&|(session, _)| *session == child).expect("the child's own updates");
    let announcement = position(&|(_, u)| u["sessionUpdate"] == "subagent_update").unwrap();
    assert!(announcement < first_child, "announced before any of its traffic");
    let linked = position(&|(_, u)| {
        u["toolCallId"] == "t1" && u["content"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "session"))
    })
    .expect("the card links the child's session");
    assert!(announcement < linked);
    let link = live[linked].1["content"].as_array().unwrap().iter().find(|c| c["type"] == "session").cloned().unwrap();
    assert_eq!(link["sessionId"], child.as_str());
    assert_eq!(child_text(&live, &child), "Hello from the child.");

    let messages: Vec<&Value> = live
        .iter()
        .filter(|(session, u)| *session == parent && u["sessionUpdate"] == "session_message")
        .map(|(_, u)| u)
        .collect();
    assert_eq!(messages.len(), 2, "the task and the report: {messages:?}");
    assert_eq!(messages[0]["recipientSessionId"], child.as_str());
    assert_eq!(messages[0]["content"][0]["text"], "CHILD-A: say hello");
    assert_eq!(messages[1]["senderSessionId"], child.as_str());
    assert_eq!(messages[1]["content"][0]["text"], "Hello from the child.");
    let ended = live
        .iter()
        .rev()
        .find(|(_, u)| u["sessionUpdate"] == "subagent_update")
        .map(|(_, u)| u["state"].clone())
        .unwrap();
    assert_eq!(ended, json!({"state": "idle", "stopReason": "end_turn"}));

    // The load shows it all again: the announcement, the linked card, the child's own words.
    let replayed = notifications(&steps[2]);
    let announced_again = replayed.iter().position(|(_, u)| u["sessionUpdate"] == "subagent_update").unwrap();
    let card_again = replayed.iter().position(|(_, u)| u["toolCallId"] == "t1").unwrap();
    assert!(announced_again < card_again, "announced before the card that links it");
    assert_eq!(replayed[announced_again].1["sessionId"], child.as_str());
    assert_eq!(child_text(&replayed, &child), "Hello from the child.");
    assert!(replayed.iter().any(|(s, u)| *s == child && u["sessionUpdate"] == "user_message_chunk"));
}

#[tokio::test]
async fn a_client_without_subagents_sees_only_the_card() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "read the notes", "CHILD-B: say hello")])).push(Reply::text(&["Done."]));
    env.mock.route("CHILD-B", Reply::text(&["Hello."]));
    let transcript = sdk::run(&env, &script(&env, json!({}), true), &["acp"]).await;
    let parent = transcript["steps"][0]["response"]["sessionId"].as_str().unwrap().to_owned();
    for step in [1, 2] {
        for (session, update) in notifications(&transcript["steps"][step]) {
            assert_eq!(session, parent, "nothing under another id: {update}");
            let kind = update["sessionUpdate"].as_str().unwrap();
            assert!(!["subagent_update", "session_message"].contains(&kind), "{update}");
            let content = update["content"].as_array().cloned().unwrap_or_default();
            assert!(content.iter().all(|c| c["type"] != "session"), "{update}");
        }
    }
}

#[tokio::test]
async fn cancelling_the_child_by_its_id_stops_it_alone_and_the_parent_goes_on() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "count forever", "CHILD-C: count")])).push(Reply::text(&["The parent goes on."]));
    env.mock.route("CHILD-C", Reply::Endless { delay: Duration::from_millis(20) });
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {"subagents": {}}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "PARENT: count"}]}, "cancel_subagent": true},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let step = &transcript["steps"][1];
    assert_eq!(step["response"]["stopReason"], "end_turn", "the parent's turn was not cancelled");
    let shown = notifications(step);
    let card = shown.iter().rev().find(|(_, u)| u["toolCallId"] == "t1" && !u["status"].is_null()).unwrap();
    assert_eq!(card.1["status"], "failed", "{card:?}");
    let ended = shown.iter().rev().find(|(_, u)| u["sessionUpdate"] == "subagent_update").unwrap();
    assert_eq!(ended.1["state"], json!({"state": "idle", "stopReason": "cancelled"}));
    let parent_requests = env.mock.requests_with("PARENT");
    assert_eq!(parent_requests.len(), 2, "the parent asked its model again");
    assert!(parent_requests[1].to_string().contains("The sub-agent was cancelled."));
}

/// Through `cairn serve` (the bridge, as an editor with `[serve] url` runs it): the child's
/// updates travel the parent's stream on the server and reach the client under the child's id.
#[tokio::test]
async fn a_served_session_shows_its_child_under_the_childs_id() {
    let mut env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "read the notes", "CHILD-S: say hello")])).push(Reply::text(&["Done."]));
    env.mock.route("CHILD-S", Reply::text(&["Hello from a served child."]));
    let server = crate::support::served::Server::start(&env).await;
    env.set_env("CAIRN_HOME", &env.dir.path().join("bridge-home").to_string_lossy());
    env.set_env("CAIRN_SERVE_TOKEN", &crate::support::served::secret_for(&server.url).unwrap());
    let script = script(&env, json!({"subagents": {}}), false);
    let transcript = sdk::run(&env, &script, &["acp", "--server", server.url.as_str()]).await;
    let shown = notifications(&transcript["steps"][1]);
    let announced = shown.iter().find(|(_, u)| u["sessionUpdate"] == "subagent_update").expect("announced");
    let child = announced.1["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(child_text(&shown, &child), "Hello from a served child.");
}

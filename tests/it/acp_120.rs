//! What ACP 1.16–1.20 added, as the official Rust client sees it (it parses every update with
//! the SDK's own types): the checklist as `plan_update` / `plan_removed` for clients that
//! advertise `plan`, and the legacy `plan` for the others.

use serde_json::{Value, json};

use crate::support::sdk::{self, updates};
use crate::support::{Reply, TestEnv};

fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates.iter().filter(|u| u["sessionUpdate"] == kind).collect()
}

#[tokio::test]
async fn a_client_with_plans_gets_the_checklist_as_plan_updates_live_and_on_load() {
    let env = TestEnv::new().await;
    let items = json!([{"content": "Read the code", "status": "completed"}, {"content": "Fix it", "status": "in_progress", "priority": "high"}]);
    env.mock
        .push(Reply::tool_calls(&[("c1", "todo", json!({"items": items}))]))
        .push(Reply::tool_calls(&[("c2", "todo", json!({"items": []}))]))
        .push(Reply::text(&["done"]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {"plan": {}}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "plan it"}]}},
        {"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;

    for step in [1, 2] {
        let updates = updates(&transcript["steps"][step]);
        assert!(of_kind(&updates, "plan").is_empty(), "no legacy plan for this client: {updates:?}");
        let plans = of_kind(&updates, "plan_update");
        assert_eq!(plans.len(), 1, "{updates:?}");
        assert_eq!(
            plans[0]["plan"],
            json!({"type": "items", "planId": "todo", "entries": [
                {"content": "Read the code", "priority": "medium", "status": "completed"},
                {"content": "Fix it", "priority": "high", "status": "in_progress"}
            ]})
        );
        let removed = of_kind(&updates, "plan_removed");
        assert_eq!(removed.len(), 1, "the emptied checklist is removed: {updates:?}");
        assert_eq!(removed[0]["planId"], "todo");
        let at = |kind: &str| updates.iter().position(|u| u["sessionUpdate"] == kind).unwrap();
        assert!(at("plan_update") < at("plan_removed"), "in the order they happened");
    }
}

#[tokio::test]
async fn a_client_without_plans_keeps_the_legacy_plan() {
    let env = TestEnv::new().await;
    env.mock
        .push(Reply::tool_calls(&[("c1", "todo", json!({"items": [{"content": "Fix it", "status": "pending"}]}))]))
        .push(Reply::text(&["done"]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "plan it"}]}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let updates = updates(&transcript["steps"][1]);
    assert!(of_kind(&updates, "plan_update").is_empty() && of_kind(&updates, "plan_removed").is_empty());
    assert_eq!(of_kind(&updates, "plan")[0]["entries"][0]["content"], "Fix it", "{updates:?}");
}

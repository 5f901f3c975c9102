//! What ACP 1.16–1.20 added, as the official Rust client sees it (it parses every update with
//! the SDK's own types): the checklist as `plan_update` / `plan_removed` for clients that
//! advertise `plan`, and the legacy `plan` for the others; the unstable `session/set_title` and
//! `session/status`; the `_session/steering` extension; and, through the raw harness, a model's
//! title arriving after the client's, and the turn's usage on the prompt's answer.

use serde_json::{Value, json};

use crate::support::mock_llm::MOCK_TITLE;
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

/// `session/set_title` (unstable) through the official client: stored before the answer,
/// listed, shown as a `session_info_update`, and never replaced by a model-written title.
#[tokio::test]
async fn a_title_the_client_sets_is_stored_shown_and_kept() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["hello"]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"set_title": {"sessionId": "$session", "title": "  Fix the login flow\nsecond line"}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "a first prompt"}]}},
        {"list": {}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let steps = &transcript["steps"];
    assert_eq!(steps[1]["response"]["title"], "Fix the login flow", "the stored title, normalized");
    let seen: Vec<Value> = [1, 2].iter().flat_map(|step| updates(&steps[*step])).collect();
    let titles = of_kind(&seen, "session_info_update");
    assert!(!titles.is_empty() && titles.iter().all(|u| u["title"] == "Fix the login flow"), "{titles:?}");
    assert_eq!(steps[3]["response"]["sessions"][0]["title"], "Fix the login flow");
    let asked_for_titles =
        env.mock.requests().iter().filter(|r| r.to_string().contains("You write short titles")).count();
    assert_eq!(asked_for_titles, 0, "no model is asked for a title the client set");
}

/// `session/status` (unstable): `open` while this process holds the session, `saved` for one
/// only stored, what it is doing under `_meta.cairn`, and -32002 for one that does not exist;
/// asking loads nothing.
#[tokio::test]
async fn status_says_open_or_saved_without_loading_anything() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["hello"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let status = agent.call("session/status", json!({"sessionId": session})).await;
    assert_eq!(status, json!({"status": "open", "_meta": {"cairn": {"state": "idle"}}}));
    let id = agent.prompt(&session, "hi").await;
    agent.response(id).await;
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let status = agent.call("session/status", json!({"sessionId": session})).await;
    assert_eq!(status["status"], "saved", "{status}");
    let again = agent.call("session/status", json!({"sessionId": session})).await;
    assert_eq!(again["status"], "saved", "asking did not load it: {again}");
    let unknown = agent.call_err("session/status", json!({"sessionId": "ses_nope"})).await;
    assert_eq!(unknown["code"], -32002, "{unknown}");
    let empty = agent.call_err("session/set_title", json!({"sessionId": session, "title": " \n "})).await;
    assert!(empty["message"].as_str().unwrap().contains("`title` is empty"), "{empty}");
}

/// `_session/steering`, the extension the Claude and Codex adapters' clients call: advertised
/// on `initialize`; with nothing running it answers `promptRequired` when asked to (and uses
/// nothing) or starts a turn; while a turn runs the prompt joins it before its next model
/// request, whatever the session's `steer` option.
#[tokio::test]
async fn steering_joins_the_running_turn_or_says_a_prompt_is_required() {
    let env = TestEnv::new().await;
    env.mock
        .push(Reply::text(&["started by a steer"]))
        .push(Reply::tool_calls(&[("w1", "write", json!({"path": "a.txt", "content": "x\n"}))]))
        .push(Reply::text(&["done"]));
    let mut agent = env.spawn().await;
    let init = agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    assert_eq!(init["_meta"]["steering"]["supported"], true);
    let capabilities = &init["agentCapabilities"]["sessionCapabilities"];
    assert_eq!((&capabilities["title"], &capabilities["status"]), (&json!({}), &json!({})), "{capabilities}");
    let session = agent.new_session(&env.cwd()).await;
    let text = |text: &str| json!([{"type": "text", "text": text}]);

    let asked = json!({"sessionId": session, "prompt": text("ignored"), "idleBehavior": "promptRequired"});
    let idle = agent.call("_session/steering", asked).await;
    assert_eq!(idle, json!({"outcome": "promptRequired", "reason": "noRunningTurn"}));
    assert!(env.mock.requests().is_empty(), "nothing was sent to the model");

    let started = agent.call("_session/steering", json!({"sessionId": session, "prompt": text("go")})).await;
    assert_eq!(started, json!({"outcome": "startedNewTurn"}));
    while !agent.recv().await.to_string().contains("started by a steer") {}

    // A turn held at its permission question: the steer joins it.
    let prompt = agent.prompt(&session, "write a file").await;
    let question = loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    let steer = agent.request("_session/steering", json!({"sessionId": session, "prompt": text("STEERED-IN")})).await;
    let (answer, _) = agent.response(steer).await;
    assert_eq!(answer["result"], json!({"outcome": "injected"}));
    agent.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let last = env.mock.requests().last().unwrap().to_string();
    assert!(last.contains("STEERED-IN"), "the steered prompt reached the turn's next request");
    assert_eq!(env.mock.requests().len(), 3, "one turn, not a second");
}

/// Waits until `ready` holds, or panics naming `what` after ten seconds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what} did not happen within 10 s");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A title the client sets while the title model is still writing one stands: the model's
/// answer, arriving after it, is neither stored nor shown.
#[tokio::test]
async fn a_model_title_arriving_after_the_clients_title_is_dropped() {
    let env = TestEnv::new().await;
    let release = env.mock.hold_titles();
    env.mock.push(Reply::text(&["hello"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "Fix the login flow").await;
    let (_, mut seen) = agent.response(id).await;
    until("the title request", || !env.mock.title_requests().is_empty()).await;

    let set = agent.request("session/set_title", json!({"sessionId": session, "title": "Client title"})).await;
    let (answer, more) = agent.response(set).await;
    assert_eq!(answer["result"]["title"], "Client title", "{answer}");
    seen.extend(more);
    release.notify_one();
    // Until the model's title is refused (logged), or shown.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !agent.stderr().contains("its title stands") && !seen.iter().any(|m| m.to_string().contains(MOCK_TITLE)) {
        assert!(std::time::Instant::now() < deadline, "the model's title was neither refused nor shown");
        seen.extend(agent.try_recv(std::time::Duration::from_millis(20)).await);
    }

    let list = agent.request("session/list", json!({})).await;
    let (listed, more) = agent.response(list).await;
    seen.extend(more);
    assert_eq!(listed["result"]["sessions"][0]["title"], "Client title", "{listed}");
    let titles: Vec<&Value> =
        seen.iter().filter(|m| m["params"]["update"]["sessionUpdate"] == "session_info_update").collect();
    assert!(!titles.iter().any(|m| m.to_string().contains(MOCK_TITLE)), "{titles:?}");
    assert!(titles.iter().any(|m| m["params"]["update"]["title"] == "Client title"), "{titles:?}");
}

/// `session/prompt`'s answer carries the turn's token usage (unstable): every model request of
/// the turn summed, here a tool call's and the answer's; a slash command that runs no model
/// used none.
#[tokio::test]
async fn the_prompt_answer_carries_what_the_turn_used() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "a note\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))])).push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "read the notes").await;
    let (response, _) = agent.response(id).await;
    // Each request of the mock: 12 prompt tokens, 2 of them cached, and 5 written.
    let usage = json!({"totalTokens": 34, "inputTokens": 20, "outputTokens": 10, "cachedReadTokens": 4});
    assert_eq!(response["result"], json!({"stopReason": "end_turn", "usage": usage}), "{response}");
    assert_eq!(env.mock.requests().len(), 2);

    let status = agent
        .call("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "/status"}]}))
        .await;
    assert_eq!(status["usage"], json!({"totalTokens": 0, "inputTokens": 0, "outputTokens": 0}), "{status}");
}

/// `session/archive` and `session/unarchive` (unstable), advertised as
/// `sessionCapabilities.archive`: archiving closes the session (its running turn cancelled)
/// and hides it from `session/list` unless the `archived` filter asks for it (every listed
/// session says whether it is), and from `cairn sessions list` but for `--archived`; it stays
/// loadable by id, and unarchiving lists it again. Both may be repeated; an unknown session is
/// -32002.
#[tokio::test]
async fn an_archived_session_is_hidden_kept_and_brought_back() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["one"])).push(Reply::endless(std::time::Duration::from_millis(20)));
    let mut agent = env.spawn().await;
    let init = agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await;
    assert_eq!(init["agentCapabilities"]["sessionCapabilities"]["archive"], json!({}), "{init}");
    let kept = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&kept, "keep me").await;
    agent.response(id).await;
    let busy = agent.new_session(&env.cwd()).await;
    let turn = agent.prompt(&busy, "keep talking").await;
    agent.next_chunk().await;

    let archive = agent.request("session/archive", json!({"sessionId": busy})).await;
    let (answers, _) = agent.responses(&[turn, archive]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled", "archiving stopped the turn: {answers:?}");
    assert_eq!(answers[1]["result"], json!({}), "{answers:?}");
    assert_eq!(agent.call("session/archive", json!({"sessionId": busy})).await, json!({}), "once more");

    let listed = |answer: Value| -> Vec<(String, bool)> {
        let sessions = answer["sessions"].as_array().unwrap().iter();
        sessions.map(|s| (s["sessionId"].as_str().unwrap().to_owned(), s["archived"].as_bool().unwrap())).collect()
    };
    assert_eq!(listed(agent.call("session/list", json!({})).await), [(kept.clone(), false)]);
    assert_eq!(listed(agent.call("session/list", json!({"archived": "only"})).await), [(busy.clone(), true)]);
    let all = listed(agent.call("session/list", json!({"archived": "include"})).await);
    assert_eq!(all, [(busy.clone(), true), (kept.clone(), false)]);
    let unknown_filter = agent.call_err("session/list", json!({"archived": "sometimes"})).await;
    assert_eq!(unknown_filter["code"], -32602, "{unknown_filter}");
    for method in ["session/archive", "session/unarchive"] {
        let unknown = agent.call_err(method, json!({"sessionId": "ses_nope"})).await;
        assert_eq!(unknown["code"], -32002, "{method}: {unknown}");
    }

    // Loadable by id, and still archived after.
    agent.call("session/load", json!({"sessionId": busy, "cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(listed(agent.call("session/list", json!({})).await), [(kept.clone(), false)]);
    let cli = |args: &'static [&'static str]| {
        let mut command = env.command();
        command.args(["sessions", "list", "--json"]).args(args);
        async move { String::from_utf8(command.output().await.unwrap().stdout).unwrap() }
    };
    let (archived, shown) = (cli(&["--archived"]).await, cli(&[]).await);
    assert!(archived.contains(&busy) && !archived.contains(&kept), "{archived}");
    assert!(shown.contains(&kept) && !shown.contains(&busy), "{shown}");

    assert_eq!(agent.call("session/unarchive", json!({"sessionId": busy})).await, json!({}));
    assert_eq!(agent.call("session/unarchive", json!({"sessionId": busy})).await, json!({}), "once more");
    assert_eq!(listed(agent.call("session/list", json!({})).await), [(busy, false), (kept, false)]);
}

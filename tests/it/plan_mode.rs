//! Plan mode: the model reads and plans, and what would change anything is refused, however it
//! is spelled, through a sub-agent included; `exit_plan` shows the plan as a plan document
//! (`plan_update` with its Markdown, or the legacy `plan` with its steps) and on the card of a
//! permission question whose answer switches the mode and lets the turn go on, or keeps
//! planning with the user's words. A load shows the plan and the mode again; a headless run
//! prints the plan and ends. The official Rust client follows one review too (its 1.17 types
//! parse the Markdown plan and the `switch_mode` card). MCP tools while planning are in
//! `mcp::session`.

use serde_json::{Value, json};

use crate::support::mock_llm::first_user_text;
use crate::support::{Agent, Editor, Reply, TestEnv, updates};
use crate::tools::{call, set_mode, tool_results, turn};

const PLAN: &str = "# Add a cache\n\nThe lookups are slow.\n\n1. Add `cache.rs` with an LRU map\n2. Use it in `lookup`\n3. Test a hit and a miss\n";

fn exit_plan(id: &str) -> Reply {
    Reply::tool_calls(&[(id, "exit_plan", json!({"plan": PLAN}))])
}

fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates.iter().filter(|u| u["sessionUpdate"] == kind).collect()
}

/// An agent whose new session is in plan mode.
async fn planning(env: &TestEnv, editor: Editor) -> (Agent, String) {
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "plan").await;
    (agent, session)
}

async fn load(agent: &mut Agent, env: &TestEnv, session: &str) -> (Value, Vec<Value>) {
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = agent.response(id).await;
    (response, updates(&replay, session).into_iter().cloned().collect())
}

#[tokio::test]
async fn while_planning_every_way_to_change_something_is_refused_and_the_model_told_to_plan() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "alpha\n").unwrap();
    let hostile = [
        ("c1", "write", json!({"path": "new.txt", "content": "x"})),
        ("c2", "edit", json!({"path": "notes.txt", "old_string": "alpha", "new_string": "beta"})),
        ("c3", "bash", json!({"command": "echo x > made.txt"})),
        ("c4", "bash", json!({"command": "bash -c 'echo x > made.txt'"})),
        ("c5", "bash", json!({"command": "cat notes.txt | tee made.txt"})),
        ("c6", "bash", json!({"command": "sed -i s/alpha/beta/ notes.txt"})),
        ("c7", "bash", json!({"command": "find . -name notes.txt -exec rm {} +"})),
        ("c8", "bash", json!({"command": "git init -q && git add -A && git commit -qm x"})),
        ("c9", "bash", json!({"command": "python3 -c \"open('made.txt','w')\""})),
    ];
    // Reading is fine: one between every few refusals keeps the turn under its limit of
    // failures in a row.
    let read = json!({"path": "notes.txt"});
    let mut calls: Vec<(&str, &str, Value)> = hostile[..4].to_vec();
    calls.push(("r1", "read", read.clone()));
    calls.extend_from_slice(&hostile[4..8]);
    calls.push(("r2", "read", read));
    calls.extend_from_slice(&hostile[8..]);
    env.mock.push(Reply::tool_calls(&calls)).push(Reply::text(&["I will plan instead."]));
    // Were anything asked, it would be allowed: nothing must be.
    let editor = Editor::default();
    editor.answer(&["allow_once"; 9]);
    let (mut agent, session) = planning(&env, editor).await;
    let (response, updates) = turn(&mut agent, &session, "change the notes").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(agent.editor.requests("session/request_permission").is_empty(), "nothing is asked while planning");
    let results: Vec<Value> = tool_results(&env, 1)
        .into_iter()
        .filter(|result| !result["tool_call_id"].as_str().unwrap().starts_with('r'))
        .collect();
    assert_eq!(results.len(), hostile.len());
    for result in &results {
        let said = result["content"].as_str().unwrap();
        assert!(said.starts_with("Permission denied: the session is in plan mode"), "{said}");
        assert!(said.contains("present the whole plan with `exit_plan`"), "{said}");
    }
    for (id, _, _) in &hostile {
        assert_eq!(call(&updates, id).last().unwrap()["status"], "failed", "{id}");
    }
    assert_eq!(std::fs::read_to_string(env.workspace().join("notes.txt")).unwrap(), "alpha\n");
    for made in ["new.txt", "made.txt", ".git"] {
        assert!(!env.workspace().join(made).exists(), "{made} was not made");
    }
    // The model is told it is planning with each request, the system prompt left as it was.
    let request = &env.mock.requests()[0];
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert!(last["content"].as_str().unwrap().starts_with("[Plan mode]"), "{last}");
    assert!(!request["messages"][0]["content"].as_str().unwrap().contains("[Plan mode]"));

    // A reader still runs, asked about as in ask mode (and in a sandbox that lets it write nothing).
    env.mock.push(Reply::tool_calls(&[("c10", "bash", json!({"command": "cat notes.txt"}))]));
    env.mock.push(Reply::text(&["It says alpha."]));
    let (response, updates) = turn(&mut agent, &session, "read the notes").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1);
    assert_eq!(call(&updates, "c10").last().unwrap()["status"], "completed");
    assert!(tool_results(&env, 3).last().unwrap()["content"].as_str().unwrap().contains("alpha"));
}

#[tokio::test]
async fn a_sub_agent_plans_too_and_cannot_present_a_plan_of_its_own() {
    let env = TestEnv::new().await;
    let task = json!({"description": "look around", "prompt": "CHILD: change things"});
    env.mock.push(Reply::tool_calls(&[("t1", "task", task)])).push(Reply::text(&["ok"]));
    env.mock.route(
        "CHILD",
        Reply::tool_calls(&[
            ("k1", "write", json!({"path": "child.txt", "content": "x"})),
            ("k2", "exit_plan", json!({"plan": "mine"})),
        ]),
    );
    env.mock.route("CHILD", Reply::text(&["I could change nothing."]));
    let (mut agent, session) = planning(&env, Editor::default()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT: go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(!env.workspace().join("child.txt").exists());
    let child = env.mock.requests_with("CHILD");
    assert!(first_user_text(&child[0]).starts_with("CHILD"));
    let tools: Vec<&str> =
        child[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(!tools.contains(&"exit_plan"), "{tools:?}");
    let said: Vec<&str> = child[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(said[0].contains("the session is in plan mode"), "{said:?}");
    assert!(said[1].contains("a sub-agent does not present plans"), "{said:?}");
    assert!(agent.editor.requests("session/request_permission").is_empty());
}

#[tokio::test]
async fn an_approved_plan_is_shown_switches_the_mode_and_the_turn_goes_on_to_implement_it() {
    let env = TestEnv::new().await;
    env.mock
        .push(exit_plan("p1"))
        .push(Reply::tool_calls(&[("w1", "write", json!({"path": "cache.rs", "content": "// lru\n"}))]))
        .push(Reply::text(&["Implemented."]));
    let editor = Editor::with_plans();
    editor.answer(&["implement_accept_edits"]);
    let (mut agent, session) = planning(&env, editor).await;
    let (response, updates) = turn(&mut agent, &session, "make lookups fast").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    // The plan document comes before the question, whose card shows the plan.
    let documents = of_kind(&updates, "plan_update");
    assert_eq!(documents.len(), 1, "{updates:?}");
    assert_eq!(documents[0]["plan"], json!({"type": "markdown", "planId": "plan", "content": PLAN.trim()}));
    assert!(of_kind(&updates, "plan").is_empty(), "no legacy plan for this client");
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1, "the write ran unasked in accept-edits mode");
    let question = &asked[0]["params"];
    assert_eq!(question["toolCall"]["toolCallId"], "p1");
    assert_eq!(question["toolCall"]["kind"], "switch_mode");
    assert_eq!(question["toolCall"]["content"][0]["content"]["text"], PLAN.trim());
    let options: Vec<(&str, &str)> = question["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        options,
        [("implement_accept_edits", "allow_always"), ("implement_ask", "allow_once"), ("keep_planning", "reject_once")]
    );

    // The mode is switched and the client told, both ways.
    let modes: Vec<&Value> = of_kind(&updates, "current_mode_update");
    assert_eq!(modes.len(), 1, "{updates:?}");
    assert_eq!(modes[0]["currentModeId"], "accept-edits");
    let options = of_kind(&updates, "config_option_update");
    let mode = options.last().unwrap()["configOptions"].as_array().unwrap().iter().find(|o| o["id"] == "mode").cloned();
    assert_eq!(mode.unwrap()["currentValue"], "accept-edits");
    let card = call(&updates, "p1");
    assert_eq!(card[0]["title"], "Plan: Add a cache");
    assert_eq!(card.last().unwrap()["status"], "completed");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(told.starts_with("The user approved the plan. The session is now in accept-edits mode"), "{told}");
    assert_eq!(std::fs::read_to_string(env.workspace().join("cache.rs")).unwrap(), "// lru\n");
    let last = env.mock.requests()[2]["messages"].as_array().unwrap().last().cloned().unwrap();
    assert!(!last["content"].as_str().unwrap_or_default().contains("[Plan mode]"), "no longer planning: {last}");

    // A load shows the plan again, and the session is in the mode the user chose.
    let (loaded, replay) = load(&mut agent, &env, &session).await;
    assert_eq!(loaded["result"]["modes"]["currentModeId"], "accept-edits", "{loaded}");
    let documents = of_kind(&replay, "plan_update");
    assert_eq!(documents.len(), 1, "{replay:?}");
    assert_eq!(documents[0]["plan"]["content"], PLAN.trim());
}

#[tokio::test]
async fn keep_planning_gives_the_model_the_words_the_user_typed_and_the_session_keeps_planning() {
    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1")).push(Reply::text(&["I will revise it."]));
    let mut editor = Editor::with_forms();
    editor.plans = true;
    editor.answer(&["keep_planning"]);
    let (mut agent, session) = planning(&env, editor).await;
    let prompt = agent.prompt(&session, "make lookups fast").await;
    let form = loop {
        let message = agent.recv().await;
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    assert_eq!(form["params"]["toolCallId"], "p1");
    assert_eq!(form["params"]["message"], "What should change in the plan?");
    agent.respond(&form["id"], json!({"action": "accept", "content": {"answer": "use a TTL, not an LRU"}})).await;
    let (response, notifications) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(told.contains("keep planning") && told.contains("use a TTL, not an LRU"), "{told}");
    assert!(told.contains("present the whole revised plan with `exit_plan`"), "{told}");
    let updates: Vec<Value> = updates(&notifications, &session).into_iter().cloned().collect();
    assert!(of_kind(&updates, "current_mode_update").is_empty(), "{updates:?}");
    let last = call(&updates, "p1").last().cloned().unwrap();
    assert_eq!(last["content"][1]["content"]["text"], "Keep planning: use a TTL, not an LRU");
    let last = env.mock.requests()[1]["messages"].as_array().unwrap().last().cloned().unwrap();
    assert!(last["content"].as_str().unwrap().starts_with("[Plan mode]"), "still planning: {last}");
}

#[tokio::test]
async fn a_client_without_plans_gets_the_steps_and_a_dismissed_review_ends_the_turn_still_planning() {
    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1")).push(Reply::text(&["never asked for"]));
    let editor = Editor::default();
    editor.answer(&["cancelled"]);
    let (mut agent, session) = planning(&env, editor).await;
    let (response, updates) = turn(&mut agent, &session, "make lookups fast").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(env.mock.requests().len(), 1, "the turn ended with the review");
    let steps: Vec<&str> = of_kind(&updates, "plan")[0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["Add `cache.rs` with an LRU map", "Use it in `lookup`", "Test a hit and a miss"]);
    assert!(of_kind(&updates, "plan_update").is_empty());
    assert!(of_kind(&updates, "current_mode_update").is_empty());
    assert_eq!(call(&updates, "p1").last().unwrap()["status"], "failed");
    let (loaded, _) = load(&mut agent, &env, &session).await;
    assert_eq!(loaded["result"]["modes"]["currentModeId"], "plan");
}

#[tokio::test]
async fn exit_plan_outside_plan_mode_is_refused_without_a_question() {
    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1")).push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["implement_ask"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(told.contains("`exit_plan` only leaves plan mode, and the session is in ask mode"), "{told}");
    assert!(agent.editor.requests("session/request_permission").is_empty());
    assert!(of_kind(&updates, "plan").is_empty() && of_kind(&updates, "current_mode_update").is_empty());
}

#[tokio::test]
async fn headless_plan_mode_prints_the_plan_and_exits_without_asking() {
    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1")).push(Reply::text(&["never asked for"]));
    let (status, stdout, stderr) = crate::exec::run(&env, &["exec", "--mode", "plan", "make lookups fast"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout, PLAN, "the plan, and only the plan, on stdout");
    assert_eq!(env.mock.requests().len(), 1, "nobody was asked, and the run ended with the plan");

    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1"));
    let (status, stdout, stderr) =
        crate::exec::run(&env, &["exec", "--json", "--mode", "plan", "make lookups fast"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let lines: Vec<Value> = stdout.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let plan = lines.iter().find(|line| line["update"]["sessionUpdate"] == "plan_update").unwrap();
    assert_eq!(plan["update"]["plan"], json!({"type": "markdown", "planId": "plan", "content": PLAN.trim()}));
    assert_eq!(lines.last().unwrap()["stopReason"], "end_turn");
}

#[tokio::test]
async fn the_official_client_follows_a_plan_review_from_plan_mode_to_implementing_it() {
    use crate::support::sdk;
    let env = TestEnv::new().await;
    env.mock.push(exit_plan("p1")).push(Reply::text(&["Implementing."]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {"plan": {}}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"set_mode": {"sessionId": "$session", "modeId": "plan"}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "make lookups fast"}]}},
        {"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let modes: Vec<&str> = transcript["steps"][0]["response"]["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|mode| mode["id"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["ask", "accept-edits", "plan", "read-only", "bypass"], "{transcript}");

    // The SDK parsed every update with its own types; it answers with the "allow once" option,
    // which implements the plan asking before edits.
    let asked = transcript["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{transcript}");
    assert_eq!(asked[0]["toolCall"]["kind"], "switch_mode");
    let turn = sdk::updates(&transcript["steps"][2]);
    let document = of_kind(&turn, "plan_update");
    assert_eq!(document[0]["plan"]["type"], "markdown", "{turn:?}");
    assert_eq!(of_kind(&turn, "current_mode_update")[0]["currentModeId"], "ask", "{turn:?}");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(told.starts_with("The user approved the plan. The session is now in ask mode"), "{told}");

    let replay = sdk::updates(&transcript["steps"][3]);
    assert_eq!(of_kind(&replay, "plan_update")[0]["plan"]["content"], PLAN.trim());
    assert_eq!(transcript["steps"][3]["response"]["modes"]["currentModeId"], "ask", "{transcript}");
}

#[tokio::test]
async fn calls_written_beside_exit_plan_do_not_run_once_the_plan_is_approved() {
    let env = TestEnv::new().await;
    // In one answer: the plan, and a write the model wrote before anyone approved it.
    let write = json!({"path": "early.rs", "content": "// too early\n"});
    env.mock
        .push(Reply::tool_calls(&[("p1", "exit_plan", json!({"plan": PLAN})), ("w1", "write", write)]))
        .push(Reply::text(&["Starting over, as planned."]));
    let editor = Editor::with_plans();
    editor.answer(&["implement_accept_edits"]);
    let (mut agent, session) = planning(&env, editor).await;
    let (response, _) = turn(&mut agent, &session, "make lookups fast").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(!env.workspace().join("early.rs").exists(), "the write was not run in the mode just approved");
    let told = tool_results(&env, 1);
    assert!(told[0]["content"].as_str().unwrap().starts_with("The user approved the plan."), "{told:?}");
    assert!(
        told[1]["content"].as_str().unwrap().starts_with("Not run: written before the plan was approved"),
        "{told:?}"
    );
}

//! Sub-agents: the `task` tool runs a child turn whose answer is the parent's tool result, with
//! its progress on the parent's card, its session hidden from the list, its limits, named agents,
//! permissions, cost, cancellation and crashes. The mock tells a child's requests from its
//! parent's by the marker in the first user message (the task's prompt).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::mock_llm::first_user_text;
use crate::support::{Agent, Editor, Reply, TestEnv, updates};
use crate::tools::{call, set_mode, turn};

pub fn task(id: &str, description: &str, prompt: &str) -> (String, String, Value) {
    (id.to_owned(), "task".to_owned(), json!({"description": description, "prompt": prompt}))
}

pub fn calls(list: &[(String, String, Value)]) -> Reply {
    let borrowed: Vec<(&str, &str, Value)> =
        list.iter().map(|(id, name, args)| (id.as_str(), name.as_str(), args.clone())).collect();
    Reply::tool_calls(&borrowed)
}

/// The `tool` messages of a request, by call id.
fn results(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect()
}

pub fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

async fn list(agent: &mut Agent, meta: Option<Value>) -> Vec<Value> {
    let params = match meta {
        Some(meta) => json!({"_meta": meta}),
        None => json!({}),
    };
    agent.call("session/list", params).await["sessions"].as_array().unwrap().clone()
}

fn last_text(update: &Value) -> String {
    update["content"]
        .as_array()
        .and_then(|c| c.last())
        .map_or_else(String::new, |c| c["content"]["text"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test]
async fn a_task_runs_a_child_turn_whose_answer_is_the_result_and_its_progress_is_shown() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "alpha\n").unwrap();
    env.mock.push(calls(&[task("t1", "read the notes", "CHILD-A: read a.txt")]));
    env.mock.push(Reply::text(&["The child says alpha."]));
    let mut slow_read = Reply::tool_calls(&[("k1", "read", json!({"path": "a.txt"}))]);
    if let Reply::Stream { delay, .. } = &mut slow_read {
        *delay = Duration::from_millis(30);
    }
    env.mock.route("CHILD-A", slow_read);
    env.mock.route("CHILD-A", Reply::text_with_delay(&["It ", "says ", "alpha."], Duration::from_millis(150)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, shown) = turn(&mut agent, &session, "PARENT: what do the notes say?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let parent = env.mock.requests_with("PARENT");
    assert_eq!(parent.len(), 2);
    assert!(tool_names(&parent[0]).contains(&"task".to_owned()), "the parent has the tool");
    assert_eq!(results(&parent[1]), [("t1".to_owned(), "It says alpha.".to_owned())]);
    let child = env.mock.requests_with("CHILD-A");
    assert_eq!(child.len(), 2, "the child ran its own turn");
    assert!(first_user_text(&child[0]).starts_with("CHILD-A"));
    assert!(child[0]["messages"][0]["content"].as_str().unwrap().contains("You are a sub-agent (depth 1)"));
    assert!(results(&child[1])[0].1.contains("alpha"), "the child's tool ran");

    let card = call(&shown, "t1");
    assert_eq!(card[0]["sessionUpdate"], "tool_call");
    assert_eq!(card.iter().find(|u| u.get("title").is_some()).unwrap()["title"], "Sub-agent: read the notes");
    let progress: Vec<String> =
        card.iter().filter(|u| u["status"].is_null() || u["status"] == "in_progress").map(|u| last_text(u)).collect();
    assert!(progress.iter().any(|text| text.contains("✓ Read a.txt")), "the child's call shows: {progress:?}");
    assert!(progress.iter().any(|text| text.contains("It says")), "the child's text shows: {progress:?}");
    let last = card.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last_text(last), "It says alpha.");
    assert!(shown.iter().all(|u| u["toolCallId"] != "k1"), "the child's own calls are not cards of the parent session");

    // The child's session is stored under the parent and hidden from the list unless asked.
    let plain = list(&mut agent, None).await;
    assert_eq!(plain.len(), 1);
    assert_eq!(plain[0]["sessionId"], session.as_str());
    let all = list(&mut agent, Some(json!({"cairn": {"subagents": true}}))).await;
    assert_eq!(all.len(), 2);
    let child_row = all.iter().find(|s| s["sessionId"] != session.as_str()).unwrap();
    assert_eq!(child_row["_meta"]["cairn"]["parentId"], session.as_str());
    assert_eq!(child_row["_meta"]["cairn"]["subagent"], "task");
    assert_eq!(child_row["title"], "read the notes");
}

#[tokio::test]
async fn forks_stay_listed_while_sub_agents_are_hidden() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "x", "CHILD-F")])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-F", Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "PARENT").await;
    let fork = agent.call("session/fork", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let listed: Vec<Value> = list(&mut agent, None).await.iter().map(|s| s["sessionId"].clone()).collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&fork["sessionId"]));
    assert_eq!(list(&mut agent, Some(json!({"cairn": {"subagents": true}}))).await.len(), 3);

    // Deleting the parent takes its sub-agents along; the fork stays.
    agent.call("session/delete", json!({"sessionId": session})).await;
    let left: Vec<Value> = list(&mut agent, Some(json!({"cairn": {"subagents": true}})))
        .await
        .iter()
        .map(|s| s["sessionId"].clone())
        .collect();
    assert_eq!(left, [fork["sessionId"].clone()]);
}

#[tokio::test]
async fn a_sub_agent_at_max_depth_has_no_task_tool_and_is_told_why() {
    let env = TestEnv::new().await;
    env.write_config("[subagents]\nmax_depth = 1\n");
    env.mock.push(calls(&[task("t1", "go deeper", "CHILD-D")])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-D", calls(&[task("t2", "deeper still", "GRANDCHILD")]));
    env.mock.route("CHILD-D", Reply::text(&["I could not nest."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let child = env.mock.requests_with("CHILD-D");
    assert!(!tool_names(&child[0]).contains(&"task".to_owned()), "{:?}", tool_names(&child[0]));
    assert!(!child[0]["messages"][0]["content"].as_str().unwrap().contains("- task:"), "not in its catalog either");
    let refused = &results(&child[1])[0].1;
    assert!(refused.contains("not available here") && refused.contains("[subagents] max_depth"), "{refused}");
    assert!(env.mock.requests_with("GRANDCHILD").is_empty());
    assert_eq!(results(&env.mock.requests_with("PARENT")[1])[0].1, "I could not nest.");
}

#[tokio::test]
async fn tasks_of_one_step_run_side_by_side_within_max_concurrent() {
    let env = TestEnv::new().await;
    env.write_config("[subagents]\nmax_concurrent = 2\n");
    let tasks: Vec<_> = (0..6).map(|n| task(&format!("t{n}"), &format!("job {n}"), &format!("CHILD-{n}"))).collect();
    env.mock.push(calls(&tasks)).push(Reply::text(&["all done"]));
    for n in 0..6 {
        let answer = format!("answer {n}");
        // Long enough that two children always overlap, however loaded the machine.
        env.mock.route(&format!("CHILD-{n}"), Reply::text_with_delay(&["a", &answer], Duration::from_millis(300)));
    }
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(env.mock.most_open(), 2, "side by side, never more than max_concurrent child requests at once");
    let expected: Vec<(String, String)> = (0..6).map(|n| (format!("t{n}"), format!("aanswer {n}"))).collect();
    assert_eq!(results(&env.mock.requests_with("PARENT")[1]), expected, "results in call order");
}

#[tokio::test]
async fn cancel_reaches_every_child_and_grandchild_at_once() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "nest", "CHILD-A"), task("t2", "wait", "CHILD-B")]));
    env.mock.route("CHILD-A", calls(&[task("g1", "deeper", "GRANDCHILD")]));
    env.mock.route("GRANDCHILD", Reply::endless(Duration::from_millis(20)));
    env.mock.route("CHILD-B", Reply::endless(Duration::from_millis(20)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "PARENT").await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while env.mock.requests_with("GRANDCHILD").is_empty() || env.mock.open() < 2 {
        assert!(Instant::now() < deadline, "the children did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let requests = env.mock.requests().len();
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    // How fast is a figure for the benches; here: both streams close, and nothing follows.
    env.mock.wait_dropped(2, Duration::from_secs(10)).await;
    let (response, shown) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(env.mock.requests().len(), requests, "no request after the cancel");
    assert_eq!(env.mock.open(), 0);
    let shown = updates(&shown, &session).into_iter().cloned().collect::<Vec<_>>();
    for id in ["t1", "t2"] {
        assert_eq!(call(&shown, id).last().unwrap()["status"], "failed", "{id} ends cancelled (shown failed)");
    }
}

#[tokio::test]
async fn a_child_that_fails_or_hits_a_limit_is_a_failed_result_and_the_parent_goes_on() {
    let env = TestEnv::new().await;
    env.write_config("[subagents]\nmax_rounds = 1\ntimeout_secs = 1\n");
    env.mock.push(calls(&[
        task("t1", "broken", "CHILD-ERR"),
        task("t2", "busy", "CHILD-ROUNDS"),
        task("t3", "slow", "CHILD-SLOW"),
    ]));
    env.mock.push(Reply::text(&["Carrying on."]));
    env.mock.route("CHILD-ERR", Reply::status(400, "the child's request is bad"));
    env.mock.route("CHILD-ROUNDS", Reply::tool_calls(&[("k1", "glob", json!({"pattern": "*"}))]));
    env.mock.route("CHILD-SLOW", Reply::endless(Duration::from_millis(50)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, shown) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let results = results(&env.mock.requests_with("PARENT")[1]);
    assert!(results[0].1.contains("The sub-agent failed") && results[0].1.contains("bad"), "{}", results[0].1);
    assert!(results[1].1.contains("[subagents] max_rounds"), "{}", results[1].1);
    assert!(results[2].1.contains("[subagents] timeout_secs") && results[2].1.contains("tick"), "{}", results[2].1);
    for id in ["t1", "t2", "t3"] {
        assert_eq!(call(&shown, id).last().unwrap()["status"], "failed", "{id}");
    }
}

pub fn write_agent(env: &TestEnv, file: &str, text: &str) {
    let dir = env.workspace().join(".agents/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

#[tokio::test]
async fn named_agents_bring_their_instructions_and_only_their_tools() {
    let env = TestEnv::new().await;
    write_agent(
        &env,
        "reader.md",
        "---\nname: reader\ndescription: Reads files and reports\ntools: Read, grep\n---\nREADER-RULES: quote exactly.\n",
    );
    write_agent(&env, "bad.md", "this file has no front matter\n");
    let mut named = task("t1", "quote it", "CHILD-R");
    named.2["agent"] = json!("reader");
    let mut unknown = task("t2", "who", "CHILD-U");
    unknown.2["agent"] = json!("nobody");
    env.mock.push(calls(&[named, unknown])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-R", Reply::tool_calls(&[("k1", "bash", json!({"command": "ls"}))]));
    env.mock.route("CHILD-R", Reply::text(&["I may only read."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let parent = env.mock.requests_with("PARENT");
    let tools = parent[0]["tools"].as_array().unwrap();
    let description =
        tools.iter().find(|t| t["function"]["name"] == "task").unwrap()["function"]["description"].as_str().unwrap();
    assert!(description.contains("- reader: Reads files and reports"), "{description}");
    let child = env.mock.requests_with("CHILD-R");
    assert_eq!(tool_names(&child[0]), ["read", "grep"]);
    assert!(child[0]["messages"][0]["content"].as_str().unwrap().contains("READER-RULES: quote exactly."));
    let refused = &results(&child[1])[0].1;
    assert!(refused.contains("the agent `reader` may only use: read, grep"), "{refused}");
    let results = results(&parent[1]);
    assert_eq!(results[0].1, "I may only read.");
    assert_eq!(results[1].1, "Unknown agent `nobody`. Known agents: reader. Omit `agent` for a general sub-agent.");
    assert!(env.mock.requests_with("CHILD-U").is_empty());
    assert!(agent.stderr().contains("bad.md"), "the skipped file is named in a warning");
}

#[tokio::test]
async fn a_named_agents_tool_list_matches_mcp_tool_names_without_case() {
    let env = TestEnv::new().await;
    env.write_config(&format!("[mcp_servers.Fx]\ncommand = \"{}\"\n", crate::mcp::fixture_exe().display()));
    write_agent(&env, "echo.md", "---\nname: echoer\ndescription: Echoes\ntools: read, mcp__Fx__echo\n---\n");
    let mut named = task("t1", "echo it", "CHILD-E");
    named.2["agent"] = json!("echoer");
    env.mock.push(calls(&[named])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-E", Reply::text(&["echoed"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let child = env.mock.requests_with("CHILD-E");
    assert_eq!(tool_names(&child[0]), ["read", "mcp__Fx__echo"]);
}

#[tokio::test]
async fn a_childs_permission_question_names_the_child_and_follows_the_parents_mode() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "make notes", "CHILD-W")])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-W", Reply::tool_calls(&[("k1", "write", json!({"path": "n.txt", "content": "x"}))]));
    env.mock.route("CHILD-W", Reply::text(&["written"]));
    env.mock.push(calls(&[task("t2", "more notes", "CHILD-RO")])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-RO", Reply::tool_calls(&[("k2", "write", json!({"path": "m.txt", "content": "x"}))]));
    env.mock.route("CHILD-RO", Reply::text(&["refused"]));
    let editor = Editor::default();
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "PARENT one").await;
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["params"]["sessionId"], session.as_str(), "asked in the user's session");
    let title = asked[0]["params"]["toolCall"]["title"].as_str().unwrap();
    assert!(title.starts_with("Sub-agent: make notes › "), "{title}");
    let id = asked[0]["params"]["toolCall"]["toolCallId"].as_str().unwrap();
    assert_eq!(id, "t1", "asked on the card the editor knows: the task call's");
    let shown = asked[0]["params"]["toolCall"]["content"].to_string();
    assert!(shown.contains("n.txt"), "what the child's call would do: {shown}");
    assert!(env.workspace().join("n.txt").exists());

    set_mode(&mut agent, &session, "read-only").await;
    turn(&mut agent, &session, "PARENT two").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1, "read-only refuses without asking");
    assert!(!env.workspace().join("m.txt").exists());
    assert!(results(&env.mock.requests_with("CHILD-RO")[1])[0].1.contains("Permission denied"));
}

#[tokio::test]
async fn a_childs_usage_and_cost_count_toward_the_parent() {
    let env = TestEnv::new().await;
    env.write_config(
        "[models.\"openai/mock-model\"]\ninput_price = 1000.0\noutput_price = 2000.0\ncache_read_price = 500.0\n",
    );
    env.mock.push(calls(&[task("t1", "x", "CHILD-C")])).push(Reply::text(&["ok"]));
    env.mock.route("CHILD-C", Reply::text(&["child"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, shown) = turn(&mut agent, &session, "PARENT").await;
    // Each step costs 10 × 1000 + 2 × 500 + 5 × 2000 per million = 0.021 USD.
    let last = shown.iter().rev().find(|u| u["sessionUpdate"] == "usage_update").unwrap();
    assert!((last["cost"]["amount"].as_f64().unwrap() - 0.063).abs() < 1e-9, "{last}");
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let row = |id: &str| -> (i64, f64) {
        db.query_row("SELECT total_tokens, cost_usd FROM sessions WHERE id = ?1", [id], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
    };
    let child: String = db.query_row("SELECT id FROM sessions WHERE parent_id = ?1", [&session], |r| r.get(0)).unwrap();
    let (tokens, cost) = row(&child);
    assert_eq!(tokens, 17);
    assert!((cost - 0.021).abs() < 1e-9);
    let (tokens, cost) = row(&session);
    assert_eq!(tokens, 51, "two steps of its own and one of the child");
    assert!((cost - 0.063).abs() < 1e-9, "{cost}");
    let (_, status) = turn(&mut agent, &session, "/status").await;
    let text: String = status
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap())
        .collect();
    assert!(text.contains("$0.0630"), "{text}");
}

#[tokio::test]
async fn kill_9_mid_task_finalizes_the_call_and_keeps_the_childs_rows() {
    let env = TestEnv::new().await;
    env.mock.push(calls(&[task("t1", "sleepy", "CHILD-K")]));
    env.mock.route("CHILD-K", Reply::tool_calls(&[("k1", "bash", json!({"command": "sleep 30"}))]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    agent.prompt(&session, "PARENT").await;
    let db = env.database();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let running: i64 = rusqlite::Connection::open(&db)
            .unwrap()
            .query_row("SELECT count(*) FROM parts WHERE tool_call_id = 'k1' AND tool_state = 'running'", [], |r| {
                r.get(0)
            })
            .unwrap();
        if running == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the child's command did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.kill9().await;

    let mut agent = env.ready().await;
    let load = |id: String| json!({"sessionId": id, "cwd": env.cwd(), "mcpServers": []});
    let id = agent.request("session/load", load(session.clone())).await;
    let (_, replay) = agent.response(id).await;
    let replay: Vec<Value> = updates(&replay, &session).into_iter().cloned().collect();
    let card = call(&replay, "t1");
    assert_eq!(card[0]["status"], "failed");
    assert!(last_text(card[0]).contains("Interrupted by a restart"), "{}", card[0]);

    let all = list(&mut agent, Some(json!({"cairn": {"subagents": true}}))).await;
    let child = all.iter().find(|s| s["_meta"]["cairn"]["parentId"] == session.as_str()).unwrap();
    let child = child["sessionId"].as_str().unwrap().to_owned();
    let id = agent.request("session/load", load(child.clone())).await;
    let (_, replay) = agent.response(id).await;
    let replay: Vec<Value> = updates(&replay, &child).into_iter().cloned().collect();
    assert!(
        replay.iter().any(|u| u["sessionUpdate"] == "user_message_chunk" && u["content"]["text"] == "CHILD-K"),
        "the child's prompt is kept"
    );
    let own = call(&replay, "k1");
    assert_eq!(own[0]["status"], "failed", "the child's own orphan call is finalized too");
    assert!(last_text(own[0]).contains("Interrupted by a restart"));
}

/// `[subagents] max_total` bounds every sub-agent one prompt starts, nested ones included (a
/// child's children count against the same total); a task past it is refused, saying the limit
/// and its setting, and the next prompt starts afresh.
#[tokio::test]
async fn one_prompt_starts_at_most_max_total_sub_agents_at_every_depth() {
    let env = TestEnv::new().await;
    env.write_config("[subagents]\nmax_total = 3\n");
    env.mock.push(calls(&[task("t1", "fan out", "CHILD-FAN")])).push(Reply::text(&["parent done"]));
    let fan: Vec<_> = (1..=3).map(|n| task(&format!("g{n}"), &format!("part {n}"), &format!("GRAND-{n}"))).collect();
    env.mock.route("CHILD-FAN", calls(&fan)).route("CHILD-FAN", Reply::text(&["fanned out"]));
    for n in 1..=3 {
        env.mock.route(&format!("GRAND-{n}"), Reply::text(&[&format!("grand {n}")]));
    }
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let grandchildren: usize = (1..=3).map(|n| env.mock.requests_with(&format!("GRAND-{n}")).len()).sum();
    assert_eq!(grandchildren, 2, "the child and two grandchildren make three");
    let results = results(&env.mock.requests_with("CHILD-FAN")[1]);
    let refused: Vec<&String> = results.iter().map(|(_, text)| text).filter(|t| t.contains("max_total")).collect();
    assert_eq!(refused.len(), 1, "{results:?}");
    assert!(refused[0].contains("[subagents] max_total") && refused[0].contains('3'), "{}", refused[0]);

    env.mock.push(calls(&[task("t2", "again", "CHILD-AGAIN")])).push(Reply::text(&["again done"]));
    env.mock.route("CHILD-AGAIN", Reply::text(&["ran"]));
    turn(&mut agent, &session, "next").await;
    assert_eq!(env.mock.requests_with("CHILD-AGAIN").len(), 1, "a new prompt has a new total");
}

/// A child that a limit stops says which limit, so the parent (and the user) know why.
#[tokio::test]
async fn a_child_stopped_by_a_limit_says_which() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nconsecutive_errors = 2\n");
    env.mock.push(calls(&[task("t1", "fail twice", "CHILD-ERRS")])).push(Reply::text(&["noted"]));
    let failing = [("k1", "read", json!({"path": "missing-1.txt"})), ("k2", "read", json!({"path": "missing-2.txt"}))];
    env.mock.route("CHILD-ERRS", Reply::tool_calls(&failing));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let result = &results(&env.mock.requests_with("PARENT")[1])[0].1;
    assert!(result.contains("[limits] consecutive_errors"), "{result}");
    assert!(!result.contains("no reason was given"), "{result}");
}

//! MCP servers as an editor uses them: passed in `session/new`, `load`, `resume` or configured in
//! `config.toml`, their tools offered to the model and run through a prompt, under the
//! permissions, cancellable, visible when they fail, replayed by `session/load`.

use std::time::Duration;

use serde_json::{Value, json};

use super::fixture_exe;
use crate::support::{Agent, Editor, Reply, TestEnv};
use crate::tools::{call, set_mode, tool_results, turn};

/// The fixture as an editor passes it in `mcpServers`.
fn stdio(name: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let env: Vec<Value> = env.iter().map(|(name, value)| json!({"name": name, "value": value})).collect();
    json!({"name": name, "command": fixture_exe(), "args": args, "env": env})
}

async fn new_session_with(agent: &mut Agent, env: &TestEnv, servers: Value) -> String {
    let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": servers})).await;
    result["sessionId"].as_str().unwrap().to_owned()
}

/// The names of the tools the model was offered in its n-th request.
fn offered(env: &TestEnv, request: usize) -> Vec<String> {
    env.mock.requests()[request]["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_owned()).collect())
        .unwrap_or_default()
}

/// Reads updates until, for each needle, one for `session` whose text contains it; returns them.
async fn notices_containing(agent: &mut Agent, session: &str, needles: &[&str]) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut found: Vec<Option<String>> = vec![None; needles.len()];
    while found.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let message = agent.try_recv(left).await.unwrap_or_else(|| panic!("notices missing: {needles:?} {found:?}"));
        if message["params"]["sessionId"] != session {
            continue;
        }
        let update = &message["params"]["update"];
        let text = update["content"]["text"].as_str().or_else(|| update["message"].as_str()).unwrap_or_default();
        for (needle, slot) in needles.iter().zip(&mut found) {
            if slot.is_none() && text.contains(needle) {
                *slot = Some(text.to_owned());
            }
        }
    }
    found.into_iter().flatten().collect()
}

#[tokio::test]
async fn an_editor_servers_tools_are_offered_called_shown_and_replayed() {
    let env = TestEnv::new().await;
    env.mock
        .push(Reply::tool_calls(&[("c1", "mcp__fx__picture", json!({}))]))
        .push(Reply::tool_calls(&[("c2", "mcp__fx__fail", json!({"text": "x"}))]))
        .push(Reply::text(&["Done."]));
    let editor = Editor::default();
    editor.answer(&["allow_once", "allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = new_session_with(&mut agent, &env, json!([stdio("fx", &[], &[])])).await;
    let (response, updates) = turn(&mut agent, &session, "show me").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");

    let tools = offered(&env, 0);
    for name in ["read", "bash", "mcp__fx__echo", "mcp__fx__picture", "mcp__fx__peek"] {
        assert!(tools.iter().any(|t| t == name), "{name} in {tools:?}");
    }
    assert!(!tools.iter().any(|t| t.contains("bad_schema")), "a tool with an unusable schema is left out");
    let requests = env.mock.requests();
    let echo = &requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__fx__echo")
        .unwrap()["function"];
    assert_eq!(echo["description"], "the echo tool");
    assert_eq!(echo["parameters"]["properties"]["text"]["type"], "string");

    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 2, "each call to a tool of another program asks");
    let why = asked[0]["params"]["toolCall"]["content"].to_string();
    assert!(why.contains("the MCP server `fx`"), "{why}");

    let picture = call(&updates, "c1");
    let done = picture.last().unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["content"][1]["content"]["type"], "image", "{done}");
    assert_eq!(done["content"][1]["content"]["mimeType"], "image/png");
    let result = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(result.starts_with("a red dot\n[image (image/png"), "{result}");

    let failed = call(&updates, "c2");
    assert_eq!(failed.last().unwrap()["status"], "failed");
    assert!(tool_results(&env, 2)[1]["content"].as_str().unwrap().contains("it failed on purpose"));

    // Loaded again, the calls come back as they were shown.
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (loaded, replay) = agent.response(id).await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replay: Vec<Value> = crate::support::updates(&replay, &session).into_iter().cloned().collect();
    let replayed = call(&replay, "c1");
    assert_eq!(replayed.last().unwrap()["status"], "completed");
    assert_eq!(replayed.last().unwrap()["content"][1]["content"]["type"], "image");
    assert_eq!(call(&replay, "c2").last().unwrap()["status"], "failed");
}

#[tokio::test]
async fn modes_and_answers_decide_mcp_calls_and_read_only_tools_run_in_accept_edits() {
    let env = TestEnv::new().await;
    env.mock
        .push(Reply::tool_calls(&[("c1", "mcp__fx__peek", json!({"text": "a"}))]))
        .push(Reply::tool_calls(&[("c2", "mcp__fx__echo", json!({"text": "b"}))]))
        .push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = new_session_with(&mut agent, &env, json!([stdio("fx", &[], &[])])).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    let (_, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "completed", "read-only by annotation: no question");
    assert_eq!(call(&updates, "c2").last().unwrap()["status"], "failed", "rejected when asked");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1);
    let results = tool_results(&env, 2);
    assert_eq!(results[0]["content"], "echo: a");
    assert!(results[1]["content"].as_str().unwrap().starts_with("The user denied this tool call."));

    // Read-only mode refuses what is not read-only, without asking.
    env.mock.push(Reply::tool_calls(&[("c3", "mcp__fx__echo", json!({}))])).push(Reply::text(&["ok"]));
    set_mode(&mut agent, &session, "read-only").await;
    let (_, updates) = turn(&mut agent, &session, "again").await;
    assert_eq!(call(&updates, "c3").last().unwrap()["status"], "failed");
    assert!(tool_results(&env, 4).last().unwrap()["content"].as_str().unwrap().contains("read-only mode"));

    // Plan mode refuses it too, telling the model it is planning, even where the user would allow it.
    env.mock.push(Reply::tool_calls(&[("c4", "mcp__fx__echo", json!({"text": "write"}))])).push(Reply::text(&["ok"]));
    agent.editor.answer(&["allow_once"]);
    set_mode(&mut agent, &session, "plan").await;
    let (_, updates) = turn(&mut agent, &session, "and now").await;
    assert_eq!(call(&updates, "c4").last().unwrap()["status"], "failed");
    let said = tool_results(&env, 6).last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(said.contains("the session is in plan mode") && said.contains("`exit_plan`"), "{said}");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1, "nothing more was asked");
}

#[tokio::test]
async fn cancel_reaches_the_server_as_notifications_cancelled() {
    let env = TestEnv::new().await;
    let log = env.workspace().join("cancelled.log");
    env.mock.push(Reply::tool_calls(&[("c1", "mcp__fx__slow", json!({}))]));
    let mut agent = env.ready().await;
    let log_path = log.to_string_lossy().into_owned();
    let called = env.workspace().join("called.log");
    let called_path = called.to_string_lossy().into_owned();
    let server = stdio("fx", &[], &[("MCP_FIXTURE_CANCEL_LOG", &log_path), ("MCP_FIXTURE_CALL_LOG", &called_path)]);
    let session = new_session_with(&mut agent, &env, json!([server])).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "wait").await;
    loop {
        let message = agent.recv().await;
        if message["params"]["update"]["status"] == "in_progress" {
            break;
        }
    }
    // The card shows the call before it is sent: cancel once the server has it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !called.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, updates) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let updates: Vec<Value> = crate::support::updates(&updates, &session).into_iter().cloned().collect();
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "failed");
    // The fixture creates the log, then writes its line: wait for a whole line, not the file.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let heard = || std::fs::read_to_string(&log).unwrap_or_default();
    while !heard().ends_with('\n') && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let logged = heard();
    assert_eq!(logged.lines().count(), 1, "the server heard of the cancel once: {logged:?}");
}

#[tokio::test]
async fn a_server_that_fails_is_told_after_the_session_is_announced_and_listed_by_slash_mcp() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let servers = json!([
        stdio("broken", &["exit-at-start"], &[]),
        {"name": "ghost", "command": "/nonexistent/mcp-server", "args": [], "env": []},
        {"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []},
        stdio("fx", &[], &[]),
    ]);
    let id = agent.request("session/new", json!({"cwd": env.cwd(), "mcpServers": servers})).await;
    let (response, before) = agent.response(id).await;
    let session = response["result"]["sessionId"].as_str().unwrap().to_owned();
    assert!(
        before.iter().all(|m| m["params"]["sessionId"] != session.as_str()),
        "nothing about the session before its response: {before:?}"
    );
    let told = notices_containing(&mut agent, &session, &["`broken`", "`ghost`", "`old`"]).await;
    assert!(told[0].contains("cannot open the database"), "the notice carries its stderr: {}", told[0]);
    assert!(told[2].contains("SSE"), "{}", told[2]);

    let mut text = String::new();
    for _ in 0..200 {
        let (_, updates) = turn(&mut agent, &session, "/mcp").await;
        text = crate::support::text_of(&updates.iter().collect::<Vec<_>>(), "agent_message_chunk");
        if !text.contains("starting") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(text.contains("broken (stdio): failed"), "{text}");
    assert!(text.contains("cannot open the database"), "{text}");
    assert!(text.contains("ghost (stdio): failed"), "{text}");
    assert!(text.contains("fx (stdio): ready"), "{text}");
    assert!(text.contains("mcp__fx__echo"), "{text}");
    assert!(!text.contains("old"), "an SSE server is not started: {text}");
    let (_, updates) = turn(&mut agent, &session, "/status").await;
    let text = crate::support::text_of(&updates.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(text.contains("MCP: 3 servers, 1 ready, 0 starting, 2 failed"), "{text}");
}

#[tokio::test]
async fn configured_and_http_servers_serve_every_session_and_headless_runs() {
    let env = TestEnv::new().await;
    let url = super::http::serve().await;
    env.write_config(&format!(
        "[mcp_servers.local]\ncommand = \"{}\"\n\n[mcp_servers.off]\ncommand = \"/nonexistent\"\nenabled = false\n",
        fixture_exe().display()
    ));
    env.mock
        .push(Reply::tool_calls(&[
            ("c1", "mcp__local__echo", json!({"text": "one"})),
            ("c2", "mcp__web__echo", json!({"text": "two"})),
        ]))
        .push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session =
        new_session_with(&mut agent, &env, json!([{"type": "http", "name": "web", "url": url, "headers": []}])).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (response, _) = turn(&mut agent, &session, "both").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let results: Vec<Value> = tool_results(&env, 1).iter().map(|r| r["content"].clone()).collect();
    assert_eq!(results, [json!("echo: one"), json!("echo: two")]);
    assert!(!offered(&env, 0).iter().any(|t| t.starts_with("mcp__off__")));
}

/// The fixture's pid and the pid of the `sleep` it left in its process group, through a prompt.
async fn server_pids(agent: &mut Agent, env: &TestEnv, session: &str, call: &str) -> (String, String) {
    env.mock.push(Reply::tool_calls(&[(call, "mcp__fx__about", json!({}))])).push(Reply::text(&["ok"]));
    let before = env.mock.requests().len();
    let (response, _) = turn(agent, session, "who are you").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let results = tool_results(env, before + 1);
    let about: Value = serde_json::from_str(results.last().unwrap()["content"].as_str().unwrap()).unwrap();
    // The server may run in a PID namespace of its own: its pids are translated.
    let pidns = about["pidns"].as_str().unwrap();
    let (pid, sleeper) = (outer_pid(&about["pid"], pidns), outer_pid(&about["sleeper"], pidns));
    assert!(crate::support::alive(&pid) && crate::support::alive(&sleeper), "{about}");
    (pid, sleeper)
}

/// The pid, as this test sees it, of the process known as `inner` in the PID namespace `pidns`.
fn outer_pid(inner: &Value, pidns: &str) -> String {
    let inner = inner.to_string();
    let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|entry| {
        let pid = entry.file_name().to_str()?.to_owned();
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ids = status.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
        (ns.to_str() == Some(pidns) && ids.split_whitespace().last() == Some(inner.as_str())).then_some(pid)
    });
    found.unwrap_or_else(|| panic!("no process {inner} in {pidns}"))
}

async fn gone(pids: &[&str]) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|pid| crate::support::alive(pid)) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn each_session_has_its_own_servers_and_closing_or_exiting_stops_them_whole() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let first = new_session_with(&mut agent, &env, json!([stdio("fx", &[], &[])])).await;
    let second = new_session_with(&mut agent, &env, json!([stdio("fx", &[], &[])])).await;
    for session in [&first, &second] {
        set_mode(&mut agent, session, "bypass").await;
    }
    let (server, sleeper) = server_pids(&mut agent, &env, &first, "c1").await;
    let (other, other_sleeper) = server_pids(&mut agent, &env, &second, "c2").await;
    assert_ne!(server, other, "the same configuration in two sessions is two processes");

    agent.call("session/close", json!({"sessionId": first})).await;
    assert!(gone(&[&server, &sleeper]).await, "closing a session kills its server's process group");
    assert!(crate::support::alive(&other), "the other session's server runs on");

    agent.close_stdin();
    agent.wait_exit().await;
    assert!(gone(&[&other, &other_sleeper]).await, "exiting kills every server's process group");
}

#[tokio::test]
async fn a_prompt_right_behind_session_resume_gets_the_servers_the_resume_passed() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.call("session/close", json!({"sessionId": session})).await;
    // Both lines in one write, before any answer: the resume is applied first, in wire order,
    // so the prompt's turn has the servers it passed (not none, replaced under it).
    let resume = json!({"jsonrpc": "2.0", "id": 900, "method": "session/resume",
        "params": {"sessionId": session, "cwd": env.cwd(), "mcpServers": [stdio("fx", &[], &[])]}});
    let prompt = json!({"jsonrpc": "2.0", "id": 901, "method": "session/prompt",
        "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}});
    agent.send_raw(&format!("{resume}\n{prompt}")).await;
    let (responses, _) = agent.responses(&[900, 901]).await;
    assert!(responses[0]["result"].is_object(), "{}", responses[0]);
    assert_eq!(responses[1]["result"]["stopReason"], "end_turn", "{}", responses[1]);
    let tools = offered(&env, 0);
    assert!(tools.iter().any(|t| t == "mcp__fx__echo"), "{tools:?}");
}

#[tokio::test]
async fn a_remembered_rule_for_a_servers_tools_by_glob_runs_them_without_asking() {
    let env = TestEnv::new().await;
    {
        // A rule remembered for the project, as "always allow" answers store them.
        std::fs::create_dir_all(env.home()).unwrap();
        let store = cairn::store::Store::open(&env.database()).unwrap();
        let rule = cairn::permissions::Rule::new(
            cairn::permissions::Permission::Tool,
            "mcp__fx__*",
            cairn::permissions::Action::Allow,
            cairn::permissions::Scope::Project,
        );
        store.commit(cairn::store::Write::AddProjectRule { project: env.cwd(), rule }).await.unwrap();
        store.shutdown().await;
    }
    env.mock
        .push(Reply::tool_calls(&[
            ("c1", "mcp__fx__echo", json!({"text": "a"})),
            ("c2", "mcp__gx__echo", json!({"text": "b"})),
        ]))
        .push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = new_session_with(&mut agent, &env, json!([stdio("fx", &[], &[]), stdio("gx", &[], &[])])).await;
    let (_, updates) = turn(&mut agent, &session, "both").await;
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "completed", "covered by mcp__fx__*");
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1, "another server's tool still asks");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "c2");
    let (_, updates) = turn(&mut agent, &session, "/permissions").await;
    let text = crate::support::text_of(&updates.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(text.contains("allow tools matching `mcp__fx__*` (this project)"), "{text}");
}

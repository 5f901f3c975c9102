//! Permissions and cancellation around tools: asking, remembering, modes, the workspace boundary,
//! cancels that reach permission questions and process trees, and calls cut off by a crash.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, alive, running_with, updates};
use crate::tools::{call, set_mode, tool_results, turn};

fn write(id: &str, path: &str) -> Reply {
    Reply::tool_calls(&[(id, "write", json!({"path": path, "content": "x\n"}))])
}

fn asked(agent: &Agent) -> usize {
    agent.editor.requests("session/request_permission").len()
}

async fn load(agent: &mut Agent, env: &TestEnv, session: &str) -> Vec<Value> {
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, replay) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    updates(&replay, session).into_iter().cloned().collect()
}

#[tokio::test]
async fn a_rejection_reaches_the_model_and_the_turn_goes_on() {
    let env = TestEnv::new().await;
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Understood."]));
    let editor = Editor::default();
    editor.answer(&["reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "write a.txt").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(!env.workspace().join("a.txt").exists());
    assert!(tool_results(&env, 1)[0]["content"].as_str().unwrap().starts_with("The user denied this tool call."));
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "failed");
}

#[tokio::test]
async fn always_answers_are_remembered_per_session_and_per_project_across_restarts() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    editor.answer(&["allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let first = agent.new_session(&env.cwd()).await;
    env.mock.push(write("c1", "one.txt")).push(Reply::text(&["ok"]));
    env.mock.push(write("c2", "two.txt")).push(Reply::text(&["ok"]));
    turn(&mut agent, &first, "one").await;
    turn(&mut agent, &first, "two").await;
    assert_eq!(asked(&agent), 1, "allowed for the session after the first answer");
    assert!(env.workspace().join("two.txt").exists());
    agent.close_stdin();
    agent.wait_exit().await;

    // A new process remembers the session's rule; another session in the same project asks, and
    // with `remember = "project"` its one "always" keeps the rule for the project.
    env.write_config("[permissions]\nremember = \"project\"\n");
    let editor = Editor::default();
    editor.answer(&["allow_project"]);
    let mut agent = env.ready_with(editor).await;
    load(&mut agent, &env, &first).await;
    env.mock.push(write("c3", "three.txt")).push(Reply::text(&["ok"]));
    turn(&mut agent, &first, "three").await;
    assert_eq!(asked(&agent), 0);
    let second = agent.new_session(&env.cwd()).await;
    env.mock.push(write("c4", "four.txt")).push(Reply::text(&["ok"]));
    turn(&mut agent, &second, "four").await;
    assert_eq!(asked(&agent), 1, "session rules stay with their session");
    let (ids, names) = options(&agent)[0].clone();
    assert_eq!(ids, ["allow_once", "allow_project", "reject_once", "reject_always"], "one always, the project's");
    assert_eq!(names[1], "Always allow edits in the workspace in this project");
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready_with(Editor::default()).await;
    let third = agent.new_session(&env.cwd()).await;
    env.mock.push(write("c5", "five.txt")).push(Reply::text(&["ok"]));
    let (response, _) = turn(&mut agent, &third, "five").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(env.workspace().join("five.txt").exists(), "the project rule covers every session in the project");
}

/// Each permission question's option ids and names, in order.
fn options(agent: &Agent) -> Vec<(Vec<String>, Vec<String>)> {
    let field = |options: &Value, name: &str| -> Vec<String> {
        options.as_array().unwrap().iter().map(|o| o[name].as_str().unwrap().to_owned()).collect()
    };
    let asked = agent.editor.requests("session/request_permission");
    asked.iter().map(|r| (field(&r["params"]["options"], "optionId"), field(&r["params"]["options"], "name"))).collect()
}

#[tokio::test]
async fn one_always_is_offered_and_the_question_says_what_it_remembers() {
    let env = TestEnv::new().await;
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "write a.txt").await;
    let (ids, names) = options(&agent)[0].clone();
    assert_eq!(ids, ["allow_once", "allow_session", "reject_once", "reject_always"]);
    assert_eq!(names[1], "Always allow edits in the workspace in this session");
    let kinds: Vec<String> = agent.editor.requests("session/request_permission")[0]["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds.iter().filter(|kind| *kind == "allow_always").count(), 1, "{kinds:?}");
    // A client that shows options by kind ("Always accept") still tells the user what it means.
    let card = &agent.editor.requests("session/request_permission")[0]["params"]["toolCall"];
    let said = card["content"].as_array().unwrap().last().unwrap()["content"]["text"].as_str().unwrap().to_owned();
    assert!(said.starts_with("cairn asks because"), "{said}");
    assert!(said.contains("\"Always allow\" means: always allow edits in the workspace in this session."), "{said}");
    assert!(said.contains("`/permissions project <n>`"), "{said}");
    assert!(env.workspace().join("a.txt").exists());
}

#[tokio::test]
async fn an_always_the_question_did_not_offer_is_a_rejection_and_stores_no_rule() {
    let env = TestEnv::new().await;
    for (id, path) in [("c1", "one.txt"), ("c2", "two.txt"), ("c3", "three.txt"), ("c4", "four.txt")] {
        env.mock.push(write(id, path)).push(Reply::text(&["ok"]));
    }
    let editor = Editor::default();
    // The project's always, which only `remember = "project"` offers (and old clients' id for
    // it); ids never offered; then the session's always, which is offered.
    editor.answer(&["allow_project", "allow_always", "yes", "allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    for prompt in ["one", "two", "three", "four"] {
        turn(&mut agent, &session, prompt).await;
    }
    assert_eq!(asked(&agent), 4, "no answer before the last one remembered anything");
    for (n, path) in ["one.txt", "two.txt", "three.txt"].into_iter().enumerate() {
        assert!(!env.workspace().join(path).exists(), "{path}");
        let told = tool_results(&env, 2 * n + 1)[0]["content"].as_str().unwrap().to_owned();
        assert!(told.starts_with("The user denied this tool call."), "{path}: {told}");
    }
    assert!(env.workspace().join("four.txt").exists());
    let (_, shown) = turn(&mut agent, &session, "/permissions").await;
    let listed = crate::support::text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(listed.contains("1. allow edits in the workspace (this session)"), "{listed}");
    assert!(!listed.contains("(this project)") && !listed.contains("\n2."), "no project rule was stored: {listed}");

    // Another session of the project still asks: nothing was kept for the project.
    env.mock.push(write("c5", "five.txt")).push(Reply::text(&["ok"]));
    agent.editor.answer(&["reject_once"]);
    let other = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &other, "five").await;
    assert_eq!(asked(&agent), 5);
    assert!(!env.workspace().join("five.txt").exists());
}

#[tokio::test]
async fn with_project_rules_the_sessions_always_is_not_offered_and_is_refused() {
    let env = TestEnv::new().await;
    env.write_config("[permissions]\nremember = \"project\"\n");
    env.mock.push(write("c1", "one.txt")).push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "one").await;
    assert_eq!(options(&agent)[0].0, ["allow_once", "allow_project", "reject_once", "reject_always"]);
    assert!(!env.workspace().join("one.txt").exists(), "an always of the other scope is a rejection");
    let said = agent.editor.requests("session/request_permission")[0]["params"]["toolCall"]["content"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(said.contains("always allow edits in the workspace in this project, in every session"), "{said}");
}

#[tokio::test]
async fn outside_the_workspace_and_through_symlinks_it_always_asks() {
    let env = TestEnv::new().await;
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace().join("link")).unwrap();
    std::fs::write(env.workspace().join("inside.txt"), "fine\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "inside.txt"})),
        ("c2", "read", json!({"path": "link/secret.txt"})),
        ("c3", "write", json!({"path": "../outside/new.txt", "content": "x"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    turn(&mut agent, &session, "go").await;
    let questions: Vec<String> = agent
        .editor
        .requests("session/request_permission")
        .iter()
        .map(|r| r["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(questions, ["c2", "c3"], "accept-edits still asks outside the workspace");
    assert!(!outside.join("new.txt").exists());
    assert_eq!(tool_results(&env, 1)[0]["content"], "     1\tfine\n");
}

#[tokio::test]
async fn read_only_mode_refuses_edits_and_commands_without_asking() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "a\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "a.txt"})),
        ("c2", "edit", json!({"path": "a.txt", "old_string": "a", "new_string": "b"})),
        ("c3", "bash", json!({"command": "touch made.txt"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.request("session/set_mode", json!({"sessionId": session, "modeId": "read-only"})).await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(response["result"], json!({}));
    let changed = updates(&notifications, &session);
    let option = &changed.iter().find(|u| u["sessionUpdate"] == "config_option_update").unwrap()["configOptions"][1];
    assert_eq!((option["id"].as_str(), option["currentValue"].as_str()), (Some("mode"), Some("read-only")));
    turn(&mut agent, &session, "go").await;
    let results = tool_results(&env, 1);
    assert_eq!(results[0]["content"], "     1\ta\n");
    for refused in &results[1..] {
        assert!(refused["content"].as_str().unwrap().contains("read-only mode"), "{refused}");
    }
    assert_eq!(asked(&agent), 0);
    assert_eq!(std::fs::read_to_string(env.workspace().join("a.txt")).unwrap(), "a\n");
    assert!(!env.workspace().join("made.txt").exists());

    // The mode is also a config option, and it is stored with the session.
    let changed = agent
        .call("session/set_config_option", json!({"sessionId": session, "configId": "mode", "value": "bypass"}))
        .await;
    assert_eq!(changed["configOptions"][1]["currentValue"], "bypass");
    let resumed = agent.call("session/resume", json!({"sessionId": session, "cwd": env.cwd()})).await;
    assert_eq!(resumed["modes"]["currentModeId"], "bypass");
}

#[tokio::test]
async fn cancel_kills_the_whole_process_tree_of_a_running_command() {
    let env = TestEnv::new().await;
    let pid_file = env.workspace().join("pid");
    // The background sleep's arguments are its name: the command's own pids are not the test's.
    let command = format!("sleep 4217 & echo started > {}; sleep 60", pid_file.display());
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "go").await;
    while !pid_file.exists() || std::fs::read_to_string(&pid_file).unwrap().trim().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let background = loop {
        let found = running_with(&["sleep", "4217"]);
        if !found.is_empty() || started.elapsed() > Duration::from_secs(10) {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(background.len(), 1, "the background sleep runs: {background:?}");
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, notifications) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!alive(&background[0]), "the background sleep is gone 100 ms after the answer");
    let shown = updates(&notifications, &session);
    let last = shown.iter().rev().find(|u| u["toolCallId"] == "c1").unwrap();
    assert_eq!(last["status"], "failed");
}

#[tokio::test]
async fn cancel_withdraws_a_pending_permission_question() {
    let env = TestEnv::new().await;
    env.mock.push(write("c1", "a.txt"));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "go").await;
    let question = loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let mut withdrawn = false;
    let mut answered = false;
    while !(withdrawn && answered) {
        let message = agent.recv().await;
        if message["method"] == "$/cancel_request" {
            assert_eq!(message["params"]["requestId"], question["id"]);
            withdrawn = true;
        }
        if message["id"] == prompt && message.get("method").is_none() {
            assert_eq!(message["result"]["stopReason"], "cancelled");
            answered = true;
        }
    }
    // The client may still answer; the agent ignores it.
    agent.respond(&question["id"], json!({"outcome": {"outcome": "cancelled"}})).await;
    assert!(!env.workspace().join("a.txt").exists());
}

#[tokio::test]
async fn contiguous_reads_run_concurrently() {
    let env = TestEnv::new().await;
    for name in ["a", "b", "c"] {
        std::fs::write(env.workspace().join(name), name).unwrap();
    }
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "a"})),
        ("c2", "read", json!({"path": "b"})),
        ("c3", "read", json!({"path": "c"})),
    ]));
    env.mock.push(Reply::text(&["read"]));
    let mut editor = Editor::with_fs();
    editor.read_delay = Duration::from_millis(200);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "go").await;
    assert_eq!(agent.editor.max_concurrent_reads.load(std::sync::atomic::Ordering::SeqCst), 3);
    let order: Vec<Value> = tool_results(&env, 1).iter().map(|m| m["tool_call_id"].clone()).collect();
    assert_eq!(order, [json!("c1"), json!("c2"), json!("c3")], "results go back in call order");
}

#[tokio::test]
async fn a_call_cut_off_by_a_crash_is_finalized_and_never_run_again() {
    let env = TestEnv::new().await;
    let marker = env.workspace().join("runs");
    let command = format!("echo run >> {}; sleep 5", marker.display());
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    agent.prompt(&session, "go").await;
    loop {
        let message = agent.recv().await;
        if message["params"]["update"]["status"] == "in_progress" {
            break;
        }
    }
    // Killed while the command runs (it has started once its line is written: `>>` makes the
    // file before `echo` writes to it, so the line is waited for, not the file).
    let written = || std::fs::read_to_string(&marker).is_ok_and(|text| !text.is_empty());
    let started = std::time::Instant::now();
    while !written() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.kill9().await;

    let mut agent = env.ready().await;
    let replay = load(&mut agent, &env, &session).await;
    let shown = call(&replay, "c1");
    assert_eq!(shown[0]["status"], "failed");
    assert!(shown[0]["content"][0]["content"]["text"].as_str().unwrap().contains("Interrupted by a restart"));
    env.mock.push(Reply::text(&["I see it was interrupted."]));
    let (response, _) = turn(&mut agent, &session, "what happened?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(tool_results(&env, 1)[0]["content"].as_str().unwrap().contains("Interrupted by a restart"));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "run\n", "the command ran once");
}

#[tokio::test]
async fn cancel_kills_and_releases_an_editor_terminal() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "sleep 60"}))]));
    let mut agent = env.ready_with(Editor::with_terminal()).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "go").await;
    while agent.editor.requests("terminal/wait_for_exit").is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let methods = agent.editor.methods();
    let tail: Vec<&str> = methods.iter().rev().take(3).rev().map(String::as_str).collect();
    assert_eq!(tail, ["terminal/kill", "terminal/output", "terminal/release"], "{methods:?}");
}

/// `additionalDirectories` widen the workspace, and only by themselves: a write into one needs
/// no question in accept-edits, a link planted in it that leads out is judged where it leads,
/// a directory the client did not name stays outside, and a bad one is refused up front.
#[tokio::test]
async fn additional_directories_widen_the_workspace_and_nothing_more() {
    let env = TestEnv::new().await;
    let base = env.workspace().parent().unwrap().to_path_buf();
    let (shared, elsewhere) = (base.join("shared"), base.join("elsewhere"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, shared.join("exit")).unwrap();
    let path = |dir: &std::path::Path, name: &str| dir.join(name).to_string_lossy().into_owned();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "write", json!({"path": path(&shared, "made.txt"), "content": "in"})),
        ("c2", "write", json!({"path": path(&shared, "exit/escaped.txt"), "content": "out"})),
        ("c3", "write", json!({"path": path(&elsewhere, "direct.txt"), "content": "out"})),
        ("c4", "write", json!({"path": path(&shared, "../elsewhere/dotdot.txt"), "content": "out"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["reject_once", "reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let capabilities = agent.call("initialize", json!({"protocolVersion": 1})).await;
    assert_eq!(capabilities["agentCapabilities"]["sessionCapabilities"]["additionalDirectories"], json!({}));
    let created = agent
        .call(
            "session/new",
            json!({"cwd": env.cwd(), "mcpServers": [], "additionalDirectories": [shared.to_string_lossy()]}),
        )
        .await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    set_mode(&mut agent, &session, "accept-edits").await;
    turn(&mut agent, &session, "go").await;
    let questions: Vec<String> = agent
        .editor
        .requests("session/request_permission")
        .iter()
        .map(|r| r["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(questions, ["c2", "c3", "c4"], "only the named directory joined the workspace");
    assert_eq!(std::fs::read_to_string(shared.join("made.txt")).unwrap(), "in");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing escaped: {elsewhere:?}");

    let file = path(&base, "a-file");
    std::fs::write(&file, "").unwrap();
    std::fs::create_dir_all(env.home()).unwrap();
    let (home, data) = (base.to_string_lossy().into_owned(), env.home().to_string_lossy().into_owned());
    for (bad, says) in [
        ("relative/dir", "absolute"),
        ("/no/such/cairn-dir", "cannot be used"),
        (file.as_str(), "not a directory"),
        ("/", "it is the whole disk"),
        (home.as_str(), "it is your home directory"),
        (data.as_str(), "it is cairn's data directory"),
    ] {
        let error = agent
            .call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": [], "additionalDirectories": [bad]}))
            .await;
        assert_eq!(error["code"], -32602, "{bad}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("additionalDirectories") && message.contains(says), "{bad}: {error}");
    }
}

/// `grep` honours `read:` rejections file by file: a directory search never shows a line of a
/// file a rule denies reading (whether it is reached by name, through a linked directory or by a
/// `**` rule), and says how many files it skipped for that. Rules match names as the rule engine
/// does, so grep and `read` agree on every spelling.
#[tokio::test]
async fn grep_never_shows_a_file_a_rule_denies_reading() {
    let env = TestEnv::new().await;
    let work = env.workspace();
    std::fs::create_dir_all(work.join("vault/deep")).unwrap();
    std::fs::write(work.join("secret.txt"), "TOKEN=hunter2-top\n").unwrap();
    std::fs::write(work.join("vault/deep/secret.txt"), "TOKEN=hunter2-deep\n").unwrap();
    std::fs::write(work.join("public.txt"), "TOKEN=public\n").unwrap();
    std::fs::write(work.join("SECRET.TXT"), "TOKEN=other-file\n").unwrap();
    std::os::unix::fs::symlink(work.join("vault"), work.join("mirror")).unwrap();
    std::os::unix::fs::symlink(work.join("secret.txt"), work.join("alias.txt")).unwrap();
    let grep = |id: &str, args: Value| (id.to_owned(), "grep".to_owned(), args);
    let calls = [
        grep("g1", json!({"pattern": "TOKEN"})),
        grep("g2", json!({"pattern": "TOKEN", "path": "mirror"})),
        grep("g3", json!({"pattern": "hunter2", "path": ".", "glob": "**"})),
        grep("g4", json!({"pattern": "TOKEN", "path": "vault/../secret.txt", "case_insensitive": true})),
        grep("g5", json!({"pattern": "TOKEN", "path": "alias.txt"})),
        ("r1".to_owned(), "read".to_owned(), json!({"path": "SECRET.TXT"})),
    ];
    env.mock.push(crate::subagents::calls(&calls)).push(Reply::text(&["searched"]));
    let args = ["exec", "--deny", "read:secret.txt", "--deny", "read:**/deep/secret.txt", "search for tokens"];
    let (status, _, stderr) = crate::exec::run(&env, &args, "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let results: Vec<String> =
        tool_results(&env, 1).iter().map(|r| r["content"].as_str().unwrap().to_owned()).collect();
    for (at, result) in results.iter().enumerate().take(5) {
        assert!(!result.contains("hunter2-"), "g{}: {result}", at + 1);
    }
    assert!(results[0].contains("public.txt:1:TOKEN=public"), "{}", results[0]);
    assert!(results[0].contains("2 files") && results[0].contains("a rule denies reading"), "{}", results[0]);
    assert!(results[1].contains("a rule denies reading"), "through the link: {}", results[1]);
    assert!(results[2].contains("No matches") && results[2].contains("2 files"), "{}", results[2]);
    for named in &results[3..5] {
        assert!(named.contains("rejects"), "named as the path, the search is refused: {named}");
    }
    // The engine compares names with their case: `SECRET.TXT` is another file, readable by both.
    assert!(results[0].contains("SECRET.TXT:1:TOKEN=other-file"), "{}", results[0]);
    assert!(results[5].contains("TOKEN=other-file"), "{}", results[5]);
}

//! Tools as the editor sees them: tool calls with their lifecycle and content, locally and
//! through the editor's fs and terminals, and the results the model gets back.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, updates};

/// Runs one prompt to its end; returns the response and this session's updates.
pub async fn turn(agent: &mut Agent, session: &str, text: &str) -> (Value, Vec<Value>) {
    let id = agent.prompt(session, text).await;
    let (response, notifications) = agent.response(id).await;
    let updates = updates(&notifications, session).into_iter().cloned().collect();
    (response, updates)
}

/// The `tool_call` and `tool_call_update`s of one call, in order.
pub fn call<'a>(updates: &'a [Value], id: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| {
            matches!(u["sessionUpdate"].as_str(), Some("tool_call" | "tool_call_update")) && u["toolCallId"] == id
        })
        .collect()
}

/// The `tool` messages of the n-th request the model received.
pub fn tool_results(env: &TestEnv, request: usize) -> Vec<Value> {
    env.mock.requests()[request]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

pub async fn set_mode(agent: &mut Agent, session: &str, mode: &str) {
    agent.call("session/set_mode", json!({"sessionId": session, "modeId": mode})).await;
}

#[tokio::test]
async fn local_read_and_edit_show_their_lifecycle_locations_and_diff() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "alpha\nbeta\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))]));
    env.mock.push(Reply::tool_calls(&[(
        "c2",
        "edit",
        json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
    )]));
    env.mock.push(Reply::text(&["Done."]));
    let editor = Editor::default();
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "fix the notes").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let path = env.workspace().join("notes.txt").display().to_string();
    let read = call(&updates, "c1");
    assert_eq!(read[0]["sessionUpdate"], "tool_call");
    // `pending` is the default status, so it may be left out.
    assert_eq!(read[0]["status"].as_str().unwrap_or("pending"), "pending");
    assert_eq!(read[0]["kind"], "read");
    let described = read.iter().find(|u| u.get("rawInput").is_some()).expect("arguments shown");
    assert_eq!(described["rawInput"], json!({"path": "notes.txt"}));
    assert_eq!(described["title"], "Read notes.txt");
    assert_eq!(described["locations"], json!([{"path": path}]));
    let statuses: Vec<&str> = read.iter().filter_map(|u| u["status"].as_str()).collect();
    assert_eq!(statuses.last(), Some(&"completed"));
    assert!(statuses.contains(&"in_progress"), "{statuses:?}");
    assert_eq!(
        tool_results(&env, 1),
        [json!({"role": "tool", "tool_call_id": "c1", "content": "     1\talpha\n     2\tbeta\n"})]
    );

    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1, "reads inside the workspace never ask");
    assert_eq!(asked[0]["params"]["toolCall"]["toolCallId"], "c2");
    let kinds: Vec<&str> =
        asked[0]["params"]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once", "reject_always"], "one always allow");
    let edit = call(&updates, "c2");
    let done = edit.last().unwrap();
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["content"],
        json!([{"type": "diff", "path": path, "oldText": "alpha\nbeta\n", "newText": "alpha\ngamma\n"}])
    );
    assert_eq!(std::fs::read_to_string(env.workspace().join("notes.txt")).unwrap(), "alpha\ngamma\n");

    // Load replays the calls as they were last shown.
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replay: Vec<Value> = crate::support::updates(&replay, &session).into_iter().cloned().collect();
    let replayed = call(&replay, "c2");
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[0]["sessionUpdate"], "tool_call");
    for field in ["status", "content", "title", "kind", "locations", "rawInput"] {
        assert_eq!(replayed[0][field], done[field], "{field}");
    }
}

#[tokio::test]
async fn through_the_editor_reads_see_unsaved_buffers_and_writes_go_to_the_editor() {
    let env = TestEnv::new().await;
    let a = env.workspace().join("a.txt");
    std::fs::write(&a, "saved text\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "a.txt"}))]));
    env.mock.push(Reply::tool_calls(&[("c2", "write", json!({"path": "b.txt", "content": "new file\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::with_fs();
    editor.buffers.lock().unwrap().insert(a.clone(), "unsaved text\n".into());
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(tool_results(&env, 1)[0]["content"], "     1\tunsaved text\n");
    let writes = agent.editor.requests("fs/write_text_file");
    let b = env.workspace().join("b.txt").display().to_string();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0]["params"], json!({"sessionId": session, "path": b, "content": "new file\n"}));
    assert_eq!(std::fs::read_to_string(env.workspace().join("b.txt")).unwrap(), "new file\n");
    let created = call(&updates, "c2");
    assert_eq!(
        created.last().unwrap()["content"],
        json!([{"type": "diff", "path": b, "newText": "new file\n"}]),
        "no oldText: a new file"
    );
}

#[tokio::test]
async fn through_the_editor_a_read_asks_for_just_its_lines() {
    let env = TestEnv::new().await;
    let a = env.workspace().join("a.txt");
    std::fs::write(&a, "saved\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "a.txt", "offset": 3, "limit": 2})),
        ("c2", "read", json!({"path": "a.txt", "offset": 9, "limit": 5})),
        ("c3", "read", json!({"path": "a.txt", "offset": 20})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::with_fs();
    let unsaved: String = (1..=10).map(|i| format!("unsaved {i}\n")).collect();
    editor.buffers.lock().unwrap().insert(a.clone(), unsaved);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "read parts").await;
    let asked: Vec<(Value, Value)> = agent
        .editor
        .requests("fs/read_text_file")
        .iter()
        .map(|r| (r["params"]["line"].clone(), r["params"]["limit"].clone()))
        .collect();
    assert_eq!(asked.len(), 3);
    for range in [(json!(3), json!(3)), (json!(9), json!(6)), (json!(20), json!(2001))] {
        assert!(asked.contains(&range), "one line more than wanted, to tell whether the file goes on: {asked:?}");
    }
    let results: Vec<Value> = tool_results(&env, 1).iter().map(|r| r["content"].clone()).collect();
    assert_eq!(
        results,
        [
            "     3\tunsaved 3\n     4\tunsaved 4\n(lines 3–4; the file goes on; use offset and limit to read others)\n",
            "     9\tunsaved 9\n    10\tunsaved 10\n(lines 9–10 of 10; use offset and limit to read others)\n",
            "a.txt has fewer than 20 lines; offset 20 is past its end",
        ]
    );
}

#[tokio::test]
async fn in_bypass_a_planted_symlink_cannot_redirect_a_local_write() {
    let env = TestEnv::new().await;
    let secret = env.dir.path().join("outside/secret.txt");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, "secret\n").unwrap();
    std::fs::write(env.workspace().join("target.txt"), "old\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "target.txt", "content": "new\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let mut agent = env.ready().await;
    let pid = agent.child.id().unwrap();
    // The temporary name cairn used to write through, and names an attacker might guess.
    let planted = [
        format!(".target.txt.cairn-{pid}"),
        ".target.txt.cairn-0".to_owned(),
        ".target.txt.cairn-0000000000000000".to_owned(),
        ".target.txt.cairn-ffffffffffffffff".to_owned(),
    ];
    for name in &planted {
        std::os::unix::fs::symlink(&secret, env.workspace().join(name)).unwrap();
    }
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (_, updates) = turn(&mut agent, &session, "write it").await;
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "completed");
    assert_eq!(std::fs::read_to_string(env.workspace().join("target.txt")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret\n", "the outside file is untouched");
    for name in &planted {
        assert_eq!(std::fs::read_link(env.workspace().join(name)).unwrap(), secret, "{name} is left alone");
    }
    let mut names: Vec<String> = std::fs::read_dir(env.workspace())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = planted.to_vec();
    expected.push("target.txt".to_owned());
    expected.sort();
    assert_eq!(names, expected, "no temporary file is left behind");
}

#[tokio::test]
async fn shell_commands_run_in_an_editor_terminal_that_is_always_released() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi; exit 3", "description": "Say hi"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::with_terminal();
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, updates) = turn(&mut agent, &session, "go").await;
    let created = agent.editor.requests("terminal/create");
    assert_eq!(created.len(), 1);
    let args = created[0]["params"]["args"].as_array().unwrap();
    let wrapper = created[0]["params"]["command"].as_str().unwrap();
    assert!(wrapper.starts_with('/') && wrapper.ends_with("/env"), "run with the children's environment: {wrapper}");
    assert_eq!(args[args.len() - 3..], [json!("bash"), json!("-c"), json!("echo hi; exit 3")]);
    assert_eq!(created[0]["params"]["cwd"], env.cwd());
    let methods = agent.editor.methods();
    assert_eq!(methods.last().map(String::as_str), Some("terminal/release"));
    let shown = call(&updates, "c1");
    let last = shown.last().unwrap();
    assert_eq!(last["status"], "failed", "a non-zero exit status fails the call");
    let terminal_id = created[0].get("id").map(|_| last["content"][0]["terminalId"].clone()).unwrap();
    assert_eq!(last["content"], json!([{"type": "terminal", "terminalId": terminal_id}]));
    assert_eq!(last["title"], "Say hi: `echo hi; exit 3`");
    assert_eq!(tool_results(&env, 1)[0]["content"], "hi\n\n[exit status 3]");
}

/// An editor's terminal starts from the editor's environment, which holds the keys cairn was
/// started with: the command is wrapped in `env -u …` so it runs with the environment a local
/// command gets (keys and their copies unset, `PATH` without relative entries).
#[tokio::test]
async fn an_editor_terminal_gets_the_scrubbed_environment_too() {
    let mut env = TestEnv::new().await;
    env.set_env("STOLEN_COPY", "sk-test");
    // The user's PATH holds a directory of the workspace (an activated virtualenv) where a
    // command planted its own `env`: the editor must not find it by name.
    let bin = env.workspace().join(".venv/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("env"), "#!/bin/sh\necho PLANTED \"$OPENAI_API_KEY\"\n").unwrap();
    std::fs::set_permissions(bin.join("env"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    env.set_env("PATH", &format!("node_modules/.bin:{}:{path}", bin.display()));
    let command = "echo \"key=${OPENAI_API_KEY:-unset} copy=${STOLEN_COPY:-unset} path=$PATH\"";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["ok"]));
    let mut editor = Editor::with_terminal();
    editor.environment = Some(env.agent_env());
    editor.answer(&["allow_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "go").await;
    let created = agent.editor.requests("terminal/create");
    assert_eq!(created.len(), 1);
    let wrapper = created[0]["params"]["command"].as_str().unwrap();
    assert!(wrapper.starts_with('/') && wrapper.ends_with("/env"), "{wrapper}");
    let args: Vec<&str> =
        created[0]["params"]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    for name in ["OPENAI_API_KEY", "STOLEN_COPY"] {
        assert!(args.windows(2).any(|pair| pair == ["-u", name]), "{name} is unset: {args:?}");
    }
    assert!(args.iter().any(|a| a.starts_with("PATH=/") && !a.contains("node_modules")), "{args:?}");
    assert_eq!(args[args.len() - 3..], ["bash", "-c", command], "{args:?}");
    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(output.starts_with("key=unset copy=unset path=/"), "{output}");
    assert!(!output.contains("sk-test") && !output.contains("node_modules"), "{output}");
    assert!(!output.contains("PLANTED"), "the planted env ran: {output}");
}

#[tokio::test]
async fn a_local_shell_streams_its_output_while_it_runs() {
    let env = TestEnv::new().await;
    let command = "for i in 1 2 3; do echo line$i; sleep 0.4; done";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (_, updates) = turn(&mut agent, &session, "go").await;
    let shown = call(&updates, "c1");
    let partial = shown.iter().any(|u| {
        u["status"] == "in_progress" && u["content"][0]["content"]["text"].as_str().is_some_and(|t| t.contains("line1"))
    });
    assert!(partial, "output shown before the command ended: {shown:?}");
    let last = shown.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["content"]["text"], "line1\nline2\nline3\n\n[exit status 0]");
    assert!(agent.editor.log.lock().unwrap().is_empty(), "bypass asks nothing");
}

#[tokio::test]
async fn bad_calls_come_back_to_the_model_as_errors_it_can_act_on() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "fly", json!({})), ("c2", "read", json!({"file": "x"}))]));
    env.mock.push(Reply::text(&["I will use the right tools."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let results = tool_results(&env, 1);
    assert_eq!(results[0]["tool_call_id"], "c1");
    assert!(
        results[0]["content"].as_str().unwrap().starts_with("Unknown tool `fly`. Available tools: read, write, edit")
    );
    assert!(results[1]["content"].as_str().unwrap().contains("unknown field `file`"), "{results:?}");
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "failed");
}

#[tokio::test]
async fn long_output_is_snipped_for_the_model_but_kept_whole() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "yes x | tr -d '\\n' | head -c 30000"}))]));
    env.mock.push(Reply::text(&["long"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (_, updates) = turn(&mut agent, &session, "go").await;
    let sent = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(sent.len() < 5_000, "the model got {} characters", sent.len());
    assert!(sent.contains("characters snipped; the full output was 30016 characters"), "{}", &sent[1990..2200]);
    let shown = call(&updates, "c1").last().unwrap()["content"][0]["content"]["text"].as_str().unwrap().len();
    assert_eq!(shown, 30_016, "the editor and the store keep all of it");
}

#[tokio::test]
async fn todo_sets_the_plan_the_editor_shows() {
    let env = TestEnv::new().await;
    let items = json!([{"content": "Read the code", "status": "completed"}, {"content": "Fix it", "status": "in_progress", "priority": "high"}]);
    env.mock.push(Reply::tool_calls(&[("c1", "todo", json!({"items": items}))]));
    env.mock.push(Reply::text(&["planned"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, updates) = turn(&mut agent, &session, "plan it").await;
    let plan = updates.iter().find(|u| u["sessionUpdate"] == "plan").expect("a plan update");
    assert_eq!(
        plan["entries"],
        json!([
            {"content": "Read the code", "priority": "medium", "status": "completed"},
            {"content": "Fix it", "priority": "high", "status": "in_progress"}
        ])
    );
    assert_eq!(call(&updates, "c1")[0]["kind"], "think");
    let _ = Duration::ZERO;
}

/// The attack of a hostile workspace on a write the permissions allow: `link` is swapped in a
/// loop between a file inside and a secret outside while the model writes through it 300
/// times, in a mode that writes inside without asking. Each write is judged at the target the
/// link has then and acts only there: those judged outside ask (and are refused), those judged
/// inside land inside or fail if the link moved since; none lands outside.
#[tokio::test]
async fn a_symlink_swapped_during_300_allowed_writes_never_lands_one_outside() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nconsecutive_errors = 0\nmax_rounds = 0\n\n[limits.loop_detection]\nenabled = false\n");
    let secret = env.dir.path().join("outside/secret.txt");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, "secret\n").unwrap();
    let ws = env.workspace();
    std::fs::write(ws.join("inside.txt"), "inside\n").unwrap();
    std::os::unix::fs::symlink(ws.join("inside.txt"), ws.join("link")).unwrap();
    for step in 0..10 {
        let calls: Vec<(String, Value)> = (0..30)
            .map(|n| (format!("c{step}_{n}"), json!({"path": "link", "content": format!("write {step} {n}\n")})))
            .collect();
        let calls: Vec<(&str, &str, Value)> =
            calls.iter().map(|(id, args)| (id.as_str(), "write", args.clone())).collect();
        env.mock.push(Reply::tool_calls(&calls));
    }
    env.mock.push(Reply::text(&["done"]));
    let editor = Editor::default();
    editor.answer(&["reject_once"; 300]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, secret, stop) = (ws.clone(), secret.clone(), stop.clone());
        std::thread::spawn(move || {
            let (to_inside, to_outside) = (ws.join(".to-inside"), ws.join(".to-outside"));
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (spare, points) in [(&to_outside, &secret), (&to_inside, &ws.join("inside.txt"))] {
                    let _ = std::fs::remove_file(spare);
                    std::os::unix::fs::symlink(points, spare).unwrap();
                    std::fs::rename(spare, ws.join("link")).unwrap();
                }
                swaps += 1;
                // The 30 calls of a step are judged together and run together: resting on the
                // inside target now and then keeps some judged inside and run inside even on a
                // loaded machine, so the last assertion has something to check.
                if swaps.is_multiple_of(4) {
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
            }
            swaps
        })
    };
    let (response, updates) = turn(&mut agent, &session, "write through the link").await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret\n", "nothing landed outside");
    let mut ended = std::collections::HashMap::new();
    for update in updates.iter().filter(|u| u["sessionUpdate"] == "tool_call_update") {
        if let Some(status @ ("completed" | "failed")) = update["status"].as_str() {
            ended.insert(update["toolCallId"].as_str().unwrap().to_owned(), status);
        }
    }
    assert_eq!(ended.len(), 300, "every call ended");
    let ended: Vec<&str> = ended.into_values().collect();
    assert!(ended.contains(&"completed"), "writes judged inside landed inside");
}

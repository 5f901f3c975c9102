//! Language servers after edits, against a stub server (`fixtures/lsp_stub.py`): a file no
//! checker covers is given to the server of its extension before and after `write` and `edit`,
//! and the result lists only the diagnostics the edit introduced (an old one moved down is not
//! new), from what the server publishes or, when it offers pull, answers; it starts once per
//! session, is answered what it asks, and is shut down when the session closes and killed when
//! cairn dies. A server that crashes, sends garbage or never publishes is said once and the
//! turn goes on; a cancel stops the wait at once. `[lsp] enabled = false` runs nothing, a
//! checker covering the file wins, a malformed `[lsp]` is refused at start, a path out of the
//! workspace sends nothing, and a project's own config names no server.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv};
use crate::tools::{set_mode, tool_results, turn};

/// The stub's config: `[lsp.servers.stub]` for `.txt` files, misbehaving as `mode` says, with
/// the test's directory as an argument so its processes can be told from other tests'.
fn config(env: &TestEnv, mode: &str, wait_ms: u64, extra: &str) -> String {
    let stub = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/lsp_stub.py");
    format!(
        "[limits]\nconsecutive_errors = 0\n\n[lsp]\nwait_ms = {wait_ms}\n\n[lsp.servers.stub]\n\
         command = [\"python3\", {:?}, {mode:?}, {:?}]\nextensions = [\"txt\"]\n{extra}",
        stub.display().to_string(),
        env.dir.path().display().to_string()
    )
}

/// The lines of a log the stub keeps in the workspace root.
fn logged(env: &TestEnv, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(env.workspace().join(name)).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

/// The live processes of this test's stub (and its supervisor, whose arguments name it too).
fn stubs(env: &TestEnv) -> Vec<String> {
    let tag = env.dir.path().display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = line.split(|byte| *byte == 0).collect();
            args.iter().any(|arg| arg.ends_with(b"lsp_stub.py")) && args.contains(&tag.as_bytes())
        })
        .filter(|pid| crate::support::alive(pid))
        .collect()
}

/// Whether this test's stub is gone within 30 s (a kill takes a moment on a loaded machine).
async fn stubs_gone(env: &TestEnv) -> bool {
    let waited = Instant::now();
    while !stubs(env).is_empty() {
        if waited.elapsed() > Duration::from_secs(30) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn result_of(env: &TestEnv, request: usize, id: &str) -> String {
    let results = tool_results(env, request);
    let result = results.iter().find(|r| r["tool_call_id"] == id).unwrap_or_else(|| panic!("no result for {id}"));
    result["content"].as_str().unwrap().to_owned()
}

/// Runs `steps` of calls in one turn in bypass mode; gives the agent and the session.
async fn edits(env: &TestEnv, steps: &[&[(&str, &str, Value)]], editor: Editor) -> (Agent, String) {
    for calls in steps {
        env.mock.push(Reply::tool_calls(calls));
    }
    env.mock.push(Reply::text(&["done"]));
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (response, _) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    (agent, session)
}

fn edit(id: &'static str, path: &str, old: &str, new: &str) -> (&'static str, &'static str, Value) {
    (id, "edit", json!({"path": path, "old_string": old, "new_string": new}))
}

#[tokio::test]
async fn an_edit_is_told_what_its_language_server_found_it_introduced_and_the_server_lives_with_the_session() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\nBROKEN: old problem\nHINT: a hint\n").unwrap();
    env.write_config(&config(&env, "normal", 30_000, ""));
    let first = [
        edit("c1", "a.txt", "hello", "hello\n\nBROKEN: new problem"),
        ("c2", "write", json!({"path": "b.txt", "content": "x\n  WARN: fresh\n"})),
    ];
    let second = [
        edit("c3", "a.txt", "BROKEN: new problem", "fixed"),
        ("c4", "write", json!({"path": "notes.md", "content": "BROKEN: not a txt\n"})),
    ];
    let (mut agent, session) = edits(&env, &[&first, &second], Editor::default()).await;

    assert_eq!(
        result_of(&env, 2, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n\
         The edit introduced 1 error in a.txt (`stub`):\na.txt:3:1: error[stub B1]: new problem",
        "the old error, now on line 4, and the hint are not the edit's"
    );
    assert_eq!(
        result_of(&env, 2, "c2"),
        "Created b.txt (2 lines).\n\n\
         The edit introduced 1 warning in b.txt (`stub`):\nb.txt:2:3: warning[stub B1]: fresh"
    );
    assert_eq!(result_of(&env, 2, "c3"), "Edited a.txt: replaced 1 occurrence.", "a fix introduces nothing");
    assert_eq!(result_of(&env, 2, "c4"), "Created notes.md (1 lines).", "no server covers it");

    let root = std::fs::canonicalize(env.workspace()).unwrap().display().to_string();
    assert_eq!(logged(&env, "lsp-starts.log"), [root], "one server for the session's edits, in its root");
    let mut answers = logged(&env, "lsp-answers.log");
    answers.sort();
    assert_eq!(
        answers,
        [
            "stub/unknown {\"code\": -32601, \"message\": \"cairn does not handle stub/unknown\"}",
            "window/workDoneProgress/create null",
            "workspace/configuration [null, null]",
        ],
        "what a server asks is answered, so it never waits"
    );
    assert!(!stubs(&env).is_empty(), "it stays for the next edit");

    agent.call("session/close", json!({"sessionId": session})).await;
    assert_eq!(logged(&env, "lsp-ends.log"), ["shutdown", "exit"], "shut down as LSP asks");
    assert!(stubs_gone(&env).await, "the server is gone with the session");
}

#[tokio::test]
async fn a_server_that_offers_pull_is_asked_and_an_edit_that_changes_nothing_waits_for_nothing() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\nBROKEN: old problem\n").unwrap();
    // It publishes nothing: only its answers to `textDocument/diagnostic` say anything.
    env.write_config(&config(&env, "pull", 30_000, ""));
    let first = [edit("c1", "a.txt", "hello", "hello\nBROKEN: new problem")];
    let second = [edit("c2", "a.txt", "hello", "hello again")];
    edits(&env, &[&first, &second], Editor::default()).await;
    assert_eq!(
        result_of(&env, 2, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n\
         The edit introduced 1 error in a.txt (`stub`):\na.txt:2:1: error[stub B1]: new problem"
    );
    assert_eq!(result_of(&env, 2, "c2"), "Edited a.txt: replaced 1 occurrence.", "answered, not timed out");
}

#[tokio::test]
async fn a_server_that_offers_pull_is_asked_again_so_what_another_change_broke_is_not_this_edit_s() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\nNEEDS: b.txt\n").unwrap();
    std::fs::write(env.workspace().join("b.txt"), "b\n").unwrap();
    env.write_config(&config(&env, "pull", 30_000, ""));
    let first = [edit("c1", "a.txt", "hello", "hello again")];
    // Not an edit of a.txt, yet it breaks it: what the server said of a.txt before is old.
    let second = [("c2", "bash", json!({"command": "rm b.txt"}))];
    let third = [edit("c3", "a.txt", "hello again", "hello once more")];
    edits(&env, &[&first, &second, &third], Editor::default()).await;
    assert_eq!(result_of(&env, 3, "c1"), "Edited a.txt: replaced 1 occurrence.");
    assert_eq!(
        result_of(&env, 3, "c3"),
        "Edited a.txt: replaced 1 occurrence.",
        "the missing b.txt was there before this edit"
    );
}

#[tokio::test]
async fn what_a_server_answers_while_it_says_it_is_loading_is_not_taken_for_its_analysis() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\nBROKEN: old problem\n").unwrap();
    env.write_config(&config(&env, "loading", 30_000, ""));
    edits(&env, &[&[edit("c1", "a.txt", "hello", "BROKEN: new problem")]], Editor::default()).await;
    assert_eq!(
        result_of(&env, 1, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n\
         The edit introduced 1 error in a.txt (`stub`):\na.txt:1:1: error[stub B1]: new problem",
        "the empty report it gave while loading is not the file's baseline, or the old error would be new"
    );
}

#[tokio::test]
async fn the_server_dies_with_cairn() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "normal", 30_000, ""));
    let (mut agent, _) = edits(&env, &[&[edit("c1", "a.txt", "hello", "BROKEN: new")]], Editor::default()).await;
    assert!(result_of(&env, 1, "c1").ends_with("a.txt:1:1: error[stub B1]: new"), "{}", result_of(&env, 1, "c1"));
    assert!(!stubs(&env).is_empty(), "it runs (under its supervisor)");
    agent.kill9().await;
    assert!(stubs_gone(&env).await, "the supervisor kills it when cairn dies, kill -9 included");
}

#[tokio::test]
async fn a_crashing_server_is_said_not_started_again_and_the_turn_goes_on() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "crash", 30_000, ""));
    let first = [edit("c1", "a.txt", "hello", "BROKEN: one")];
    let second = [edit("c2", "a.txt", "BROKEN: one", "BROKEN: two"), ("c3", "bash", json!({"command": "echo after"}))];
    edits(&env, &[&first, &second], Editor::default()).await;
    for id in ["c1", "c2"] {
        let edited = result_of(&env, 2, id);
        assert!(edited.starts_with("Edited a.txt: replaced 1 occurrence.\n\n`stub` exited ("), "{id}: {edited}");
        assert!(edited.ends_with("; its diagnostics are left out."), "{id}: {edited}");
        assert_eq!(edited.matches("`stub`").count(), 1, "said once: {edited}");
    }
    assert!(result_of(&env, 2, "c1").contains("crashing on purpose"), "its last words: {}", result_of(&env, 2, "c1"));
    assert_eq!(std::fs::read_to_string(env.workspace().join("a.txt")).unwrap(), "BROKEN: two\n", "both edits made");
    assert!(result_of(&env, 2, "c3").contains("after"));
    assert_eq!(logged(&env, "lsp-starts.log").len(), 1, "a crashed server is not started again in the session");
}

#[tokio::test]
async fn a_server_that_never_publishes_is_waited_for_only_wait_ms() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "silent", 300, ""));
    let calls = [edit("c1", "a.txt", "hello", "BROKEN: new"), ("c2", "bash", json!({"command": "echo after"}))];
    edits(&env, &[&calls], Editor::default()).await;
    assert_eq!(
        result_of(&env, 1, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n`stub` did not report within 0.3 s; its diagnostics are left out.",
        "said once: after a silent baseline there is nothing to compare with"
    );
    assert!(result_of(&env, 1, "c2").contains("after"));
}

#[tokio::test]
async fn a_server_sending_garbage_is_said_and_the_edit_made() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "garbage", 30_000, ""));
    edits(&env, &[&[edit("c1", "a.txt", "hello", "BROKEN: new")]], Editor::default()).await;
    assert_eq!(
        result_of(&env, 1, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n`stub` sent what is not LSP: a header line that is not \
         `Name: value` (\"this is not LSP at all\"); its diagnostics are left out."
    );
    assert!(stubs_gone(&env).await, "a server that is not LSP is killed");
}

#[tokio::test]
async fn cancelling_the_turn_stops_the_wait_at_once() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "silent", 60_000, ""));
    env.mock.push(Reply::tool_calls(&[edit("c1", "a.txt", "hello", "BROKEN: new")]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "go").await;
    let waited = Instant::now();
    while logged(&env, "lsp-starts.log").is_empty() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the server never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = Instant::now();
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert!(cancelled.elapsed() < Duration::from_secs(45), "the wait held the cancel: {:?}", cancelled.elapsed());
    assert_eq!(std::fs::read_to_string(env.workspace().join("a.txt")).unwrap(), "hello\n", "nothing changed");
}

#[tokio::test]
async fn with_lsp_off_nothing_runs() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "normal", 30_000, "").replace("[lsp]\n", "[lsp]\nenabled = false\n"));
    edits(&env, &[&[edit("c1", "a.txt", "hello", "BROKEN: new")]], Editor::default()).await;
    assert_eq!(result_of(&env, 1, "c1"), "Edited a.txt: replaced 1 occurrence.");
    assert!(logged(&env, "lsp-starts.log").is_empty());
}

#[tokio::test]
async fn a_checker_covering_the_file_wins_over_its_server() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    let checker = "\n[[checks.after_edit]]\nglob = \"*.txt\"\ncommand = \"echo ran >> checker.log\"\n";
    env.write_config(&config(&env, "normal", 30_000, checker));
    edits(&env, &[&[edit("c1", "a.txt", "hello", "BROKEN: new")]], Editor::default()).await;
    assert_eq!(result_of(&env, 1, "c1"), "Edited a.txt: replaced 1 occurrence.");
    assert_eq!(logged(&env, "checker.log"), ["ran", "ran"], "the checker ran before and after");
    assert!(logged(&env, "lsp-starts.log").is_empty(), "and the server did not: nothing checks a file twice");
}

#[tokio::test]
async fn a_malformed_lsp_table_is_refused_at_start_naming_the_key() {
    let env = TestEnv::new().await;
    for (toml, named) in [
        ("[lsp]\nwait_ms = 5\n", "[lsp] wait_ms = 5 is out of bounds; use from 100 to 60000"),
        ("[lsp.servers.mine]\ncommand = [\"x\"]\n", "[lsp.servers.mine] is not a built-in server"),
        ("[lsp.servers.mine]\ncommand = []\nextensions = [\"x\"]\n", "[lsp.servers.mine] command is empty"),
        ("[lsp]\nenable = false\n", "enable"),
    ] {
        let stderr = env.refused_config(toml).await;
        assert!(stderr.contains(named), "{toml}: {stderr}");
    }
}

#[tokio::test]
async fn paths_out_of_the_workspace_send_nothing_and_a_project_names_no_server() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("x.txt"), "hello\n").unwrap();
    std::os::unix::fs::symlink(outside.join("x.txt"), ws.join("link.txt")).unwrap();
    // A repository's own config, as if cairn read one: it must not run anything.
    let evil = "[lsp.servers.evil]\ncommand = [\"touch\", \"pwned\"]\nextensions = [\"md\"]\n";
    std::fs::create_dir_all(ws.join(".cairn")).unwrap();
    for place in [ws.join(".cairn/config.toml"), ws.join("cairn.toml"), ws.join("config.toml")] {
        std::fs::write(place, evil).unwrap();
    }
    env.write_config(&config(&env, "normal", 30_000, ""));
    let outside_name = format!("../{}/y.txt", outside.file_name().unwrap().to_str().unwrap());
    let calls = [
        edit("c1", "link.txt", "hello", "BROKEN: out"),
        ("c2", "write", json!({"path": outside_name, "content": "BROKEN: out too\n"})),
        ("c3", "write", json!({"path": "notes.md", "content": "hi\n"})),
        ("c4", "write", json!({"path": "inside.txt", "content": "BROKEN: in\n"})),
    ];
    let editor = Editor::default();
    editor.answer(&["allow_once", "allow_once", "allow_once"]);
    edits(&env, &[&calls], editor).await;
    assert_eq!(std::fs::read_to_string(outside.join("x.txt")).unwrap(), "BROKEN: out\n", "allowed, made");
    for id in ["c1", "c2", "c3"] {
        assert!(!result_of(&env, 1, id).contains("stub") && !result_of(&env, 1, id).contains("evil"), "{id}");
    }
    assert!(result_of(&env, 1, "c4").ends_with("inside.txt:1:1: error[stub B1]: in"), "{}", result_of(&env, 1, "c4"));
    let root = std::fs::canonicalize(&ws).unwrap().display().to_string();
    assert_eq!(
        logged(&env, "lsp-opened.log"),
        [format!("file://{root}/inside.txt")],
        "the server was given the file inside, and none out of the workspace"
    );
    assert!(!ws.join("pwned").exists(), "a project's file named no program");
}

#[tokio::test]
async fn the_official_client_sees_the_introduced_error_on_the_card() {
    use crate::support::sdk;
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\n").unwrap();
    env.write_config(&config(&env, "normal", 30_000, ""));
    env.mock.push(Reply::tool_calls(&[edit("c1", "a.txt", "hello", "hello BROKEN: broken")]));
    env.mock.push(Reply::text(&["Edited."]));
    let text = |text: &str| json!([{"type": "text", "text": text}]);
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": text("break a.txt")}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let updates = sdk::updates(&transcript["steps"][1]);
    let card = updates
        .iter()
        .filter(|update| update["sessionUpdate"] == "tool_call_update" && update["toolCallId"] == "c1")
        .filter_map(|update| update["content"].as_array())
        .next_back()
        .expect("the call's content");
    let shown: Vec<&str> = card.iter().filter_map(|part| part["content"]["text"].as_str()).collect();
    assert_eq!(shown, ["The edit introduced 1 error in a.txt (`stub`):\na.txt:1:7: error[stub B1]: broken"]);
}

#[tokio::test]
async fn a_hostile_server_is_outlasted_and_leaves_nothing_behind() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "hello\nBROKEN: old problem\n").unwrap();
    std::fs::write(env.workspace().join("other.txt"), "x\n").unwrap();
    env.write_config(&config(&env, "hostile", 30_000, ""));
    let calls = [edit("c1", "a.txt", "hello", "hello\nBROKEN: new problem")];
    let (mut agent, session) = edits(&env, &[&calls], Editor::default()).await;
    assert_eq!(
        result_of(&env, 1, "c1"),
        "Edited a.txt: replaced 1 occurrence.\n\n\
         The edit introduced 1 error in a.txt (`stub`):\na.txt:2:1: error[stub B1]: new problem",
        "noise is passed over, and what it says of other files or of an older text is not this text's"
    );
    let sleepers = stubs(&env)
        .iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line.split(|byte| *byte == 0).any(|arg| arg == b"sleeper"))
        })
        .count();
    assert_eq!(sleepers, 1, "the stub started its setsid'd sleeper");
    agent.call("session/close", json!({"sessionId": session})).await;
    assert_eq!(logged(&env, "lsp-ends.log"), ["shutdown ignored"], "no answer, so no `exit`");
    assert!(stubs_gone(&env).await, "killed, with what it started in a session of its own: {:?}", stubs(&env));
}

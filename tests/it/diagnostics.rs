//! Diagnostics after edits: a checker of `[checks]` covering the edited file runs before and
//! after `write` and `edit`, and the result (and the call's card) lists only what the edit
//! introduced, an old error moved down by added lines included; a checker for other files
//! never runs, a hanging one is reported over its limit and killed while the turn goes on (and
//! killed at once when the turn is cancelled), a
//! path out of the workspace (`..`, a symlink) runs nothing, an odd file name reaches the
//! checker only as its variable, and a malformed `[checks]` is refused at start naming the key.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Editor, Reply, TestEnv, running_with};
use crate::tools::{call, set_mode, tool_results, turn};

/// A checker script (outside the workspace) that reports every `ERR: message` in the `.rs`
/// files under its directory as `path:line:1: error: message` on stderr, as cargo does, and
/// logs each run (its directory and `CAIRN_EDITED_FILE`) to `runs.log` there (the sandbox lets
/// it write only the workspace).
fn checker(env: &TestEnv) -> String {
    let dir = env.dir.path().join("scripts");
    std::fs::create_dir_all(&dir).unwrap();
    let body = "printf '%s|%s\\n' \"$PWD\" \"$CAIRN_EDITED_FILE\" >> runs.log\n\
         grep -rn 'ERR: ' --include='*.rs' . | while IFS=: read -r file line rest; do\n\
           printf '%s:%s:1: error: %s\\n' \"${file#./}\" \"$line\" \"${rest#*ERR: }\" >&2\n\
         done\n\
         echo 'garbage \u{1b}[31m line: not a diagnostic'\n";
    let path = dir.join("check.sh");
    std::fs::write(&path, body).unwrap();
    format!("sh {}", path.display())
}

/// The runs the checker logged: (directory, edited file).
fn runs(env: &TestEnv) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(env.workspace().join("runs.log")).unwrap_or_default();
    text.lines().map(|line| line.split_once('|').map(|(a, b)| (a.to_owned(), b.to_owned())).unwrap()).collect()
}

fn config(checks: &[(&str, &str)], timeout: u64) -> String {
    let mut text = format!("[limits]\nconsecutive_errors = 0\n\n[checks]\ntimeout_secs = {timeout}\n");
    for (glob, command) in checks {
        text.push_str(&format!("\n[[checks.after_edit]]\nglob = {glob:?}\ncommand = {command:?}\n"));
    }
    text
}

/// Whether no process runs `args` within 30 s (a kill's signal takes a moment, longer on a
/// loaded machine; the answer comes as soon as it is gone).
async fn gone(args: &[&str]) -> bool {
    let waited = Instant::now();
    while !running_with(args).is_empty() {
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

/// Runs `calls` (one step) in bypass mode and gives the updates of the turn.
async fn edits(env: &TestEnv, calls: &[(&str, &str, Value)], editor: Editor) -> Vec<Value> {
    env.mock.push(Reply::tool_calls(calls)).push(Reply::text(&["done"]));
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    updates
}

#[tokio::test]
async fn an_edit_is_told_the_errors_it_introduced_and_not_the_old_ones_it_moved_down() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/a.rs"), "fn a() {}\nlet old = 1; // ERR: old problem\n").unwrap();
    std::fs::write(ws.join("src/other.rs"), "// ERR: elsewhere\n").unwrap();
    let marker = ws.join("python-checked");
    env.write_config(&config(&[("**/*.rs", &checker(&env)), ("**/*.py", "touch python-checked")], 30));
    let calls = [
        (
            "c1",
            "edit",
            json!({"path": "src/a.rs", "old_string": "fn a() {}", "new_string": "fn a() {}\n\n\nlet y = 2; // ERR: new problem"}),
        ),
        ("c2", "write", json!({"path": "src/b.rs", "content": "fn b() {}\n// ERR: fresh file\n"})),
        ("c3", "write", json!({"path": "notes.md", "content": "ERR: not checked\n"})),
    ];
    let updates = edits(&env, &calls, Editor::default()).await;

    let edited = result_of(&env, 1, "c1");
    assert_eq!(
        edited,
        format!(
            "Edited src/a.rs: replaced 1 occurrence.\n\n\
             The edit introduced 1 error in src/a.rs (`{}`):\nsrc/a.rs:4:1: error: new problem",
            checker(&env)
        ),
        "the old error, now on line 5, and the other file's are not the edit's"
    );
    let created = result_of(&env, 1, "c2");
    assert!(created.ends_with("src/b.rs:2:1: error: fresh file"), "{created}");
    assert_eq!(result_of(&env, 1, "c3"), "Created notes.md (1 lines).", "no checker covers it");
    assert!(!marker.exists(), "a checker for other files never runs");

    // The edit ran it before and after, the new file only after, each in the workspace root
    // with the file's path.
    let root = std::fs::canonicalize(&ws).unwrap().display().to_string();
    let a = format!("{root}/src/a.rs");
    let b = format!("{root}/src/b.rs");
    let mut logged = runs(&env);
    logged.sort();
    let mut expected = vec![(root.clone(), a.clone()), (root.clone(), a), (root, b)];
    expected.sort();
    assert_eq!(logged, expected);

    // The card shows the section under the diff.
    let card = call(&updates, "c1");
    let content = &card.last().unwrap()["content"];
    assert_eq!(content[0]["type"], "diff");
    let shown = content[1]["content"]["text"].as_str().unwrap_or_default();
    assert!(shown.starts_with("The edit introduced 1 error in src/a.rs"), "{content}");
}

#[tokio::test]
async fn a_hanging_checker_is_reported_over_its_limit_killed_and_the_turn_goes_on() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.rs"), "fn a() {}\n").unwrap();
    env.write_config(&config(&[("*.rs", "sleep 31337")], 1));
    let calls = [
        ("c1", "edit", json!({"path": "a.rs", "old_string": "fn a() {}", "new_string": "fn b() {}"})),
        ("c2", "bash", json!({"command": "echo after"})),
    ];
    // No bound on the turn's time: the result below says the checker's own 1 s limit ended it,
    // not the tool's (which would say "did not finish"), and a loaded machine is slow anyway.
    edits(&env, &calls, Editor::default()).await;
    let edited = result_of(&env, 1, "c1");
    assert_eq!(
        edited,
        "Edited a.rs: replaced 1 occurrence.\n\n`sleep 31337` took longer than 1 s; its diagnostics are left out.",
        "said once: the run before the edit was over its limit, so none runs after"
    );
    assert_eq!(std::fs::read_to_string(env.workspace().join("a.rs")).unwrap(), "fn b() {}\n", "the edit is made");
    assert!(result_of(&env, 1, "c2").contains("after"));
    assert!(gone(&["sleep", "31337"]).await, "the checker was killed");
}

#[tokio::test]
async fn a_checker_that_cannot_run_is_said_not_taken_for_a_clean_file() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.rs"), "fn a() {}\n").unwrap();
    env.write_config(&config(&[("*.rs", "no-such-checker-cairn --check")], 30));
    let calls = [("c1", "edit", json!({"path": "a.rs", "old_string": "fn a() {}", "new_string": "fn b() {}"}))];
    edits(&env, &calls, Editor::default()).await;
    let edited = result_of(&env, 1, "c1");
    assert!(
        edited.starts_with(
            "Edited a.rs: replaced 1 occurrence.\n\n`no-such-checker-cairn --check` could not be started (exit status 127: "
        ),
        "a typo in the command must not read as \"no new errors\": {edited}"
    );
    assert!(edited.contains("no-such-checker-cairn: command not found"), "{edited}");
    assert!(edited.ends_with("; its diagnostics are left out."), "{edited}");
}

#[tokio::test]
async fn a_change_saved_while_the_file_is_checked_is_not_overwritten() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.rs"), "fn a() {}\n").unwrap();
    // The user saves the file in their editor while the check before the edit runs.
    let saves =
        "if [ ! -e saved ]; then touch saved; printf 'fn user() {}\\nfn a() {}\\n' > \"$CAIRN_EDITED_FILE\"; fi";
    env.write_config(&config(&[("*.rs", saves)], 30));
    let calls = [("c1", "edit", json!({"path": "a.rs", "old_string": "fn a() {}", "new_string": "fn b() {}"}))];
    edits(&env, &calls, Editor::default()).await;
    assert_eq!(
        std::fs::read_to_string(env.workspace().join("a.rs")).unwrap(),
        "fn user() {}\nfn b() {}\n",
        "the edit applies to the file as it is when it is saved, not as it was before the check"
    );
}

#[tokio::test]
async fn cancelling_the_turn_kills_the_check_at_once() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.rs"), "fn a() {}\n").unwrap();
    env.write_config(&config(&[("*.rs", "touch started; sleep 31338")], 300));
    env.mock.push(Reply::tool_calls(&[(
        "c1",
        "edit",
        json!({"path": "a.rs", "old_string": "fn a() {}", "new_string": "fn b() {}"}),
    )]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "go").await;
    let waited = Instant::now();
    while !env.workspace().join("started").exists() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the checker never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = Instant::now();
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert!(cancelled.elapsed() < Duration::from_secs(60), "the check held the cancel: {:?}", cancelled.elapsed());
    assert!(gone(&["sleep", "31338"]).await, "the checker was killed");
    assert_eq!(
        std::fs::read_to_string(env.workspace().join("a.rs")).unwrap(),
        "fn a() {}\n",
        "cancelled while the file was checked before the change: the change is not made"
    );
}

#[tokio::test]
async fn paths_out_of_the_workspace_run_no_checker_and_an_odd_name_is_only_a_variable() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("x.rs"), "fn x() {}\n").unwrap();
    std::os::unix::fs::symlink(outside.join("x.rs"), ws.join("link.rs")).unwrap();
    env.write_config(&config(&[("**/*.rs", &checker(&env))], 30));
    let odd = "it's $(touch pwned) `touch pwned2` a.rs";
    let outside_name = format!("../{}/y.rs", outside.file_name().unwrap().to_str().unwrap());
    let calls = [
        ("c1", "edit", json!({"path": "link.rs", "old_string": "fn x() {}", "new_string": "fn z() {} // ERR: out"})),
        ("c2", "write", json!({"path": outside_name, "content": "// ERR: out too\n"})),
        ("c3", "write", json!({"path": odd, "content": "// ERR: odd\n"})),
    ];
    let editor = Editor::default();
    editor.answer(&["allow_once", "allow_once", "allow_once"]);
    edits(&env, &calls, editor).await;

    assert_eq!(std::fs::read_to_string(outside.join("x.rs")).unwrap(), "fn z() {} // ERR: out\n", "allowed, made");
    assert!(!result_of(&env, 1, "c1").contains("introduced"), "{}", result_of(&env, 1, "c1"));
    assert!(!result_of(&env, 1, "c2").contains("introduced"), "{}", result_of(&env, 1, "c2"));
    let root = std::fs::canonicalize(&ws).unwrap().display().to_string();
    assert_eq!(runs(&env), [(root.clone(), format!("{root}/{odd}"))], "only the file inside ran it, once");
    assert!(result_of(&env, 1, "c3").contains(&format!("{odd}:1:1: error: odd")), "{}", result_of(&env, 1, "c3"));
    assert!(!ws.join("pwned").exists() && !ws.join("pwned2").exists(), "the name was never run");
}

#[tokio::test]
async fn a_malformed_checks_table_is_refused_at_start_naming_the_key() {
    let env = TestEnv::new().await;
    for (toml, named) in [
        ("[[checks.after_edit]]\ncommand = \"cargo check\"\n", "[[checks.after_edit]] #1 has no `glob`"),
        ("[[checks.after_edit]]\nglob = \"src/[\"\ncommand = \"x\"\n", "is not a glob"),
        ("[checks]\ntimeout_secs = 0\n", "[checks] timeout_secs = 0 is out of bounds"),
        ("[[checks.after_edit]]\nglob = \"*.rs\"\ncmd = \"x\"\n", "cmd"),
    ] {
        let stderr = env.refused_config(toml).await;
        assert!(stderr.contains(named), "{toml}: {stderr}");
    }
}

#[tokio::test]
async fn the_official_client_sees_the_introduced_error_on_the_card() {
    use crate::support::sdk;
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.rs"), "fn a() {}\n").unwrap();
    env.write_config(&config(&[("*.rs", &checker(&env))], 30));
    env.mock.push(Reply::tool_calls(&[(
        "c1",
        "edit",
        json!({"path": "a.rs", "old_string": "fn a() {}", "new_string": "fn a() {} // ERR: broken"}),
    )]));
    env.mock.push(Reply::text(&["Edited."]));
    let text = |text: &str| json!([{"type": "text", "text": text}]);
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": text("break a.rs")}},
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
    assert_eq!(shown.len(), 1, "{card:?}");
    assert!(shown[0].ends_with("a.rs:1:1: error: broken"), "{shown:?}");
    assert!(result_of(&env, 1, "c1").contains("The edit introduced 1 error in a.rs"));
}

//! File checkpoints behind `/rewind`: what `write`, `edit` and commands change is put back, files
//! they created are removed, a file someone else changed since is named and kept unless the user
//! says otherwise, `/rewind undo` undoes a rewind, links come back as links and nothing outside
//! the workspace is touched, and a restore a crash interrupted is finished at the next load.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates};
use crate::tools::{set_mode, turn};

/// Sends a prompt (a command) and returns the agent text it showed; a rewind that does not
/// answer within a minute fails the test.
pub async fn say(agent: &mut Agent, session: &str, text: &str) -> String {
    let id = agent.prompt(session, text).await;
    let answered = tokio::time::timeout(std::time::Duration::from_secs(60), agent.response(id)).await;
    let (response, notifications) = answered.unwrap_or_else(|_| panic!("`{text}` hung"));
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    text_of(&updates(&notifications, session), "agent_message_chunk")
}

/// The text of the last rewind question asked.
fn asked(agent: &Agent) -> String {
    let asked = agent.editor.requests("session/request_permission");
    let last = asked.last().expect("a question was asked");
    last["params"]["toolCall"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|content| content["content"]["text"].as_str())
        .collect()
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| format!("<{err}>"))
}

pub async fn session_in_bypass(env: &TestEnv, editor: Editor) -> (Agent, String) {
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    (agent, session)
}

#[tokio::test]
async fn rewind_puts_back_what_edits_changed_and_removes_what_they_created_then_undo_brings_it_back() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("notes.txt"), "one\ntwo\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "edit", json!({"path": "notes.txt", "old_string": "two", "new_string": "TWO"})),
        ("c2", "write", json!({"path": "src/new.rs", "content": "fn new() {}\n"})),
    ]));
    env.mock.push(Reply::text(&["Done."]));
    let editor = Editor::default();
    editor.answer(&["restore", "restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "change things").await;
    assert_eq!(read(&ws.join("notes.txt")), "one\nTWO\n");

    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 2 of 2 files"), "{said}");
    let question = asked(&agent);
    assert!(question.contains("notes.txt: put back (+1 −1 lines)"), "{question}");
    assert!(question.contains("src/new.rs: removed (the session created it)"), "{question}");
    assert_eq!(read(&ws.join("notes.txt")), "one\ntwo\n");
    assert!(!ws.join("src/new.rs").exists());

    let said = say(&mut agent, &session, "/rewind undo").await;
    assert!(said.contains("Restored 2 of 2 files to before the last rewind"), "{said}");
    assert_eq!(read(&ws.join("notes.txt")), "one\nTWO\n");
    assert_eq!(read(&ws.join("src/new.rs")), "fn new() {}\n");
    assert_eq!(env.mock.requests().len(), 2, "rewinds never reach the model");
}

#[tokio::test]
async fn rewind_puts_back_what_a_command_changed_created_and_deleted_and_the_conversation_too() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original a\n").unwrap();
    std::fs::write(ws.join("b.txt"), "original b\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    let command =
        "printf 'changed' > a.txt && rm b.txt && mkdir -p d target && echo new > d/c.txt && echo built > target/out";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["Ran it."]));
    env.mock.push(Reply::text(&["Fresh start."]));
    let editor = Editor::default();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "run the command").await;
    assert!(!ws.join("b.txt").exists());

    let said = say(&mut agent, &session, "/rewind").await;
    assert!(said.contains("Restored 3 of 3 files") && said.contains("Rewound 1 turn"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original a\n");
    assert_eq!(read(&ws.join("b.txt")), "original b\n");
    assert!(!ws.join("d/c.txt").exists());
    assert_eq!(read(&ws.join("target/out")), "built\n", "ignored files are not captured, so not touched");
    turn(&mut agent, &session, "again").await;
    let requests = env.mock.requests();
    assert_eq!(crate::support::user_texts(&requests[2]), ["again"], "the conversation went back too");
}

#[tokio::test]
async fn a_file_someone_else_changed_since_is_named_and_kept_unless_the_user_chooses_otherwise() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("mine.txt"), "before\n").unwrap();
    std::fs::write(ws.join("shared.txt"), "before\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "write", json!({"path": "mine.txt", "content": "model\n"})),
        ("c2", "write", json!({"path": "shared.txt", "content": "model\n"})),
    ]));
    env.mock.push(Reply::text(&["Written."]));
    let editor = Editor::default();
    editor.answer(&["restore_keep", "restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "write both").await;
    // The user edits one of them in the editor afterwards.
    std::fs::write(ws.join("shared.txt"), "the user's edit\n").unwrap();

    let said = say(&mut agent, &session, "/rewind code").await;
    let question = asked(&agent);
    assert!(question.contains("shared.txt: put back (+1 −1 lines); CHANGED SINCE by someone else"), "{question}");
    let options = &agent.editor.requests("session/request_permission")[0]["params"]["options"];
    let ids: Vec<&str> = options.as_array().unwrap().iter().map(|o| o["optionId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["restore", "restore_keep", "cancel"]);
    assert!(said.contains("shared.txt: kept as it is (changed since by someone else)"), "{said}");
    assert_eq!(read(&ws.join("mine.txt")), "before\n");
    assert_eq!(read(&ws.join("shared.txt")), "the user's edit\n", "not overwritten unasked");

    // Asked again, the user chooses to overwrite it.
    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("shared.txt")), "before\n");
}

#[tokio::test]
async fn cancelling_the_question_changes_nothing_and_with_nothing_changed_nothing_is_asked() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "x\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    env.mock.push(Reply::text(&["just talking"]));
    let editor = Editor::default();
    editor.answer(&["cancel"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "write").await;
    let said = say(&mut agent, &session, "/rewind 1 code").await;
    assert!(said.contains("Rewind cancelled: no file was changed."), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "x\n");
    turn(&mut agent, &session, "talk").await;
    let said = say(&mut agent, &session, "/rewind 1 code").await;
    assert!(said.contains("No files were changed since then"), "{said}");
    let said = say(&mut agent, &session, "/rewind 3").await;
    assert!(said.contains("Nothing was rewound: this session has 2 turns; /rewind 2 goes back"), "{said}");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1);
}

#[tokio::test]
async fn links_come_back_as_links_large_files_are_listed_and_nothing_outside_is_touched() {
    let env = TestEnv::new().await;
    env.write_config("[checkpoints]\nmax_file_bytes = 1024\n");
    let ws = env.workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("target.txt"), "outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("target.txt"), ws.join("link")).unwrap();
    std::fs::write(ws.join("big.dat"), vec![b'a'; 4096]).unwrap();
    // The command replaces the link with a file (never writing through it) and grows the big file.
    let command = "rm link && echo replaced > link && printf b >> big.dat";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "go").await;

    let said = say(&mut agent, &session, "/rewind code").await;
    assert_eq!(std::fs::read_link(ws.join("link")).unwrap(), outside.path().join("target.txt"), "{said}");
    assert_eq!(read(&outside.path().join("target.txt")), "outside\n");
    assert!(
        said.contains("big.dat: not restored: its content was not kept: it was larger than the checkpoint limit"),
        "{said}"
    );
}

#[tokio::test]
async fn checkpoints_lists_the_prompts_that_changed_files() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "x\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    let said = say(&mut agent, &session, "/checkpoints").await;
    assert!(said.contains("No checkpoints yet"), "{said}");
    turn(&mut agent, &session, "write a file").await;
    let said = say(&mut agent, &session, "/checkpoints").await;
    assert!(said.contains("File changes kept") && said.contains("“write a file”: 1 file changes, 2 bytes"), "{said}");
}

#[tokio::test]
async fn a_restore_a_crash_interrupted_is_finished_when_the_session_is_loaded() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "model\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    turn(&mut agent, &session, "write").await;
    agent.kill9().await;

    // What a restore records before it touches a file, as if the process died right after.
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let original: Vec<u8> = db
        .query_row("SELECT data FROM file_blobs WHERE data = CAST('original\n' AS BLOB)", [], |row| row.get(0))
        .unwrap();
    assert_eq!(original, b"original\n");
    db.execute(
        "INSERT INTO checkpoints (session_id, kind, restore, pending, created_at) VALUES (?1, 'made', 'before “write”', 1, 0)",
        [&session],
    )
    .unwrap();
    db.execute(
        "INSERT INTO checkpoint_files (checkpoint_id, path, state, hash, size)
         SELECT last_insert_rowid(), CAST('a.txt' AS BLOB), 'file', hash, size FROM file_blobs WHERE data = CAST('original\n' AS BLOB)",
        [],
    )
    .unwrap();
    drop(db);

    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, notifications) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let shown: Vec<&Value> = updates(&notifications, &session);
    let notes = format!("{shown:?}");
    assert!(notes.contains("was interrupted; it was completed (1 files)"), "{notes}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let pending: i64 =
        db.query_row("SELECT count(*) FROM checkpoints WHERE pending = 1", [], |row| row.get(0)).unwrap();
    assert_eq!(pending, 0);
}

#[tokio::test]
async fn show_marks_the_calls_whose_changes_are_kept_and_deleting_the_session_removes_them() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "unique content\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    turn(&mut agent, &session, "write").await;
    agent.close_stdin();
    agent.wait_exit().await;
    let count = || -> i64 {
        let db = rusqlite::Connection::open(env.database()).unwrap();
        db.query_row("SELECT count(*) FROM file_blobs", [], |row| row.get(0)).unwrap()
    };
    assert_eq!(count(), 1);
    let mut command = env.command();
    command.args(["sessions", "show", &session]).stdin(std::process::Stdio::null());
    let shown = String::from_utf8(command.output().await.unwrap().stdout).unwrap();
    assert!(shown.contains("[checkpoint: 1 file changes kept; /rewind puts them back]"), "{shown}");
    let mut command = env.command();
    command.args(["sessions", "rm", &session]).stdin(std::process::Stdio::null());
    let out = command.output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(count(), 0);
}

#[tokio::test]
async fn what_a_command_changed_before_a_kill_9_is_put_back_after_the_restart() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    std::fs::write(ws.join("bin.dat"), b"\x00\x01binary").unwrap();
    let command = "printf 'x\\0y' > bin.dat && echo changed > a.txt && touch started && sleep 60";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    agent.prompt(&session, "run it").await;
    for _ in 0..200 {
        if ws.join("started").exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(read(&ws.join("a.txt")), "changed\n");
    agent.kill9().await;

    let editor = Editor::default();
    editor.answer(&["restore"]);
    let mut agent = env.ready_with(editor).await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    agent.response(id).await;
    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 3 of 3 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
    assert_eq!(std::fs::read(ws.join("bin.dat")).unwrap(), b"\x00\x01binary", "binary content comes back whole");
    assert!(!ws.join("started").exists());
}

#[tokio::test]
async fn the_official_client_is_asked_about_the_files_and_they_come_back() {
    use crate::support::sdk;
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("a.txt"), "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "changed\n"}))]));
    env.mock.push(Reply::text(&["Written."]));
    let text = |text: &str| json!([{"type": "text", "text": text}]);
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": text("change a.txt")}},
        {"prompt": {"sessionId": "$session", "prompt": text("/rewind code")}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let asked = transcript["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "the write, then the rewind: {asked:?}");
    let rewind = &asked[1]["toolCall"];
    assert_eq!(rewind["title"], "Restore 1 files to before “change a.txt”");
    assert_eq!(rewind["content"][1]["type"], "diff", "{rewind}");
    let said: String =
        sdk::updates(&transcript["steps"][2]).iter().filter_map(|update| update["content"]["text"].as_str()).collect();
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&env.workspace().join("a.txt")), "original\n");
}

#[tokio::test]
async fn an_export_carries_the_checkpoints_and_an_import_can_rewind_with_them() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "changed\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    turn(&mut agent, &session, "change it").await;
    agent.close_stdin();
    agent.wait_exit().await;
    let cairn = |args: &[&str]| {
        let mut command = env.command();
        command.args(args).stdin(std::process::Stdio::null());
        command.output()
    };
    let exported = cairn(&["sessions", "export", &session, "--format", "jsonl"]).await.unwrap();
    let text = String::from_utf8(exported.stdout).unwrap();
    assert!(text.lines().any(|line| line.contains("\"type\":\"checkpoint\"")), "{text}");
    assert!(text.lines().any(|line| line.contains("\"type\":\"blob\"")), "{text}");
    let file = env.workspace().join("../export.jsonl");
    std::fs::write(&file, &text).unwrap();
    assert!(cairn(&["sessions", "rm", &session]).await.unwrap().status.success());
    let imported = cairn(&["sessions", "import", file.to_str().unwrap()]).await.unwrap();
    assert!(imported.status.success(), "{imported:?}");

    let editor = Editor::default();
    editor.answer(&["restore"]);
    let mut agent = env.ready_with(editor).await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    agent.response(id).await;
    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");

    // A forged file: a path out of the directory, or content that is not what its hash says.
    for (forged, why) in [
        (text.replace("\"path\":\"a.txt\"", "\"path\":\"../escape\""), "is not a plain relative path"),
        (text.replace("\"data\":\"", "\"data\":\"AAAA"), "its SHA-256 is not"),
    ] {
        std::fs::write(&file, &forged).unwrap();
        let refused = cairn(&["sessions", "import", file.to_str().unwrap()]).await.unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && stderr.contains(why), "{stderr}");
    }
}

#[tokio::test]
async fn an_editor_that_writes_files_gets_the_restored_text_so_its_buffers_follow() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "edit", json!({"path": "a.txt", "old_string": "original", "new_string": "edited"})),
        ("c2", "write", json!({"path": "new.txt", "content": "new\n"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::with_fs();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "edit").await;
    let writes_before = agent.editor.requests("fs/write_text_file").len();
    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 2 of 2 files"), "{said}");
    let writes = agent.editor.requests("fs/write_text_file");
    let restored: Vec<&Value> = writes[writes_before..].iter().collect();
    assert_eq!(
        restored.len(),
        1,
        "the text file through the editor; the created one removed on the disk: {restored:?}"
    );
    assert_eq!(restored[0]["params"]["content"], "original\n");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
    assert!(!ws.join("new.txt").exists());
}

#[tokio::test]
async fn what_a_post_tool_use_hook_changes_is_the_calls_doing_and_comes_back_without_a_conflict() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    // A formatter run after every edit: it rewrites the file the call changed.
    let formatter = "cd \"$CLAUDE_PROJECT_DIR\" && printf 'formatted\\n' >> a.txt";
    env.write_config(&format!(
        "[[hooks.PostToolUse]]\nmatcher = \"Write|Edit\"\nhooks = [{{ type = \"command\", command = {formatter:?} }}]\n"
    ));
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "model\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "write").await;
    assert_eq!(read(&ws.join("a.txt")), "model\nformatted\n", "the hook ran");
    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(!asked(&agent).contains("CHANGED SINCE"), "{}", asked(&agent));
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
}

#[tokio::test]
async fn a_session_loaded_by_another_process_mid_call_is_left_to_the_process_running_it() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    let command = "echo changed > a.txt && touch started && sleep 30";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["stopped"]));
    let (mut a, session) = session_in_bypass(&env, Editor::default()).await;
    let turn = a.prompt(&session, "run it").await;
    for _ in 0..200 {
        if ws.join("started").exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let made = || -> i64 {
        let db = rusqlite::Connection::open(env.database()).unwrap();
        db.query_row("SELECT count(*) FROM checkpoints WHERE kind = 'made'", [], |row| row.get(0)).unwrap()
    };
    let mut b = env.ready().await;
    let id = b.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    b.response(id).await;
    assert_eq!(made(), 0, "B took A's running call for one a crash cut short");
    a.notify("session/cancel", json!({"sessionId": session})).await;
    a.response(turn).await;
    assert_eq!(made(), 1, "A captures what its call changed");
}

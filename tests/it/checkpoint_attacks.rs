//! Hostile workspaces and users against `/rewind`: a directory swapped for a link out of the
//! workspace after the capture (an editor that writes files must not be sent through it), a link
//! or a FIFO where a restored file was (nothing hangs, nothing outside is read or written), a
//! file whose name is not UTF-8, a mode changed with the content, a user's edit (made while the
//! session was closed, or seen by a later command) that is never taken for the session's, and a
//! cancelled question that rewinds nothing at all.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::json;

use crate::checkpoints::{read, say, session_in_bypass};
use crate::support::{Agent, Editor, Reply, TestEnv};
use crate::tools::turn;

/// A directory beside the workspace, outside it.
fn outside(env: &TestEnv) -> std::path::PathBuf {
    let dir = env.workspace().parent().unwrap().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A session in bypass mode whose model wrote over `path` (which held "original"), with the
/// editor answering the rewind's question by restoring.
async fn written_over(env: &TestEnv, path: &str, editor: Editor) -> (Agent, String) {
    let file = env.workspace().join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "model\n"}))]));
    env.mock.push(Reply::text(&["Written."]));
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(env, editor).await;
    turn(&mut agent, &session, "write it").await;
    (agent, session)
}

#[tokio::test]
async fn a_restore_through_the_editor_never_writes_through_a_directory_link_planted_after_the_capture() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let (mut agent, session) = written_over(&env, "sub/a.txt", Editor::with_fs()).await;
    assert_eq!(read(&ws.join("sub/a.txt")), "model\n");

    // Since then `sub` became a link to a directory elsewhere whose `a.txt` holds just what the
    // session left, so nothing looks changed.
    let outside = outside(&env);
    std::fs::write(outside.join("a.txt"), "model\n").unwrap();
    std::fs::remove_dir_all(ws.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("sub")).unwrap();

    let said = say(&mut agent, &session, "/rewind code").await;
    assert_eq!(read(&outside.join("a.txt")), "model\n", "the restore wrote outside the workspace: {said}");
    assert!(said.contains("NOT restored") || said.contains("not restored"), "{said}");
}

#[tokio::test]
async fn a_link_put_where_a_restored_file_was_is_replaced_through_the_editor_never_written_through() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let (mut agent, session) = written_over(&env, "a.txt", Editor::with_fs()).await;

    let outside = outside(&env);
    std::fs::write(outside.join("target.txt"), "model\n").unwrap();
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("target.txt"), ws.join("a.txt")).unwrap();

    let said = say(&mut agent, &session, "/rewind code").await;
    assert_eq!(read(&outside.join("target.txt")), "model\n", "written through the link: {said}");
    assert!(!ws.join("a.txt").is_symlink(), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n", "{said}");
}

#[tokio::test]
async fn a_fifo_where_a_restored_file_was_does_not_hang_the_rewind() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let (mut agent, session) = written_over(&env, "a.txt", Editor::default()).await;

    // Someone swapped the file for a FIFO nobody writes to: opening it to read blocks forever.
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(ws.join("a.txt")).status().unwrap();
    assert!(made.success());

    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
}

#[tokio::test]
async fn a_link_to_a_fifo_where_a_restored_file_was_does_not_hang_the_question() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let (mut agent, session) = written_over(&env, "a.txt", Editor::default()).await;

    let outside = outside(&env);
    let made = std::process::Command::new("mkfifo").arg(outside.join("pipe")).status().unwrap();
    assert!(made.success());
    std::fs::remove_file(ws.join("a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("pipe"), ws.join("a.txt")).unwrap();

    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
}

#[tokio::test]
async fn a_file_whose_name_is_not_utf8_that_a_command_changed_comes_back() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let name = OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(ws.join(name), "original\n").unwrap();
    let command = "for f in caf*.txt; do printf 'changed\\n' > \"$f\"; done";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["Ran it."]));
    let editor = Editor::default();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "run it").await;
    assert_eq!(read(&ws.join(name)), "changed\n");

    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join(name)), "original\n");
}

#[tokio::test]
async fn a_users_edit_made_while_the_session_was_closed_is_never_taken_for_the_sessions_own() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    std::fs::write(ws.join("user.txt"), "mine v1\n").unwrap();
    // A command that changes nothing it leaves behind: its capture before is stored, the one
    // after is empty.
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "model\n"}))]));
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "touch scratch && rm scratch"}))]));
    env.mock.push(Reply::text(&["Done."]));
    let (mut agent, session) = session_in_bypass(&env, Editor::default()).await;
    turn(&mut agent, &session, "work").await;
    agent.close_stdin();
    agent.wait_exit().await;

    // With the session closed, the user edits a file of theirs.
    std::fs::write(ws.join("user.txt"), "mine v2, longer\n").unwrap();

    let editor = Editor::default();
    editor.answer(&["restore_keep"]);
    let mut agent = env.ready_with(editor).await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    agent.response(id).await;
    let said = say(&mut agent, &session, "/rewind code").await;
    assert_eq!(read(&ws.join("a.txt")), "original\n", "{said}");
    assert_eq!(read(&ws.join("user.txt")), "mine v2, longer\n", "the user's edit was overwritten: {said}");
}

#[tokio::test]
async fn a_users_edit_seen_by_a_later_command_is_still_named_as_changed_since() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "model\n"}))]));
    env.mock.push(Reply::text(&["Written."]));
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "touch other.txt"}))]));
    env.mock.push(Reply::text(&["Touched."]));
    let editor = Editor::default();
    editor.answer(&["restore_keep"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "write it").await;
    // The user edits the file the session wrote; the next turn's command sees it on the way.
    std::fs::write(ws.join("a.txt"), "the user's edit\n").unwrap();
    turn(&mut agent, &session, "touch another").await;

    let said = say(&mut agent, &session, "/rewind 2 code").await;
    let asked = agent.editor.requests("session/request_permission");
    let question = format!("{:?}", asked.last().expect("a question was asked"));
    assert!(question.contains("CHANGED SINCE"), "the user's edit was not named: {question}");
    assert_eq!(read(&ws.join("a.txt")), "the user's edit\n", "overwritten unasked: {said}");
    assert!(!ws.join("other.txt").exists(), "{said}");
}

#[tokio::test]
async fn a_file_made_executable_comes_back_not_executable_through_the_editor_too() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("run.txt"), "echo hi\n").unwrap();
    std::fs::set_permissions(ws.join("run.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let command = "chmod +x run.txt && printf 'echo bye\\n' > run.txt";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["Ran it."]));
    let editor = Editor::with_fs();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "run it").await;

    let said = say(&mut agent, &session, "/rewind code").await;
    assert_eq!(read(&ws.join("run.txt")), "echo hi\n", "{said}");
    let mode = std::fs::metadata(ws.join("run.txt")).unwrap().permissions().mode();
    assert_eq!(mode & 0o111, 0, "still executable after the rewind: {said}");
}

#[tokio::test]
async fn cancelling_the_file_question_of_a_full_rewind_keeps_the_conversation_too() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "x\n"}))]));
    env.mock.push(Reply::text(&["ok"]));
    env.mock.push(Reply::text(&["still here"]));
    let editor = Editor::default();
    editor.answer(&["cancel"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "write").await;
    let said = say(&mut agent, &session, "/rewind").await;
    assert!(said.contains("Rewind cancelled"), "{said}");
    assert!(!said.contains("Rewound 1 turn"), "the user cancelled, yet the conversation went back: {said}");
    assert_eq!(read(&ws.join("a.txt")), "x\n");
    turn(&mut agent, &session, "next").await;
    let requests = env.mock.requests();
    assert_eq!(crate::support::user_texts(&requests[2]), ["write", "next"], "the conversation was kept");
}

#[tokio::test]
async fn links_to_the_root_and_link_loops_are_captured_as_links_never_walked_into() {
    // (cairn's own data directory inside a workspace is refused at `session/new`.)
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::os::unix::fs::symlink("/", ws.join("slash")).unwrap();
    std::os::unix::fs::symlink("loop", ws.join("loop")).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo new > made.txt && rm loop"}))]));
    env.mock.push(Reply::text(&["Ran it."]));
    let editor = Editor::default();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    turn(&mut agent, &session, "run it").await;

    let said = say(&mut agent, &session, "/rewind code").await;
    assert!(said.contains("Restored 2 of 2 files"), "{said}");
    assert!(!ws.join("made.txt").exists());
    assert_eq!(std::fs::read_link(ws.join("slash")).unwrap(), Path::new("/"), "{said}");
    assert_eq!(std::fs::read_link(ws.join("loop")).unwrap(), Path::new("loop"), "the loop comes back as a link");
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let mut query = db.prepare("SELECT CAST(path AS TEXT) FROM checkpoint_files").unwrap();
    let paths: Vec<String> = query.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect();
    assert!(paths.iter().all(|path| !path.starts_with("slash/")), "walked through the link to /: {paths:?}");
}

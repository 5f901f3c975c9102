//! The editor's file methods and the processes cairn runs: the editor resolves a path again,
//! following links, after cairn judged it, so while a process cairn started that may write the
//! path's directories runs (here a background job) `read`, `write` and `/rewind` work on the
//! disk beneath the workspace and never hand a path to the editor; with nothing running there
//! they go through the editor as before, a job of another workspace notwithstanding. The
//! attack: a job swaps a directory of the path for a link out of the workspace in the moment the
//! editor would open it (played by the test editor, so it happens every time).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::checkpoints::{read, say, session_in_bypass};
use crate::support::{Agent, Editor, Reply, TestEnv};
use crate::tools::{tool_results, turn};

/// Runs one turn in which the model makes `calls` one after another, then ends; what each call
/// returned to the model, in order.
async fn calls(agent: &mut Agent, env: &TestEnv, session: &str, calls: &[(&str, Value)]) -> Vec<String> {
    let before = env.mock.requests().len();
    for (n, (name, args)) in calls.iter().enumerate() {
        env.mock.push(Reply::tool_calls(&[(&format!("c{before}-{n}"), name, args.clone())]));
    }
    env.mock.push(Reply::text(&["ok"]));
    let (response, _) = turn(agent, session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    (0..calls.len())
        .map(|n| tool_results(env, before + n + 1).last().unwrap()["content"].as_str().unwrap().to_owned())
        .collect()
}

/// A job that runs until it is killed, doing nothing: enough for cairn to know a process runs.
fn sleeping_job() -> (&'static str, Value) {
    ("bash", json!({"command": "exec sleep 300", "background": true}))
}

/// `a.txt` saved as "saved text" in `ws`, and open in `editor` with "unsaved text".
fn saved_and_unsaved(ws: &std::path::Path, editor: Editor) -> Editor {
    std::fs::write(ws.join("a.txt"), "saved text\n").unwrap();
    editor.buffers.lock().unwrap().insert(ws.join("a.txt"), "unsaved text\n".into());
    editor
}

fn fs_paths(agent: &Agent, method: &str) -> Vec<String> {
    agent.editor.requests(method).iter().map(|r| r["params"]["path"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn while_a_job_runs_reads_and_writes_go_to_the_disk_and_once_it_is_killed_through_the_editor_again() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let editor = saved_and_unsaved(&ws, Editor::with_fs());
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    let results = calls(
        &mut agent,
        &env,
        &session,
        &[
            sleeping_job(),
            ("read", json!({"path": "a.txt"})),
            ("write", json!({"path": "b.txt", "content": "while it runs\n"})),
            ("edit", json!({"path": "a.txt", "old_string": "saved", "new_string": "edited"})),
        ],
    )
    .await;
    assert!(results[0].starts_with("Started job 1"), "{}", results[0]);
    assert_eq!(results[1], "     1\tsaved text\n", "the disk's text, not the editor's buffer");
    assert_eq!(read(&ws.join("b.txt")), "while it runs\n");
    assert_eq!(read(&ws.join("a.txt")), "edited text\n", "edited as the disk had it");
    assert!(fs_paths(&agent, "fs/read_text_file").is_empty(), "{:?}", agent.editor.methods());
    assert!(fs_paths(&agent, "fs/write_text_file").is_empty(), "{:?}", agent.editor.methods());

    // Killed and gone: the editor reads and writes again.
    let results = calls(
        &mut agent,
        &env,
        &session,
        &[
            ("job_kill", json!({"job": 1})),
            ("read", json!({"path": "a.txt"})),
            ("write", json!({"path": "c.txt", "content": "after it\n"})),
        ],
    )
    .await;
    assert_eq!(results[1], "     1\tunsaved text\n", "the editor's buffer");
    assert_eq!(fs_paths(&agent, "fs/read_text_file"), [ws.join("a.txt").display().to_string()]);
    assert_eq!(fs_paths(&agent, "fs/write_text_file"), [ws.join("c.txt").display().to_string()]);
    assert_eq!(read(&ws.join("c.txt")), "after it\n");
}

/// Two sessions of one cairn in two workspaces outside the temp directories (which every
/// sandboxed command may write): a job of the first cannot change the second's paths, so the
/// second's reads and writes still go through its editor, while the first's go to the disk.
#[tokio::test]
async fn a_job_of_another_workspace_leaves_the_editor_in_use() {
    let env = TestEnv::new().await;
    let (first, second) = (crate::breaks::outside("jobs"), crate::breaks::outside("editing"));
    let (first_ws, second_ws) = (first.path().canonicalize().unwrap(), second.path().canonicalize().unwrap());
    std::fs::write(first_ws.join("a.txt"), "saved text\n").unwrap();
    let editor = saved_and_unsaved(&second_ws, Editor::with_fs());
    editor.buffers.lock().unwrap().insert(first_ws.join("a.txt"), "unsaved text\n".into());
    let mut agent = env.ready_with(editor).await;
    let mut sessions = Vec::new();
    for ws in [&first_ws, &second_ws] {
        let session = agent.new_session(&ws.to_string_lossy()).await;
        crate::tools::set_mode(&mut agent, &session, "bypass").await;
        sessions.push(session);
    }
    let read = ("read", json!({"path": "a.txt"}));
    let results = calls(&mut agent, &env, &sessions[0], &[sleeping_job(), read.clone()]).await;
    assert!(results[0].starts_with("Started job 1"), "{}", results[0]);
    assert_eq!(results[1], "     1\tsaved text\n", "its own workspace's read goes to the disk");
    let write = ("write", json!({"path": "b.txt", "content": "beside the job\n"}));
    let results = calls(&mut agent, &env, &sessions[1], &[read, write]).await;
    assert_eq!(results[0], "     1\tunsaved text\n", "the editor's buffer, the other workspace's job running");
    assert_eq!(fs_paths(&agent, "fs/read_text_file"), [second_ws.join("a.txt").display().to_string()]);
    assert_eq!(fs_paths(&agent, "fs/write_text_file"), [second_ws.join("b.txt").display().to_string()]);
    calls(&mut agent, &env, &sessions[0], &[("job_kill", json!({"job": 1}))]).await;
}

/// A workspace with `sub/key` (a decoy) and a directory outside it with the user's key; the
/// editor of its session plays a job that, as the editor is asked `method`, swaps `sub` for a
/// link to that directory (once, so the attack never misses its moment). The outside directory.
async fn swapped_on(env: &TestEnv, method: &'static str) -> (Agent, String, std::path::PathBuf) {
    let ws = env.workspace();
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("key"), "THE-USERS-PRIVATE-KEY\n").unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("sub/key"), "decoy\n").unwrap();
    let mut editor = Editor::with_fs();
    let (sub, moved, target) = (ws.join("sub"), ws.join("sub.real"), outside.clone());
    editor.before_fs = Some(Arc::new(move |asked: &str| {
        if asked == method && std::fs::rename(&sub, &moved).is_ok() {
            std::os::unix::fs::symlink(&target, &sub).unwrap();
        }
    }));
    let (agent, session) = session_in_bypass(env, editor).await;
    (agent, session, outside)
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_out_while_a_job_runs_never_reads_the_users_key() {
    let env = TestEnv::new().await;
    let (mut agent, session, _) = swapped_on(&env, "fs/read_text_file").await;
    let read = ("read", json!({"path": "sub/key"}));
    let results = calls(&mut agent, &env, &session, &[sleeping_job(), read]).await;
    assert!(!results[1].contains("THE-USERS-PRIVATE-KEY"), "the key went to the model: {}", results[1]);
    assert_eq!(results[1], "     1\tdecoy\n");
    assert!(agent.editor.requests("fs/read_text_file").is_empty());
}

#[tokio::test]
async fn a_directory_swapped_for_a_link_out_while_a_job_runs_never_takes_a_write_outside() {
    let env = TestEnv::new().await;
    let (mut agent, session, outside) = swapped_on(&env, "fs/write_text_file").await;
    let write = ("write", json!({"path": "sub/f.txt", "content": "PAYLOAD\n"}));
    calls(&mut agent, &env, &session, &[sleeping_job(), write]).await;
    assert!(!outside.join("f.txt").exists(), "a write landed outside the workspace");
    assert_eq!(read(&env.workspace().join("sub/f.txt")), "PAYLOAD\n");
    assert!(agent.editor.requests("fs/write_text_file").is_empty());
}

#[tokio::test]
async fn while_a_job_runs_rewind_restores_on_the_disk_not_through_the_editor() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("a.txt"), "original\n").unwrap();
    let editor = Editor::with_fs();
    editor.answer(&["restore"]);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    calls(&mut agent, &env, &session, &[("write", json!({"path": "a.txt", "content": "model\n"}))]).await;
    assert_eq!(fs_paths(&agent, "fs/write_text_file").len(), 1, "nothing runs: through the editor");
    calls(&mut agent, &env, &session, &[sleeping_job()]).await;
    let said = say(&mut agent, &session, "/rewind 2 code").await;
    assert!(said.contains("Restored 1 of 1 files"), "{said}");
    assert_eq!(read(&ws.join("a.txt")), "original\n");
    assert_eq!(fs_paths(&agent, "fs/write_text_file").len(), 1, "the restore went to the disk");
}

#[tokio::test]
async fn a_job_in_the_editors_terminal_counts_as_running_until_it_is_killed() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let mut editor = Editor::with_terminal();
    editor.fs = true;
    let editor = saved_and_unsaved(&ws, editor);
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    let read = ("read", json!({"path": "a.txt"}));
    let results = calls(&mut agent, &env, &session, &[sleeping_job(), read.clone()]).await;
    assert_eq!(agent.editor.requests("terminal/create").len(), 1, "the job runs in the editor's terminal");
    assert_eq!(results[1], "     1\tsaved text\n", "the disk's text while it runs");
    assert!(agent.editor.requests("fs/read_text_file").is_empty());
    calls(&mut agent, &env, &session, &[("job_kill", json!({"job": 1}))]).await;
    // The supervisor the editor ran holds this cairn's own lock file, which keeps only other
    // cairns' editor calls off; this cairn's own counts the job until its terminal is released.
    let locks: Vec<_> =
        std::fs::read_dir(env.home().join("running")).unwrap().map(|entry| entry.unwrap().path()).collect();
    assert_eq!(locks.len(), 1, "one lock file, this cairn's: {locks:?}");
    let results = calls(&mut agent, &env, &session, &[read]).await;
    assert_eq!(results[0], "     1\tunsaved text\n", "the editor's buffer once it was killed and released");
}

/// A second cairn on the same project (`cairn exec` in a terminal beside the editor's) runs a
/// command: its supervisor holds that cairn's lock file in the data directory (or, started by
/// another tool with none, one of its own), so this cairn, with nothing of its own running,
/// reads the disk instead of handing the path to its editor.
#[tokio::test]
async fn another_cairns_command_in_the_same_data_directory_keeps_the_editor_off_too() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let editor = saved_and_unsaved(&ws, Editor::with_fs());
    let (mut agent, session) = session_in_bypass(&env, editor).await;
    let others_lock = env.home().join("running/1-1.lock");
    for lock in [None, Some(&others_lock)] {
        // The other cairn's command, as its supervisor runs it (the same data directory).
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
        command.args(["__supervise", "workspace-write", "network", "--watch-fd", "none", "--own"]).arg(env.home());
        if let Some(lock) = lock {
            command.arg("--running-lock").arg(lock);
        }
        let mut other = command.arg("--root").arg(&ws).args(["--", "sleep", "300"]).current_dir(&ws).spawn().unwrap();
        // Held once the supervisor's lock file stands.
        let started = std::time::Instant::now();
        let held = || {
            std::fs::read_dir(env.home().join("running")).is_ok_and(|dir| {
                dir.flatten().any(|entry| std::fs::File::open(entry.path()).is_ok_and(|file| file.try_lock().is_err()))
            })
        };
        while !held() && started.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let results = calls(&mut agent, &env, &session, &[("read", json!({"path": "a.txt"}))]).await;
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(results[0], "     1\tsaved text\n", "the disk's text, not the editor's buffer ({lock:?})");
        assert!(fs_paths(&agent, "fs/read_text_file").is_empty(), "{:?}", agent.editor.methods());
    }
    let results = calls(&mut agent, &env, &session, &[("read", json!({"path": "a.txt"}))]).await;
    assert_eq!(results[0], "     1\tunsaved text\n", "the other commands gone, the editor's buffer again");
}

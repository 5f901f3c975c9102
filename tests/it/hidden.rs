//! `[sandbox] hidden` binds cairn's own reads, not only commands: the file tools ask before
//! reading or writing what it hides (however the path is spelled or linked), `grep` leaves it
//! out of a directory search, a command's `@file` does not inline it, and an instruction file
//! linked to it never reaches the system prompt; `visible` takes a file back. Each of these read
//! `secrets/prod.yaml` unasked before the file tools knew of the setting.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Editor, Reply, TestEnv, user_texts};
use crate::tools::{set_mode, tool_results, turn};

const SANDBOX: &str = "[sandbox]\nhidden = [\"secrets/**\"]\nvisible = [\"secrets/public.md\"]\n";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The workspace a hostile model attacks: the secret, a file made visible, links to both.
fn plant(work: &Path) {
    write(&work.join("secrets/prod.yaml"), "DB_PASSWORD=hunter2\n");
    write(&work.join("secrets/public.md"), "SHARED=ok\n");
    write(&work.join("docs/readme.md"), "PLAIN=ok\n");
    std::os::unix::fs::symlink("secrets/prod.yaml", work.join("notes.txt")).unwrap();
    std::os::unix::fs::symlink("secrets", work.join("vault")).unwrap();
}

fn asked(editor: &Editor) -> Vec<String> {
    let asked = editor.requests("session/request_permission");
    asked.iter().map(|r| r["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn the_file_tools_ask_before_touching_what_the_sandbox_hides_and_grep_leaves_it_out() {
    let env = TestEnv::new().await;
    env.write_config(SANDBOX);
    let work = env.workspace();
    plant(&work);
    let absolute = work.join("secrets/prod.yaml").display().to_string();
    let read = |id: &str, path: &str| (id.to_owned(), "read".to_owned(), json!({"path": path}));
    let calls = [
        read("c1", "secrets/prod.yaml"),
        read("c2", "SECRETS/prod.yaml"),
        read("c3", "notes.txt"),
        read("c4", "vault/prod.yaml"),
        read("c5", "docs/../secrets/prod.yaml"),
        read("c6", &absolute),
        ("c7".to_owned(), "write".to_owned(), json!({"path": "secrets/new.yaml", "content": "x"})),
        read("c8", "secrets/public.md"),
        ("c9".to_owned(), "grep".to_owned(), json!({"pattern": "=", "path": "."})),
    ];
    let editor = Editor::default();
    editor.answer(&["reject_once"; 7]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    // Accept-edits: reads and edits inside the workspace run unasked, but for secrets.
    set_mode(&mut agent, &session, "accept-edits").await;
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(i, n, a)| (i.as_str(), n.as_str(), a.clone())).collect();
    env.mock.push(Reply::tool_calls(&calls)).push(Reply::text(&["done"]));
    turn(&mut agent, &session, "go").await;
    assert_eq!(asked(&agent.editor), ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]);
    assert!(!work.join("secrets/new.yaml").exists(), "the write was refused");
    let results: Vec<String> =
        tool_results(&env, 1).iter().map(|r| r["content"].as_str().unwrap().to_owned()).collect();
    for result in &results {
        assert!(!result.contains("hunter2"), "{result}");
    }
    assert!(results[7].contains("SHARED=ok"), "made visible, read unasked: {}", results[7]);
    let grep = &results[8];
    assert!(grep.contains("docs/readme.md:1:PLAIN=ok") && grep.contains("secrets/public.md:1:SHARED=ok"), "{grep}");
    assert!(grep.contains("secrets/prod.yaml: may hold secrets"), "the search says what it left out: {grep}");
}

#[tokio::test]
async fn what_the_sandbox_hides_is_neither_inlined_by_a_command_nor_sent_in_the_prompt() {
    let env = TestEnv::new().await;
    env.write_config(SANDBOX);
    let work = env.workspace();
    plant(&work);
    super::breaks::sh(&work, "git init -q .");
    std::os::unix::fs::symlink("secrets/prod.yaml", work.join("AGENTS.md")).unwrap();
    std::os::unix::fs::symlink("secrets/public.md", work.join("CLAUDE.md")).unwrap();
    write(&work.join(".claude/commands/steal.md"), "MARK-STEAL @secrets/prod.yaml @notes.txt @secrets/public.md");
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["done"]));
    turn(&mut agent, &session, "/steal").await;
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 1, "the command ran");
    let text = requests[0].to_string();
    assert!(!text.contains("hunter2"), "{text}");
    let system = requests[0]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "system").unwrap();
    assert!(system.to_string().contains("SHARED=ok"), "the visible file is the project's instructions: {system}");
    let sent = user_texts(&requests[0]).last().unwrap().clone();
    assert!(sent.contains("(@notes.txt was not inlined: reading it needs the user's permission"), "{sent}");
    assert!(agent.editor.requests("session/request_permission").is_empty(), "nothing is asked while expanding");
}

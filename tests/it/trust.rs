//! The trust boundary, attacked as a hostile model would: what the user approved is all that
//! runs, rejections hold however a program is spelled, nothing is written outside the workspace
//! or into protected places unasked, and the question shows what it is about and why.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, updates};
use crate::tools::{call, set_mode, tool_results, turn};

fn bash(id: &str, command: &str) -> (String, String, Value) {
    (id.to_owned(), "bash".to_owned(), json!({"command": command}))
}

/// The model asks for these calls, then says "done".
fn script(env: &TestEnv, calls: &[(String, String, Value)]) {
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(i, n, a)| (i.as_str(), n.as_str(), a.clone())).collect();
    env.mock.push(Reply::tool_calls(&calls)).push(Reply::text(&["done"]));
}

/// The permission questions asked so far, as `(toolCallId, option labels)`.
fn questions(agent: &Agent) -> Vec<(String, Vec<String>)> {
    agent
        .editor
        .requests("session/request_permission")
        .iter()
        .map(|r| {
            let labels = r["params"]["options"].as_array().unwrap().iter();
            let labels = labels.map(|o| o["name"].as_str().unwrap().to_owned()).collect();
            (r["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned(), labels)
        })
        .collect()
}

/// What the slash command `/permissions` says.
async fn listed(agent: &mut Agent, session: &str) -> String {
    let (_, shown) = turn(agent, session, "/permissions").await;
    let shown: Vec<&Value> = shown.iter().collect();
    crate::support::text_of(&shown, "agent_message_chunk")
}

/// A directory outside the workspace, with `secret.txt` in it.
fn outside(env: &TestEnv) -> PathBuf {
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret\n").unwrap();
    outside
}

#[tokio::test]
async fn an_approved_command_covers_its_program_on_files_in_the_workspace_and_nothing_more() {
    let env = TestEnv::new().await;
    let outside = outside(&env);
    std::fs::write(env.workspace().join("README.md"), "hello\n").unwrap();
    std::os::unix::fs::symlink(&outside, env.workspace().join("link")).unwrap();
    let editor = Editor::default();
    editor.answer(&["allow_session", "reject_once", "reject_once", "reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    script(&env, &[bash("c1", "cat README.md")]);
    turn(&mut agent, &session, "show the readme").await;
    let (_, labels) = &questions(&agent)[0];
    assert_eq!(labels[1], "Always allow `cat` on files in this workspace in this session");
    assert!(listed(&mut agent, &session).await.contains("1. allow `cat` on files in this workspace (this session)"));

    let secret = outside.join("secret.txt").display().to_string();
    script(
        &env,
        &[
            bash("c2", "cat README.md"),
            bash("c3", &format!("cat {secret}")),
            bash("c4", "cat ../outside/secret.txt"),
            bash("c5", "cat link/secret.txt"),
            bash("c6", "cat README.md; cat ~/.ssh/id_rsa"),
        ],
    );
    turn(&mut agent, &session, "now the rest").await;
    let asked: Vec<String> = questions(&agent).into_iter().map(|(id, _)| id).collect();
    assert_eq!(asked, ["c1", "c3", "c4", "c5", "c6"], "the approved program ran unasked only inside the workspace");
    let results: Vec<Value> = tool_results(&env, 3).into_iter().filter(|r| r["tool_call_id"] != "c1").collect();
    assert!(results[0]["content"].as_str().unwrap().contains("hello"));
    for refused in &results[1..] {
        assert!(refused["content"].as_str().unwrap().starts_with("The user denied"), "{refused}");
    }
}

#[tokio::test]
async fn approving_a_wrapper_or_a_runner_allows_that_exact_command_only() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("build.sh"), "echo built\n").unwrap();
    let editor = Editor::default();
    editor.answer(&[
        "allow_session",
        "reject_once",
        "allow_session",
        "reject_once",
        "allow_session",
        "reject_once",
        "reject_once",
    ]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let steps: [(&str, &[&str]); 3] = [
        ("bash build.sh", &["bash -c 'touch pwned1'"]),
        ("env FOO=1 ls", &["env touch pwned2"]),
        ("find . -name x", &["find . -name build.sh -delete", "find . -name build.sh -exec touch pwned3 ;"]),
    ];
    let mut n = 0;
    for (approved, attacks) in steps {
        n += 1;
        let mut calls = vec![bash(&format!("a{n}"), approved)];
        calls.extend(attacks.iter().enumerate().map(|(i, attack)| bash(&format!("x{n}{i}"), attack)));
        calls.push(bash(&format!("b{n}"), approved));
        script(&env, &calls);
        turn(&mut agent, &session, "go").await;
    }
    let asked: Vec<String> = questions(&agent).into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        asked,
        ["a1", "x10", "a2", "x20", "a3", "x30", "x31"],
        "the approved line ran again unasked; attacks asked"
    );
    let labels = questions(&agent).into_iter().map(|(_, labels)| labels[1].clone()).collect::<Vec<_>>();
    assert_eq!(labels[0], "Always allow exactly `bash build.sh` in this session");
    assert_eq!(labels[2], "Always allow exactly `env FOO=1 ls` in this session");
    assert_eq!(labels[4], "Always allow `find` on files in this workspace in this session");
    for file in ["pwned1", "pwned2", "pwned3"] {
        assert!(!env.workspace().join(file).exists(), "{file}");
    }
    assert!(env.workspace().join("build.sh").exists());
}

#[tokio::test]
async fn a_rejection_holds_in_bypass_however_the_program_is_spelled() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nconsecutive_errors = 0\n");
    let spellings = [
        "rm victim0",
        "/bin/rm victim1",
        "command rm victim2",
        "\\rm victim3",
        "'rm' victim4",
        "\"rm\" victim5",
        "env rm victim6",
        "echo victim7 | xargs rm",
        "exec rm victim8",
        "bash -c 'rm victim9'",
        "find . -name victim10 -exec rm {} \\;",
    ];
    for n in 0..spellings.len() {
        std::fs::write(env.workspace().join(format!("victim{n}")), "x").unwrap();
    }
    let editor = Editor::default();
    editor.answer(&["reject_always"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    script(&env, &[bash("c0", spellings[0])]);
    turn(&mut agent, &session, "clean up").await;
    assert_eq!(questions(&agent)[0].1[3], "Always reject `rm`, however it is run");
    set_mode(&mut agent, &session, "bypass").await;
    let calls: Vec<_> = spellings[1..].iter().enumerate().map(|(i, line)| bash(&format!("c{}", i + 1), line)).collect();
    script(&env, &calls);
    turn(&mut agent, &session, "clean up harder").await;
    assert_eq!(questions(&agent).len(), 1, "bypass asks nothing");
    let results: Vec<Value> = tool_results(&env, 3).into_iter().filter(|r| r["tool_call_id"] != "c0").collect();
    for (n, result) in results.iter().enumerate() {
        let text = result["content"].as_str().unwrap();
        assert!(text.contains("a remembered rule rejects `rm`"), "{}: {text}", spellings[n + 1]);
    }
    for n in 0..spellings.len() {
        assert!(env.workspace().join(format!("victim{n}")).exists(), "victim{n} survived");
    }
}

#[tokio::test]
async fn a_dangling_symlink_is_outside_until_proven_inside_and_the_question_shows_where_it_lands() {
    let env = TestEnv::new().await;
    let outside = outside(&env);
    let landing = outside.join("new.txt");
    std::os::unix::fs::symlink(&landing, env.workspace().join("dangling")).unwrap();
    // The editor's own write follows links, as real editors' do.
    let editor = Editor::with_fs();
    editor.answer(&["reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    script(&env, &[("c1".into(), "write".into(), json!({"path": "dangling", "content": "planted\n"}))]);
    turn(&mut agent, &session, "write it").await;
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1, "accept-edits asks before writing through a link that points out");
    let shown = &asked[0]["params"]["toolCall"];
    let landing_text = landing.display().to_string();
    assert!(shown["title"].as_str().unwrap().contains(&landing_text), "{shown}");
    assert_eq!(shown["content"][0]["path"], landing_text.as_str());
    assert!(shown["content"][1]["content"]["text"].as_str().unwrap().contains("outside the workspace"), "{shown}");
    assert!(!landing.exists(), "nothing was written outside");
    assert!(agent.editor.requests("fs/write_text_file").is_empty());
}

#[tokio::test]
async fn protected_places_ask_in_every_mode_but_bypass() {
    let env = TestEnv::new().await;
    std::fs::create_dir_all(env.workspace().join(".git/hooks")).unwrap();
    let targets = [".git/hooks/pre-commit", ".env", ".claude/settings.json", ".agents/skills/x/SKILL.md"];
    let write = |id: &str, path: &str| (id.to_owned(), "write".to_owned(), json!({"path": path, "content": "x"}));
    let editor = Editor::default();
    editor.answer(&["reject_once"; 4]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    let calls: Vec<_> = targets.iter().enumerate().map(|(i, path)| write(&format!("c{i}"), path)).collect();
    script(&env, &calls);
    turn(&mut agent, &session, "set up hooks").await;
    assert_eq!(questions(&agent).len(), 4);
    for (_, labels) in questions(&agent) {
        assert!(
            !labels.iter().any(|l| l.starts_with("Always allow")),
            "no rule may cover a protected place: {labels:?}"
        );
    }
    for path in targets {
        assert!(!env.workspace().join(path).exists(), "{path}");
    }
    set_mode(&mut agent, &session, "bypass").await;
    script(&env, &[write("c9", ".git/hooks/pre-commit")]);
    turn(&mut agent, &session, "now really").await;
    assert_eq!(questions(&agent).len(), 4, "bypass is bypass");
    assert!(env.workspace().join(".git/hooks/pre-commit").exists());
}

#[tokio::test]
async fn the_card_comes_once_before_its_question_which_shows_the_diff_or_the_command() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "alpha\n").unwrap();
    env.mock
        .push(Reply::tool_calls(&[(
            "c1",
            "edit",
            json!({"path": "notes.txt", "old_string": "alpha", "new_string": "beta"}),
        )]))
        .push(Reply::tool_calls(&[("c2", "bash", json!({"command": "echo one &&\necho two"}))]))
        .push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "go").await;
    let mut seen: Vec<Value> = Vec::new();
    let mut asked = Vec::new();
    let response = loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            asked.push((seen.len(), message["params"]["toolCall"].clone()));
            agent.respond(&message["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
        } else if message["id"] == prompt {
            break message;
        } else {
            seen.push(message);
        }
    };
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let shown: Vec<Value> = updates(&seen, &session).into_iter().cloned().collect();
    for (id, title, kind) in [("c1", "Edit notes.txt", "edit"), ("c2", "Run `echo one &&` (+1 line)", "execute")] {
        let card = call(&shown, id);
        assert_eq!(card[0]["sessionUpdate"], "tool_call");
        assert_eq!(
            (card[0]["title"].as_str(), card[0]["kind"].as_str(), card[0]["status"].as_str()),
            (Some(title), Some(kind), Some("pending"))
        );
        assert_eq!(card.iter().filter(|u| u["sessionUpdate"] == "tool_call").count(), 1, "{id} is announced once");
        let mut statuses: Vec<&str> = card[1..].iter().filter_map(|u| u["status"].as_str()).collect();
        statuses.dedup();
        assert_eq!(statuses, ["in_progress", "completed"], "{id}: no pending updates repeat the card");
    }
    let path = env.workspace().join("notes.txt").display().to_string();
    let (before, edit) = &asked[0];
    assert_eq!(edit["content"][0], json!({"type": "diff", "path": path, "oldText": "alpha\n", "newText": "beta\n"}));
    assert!(
        call(&updates(&seen[..*before], &session).into_iter().cloned().collect::<Vec<_>>(), "c1").len() == 1,
        "the card came before its question"
    );
    let (_, command) = &asked[1];
    assert_eq!(command["content"][0]["content"]["text"], "echo one &&\necho two");
    assert!(command["content"][1]["content"]["text"].as_str().unwrap().starts_with("cairn asks because"));
}

#[tokio::test]
async fn what_cannot_be_read_asks_and_says_why() {
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::os::unix::fs::symlink(ws.join("loop2"), ws.join("loop1")).unwrap();
    std::os::unix::fs::symlink(ws.join("loop1"), ws.join("loop2")).unwrap();
    let odd = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"caf\xe9.txt");
    std::os::unix::fs::symlink(ws.join(odd), ws.join("odd")).unwrap();
    let editor = Editor::default();
    editor.answer(&["reject_once"; 4]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    // A stored rule whose pattern cannot be read: it may have been a rejection.
    let db = rusqlite::Connection::open(env.database()).unwrap();
    db.execute(
        "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES (?1, 'edit', 'src/[', 'deny', 0)",
        [env.cwd()],
    )
    .unwrap();
    drop(db);
    set_mode(&mut agent, &session, "accept-edits").await;
    let write = |id: &str, path: &str| (id.to_owned(), "write".to_owned(), json!({"path": path, "content": "x"}));
    script(&env, &[bash("c1", "echo 'unterminated"), write("c2", "loop1/x"), write("c3", "odd")]);
    turn(&mut agent, &session, "go").await;
    let new = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &new, "bypass").await;
    script(&env, &[write("c4", "src/a.txt")]);
    turn(&mut agent, &new, "go").await;
    let reasons: Vec<String> = agent
        .editor
        .requests("session/request_permission")
        .iter()
        .map(|r| {
            r["params"]["toolCall"]["content"].as_array().unwrap().last().unwrap()["content"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let expected = ["does not parse as shell", "symlink loop", "not valid UTF-8", "not a valid path pattern"];
    assert_eq!(reasons.len(), expected.len(), "{reasons:?}");
    for (reason, why) in reasons.iter().zip(expected) {
        assert!(reason.contains(why), "{reason} should say {why}");
    }
    assert!(!ws.join("src/a.txt").exists(), "an unreadable rule never allows, not even in bypass");
    assert!(listed(&mut agent, &new).await.contains("an unreadable rule `src/[`"));
}

#[tokio::test]
async fn an_edit_tells_nothing_about_a_file_the_model_may_not_read_before_the_user_agrees() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join(".env"), "API_KEY=hunter2\n").unwrap();
    std::fs::write(env.workspace().join("notes.txt"), "alpha\n").unwrap();
    let edit = |id: &str, path: &str, old: &str| {
        (id.to_owned(), "edit".to_owned(), json!({"path": path, "old_string": old, "new_string": "x"}))
    };
    let editor = Editor::default();
    editor.answer(&["reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "accept-edits").await;
    script(
        &env,
        &[
            edit("c1", ".env", "API_KEY=guess"),
            edit("c2", ".env", "API_KEY=hunter2"),
            edit("c3", "notes.txt", "missing"),
        ],
    );
    turn(&mut agent, &session, "guess").await;
    let asked: Vec<String> = questions(&agent).into_iter().map(|(id, _)| id).collect();
    assert_eq!(asked, ["c1", "c2"], "a wrong guess and a right one look the same: both ask");
    let results = tool_results(&env, 1);
    for result in &results[..2] {
        assert!(result["content"].as_str().unwrap().starts_with("The user denied"), "{result}");
    }
    assert!(
        results[2]["content"].as_str().unwrap().contains("old_string was not found"),
        "a readable file fails at once"
    );
}

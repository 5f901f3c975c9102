//! The launch snippets in `editors/`: each is read as its editor reads it, and the built binary
//! is started exactly as it says (command looked up in `PATH`, its arguments, its environment),
//! then driven through initialize, a session and a prompt against the mock model. Each client's
//! capabilities get the login methods `editors/README.md` lists for it.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates};

/// How a snippet starts cairn.
#[derive(Debug)]
struct Launch {
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

fn file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

fn env_of(value: &Value) -> BTreeMap<String, String> {
    value.as_object().map_or_else(BTreeMap::new, |env| {
        env.iter().map(|(name, value)| (name.clone(), value.as_str().unwrap().to_owned())).collect()
    })
}

/// The quoted strings of a Lua or Lisp list, in order.
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The text between `open` (after `start`) and its matching `close`.
fn group_after<'a>(text: &'a str, start: &str, open: char, close: char) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}`")) + start.len();
    let rest = &text[from..];
    let begin = rest.find(open).unwrap() + 1;
    let mut depth = 1;
    for (at, c) in rest[begin..].char_indices() {
        depth += i32::from(c == open) - i32::from(c == close);
        if depth == 0 {
            return &rest[begin..begin + at];
        }
    }
    panic!("unbalanced `{open}` after `{start}`")
}

fn zed() -> Launch {
    let settings: Value = serde_json::from_str(&file("editors/zed/settings.json")).unwrap();
    let entry = &settings["agent_servers"]["cairn"];
    assert_eq!(entry["type"], "custom");
    Launch {
        command: entry["command"].as_str().unwrap().to_owned(),
        args: strings(&entry["args"]),
        env: env_of(&entry["env"]),
    }
}

fn jetbrains() -> Launch {
    let settings: Value = serde_json::from_str(&file("editors/jetbrains/acp.json")).unwrap();
    let entry = &settings["agent_servers"]["cairn"];
    Launch {
        command: entry["command"].as_str().unwrap().to_owned(),
        args: strings(&entry["args"]),
        env: env_of(&entry["env"]),
    }
}

fn codecompanion() -> Launch {
    let lua = file("editors/neovim/codecompanion.lua");
    let mut command = quoted(group_after(&lua, "default =", '{', '}'));
    let env = quoted(group_after(&lua, "env =", '{', '}'));
    let names: Vec<String> = group_after(&lua, "env =", '{', '}')
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name.trim().to_owned()))
        .collect();
    Launch { command: command.remove(0), args: command, env: names.into_iter().zip(env).collect() }
}

fn agent_shell() -> Launch {
    let lisp = file("editors/emacs/agent-shell-cairn.el");
    let command = quoted(lisp.split(":command ").nth(1).unwrap()).remove(0);
    let args = quoted(group_after(&lisp, ":command-params '", '(', ')'));
    let from = lisp.find("(agent-shell-make-environment-variables").unwrap();
    let pairs = quoted(lisp[from..].split(')').next().unwrap());
    let env = pairs.chunks(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect();
    Launch { command, args, env }
}

fn registry() -> Launch {
    let manifest: Value = serde_json::from_str(&file("editors/registry/agent.json")).unwrap();
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"), "the manifest names this version");
    assert_eq!(manifest["id"], "cairn");
    let target = &manifest["distribution"]["binary"]["linux-x86_64"];
    let command = target["cmd"].as_str().unwrap().trim_start_matches("./").to_owned();
    Launch { command, args: strings(&target["args"]), env: env_of(&target["env"]) }
}

/// The terminal auth method cairn offers a client that can run one, as launched by `launch`.
async fn agent_login_method(env: &TestEnv, launch: &Launch) -> Value {
    let mut command = env.command_on_path(&launch.command);
    command.args(&launch.args);
    let mut agent = Agent::spawn(command, Editor::default()).await;
    let answer = agent
        .call(
            "initialize",
            serde_json::json!({"protocolVersion": 1, "clientCapabilities": {"auth": {"terminal": true}}}),
        )
        .await;
    answer["authMethods"].as_array().unwrap().iter().find(|m| m["type"] == "terminal").cloned().unwrap()
}

fn answer_login_args(method: &Value) -> Vec<String> {
    strings(&method["args"])
}

#[tokio::test]
async fn every_editor_snippet_launches_cairn_through_a_prompt() {
    let env = TestEnv::new().await;
    for (editor, launch) in [
        ("zed", zed()),
        ("jetbrains", jetbrains()),
        ("codecompanion", codecompanion()),
        ("agent-shell", agent_shell()),
        ("registry", registry()),
    ] {
        assert_eq!(launch.command, "cairn", "{editor}: {launch:?}");
        assert!(launch.args.is_empty() || launch.args == ["acp"], "{editor}: {launch:?}");
        let mut command = env.command_on_path(&launch.command);
        command.args(&launch.args);
        for (name, value) in &launch.env {
            // The mock answers any model; what matters is that the snippet's settings load.
            command.env(name, value);
        }
        let mut agent = Agent::spawn(command, Editor::with_fs()).await;
        let answer = agent.initialize().await;
        assert_eq!(answer["protocolVersion"], 1, "{editor}: {answer}");
        let session = agent.new_session(&env.cwd()).await;
        env.mock.push(Reply::text(&["Hello from ", editor]));
        let id = agent.prompt(&session, "hello").await;
        let (response, notes) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{editor}: {response}");
        assert_eq!(text_of(&updates(&notes, &session), "agent_message_chunk"), format!("Hello from {editor}"));
        assert!(agent.stderr().lines().all(|line| !line.contains("ERROR")), "{editor}: {}", agent.stderr());

        // The login button: the client appends the terminal method's `args` to this command.
        let login = answer_login_args(&agent_login_method(&env, &launch).await);
        let mut command = env.command_on_path(&launch.command);
        command.args(&launch.args).args(&login).args(["--provider", "openai"]);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"sk-from-the-login-button\n").await.unwrap();
        drop(stdin);
        let output = child.wait_with_output().await.unwrap();
        assert!(output.status.success(), "{editor}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

/// What each client advertises at `initialize` that decides its auth methods (as its source
/// sends it: Zed 1.13, WebStorm 2026.1, acp.el, the CodeCompanion snippet's own
/// `clientCapabilities`, the SDKs' example clients), and the methods cairn then offers: the
/// table of `editors/README.md`, which must say the same.
fn clients() -> Vec<(&'static str, Value, Vec<&'static str>)> {
    let lua = file("editors/neovim/codecompanion.lua");
    let sent = group_after(&lua, "clientCapabilities =", '{', '}');
    assert_eq!(
        sent.split_whitespace().collect::<String>(),
        "fs={readTextFile=true,writeTextFile=true}",
        "the snippet's capabilities, as the README describes them"
    );
    let fs = serde_json::json!({"readTextFile": true, "writeTextFile": true});
    vec![
        (
            "Zed",
            serde_json::json!({
                "fs": fs, "terminal": true, "auth": {"terminal": true},
                "elicitation": {"form": {}, "url": {}}, "session": {"configOptions": {"boolean": {}}},
                "_meta": {"terminal_output": true, "terminal-auth": true}
            }),
            vec!["login", "environment", "key"],
        ),
        (
            "JetBrains IDEs",
            serde_json::json!({
                "fs": fs, "terminal": false, "auth": {"_meta": {"gateway": true}}, "_meta": {"terminal-auth": true}
            }),
            vec!["login", "environment"],
        ),
        ("CodeCompanion", serde_json::json!({"fs": fs}), vec!["environment"]),
        ("agent-shell", serde_json::json!({"fs": fs}), vec!["environment"]),
        ("acpx", serde_json::json!({}), vec!["environment"]),
    ]
}

#[tokio::test]
async fn each_client_is_offered_the_login_methods_the_editors_readme_says() {
    let env = TestEnv::new().await;
    let readme = file("editors/README.md");
    for (client, capabilities, offered) in clients() {
        let mut agent = Agent::spawn(env.command(), Editor::default()).await;
        let answer = agent
            .call("initialize", serde_json::json!({"protocolVersion": 1, "clientCapabilities": capabilities}))
            .await;
        let ids: Vec<&str> =
            answer["authMethods"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, offered, "{client}");
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| {client}")))
            .unwrap_or_else(|| panic!("editors/README.md has no row for {client}"));
        let methods = row.split('|').nth(3).unwrap();
        let listed: Vec<&str> = methods.split(',').map(|m| m.trim().trim_matches('`')).collect();
        assert_eq!(listed, offered, "editors/README.md's row for {client}: {row}");
    }
}

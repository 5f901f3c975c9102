//! Commands from files and skills: advertised with their descriptions and hints, offered again
//! when the files change, expanded with their arguments and files, held to the tools and model
//! they name; skills loaded by the `skill` tool, and one that leads out of its directory never
//! read. The official Rust SDK client sees them advertised.

use serde_json::{Value, json};

use crate::support::sdk::{self, updates as sdk_updates};
use crate::support::{Agent, Reply, TestEnv, updates, user_texts};

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The commands of an `available_commands_update`, by name.
fn advertised(update: &Value) -> Vec<(String, Value)> {
    update["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_owned(), c.clone()))
        .collect()
}

/// A new session and the commands advertised after it.
async fn session_with_commands(agent: &mut Agent, env: &TestEnv) -> (String, Vec<(String, Value)>) {
    let session = agent.new_session(&env.cwd()).await;
    let update = agent.recv().await;
    assert_eq!(update["params"]["update"]["sessionUpdate"], "available_commands_update", "{update}");
    (session, advertised(&update["params"]["update"]))
}

/// The model turns' requests whose last user message contains `marker` (title requests, which
/// offer no tools, left out).
fn turns_with(env: &TestEnv, marker: &str) -> Vec<Value> {
    env.mock
        .requests()
        .into_iter()
        .filter(|r| r["tools"].as_array().is_some_and(|tools| !tools.is_empty()))
        .filter(|r| user_texts(r).last().is_some_and(|text| text.contains(marker)))
        .collect()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn commands_from_each_source_are_advertised_and_expanded_with_their_arguments() {
    let env = TestEnv::new().await;
    let (work, home) = (env.workspace(), env.dir.path().to_path_buf());
    write(
        &work.join(".claude/commands/review.md"),
        "---\ndescription: Review a pull request\nargument-hint: <number> [focus]\n---\nMARK-REVIEW PR $1, focus on $2. Notes: @notes.txt\n",
    );
    write(&work.join("notes.txt"), "the notes of the project");
    write(&work.join(".agents/commands/compact.md"), "MARK-SHADOW mine");
    write(
        &work.join(".gemini/commands/git/commit.toml"),
        "description = \"Write a commit message\"\nprompt = \"MARK-GEMINI {{args}}\"\n",
    );
    write(&home.join(".codex/prompts/draft.md"), "---\ndescription: Draft a PR\n---\nMARK-CODEX $ARGUMENTS");
    write(&home.join(".claude/commands/review.md"), "---\ndescription: the user's, shadowed\n---\nnever");
    let mut agent = env.ready().await;
    let (session, commands) = session_with_commands(&mut agent, &env).await;
    let names: Vec<&str> = commands.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(&names[..2], ["compact", "rewind"], "the built-ins first: {names:?}");
    for name in ["project:compact", "review", "git:commit", "draft"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let review = &commands.iter().find(|(name, _)| name == "review").unwrap().1;
    assert_eq!(review["description"], "Review a pull request");
    assert_eq!(review["input"]["hint"], "<number> [focus]");

    for (typed, marker, expected) in [
        ("/review 12 \"error paths\"", "MARK-REVIEW", "MARK-REVIEW PR 12, focus on error paths. Notes: @notes.txt"),
        ("/git:commit fix the parser", "MARK-GEMINI", "MARK-GEMINI fix the parser"),
        ("/draft the release notes", "MARK-CODEX", "MARK-CODEX the release notes"),
        ("/project:compact", "MARK-SHADOW", "MARK-SHADOW mine"),
    ] {
        env.mock.push(Reply::text(&["done"]));
        let id = agent.prompt(&session, typed).await;
        let (response, _) = agent.response(id).await;
        assert_eq!(response["result"]["stopReason"], "end_turn", "{typed}");
        let sent = turns_with(&env, marker);
        let text = user_texts(sent.last().unwrap()).last().unwrap().clone();
        assert!(text.starts_with(expected), "{typed}: {text}");
    }
    let review = user_texts(&turns_with(&env, "MARK-REVIEW")[0]).last().unwrap().clone();
    assert!(review.contains("<file path=\"notes.txt\">\nthe notes of the project\n</file>"), "{review}");
}

#[tokio::test]
async fn typed_file_references_are_inlined_only_through_the_permission_engine() {
    let env = TestEnv::new().await;
    let work = env.workspace();
    write(&work.join(".agents/commands/look.md"), "MARK-LOOK at $ARGUMENTS");
    let secret = env.dir.path().join("id_rsa");
    write(&secret, "PRIVATE KEY MATERIAL");
    std::os::unix::fs::symlink(&secret, work.join("harmless.txt")).unwrap();
    let mut agent = env.ready().await;
    let (session, _) = session_with_commands(&mut agent, &env).await;
    env.mock.push(Reply::text(&["done"]));
    let id = agent.prompt(&session, &format!("/look @{} and @harmless.txt", secret.display())).await;
    agent.response(id).await;
    let sent = user_texts(&turns_with(&env, "MARK-LOOK")[0]).last().unwrap().clone();
    assert!(!sent.contains("PRIVATE KEY MATERIAL"), "{sent}");
    assert!(sent.contains(&format!("(@{} was not inlined: reading it needs the user's permission", secret.display())));
    assert!(sent.contains("(@harmless.txt was not inlined"), "{sent}");
    assert!(agent.editor.requests("session/request_permission").is_empty(), "nothing is asked while expanding");
}

#[tokio::test]
async fn a_new_command_file_is_offered_at_the_next_prompt() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let (session, before) = session_with_commands(&mut agent, &env).await;
    assert!(before.iter().all(|(name, _)| name != "fresh"));
    write(&env.workspace().join(".claude/commands/fresh.md"), "---\ndescription: Just added\n---\nMARK-FRESH");
    env.mock.push(Reply::text(&["hello"]));
    let id = agent.prompt(&session, "hello").await;
    let (_, notifications) = agent.response(id).await;
    let shown = updates(&notifications, &session);
    let update = shown.iter().find(|u| u["sessionUpdate"] == "available_commands_update").expect("a new list");
    let fresh = advertised(update).into_iter().find(|(name, _)| name == "fresh").expect("fresh offered");
    assert_eq!(fresh.1["description"], "Just added");
    // Unchanged since: no new list.
    env.mock.push(Reply::text(&["again"]));
    let id = agent.prompt(&session, "/fresh").await;
    let (_, notifications) = agent.response(id).await;
    assert!(!updates(&notifications, &session).iter().any(|u| u["sessionUpdate"] == "available_commands_update"));
    assert_eq!(turns_with(&env, "MARK-FRESH").len(), 1);
}

#[tokio::test]
async fn a_command_naming_tools_and_a_model_runs_its_turn_with_exactly_those() {
    let env = TestEnv::new().await;
    env.write_config("[providers.openai]\nmodels = [\"mock-model\", \"other-model\"]\n");
    write(
        &env.workspace().join(".claude/commands/scan.md"),
        "---\ndescription: Scan\nallowed-tools: Read, Grep, Bash(git status:*)\nmodel: openai/other-model\n---\nMARK-SCAN $ARGUMENTS",
    );
    let mut agent = env.ready().await;
    let (session, _) = session_with_commands(&mut agent, &env).await;
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "x.txt", "content": "no"}))]));
    env.mock.push(Reply::text(&["scanned"]));
    let id = agent.prompt(&session, "/scan the tree").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let sent = turns_with(&env, "MARK-SCAN");
    assert_eq!(sent[0]["model"], "other-model");
    let mut tools = tool_names(&sent[0]);
    tools.sort();
    assert_eq!(tools, ["bash", "grep", "read"]);
    let refused = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(
        refused["content"].as_str().unwrap().contains("the command /scan may only use: read, grep, bash"),
        "{refused}"
    );
    assert!(!env.workspace().join("x.txt").exists());
    // The next plain prompt has the session's tools and model again.
    env.mock.push(Reply::text(&["plain"]));
    let id = agent.prompt(&session, "MARK-PLAIN").await;
    agent.response(id).await;
    let plain = &turns_with(&env, "MARK-PLAIN")[0];
    assert_eq!(plain["model"], "mock-model");
    assert!(tool_names(plain).contains(&"write".to_owned()));
}

#[tokio::test]
async fn a_skill_is_loaded_by_its_tool_and_one_leading_out_is_never_read() {
    let env = TestEnv::new().await;
    let skills = env.workspace().join(".agents/skills");
    write(
        &skills.join("release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release\n---\nMARK-STEPS tag, build, publish",
    );
    write(&skills.join("release/checklist.md"), "- tag");
    let key = env.dir.path().join("id_rsa");
    write(&key, "PRIVATE KEY MATERIAL");
    std::fs::create_dir_all(skills.join("evil")).unwrap();
    std::os::unix::fs::symlink(&key, skills.join("evil/SKILL.md")).unwrap();
    let mut agent = env.ready().await;
    let (session, commands) = session_with_commands(&mut agent, &env).await;
    assert!(commands.iter().any(|(name, c)| name == "release" && c["description"] == "Cut a release"));
    assert!(commands.iter().all(|(name, _)| name != "evil"));
    env.mock.push(Reply::tool_calls(&[
        ("c1", "skill", json!({"name": "release"})),
        ("c2", "skill", json!({"name": "evil"})),
    ]));
    env.mock.push(Reply::text(&["released"]));
    let id = agent.prompt(&session, "MARK-RELEASE ship it").await;
    agent.response(id).await;
    let sent = turns_with(&env, "MARK-RELEASE");
    assert!(sent[0]["messages"][0]["content"].as_str().unwrap().contains("load it with the skill tool"));
    let results: Vec<&str> = sent[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        results[0].contains("MARK-STEPS tag, build, publish") && results[0].contains("- checklist.md"),
        "{results:?}"
    );
    assert!(results[1].contains("there is no skill named `evil`"), "{results:?}");
    for request in env.mock.requests() {
        assert!(!request.to_string().contains("PRIVATE KEY MATERIAL"));
    }
    // The skill as a command: its instructions are the prompt.
    env.mock.push(Reply::text(&["ok"]));
    let id = agent.prompt(&session, "/release v2").await;
    agent.response(id).await;
    let sent = turns_with(&env, "MARK-STEPS");
    let text = user_texts(sent.last().unwrap()).last().unwrap().clone();
    assert!(text.contains("Use this skill") && text.ends_with("\n\nv2"), "{text}");
}

#[tokio::test]
async fn the_official_client_sees_the_commands_advertised() {
    let env = TestEnv::new().await;
    write(
        &env.workspace().join(".claude/commands/hello.md"),
        "---\ndescription: Say hello\nargument-hint: <name>\n---\nHello $1",
    );
    env.mock.push(Reply::text(&["hi"]));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "/hello world"}]}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    let steps = transcript["steps"].as_array().unwrap();
    let update = steps
        .iter()
        .flat_map(sdk_updates)
        .find(|u| u["sessionUpdate"] == "available_commands_update")
        .expect("the SDK received the commands");
    let hello = advertised(&update).into_iter().find(|(name, _)| name == "hello").expect("hello offered");
    assert_eq!(hello.1["description"], "Say hello");
    assert_eq!(hello.1["input"]["hint"], "<name>");
    assert_eq!(steps[1]["response"]["stopReason"], "end_turn");
    assert_eq!(turns_with(&env, "Hello").len(), 1);
    assert_eq!(user_texts(&turns_with(&env, "Hello")[0]).last().unwrap(), "Hello world");
}

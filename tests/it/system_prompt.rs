//! The system prompt the model gets: base, project instructions layered from the user level down
//! to the workspace, the skills index, the environment and the tool catalog, in that order, the
//! same bytes on every turn of a session.

use serde_json::Value;

use crate::support::{Reply, TestEnv};

fn system_of(request: &Value) -> String {
    let first = &request["messages"][0];
    assert_eq!(first["role"], "system", "{request}");
    first["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn instructions_skills_environment_and_tools_come_in_order_and_stay_byte_stable() {
    let env = TestEnv::new().await;
    // HOME is the test directory; the workspace is its `work` subdirectory.
    let home = env.dir.path();
    std::fs::create_dir_all(home.join(".agents")).unwrap();
    std::fs::write(home.join(".agents/AGENTS.md"), "USER-LEVEL: prefer small commits").unwrap();
    let work = env.workspace();
    std::fs::create_dir_all(work.join(".git")).unwrap();
    std::fs::write(work.join("AGENTS.md"), "PROJECT: run cargo test before you finish").unwrap();
    std::fs::create_dir_all(work.join(".agents/skills/bench")).unwrap();
    std::fs::write(
        work.join(".agents/skills/bench/SKILL.md"),
        "---\nname: bench\ndescription: Measure the hot path\n---\nbody",
    )
    .unwrap();
    env.mock.push(Reply::text(&["one"]));
    env.mock.push(Reply::text(&["two"]));

    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "first").await;
    agent.response(id).await;
    // A file changed mid-session, between the two turns, does not change this session's prompt.
    std::fs::write(work.join("AGENTS.md"), "PROJECT: changed").unwrap();
    let id = agent.prompt(&session, "second").await;
    agent.response(id).await;
    let requests = env.mock.requests();
    let (first, second) = (system_of(&requests[0]), system_of(&requests[1]));
    assert_eq!(first, second, "byte-stable across turns");
    let at = |needle: &str| first.find(needle).unwrap_or_else(|| panic!("{needle} missing from:\n{first}"));
    assert!(at("You are cairn") < at("USER-LEVEL"));
    assert!(at("USER-LEVEL") < at("PROJECT: run cargo test"));
    assert!(at("PROJECT: run cargo test") < at("- bench: Measure the hot path"));
    assert!(at("- bench:") < at("# Environment"));
    assert!(at(&format!("Working directory: {}", env.cwd())) > at("# Environment"));
    assert!(at("- Date: ") < at("# Tools"));
    assert!(at("# Tools") < at("- bash: "));
}

/// Instructions and named agents come from the workspace up to its repository's root, and with
/// no repository from the workspace alone: files planted above it (in a shared temporary
/// directory, say) never reach the prompt or the `task` tool.
#[tokio::test]
async fn instructions_and_agents_above_the_repository_or_the_workspace_are_never_read() {
    let env = TestEnv::new().await;
    let shared = tempfile::tempdir().unwrap();
    let plant = |dir: &std::path::Path, tag: &str| {
        std::fs::create_dir_all(dir.join(".agents/agents")).unwrap();
        std::fs::write(dir.join("AGENTS.md"), format!("INSTRUCTIONS-{tag}")).unwrap();
        let agent = format!("---\nname: agent-{tag}\ndescription: AGENT-{tag}\n---\nbe {tag}\n");
        std::fs::write(dir.join(format!(".agents/agents/{tag}.md")), agent).unwrap();
    };
    // No repository: /shared/loose/work, with files planted one and two levels up.
    let loose = shared.path().join("loose");
    let work = loose.join("work");
    plant(shared.path(), "SHARED");
    plant(&loose, "LOOSE");
    plant(&work, "WORK");
    // A repository: /shared/repo/.git, its workspace two levels down.
    let repo = shared.path().join("repo");
    let nested = repo.join("crates/app");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    plant(&repo, "REPO");
    plant(&nested, "NESTED");
    for _ in 0..2 {
        env.mock.push(Reply::text(&["ok"]));
    }
    let mut agent = env.ready().await;
    for (dir, prompt) in [(&work, "first session"), (&nested, "second session")] {
        let session = agent.new_session(&dir.to_string_lossy()).await;
        let id = agent.prompt(&session, prompt).await;
        agent.response(id).await;
    }
    let seen = |prompt: &str| {
        let request = &env.mock.requests_with(prompt)[0];
        format!("{}{}", system_of(request), request["tools"])
    };
    let loose_prompt = seen("first session");
    assert!(loose_prompt.contains("INSTRUCTIONS-WORK") && loose_prompt.contains("AGENT-WORK"), "{loose_prompt}");
    for tag in ["LOOSE", "SHARED", "REPO", "NESTED"] {
        assert!(!loose_prompt.contains(&format!("-{tag}")), "{tag} reached the prompt: {loose_prompt}");
    }
    let repo_prompt = seen("second session");
    for tag in ["REPO", "NESTED"] {
        assert!(repo_prompt.contains(&format!("INSTRUCTIONS-{tag}")), "{tag}: {repo_prompt}");
        assert!(repo_prompt.contains(&format!("AGENT-{tag}")), "{tag}: {repo_prompt}");
    }
    assert!(!repo_prompt.contains("-SHARED"), "above the repository: {repo_prompt}");
}

/// The editor's `systemPrompt` (ACP 1.16+), through the official Rust client: appended to
/// cairn's instructions, stored with the session, so a load in a new process without it builds
/// the same bytes (the provider's prompt cache keeps hitting), and `/status` says it is in
/// effect.
#[tokio::test]
async fn the_editors_system_prompt_is_appended_kept_with_the_session_and_named_by_status() {
    use crate::support::sdk::{self, agent_text, updates};
    use serde_json::json;

    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Bonjour."])).push(Reply::text(&["Encore."]));
    let initialize = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let system = json!({"mode": "append", "content": [
        {"type": "text", "text": "EDITOR-RULE: answer in French."},
        {"type": "text", "text": "EDITOR-RULE-2: be brief."},
    ]});
    let first = json!({"initialize": initialize, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": [], "systemPrompt": system}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "hello"}]}},
    ]});
    let transcript = sdk::run(&env, &first, &["acp"]).await;
    let advertised = &transcript["initialize"]["agentCapabilities"]["sessionCapabilities"]["systemPrompt"];
    assert_eq!(advertised, &json!({"mode": {"override": {}}}), "append, and override too");
    let session = transcript["steps"][0]["response"]["sessionId"].as_str().unwrap().to_owned();

    let second = json!({"initialize": initialize, "steps": [
        {"load": {"sessionId": session, "cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "again"}]}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "/status"}]}},
    ]});
    let transcript = sdk::run(&env, &second, &["acp"]).await;
    let requests = env.mock.requests();
    let (before, after) = (system_of(&requests[0]), system_of(&requests[1]));
    let at = |needle: &str| before.find(needle).unwrap_or_else(|| panic!("{needle} missing from:\n{before}"));
    assert!(at("You are cairn") < at("EDITOR-RULE: answer in French.\n\nEDITOR-RULE-2: be brief."));
    assert!(at("EDITOR-RULE-2") < at("# Environment"));
    assert_eq!(before, after, "a load in a new process builds the same prompt, byte for byte");
    let status = agent_text(&updates(&transcript["steps"][2]));
    assert!(status.contains("System prompt: the editor's, appended to cairn's"), "{status}");
}

/// `override` replaces cairn's base instructions and keeps what the tools and permissions need
/// (environment, tool catalog); a resume with other instructions applies them from the next
/// turn, and a resume without any keeps them.
#[tokio::test]
async fn an_override_keeps_the_tool_catalog_and_a_resume_can_change_it() {
    use serde_json::json;

    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("AGENTS.md"), "PROJECT: keep it tidy").unwrap();
    env.mock.push(Reply::text(&["one"])).push(Reply::text(&["two"])).push(Reply::text(&["three"]));
    let mut agent = env.ready().await;
    let system = json!({"mode": "override", "content": [{"type": "text", "text": "You are the editor's helper."}]});
    let created = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": [], "systemPrompt": system})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let id = agent.prompt(&session, "first").await;
    agent.response(id).await;
    let appended = json!({"mode": "append", "content": [{"type": "text", "text": "APPENDED-LATER"}]});
    agent
        .call(
            "session/resume",
            json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": [], "systemPrompt": appended}),
        )
        .await;
    let id = agent.prompt(&session, "second").await;
    agent.response(id).await;
    agent.call("session/resume", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let id = agent.prompt(&session, "third").await;
    agent.response(id).await;

    let requests = env.mock.requests();
    let overridden = system_of(&requests[0]);
    assert!(overridden.starts_with("You are the editor's helper."), "{overridden}");
    assert!(!overridden.contains("You are cairn"), "{overridden}");
    for kept in ["PROJECT: keep it tidy", "# Environment", "# Tools", "- bash: "] {
        assert!(overridden.contains(kept), "an override keeps {kept:?}:\n{overridden}");
    }
    let changed = system_of(&requests[1]);
    assert!(changed.starts_with("You are cairn") && changed.contains("# From the editor\nAPPENDED-LATER"), "{changed}");
    assert_eq!(system_of(&requests[2]), changed, "a resume without a systemPrompt keeps the session's");
}

/// What cairn cannot apply is refused, the session neither created nor changed, with what to
/// send instead.
#[tokio::test]
async fn a_system_prompt_cairn_cannot_apply_is_refused_with_what_to_send() {
    use serde_json::json;

    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let cases = [
        (
            json!({"mode": "_replace_all", "content": [{"type": "text", "text": "x"}]}),
            "`_replace_all` is not supported",
        ),
        (json!({"mode": "append", "content": []}), "`systemPrompt.content` is empty"),
        (
            json!({"mode": "append", "content": [{"type": "text", "text": "x"}, {"type": "image", "mimeType": "image/png", "data": "AA=="}]}),
            "`systemPrompt.content[1]` is not a text block",
        ),
    ];
    for (system, why) in cases {
        let error =
            agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": [], "systemPrompt": system})).await;
        assert_eq!(error["code"], -32602, "{error}");
        assert!(error["message"].as_str().unwrap().contains(why), "{why}: {error}");
    }
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"], json!([]), "nothing was created: {listed}");
}

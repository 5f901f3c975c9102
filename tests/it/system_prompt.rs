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

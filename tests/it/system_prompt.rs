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
    for text in ["first", "second"] {
        let id = agent.prompt(&session, text).await;
        agent.response(id).await;
    }
    // A file changed mid-session does not change this session's prompt.
    std::fs::write(work.join("AGENTS.md"), "PROJECT: changed").unwrap();
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

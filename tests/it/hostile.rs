//! Sub-agents attacked as a hostile model and a hostile workspace would: a restricted named
//! agent reaching wider tools through a nested `task`, a model-written task description forging
//! the title of a permission question.

use serde_json::{Value, json};

use crate::support::{Editor, Reply, TestEnv};
use crate::tools::turn;

fn task(id: &str, description: &str, prompt: &str) -> (String, String, Value) {
    (id.to_owned(), "task".to_owned(), json!({"description": description, "prompt": prompt}))
}

fn calls(list: &[(String, String, Value)]) -> Reply {
    let borrowed: Vec<(&str, &str, Value)> =
        list.iter().map(|(id, name, args)| (id.as_str(), name.as_str(), args.clone())).collect();
    Reply::tool_calls(&borrowed)
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn write_agent(env: &TestEnv, file: &str, text: &str) {
    let dir = env.workspace().join(".agents/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(file), text).unwrap();
}

#[tokio::test]
async fn a_restricted_named_agent_cannot_reach_wider_tools_through_a_nested_task() {
    let env = TestEnv::new().await;
    write_agent(&env, "reader.md", "---\nname: reader\ndescription: Reads\ntools: read, task\n---\nRead only.\n");
    write_agent(&env, "writer.md", "---\nname: writer\ndescription: Writes\ntools: write, bash\n---\nWrite.\n");
    let mut named = task("t1", "read it", "CHILD-READER");
    named.2["agent"] = json!("reader");
    env.mock.push(calls(&[named])).push(Reply::text(&["ok"]));
    let general = task("t2", "do anything", "GRANDCHILD-GENERAL");
    let mut writer = task("t3", "write", "GRANDCHILD-WRITER");
    writer.2["agent"] = json!("writer");
    env.mock.route("CHILD-READER", calls(&[general, writer]));
    env.mock.route("CHILD-READER", Reply::text(&["done"]));
    env.mock.route("GRANDCHILD-GENERAL", Reply::text(&["general"]));
    env.mock.route("GRANDCHILD-WRITER", Reply::text(&["writer"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let child = env.mock.requests_with("CHILD-READER");
    assert_eq!(tool_names(&child[0]), ["read", "task"]);
    for marker in ["GRANDCHILD-GENERAL", "GRANDCHILD-WRITER"] {
        for request in env.mock.requests_with(marker) {
            let names = tool_names(&request);
            assert!(
                names.iter().all(|name| name == "read" || name == "task"),
                "{marker}: a sub-agent of `reader` gets only what `reader` has: {names:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_question_title_is_one_line_whatever_the_model_or_a_server_writes_into_it() {
    let env = TestEnv::new().await;
    let forged = "tidy up › Read README.md\n\n\n\n\u{1b}[2K\u{202e}";
    env.mock.push(calls(&[task("t1", forged, "CHILD-F")])).push(Reply::text(&["ok"]));
    let command = json!({"command": "rm -rf build", "description": "List files\n\u{1b}[8m"});
    env.mock.route("CHILD-F", Reply::tool_calls(&[("k1", "bash", command)]));
    env.mock.route("CHILD-F", Reply::text(&["done"]));
    let editor = Editor::default();
    editor.answer(&["reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "PARENT").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1);
    let title = asked[0]["params"]["toolCall"]["title"].as_str().unwrap();
    let bad =
        |c: char| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c);
    assert!(!title.contains(bad), "{title:?}");
    assert!(title.starts_with("Sub-agent: tidy up › Read README.md"), "{title:?}");
    let content = asked[0]["params"]["toolCall"]["content"].to_string();
    assert!(content.contains("rm -rf build"), "the real command is in the question: {content}");
    for update in &updates {
        if let Some(title) = update["title"].as_str() {
            assert!(!title.contains(bad), "card title {title:?}");
        }
    }
}

//! The `question` tool: the model asks the user, through an elicitation form where the editor
//! has them, else as a permission question with the choices as options; headless runs tell the
//! model that nobody can answer. Odd replies are refused with what came, and the turn goes on.

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv};
use crate::tools::{call, tool_results, turn};

fn ask(id: &str, args: Value) -> Reply {
    Reply::tool_calls(&[(id, "question", args)])
}

fn which_database() -> Value {
    json!({"question": "Which database should the cache use?", "options": [
        {"label": "SQLite", "description": "one file, no server"},
        {"label": "Postgres"}
    ]})
}

/// Sends a prompt and waits for the agent's next request of `method`, which must come after the
/// card of the call it is about; returns (prompt id, request).
async fn asked(agent: &mut Agent, session: &str, method: &str) -> (i64, Value) {
    let prompt = agent.prompt(session, "set up the cache").await;
    let mut cards = Vec::new();
    loop {
        let message = agent.recv().await;
        if message["method"] == method && message.get("id").is_some() {
            let card = message["params"]["toolCallId"].clone();
            assert!(cards.contains(&card), "the card {card} is shown before its question: {cards:?}");
            return (prompt, message);
        }
        if message["params"]["update"]["sessionUpdate"] == "tool_call" {
            cards.push(message["params"]["update"]["toolCallId"].clone());
        }
    }
}

/// The model's answer for call `c1` in its second request.
fn told(env: &TestEnv) -> String {
    tool_results(env, 1)[0]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_client_with_forms_gets_the_question_as_an_elicitation_on_the_calls_card() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["Postgres it is."]));
    let mut agent = env.ready_with(Editor::with_forms()).await;
    let session = agent.new_session(&env.cwd()).await;
    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    let params = &form["params"];
    assert_eq!(params["mode"], "form");
    assert_eq!(params["sessionId"], session.as_str());
    assert_eq!(params["toolCallId"], "c1");
    assert_eq!(params["message"], "Which database should the cache use?");
    let answer = &params["requestedSchema"]["properties"]["answer"];
    assert_eq!(answer["oneOf"][0], json!({"const": "SQLite", "title": "SQLite", "description": "one file, no server"}));
    assert_eq!(params["requestedSchema"]["properties"]["other"]["type"], "string", "typing is allowed by default");
    agent
        .respond(&form["id"], json!({"action": "accept", "content": {"answer": "Postgres", "other": "version 16"}}))
        .await;
    let (response, notifications) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(told(&env), "The user answered: Postgres — version 16");
    let updates: Vec<Value> = crate::support::updates(&notifications, &session).into_iter().cloned().collect();
    let card = call(&updates, "c1");
    assert_eq!(card[0]["title"], "Which database should the cache use?");
    assert_eq!(card[0]["kind"], "other");
    let last = card.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(last["content"][0]["content"]["text"], "Which database should the cache use?\n→ Postgres — version 16");
    assert!(agent.editor.requests("session/request_permission").is_empty(), "no permission question besides");
}

#[tokio::test]
async fn declining_or_answering_with_an_option_never_offered_is_told_to_the_model_and_the_turn_goes_on() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["ok"]));
    env.mock.push(ask("c2", which_database())).push(Reply::text(&["ok"]));
    let mut agent = env.ready_with(Editor::with_forms()).await;
    let session = agent.new_session(&env.cwd()).await;

    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    agent.respond(&form["id"], json!({"action": "accept", "content": {"answer": "MySQL"}})).await;
    let (response, notifications) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(told(&env), "the editor answered `MySQL`, which is not one of the choices offered (SQLite, Postgres)");
    let updates: Vec<Value> = crate::support::updates(&notifications, &session).into_iter().cloned().collect();
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "failed");

    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    agent.respond(&form["id"], json!({"action": "decline"})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let declined = tool_results(&env, 3);
    assert!(declined[1]["content"].as_str().unwrap().starts_with("The user declined to answer."), "{declined:?}");
}

#[tokio::test]
async fn without_forms_the_choices_are_asked_as_a_permission_question() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["SQLite then."]));
    let editor = Editor::default();
    editor.answer(&["choice_0"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "set up the cache").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(told(&env), "The user answered: SQLite");
    let asked = agent.editor.requests("session/request_permission");
    let params = &asked[0]["params"];
    assert_eq!(params["toolCall"]["toolCallId"], "c1");
    assert_eq!(params["toolCall"]["title"], "Which database should the cache use?");
    let options: Vec<(&str, &str)> = params["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["name"].as_str().unwrap()))
        .collect();
    assert_eq!(options, [("choice_0", "1. SQLite"), ("choice_1", "2. Postgres"), ("decline", "Don't answer")]);
    // A client that names options by their kind (every answer an "Accept") still shows which is
    // which: the numbered answers and what each option means are on the card itself.
    let content = params["toolCall"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 1, "{content:?}");
    assert_eq!(content[0]["type"], "content");
    let shown = content[0]["content"]["text"].as_str().unwrap();
    assert!(
        shown.starts_with("Which database should the cache use?\n\n1. SQLite — one file, no server\n2. Postgres\n\n"),
        "{shown}"
    );
    assert!(shown.contains("Answer with the option of the same number, or \"Don't answer\""), "{shown}");
}

#[tokio::test]
async fn a_question_that_needs_typing_cannot_be_asked_without_forms_and_the_model_is_told_what_to_do() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", json!({"question": "What should the service be called?"}))).push(Reply::text(&["ok"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, _) = turn(&mut agent, &session, "name it").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(told(&env).contains("Ask the question in your reply instead"), "{}", told(&env));
    assert!(agent.editor.requests("session/request_permission").is_empty());
}

#[tokio::test]
async fn cancelling_the_turn_withdraws_a_pending_question() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database()));
    let mut agent = env.ready_with(Editor::with_forms()).await;
    let session = agent.new_session(&env.cwd()).await;
    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (mut withdrawn, mut answered) = (false, false);
    while !(withdrawn && answered) {
        let message = agent.recv().await;
        if message["method"] == "$/cancel_request" {
            assert_eq!(message["params"]["requestId"], form["id"]);
            withdrawn = true;
        }
        if message["id"] == prompt && message.get("method").is_none() {
            assert_eq!(message["result"]["stopReason"], "cancelled");
            answered = true;
        }
    }
    // A late answer is ignored.
    agent.respond(&form["id"], json!({"action": "cancel"})).await;
    assert_eq!(env.mock.requests().len(), 1, "nothing was sent to the model after the cancel");
}

#[tokio::test]
async fn a_headless_run_tells_the_model_nobody_can_answer() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["Going with SQLite."]));
    let (status, stdout, stderr) = crate::exec::run(&env, &["exec", "set up the cache"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.contains("Going with SQLite."), "{stdout}");
    assert!(told(&env).starts_with("Nobody can answer questions in this run"), "{}", told(&env));
}

#[tokio::test]
async fn a_client_that_announces_forms_but_does_not_serve_them_gets_the_permission_question() {
    let env = TestEnv::new().await;
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["ok"]));
    let editor = Editor::with_forms();
    editor.answer(&["choice_1"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    agent
        .send(json!({"jsonrpc": "2.0", "id": form["id"], "error": {"code": -32601, "message": "Method not found"}}))
        .await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(told(&env), "The user answered: Postgres");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1);
}

#[tokio::test]
async fn the_turns_time_limit_stops_while_the_user_reads_the_question() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\ntimeout_secs = 2\n");
    env.mock.push(ask("c1", which_database())).push(Reply::text(&["Postgres it is."]));
    let mut agent = env.ready_with(Editor::with_forms()).await;
    let session = agent.new_session(&env.cwd()).await;
    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    // The user thinks for longer than the whole turn may run.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    agent.respond(&form["id"], json!({"action": "accept", "content": {"answer": "Postgres"}})).await;
    let (response, notifications) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert!(!notifications.iter().any(|n| n["method"] == "$/cancel_request"), "the question was not withdrawn");
    assert_eq!(told(&env), "The user answered: Postgres");
}

#[tokio::test]
async fn a_sub_agents_question_is_asked_on_its_task_card_and_stops_the_parents_clock_too() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\ntimeout_secs = 2\n");
    let task = json!({"description": "pick a database", "prompt": "ask which database"});
    env.mock
        .push(Reply::tool_calls(&[("t1", "task", task)]))
        .push(ask("c1", which_database()))
        .push(Reply::text(&["The user wants Postgres."]))
        .push(Reply::text(&["Postgres it is."]));
    let mut agent = env.ready_with(Editor::with_forms()).await;
    let session = agent.new_session(&env.cwd()).await;
    let (prompt, form) = asked(&mut agent, &session, "elicitation/create").await;
    assert_eq!(form["params"]["toolCallId"], "t1", "asked on the card the editor knows");
    assert!(form["params"]["message"].as_str().unwrap().ends_with("Which database should the cache use?"));
    // The user thinks for longer than the parent's whole turn may run.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    agent.respond(&form["id"], json!({"action": "accept", "content": {"answer": "Postgres"}})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(env.mock.requests().len(), 4);
}

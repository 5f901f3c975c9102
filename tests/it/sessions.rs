//! Session lifecycle: new, load, resume, list, close, delete and the model option.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, TestEnv, messages_of, updates};

fn load_params(session: &str, env: &TestEnv) -> Value {
    json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})
}

#[tokio::test]
async fn new_session_needs_an_absolute_cwd_and_offers_a_model_option() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": "work", "mcpServers": []})).await;
    assert_eq!(error["code"], -32602);

    let result = agent.call("session/new", json!({"cwd": env.cwd()})).await;
    let session = result["sessionId"].as_str().unwrap();
    assert!(session.starts_with("ses_"), "{result}");
    let option = &result["configOptions"][0];
    assert_eq!(option["id"], "model");
    assert_eq!(option["category"], "model");
    assert_eq!(option["type"], "select");
    assert_eq!(option["currentValue"], "openai/mock-model");
    let values: Vec<&str> =
        option["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
    assert_eq!(values[0], "openai/mock-model");
    assert!(values.contains(&"openai/gpt-5"), "{values:?}");
}

#[tokio::test]
async fn load_in_a_new_process_replays_the_same_text_with_the_same_message_ids() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::thinking_then_text(&["Let me ", "think."], &["The answer ", "is 42."]));
    env.mock.push(Reply::text(&["Second ", "answer."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let mut live = Vec::new();
    for text in ["First question", "Second question"] {
        let id = agent.prompt(&session, text).await;
        let (_, notifications) = agent.response(id).await;
        live.extend(notifications);
    }
    let live_updates = updates(&live, &session);
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let id = agent.request("session/load", load_params(&session, &env)).await;
    let (response, replay) = agent.response(id).await;
    assert_eq!(response["result"]["configOptions"][0]["currentValue"], "openai/mock-model", "{response}");
    let replayed = updates(&replay, &session);
    assert_eq!(replay.len(), replayed.len(), "only this session's updates come before the answer");
    for kind in ["agent_message_chunk", "agent_thought_chunk"] {
        assert_eq!(messages_of(&replayed, kind), messages_of(&live_updates, kind), "{kind}");
    }
    assert_eq!(
        messages_of(&replayed, "agent_message_chunk").iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(),
        ["The answer is 42.", "Second answer."]
    );
    let users = messages_of(&replayed, "user_message_chunk");
    assert_eq!(users.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>(), ["First question", "Second question"]);
    assert!(users[0].0 != users[1].0 && users[0].0.starts_with("msg_"));
    let kinds: Vec<&str> = replayed.iter().map(|u| u["sessionUpdate"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk",
            "user_message_chunk",
            "agent_message_chunk",
            "usage_update"
        ]
    );

    // The loaded session carries on, with the whole conversation sent to the model.
    env.mock.push(Reply::text(&["Third."]));
    let id = agent.prompt(&session, "Third question").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let sent = &env.mock.requests()[2]["messages"];
    let roles: Vec<&str> = sent.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant", "user"]);
    assert_eq!(sent[2]["content"], "The answer is 42.");
}

#[tokio::test]
async fn a_prompt_right_behind_the_load_of_a_stored_session_follows_its_replay_and_a_second_load_shows_both() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["First answer."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "First question").await;
    agent.response(id).await;
    agent.close_stdin();
    agent.wait_exit().await;

    // A new process: the load and a prompt behind it are both sent before either is answered.
    let mut agent = env.ready().await;
    env.mock.push(Reply::text(&["Second ", "answer."]));
    let load = agent.request("session/load", load_params(&session, &env)).await;
    let prompt = agent.prompt(&session, "Second question").await;
    let (_, mut shown) = agent.response(load).await;
    let (response, rest) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    shown.extend(rest);
    let shown = updates(&shown, &session);
    let texts = |updates: &[&Value]| -> Vec<String> {
        updates
            .iter()
            .filter(|u| matches!(u["sessionUpdate"].as_str(), Some("agent_message_chunk" | "user_message_chunk")))
            .map(|u| u["content"]["text"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(texts(&shown), ["First question", "First answer.", "Second ", "answer."], "{shown:#?}");

    // The session is live now: a second load replays both turns, each once.
    let id = agent.request("session/load", load_params(&session, &env)).await;
    let (_, replay) = agent.response(id).await;
    assert_eq!(
        texts(&updates(&replay, &session)),
        ["First question", "First answer.", "Second question", "Second answer."]
    );
}

#[tokio::test]
async fn load_of_an_unknown_session_is_resource_not_found() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let error = agent.call_err("session/load", load_params("ses_nope", &env)).await;
    assert_eq!(error["code"], -32002, "{error}");
    assert!(error["message"].as_str().unwrap().contains("ses_nope"));
    let error = agent.call_err("session/resume", load_params("ses_nope", &env)).await;
    assert_eq!(error["code"], -32002, "{error}");
    let error = agent
        .call_err("session/prompt", json!({"sessionId": "ses_nope", "prompt": [{"type": "text", "text": "hi"}]}))
        .await;
    assert_eq!(error["code"], -32002, "{error}");
}

#[tokio::test]
async fn resume_restores_a_stored_session_without_replay_and_attaches_to_a_live_one() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Stored answer."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "Remember this").await;
    agent.response(id).await;
    // Attaching to the live session in the same process.
    let id = agent.request("session/resume", load_params(&session, &env)).await;
    let (response, before) = agent.response(id).await;
    assert_not_replayed(&before, &session);
    assert_eq!(response["result"]["configOptions"][0]["id"], "model");
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let id = agent.request("session/resume", load_params(&session, &env)).await;
    let (response, before) = agent.response(id).await;
    assert_not_replayed(&before, &session);
    assert!(response["result"].is_object(), "{response}");
    env.mock.push(Reply::text(&["I remember."]));
    let id = agent.prompt(&session, "Do you?").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let sent = &env.mock.requests()[1]["messages"];
    assert_eq!(sent[1]["content"], "Remember this", "history restored from the store: {sent}");
    assert_eq!(sent[2]["content"], "Stored answer.");
}

/// A new session in `cwd`, prompted once and given its model-written title.
async fn prompted_session(agent: &mut crate::support::Agent, env: &TestEnv, cwd: &str) -> String {
    let session = agent.new_session(cwd).await;
    env.mock.push(Reply::text(&["ok"]));
    let id = agent.prompt(&session, "hello").await;
    let (_, mut seen) = agent.response(id).await;
    // Its title is written now, not in the middle of what the test does next.
    loop {
        let titled = updates(&seen, &session)
            .iter()
            .any(|u| u["sessionUpdate"] == "session_info_update" && u["title"] == crate::support::mock_llm::MOCK_TITLE);
        if titled {
            return session;
        }
        seen = vec![agent.recv().await];
    }
}

#[tokio::test]
async fn list_pages_by_cursor_filters_by_cwd_and_titles_from_the_first_prompt() {
    let env = TestEnv::new().await;
    let other = env.dir.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.to_string_lossy().into_owned();
    let mut agent = env.ready().await;
    let mut created = Vec::new();
    for i in 0..54 {
        let cwd = if i % 5 == 0 { other.clone() } else { env.cwd() };
        created.push(prompted_session(&mut agent, &env, &cwd).await);
        // A session never prompted between every two: listed by no page, counted by none.
        agent.new_session(&cwd).await;
    }
    env.mock.push(Reply::text(&["ok"]));
    let titled = agent.new_session(&env.cwd()).await;
    created.push(titled.clone());
    let id = agent.prompt(&titled, "Fix the flaky login test\nit fails on CI").await;
    let (_, notifications) = agent.response(id).await;
    let info: Vec<_> = updates(&notifications, &titled)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "session_info_update")
        .cloned()
        .collect();
    assert_eq!(info[0], json!({"sessionUpdate": "session_info_update", "title": "Fix the flaky login test"}));
    // Then the model's title replaces the first line (before the prompt's answer, on a busy machine).
    let model_title = match info.get(1) {
        Some(update) => update["title"].clone(),
        None => loop {
            let message = agent.recv().await;
            if message["params"]["update"]["sessionUpdate"] == "session_info_update" {
                assert_eq!(message["params"]["sessionId"], titled.as_str());
                break message["params"]["update"]["title"].clone();
            }
        },
    };
    assert_eq!(model_title, crate::support::mock_llm::MOCK_TITLE);
    assert!(info.len() <= 2, "{info:?}");
    let titles = env.mock.title_requests();
    assert_eq!(titles.len(), 55, "one for each prompted session");
    assert!(titles[54]["messages"][1]["content"].as_str().unwrap().starts_with("Fix the flaky"));

    let first = agent.call("session/list", Value::Null).await;
    let page: &Vec<Value> = first["sessions"].as_array().unwrap();
    assert_eq!(page.len(), 50);
    assert_eq!(page[0]["sessionId"], titled.as_str(), "the most recently updated comes first");
    assert_eq!(page[0]["title"], crate::support::mock_llm::MOCK_TITLE);
    assert!(page[0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    let cursor = first["nextCursor"].as_str().expect("a next page");
    let second = agent.call("session/list", json!({"cursor": cursor})).await;
    assert_eq!(second["sessions"].as_array().unwrap().len(), 5);
    assert!(second.get("nextCursor").is_none_or(Value::is_null), "{second}");
    let mut all: Vec<String> = page
        .iter()
        .chain(second["sessions"].as_array().unwrap())
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect();
    all.sort();
    created.sort();
    assert_eq!(all, created, "every session exactly once");

    let filtered = agent.call("session/list", json!({"cwd": format!("{other}/")})).await;
    let filtered = filtered["sessions"].as_array().unwrap();
    assert_eq!(filtered.len(), 11);
    assert!(filtered.iter().all(|s| s["cwd"] == other.as_str()));
}

#[tokio::test]
async fn close_mid_turn_ends_the_prompt_cancelled_and_keeps_the_rows() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(10)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "Keep talking").await;
    agent.next_chunk().await;
    let close = agent.request("session/close", json!({"sessionId": session})).await;
    let (answers, _) = agent.responses(&[prompt, close]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"], json!({}));
    env.mock.wait_dropped(1, Duration::from_secs(2)).await;

    let id = agent.request("session/load", load_params(&session, &env)).await;
    let (_, replay) = agent.response(id).await;
    let text = crate::support::text_of(&updates(&replay, &session), "agent_message_chunk");
    assert!(text.starts_with("tick 0 "), "the partial reply is kept: {text:?}");
}

#[tokio::test]
async fn delete_mid_turn_cancels_then_removes_the_rows() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["kept"]));
    env.mock.push(Reply::endless(Duration::from_millis(10)));
    let mut agent = env.ready().await;
    let keep = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&keep, "Stay").await;
    agent.response(id).await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = agent.prompt(&session, "Keep talking").await;
    agent.next_chunk().await;
    let delete = agent.request("session/delete", json!({"sessionId": session})).await;
    let (answers, _) = agent.responses(&[prompt, delete]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"], json!({}));

    let listed = agent.call("session/list", json!({})).await;
    let ids: Vec<&str> =
        listed["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    assert_eq!(ids, [keep.as_str()]);
    let error = agent.call_err("session/load", load_params(&session, &env)).await;
    assert_eq!(error["code"], -32002);
    // Deleting again, or deleting what never existed, succeeds quietly.
    assert_eq!(agent.call("session/delete", json!({"sessionId": session})).await, json!({}));
    let count: i64 = rusqlite::Connection::open(env.database())
        .unwrap()
        .query_row("SELECT count(*) FROM parts WHERE session_id = ?1", [&session], |row| row.get(0))
        .unwrap();
    assert_eq!(count, 0, "no parts of the deleted session remain");
}

#[tokio::test]
async fn set_config_option_switches_the_model_from_the_next_turn() {
    let mut env = TestEnv::new().await;
    env.write_config("[providers.openai]\nmodels = [\"mock-model\", \"mock-large\"]\n");
    env.set_env("CAIRN_MODEL", "openai/mock-model");
    env.mock.push(Reply::text_with_delay(&["one ", "two"], Duration::from_millis(30)));
    env.mock.push(Reply::text(&["bigger"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let first = agent.prompt(&session, "first").await;
    let switch = agent
        .request(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "openai/mock-large"}),
        )
        .await;
    let (answers, _) = agent.responses(&[switch, first]).await;
    assert_eq!(answers[0]["result"]["configOptions"][0]["currentValue"], "openai/mock-large", "{answers:?}");
    let second = agent.prompt(&session, "second").await;
    agent.response(second).await;
    let models: Vec<String> = env.mock.requests().iter().map(|r| r["model"].as_str().unwrap().to_owned()).collect();
    assert_eq!(models, ["mock-model", "mock-large"], "the running turn keeps its model");

    let error = agent
        .call_err(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "openai/nope"}),
        )
        .await;
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("openai/mock-large"), "lists the choices: {error}");

    // The choice is stored: a new process resumes with it.
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.ready().await;
    let resumed = agent.call("session/resume", load_params(&session, &env)).await;
    assert_eq!(resumed["configOptions"][0]["currentValue"], "openai/mock-large");
}

/// A resume sends no conversation: only the session's state (title, usage) may precede its answer.
fn assert_not_replayed(before: &[Value], session: &str) {
    let shown: Vec<&str> =
        updates(before, session).iter().map(|u| u["sessionUpdate"].as_str().unwrap_or_default()).collect();
    assert!(
        shown.iter().all(|kind| matches!(*kind, "usage_update" | "session_info_update")),
        "resume must not replay: {shown:?}"
    );
    assert!(shown.contains(&"usage_update"), "the context in use is shown: {shown:?}");
}

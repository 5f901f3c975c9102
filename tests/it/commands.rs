//! Slash commands and what they stand for: the advertised list, `/status` and session status in
//! `session/list`, `/permissions`, `/model`, `/rewind` (hidden, not deleted; load shows what is
//! visible) and forks (`session/fork` and `/fork`: a copy with new ids that the model sees whole).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, text_of, updates, user_texts};

/// Sends a prompt and returns its stop reason and the agent text it showed.
async fn say(agent: &mut Agent, session: &str, text: &str) -> (Value, String) {
    let id = agent.prompt(session, text).await;
    let (response, notifications) = agent.response(id).await;
    (response["result"]["stopReason"].clone(), text_of(&updates(&notifications, session), "agent_message_chunk"))
}

#[tokio::test]
async fn the_commands_are_advertised_after_the_session_is_created() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let update = agent.recv().await;
    assert_eq!(update["params"]["sessionId"], session, "sent after the session/new response: {update}");
    let commands = &update["params"]["update"];
    assert_eq!(commands["sessionUpdate"], "available_commands_update");
    let names: Vec<&str> =
        commands["availableCommands"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["compact", "rewind", "checkpoints", "fork", "model", "status", "mcp", "jobs", "hooks", "permissions"]
    );
    assert_eq!(commands["availableCommands"][1]["input"]["hint"], "[n] [code|conversation|both] | undo");
}

#[tokio::test]
async fn status_answers_at_once_while_busy_and_list_reports_busy_then_idle() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text_with_delay(&["slow ", "answer"], Duration::from_millis(400)));
    env.mock.push(Reply::text(&["queued answer"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let running = agent.prompt(&session, "take your time").await;
    agent.next_chunk().await;
    let queued = agent.prompt(&session, "and then this").await;
    let status = agent.prompt(&session, "/status").await;
    let (answer, notifications) = agent.response(status).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let said = text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(said.contains("Status: busy (a turn is running); 1 queued."), "{said}");
    assert!(said.contains("Limits per turn: 50 model requests, 600 s"), "{said}");
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["_meta"]["cairn"]["status"], "busy");
    agent.responses(&[running, queued]).await;
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["_meta"]["cairn"]["status"], "idle");
    assert_eq!(env.mock.requests().len(), 2, "/status never reaches the model");
}

#[tokio::test]
async fn permissions_lists_and_revokes_remembered_rules() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    editor.answer(&["allow_session", "allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi"}))]));
    env.mock.push(Reply::text(&["ran"]));
    say(&mut agent, &session, "run echo").await;
    let (_, listed) = say(&mut agent, &session, "/permissions").await;
    assert!(listed.contains("1. allow `echo` on files in this workspace (this session)"), "{listed}");
    let (_, revoked) = say(&mut agent, &session, "/permissions revoke 1").await;
    assert!(revoked.contains("Revoked 1 rule"), "{revoked}");
    let (_, listed) = say(&mut agent, &session, "/permissions").await;
    assert!(listed.contains("No remembered permission rules"), "{listed}");
    let (_, wrong) = say(&mut agent, &session, "/permissions revoke 7").await;
    assert!(wrong.contains("There is no rule 7"), "{wrong}");
}

#[tokio::test]
async fn permissions_during_a_turn_lists_the_rules_the_turn_holds_now_numbered_as_after_it() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    // The other session's question, then this one's first; its second is left waiting.
    editor.answer(&["allow_session", "allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let mine = agent.new_session(&env.cwd()).await;
    let other = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi"}))]));
    env.mock.push(Reply::text(&["ran"]));
    say(&mut agent, &other, "run echo").await;
    say(&mut agent, &other, "/permissions project 1").await;

    // This session's turn reads the project's rules again and answers one question "always".
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "printf x"}))]));
    env.mock.push(Reply::tool_calls(&[("c3", "bash", json!({"command": "date"}))]));
    env.mock.push(Reply::text(&["done"]));
    let running = agent.prompt(&mine, "run printf, then date").await;
    let question = loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    assert!(question["params"]["toolCall"].to_string().contains("date"), "{question}");
    let expected = [
        "1. allow `echo` on files in this workspace (this project)",
        "2. allow `printf` on files in this workspace (this session)",
    ];
    let (_, listed) = say(&mut agent, &mine, "/permissions").await;
    for rule in expected {
        assert!(listed.contains(rule), "while the turn runs: {listed}");
    }
    agent.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}})).await;
    agent.response(running).await;
    let (_, after) = say(&mut agent, &mine, "/permissions").await;
    for rule in expected {
        assert!(after.contains(rule), "after it: {after}");
    }
    assert!(!after.contains("3."), "{after}");
}

#[tokio::test]
async fn permissions_project_keeps_a_sessions_rule_for_every_session_in_the_project() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    editor.answer(&["allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let first = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi"}))]));
    env.mock.push(Reply::text(&["ran"]));
    say(&mut agent, &first, "run echo").await;
    let (_, wrong) = say(&mut agent, &first, "/permissions project 2").await;
    assert!(wrong.contains("There is no rule 2"), "{wrong}");
    let (_, kept) = say(&mut agent, &first, "/permissions project 1").await;
    assert!(
        kept.contains("Kept rule 1 (allow `echo` on files in this workspace) for every session in this project"),
        "{kept}"
    );
    let (_, listed) = say(&mut agent, &first, "/permissions").await;
    assert!(listed.contains("1. allow `echo` on files in this workspace (this project)"), "{listed}");
    assert!(!listed.contains("2."), "the session's copy is gone: {listed}");
    let (_, again) = say(&mut agent, &first, "/permissions project 1").await;
    assert!(again.contains("already holds in every session in this project"), "{again}");
    agent.close_stdin();
    agent.wait_exit().await;

    // Another session of the project, in a new process, runs it unasked.
    let mut agent = env.ready().await;
    let second = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "echo again"}))]));
    env.mock.push(Reply::text(&["ran again"]));
    let (stop, _) = say(&mut agent, &second, "run echo again").await;
    assert_eq!(stop, "end_turn");
    assert!(agent.editor.requests("session/request_permission").is_empty(), "the project's rule covered it");
    let sent = env.mock.requests();
    let result = sent.last().unwrap()["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool");
    assert!(result.unwrap()["content"].as_str().unwrap().starts_with("again\n"), "{result:?}");
    let (_, listed) = say(&mut agent, &second, "/permissions").await;
    assert!(listed.contains("1. allow `echo` on files in this workspace (this project)"), "{listed}");
}

#[tokio::test]
async fn model_lists_and_switches() {
    let env = TestEnv::new().await;
    env.write_config("[providers.openai]\nmodels = [\"mock-model\", \"other-model\"]\n");
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, listed) = say(&mut agent, &session, "/model").await;
    assert!(listed.contains("- openai/other-model"), "{listed}");
    let id = agent.prompt(&session, "/model openai/other-model").await;
    let (_, notifications) = agent.response(id).await;
    let changed = updates(&notifications, &session);
    assert!(text_of(&changed, "agent_message_chunk").contains("openai/other-model from the next turn"));
    let options = changed.iter().find(|u| u["sessionUpdate"] == "config_option_update").unwrap();
    assert_eq!(options["configOptions"][0]["currentValue"], "openai/other-model");
    env.mock.push(Reply::text(&["hi"]));
    say(&mut agent, &session, "hello").await;
    assert_eq!(env.mock.requests()[0]["model"], "other-model");
}

#[tokio::test]
async fn rewind_hides_the_last_turns_and_load_shows_only_what_is_visible() {
    let env = TestEnv::new().await;
    for answer in ["answer one", "answer two", "answer three", "answer four"] {
        env.mock.push(Reply::text(&[answer]));
    }
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for prompt in ["one", "two", "three"] {
        say(&mut agent, &session, prompt).await;
    }
    let (stop, said) = say(&mut agent, &session, "/rewind 2").await;
    assert_eq!(stop, "end_turn");
    assert!(said.contains("Rewound 2 turns") && said.contains("“two”"), "{said}");
    say(&mut agent, &session, "four").await;
    let requests = env.mock.requests();
    assert_eq!(user_texts(&requests[3]), ["one", "four"], "the model continues from before the rewound turns");

    // A new process loads only the visible messages; the hidden rows are still in the file.
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, notifications) = agent.response(id).await;
    let replayed = updates(&notifications, &session);
    assert_eq!(text_of(&replayed, "user_message_chunk"), "onefour");
    assert_eq!(text_of(&replayed, "agent_message_chunk"), "answer oneanswer four");
    let db = rusqlite::Connection::open(env.database()).unwrap();
    let hidden: i64 = db
        .query_row("SELECT count(*) FROM messages WHERE session_id = ?1 AND hidden_at IS NOT NULL", [&session], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(hidden, 4, "two prompts and two answers are hidden, not deleted");
}

#[tokio::test]
async fn a_fork_copies_the_conversation_and_its_next_prompt_sends_all_of_it() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["parent answer"]));
    env.mock.push(Reply::text(&["fork answer"]));
    let editor = Editor::default();
    let mut agent = env.ready_with(editor).await;
    let parent = agent.new_session(&env.cwd()).await;
    say(&mut agent, &parent, "remember the number 42").await;
    let forked = agent.call("session/fork", json!({"sessionId": parent, "cwd": env.cwd()})).await;
    let fork = forked["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, parent);
    assert_eq!(forked["configOptions"][0]["currentValue"], "openai/mock-model");
    let (stop, said) = say(&mut agent, &fork, "what was the number?").await;
    assert_eq!((stop.as_str(), said.as_str()), (Some("end_turn"), "fork answer"));
    let request = &env.mock.requests()[1];
    assert_eq!(user_texts(request), ["remember the number 42", "what was the number?"]);
    assert_eq!(request["messages"][2]["content"], "parent answer");

    let listed = agent.call("session/list", json!({})).await;
    let titles: Vec<&str> = listed["sessions"].as_array().unwrap().iter().filter_map(|s| s["title"].as_str()).collect();
    assert!(titles.contains(&"remember the number 42 (copy)"), "{titles:?}");
    // The parent is untouched.
    let id = agent.request("session/load", json!({"sessionId": parent, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, notifications) = agent.response(id).await;
    assert_eq!(text_of(&updates(&notifications, &parent), "agent_message_chunk"), "parent answer");
}

#[tokio::test]
async fn a_fork_leaves_session_rules_behind_and_recomputes_the_totals() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    editor.answer(&["allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let parent = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi"}))]));
    env.mock.push(Reply::text(&["ran"]));
    say(&mut agent, &parent, "run echo").await;
    let forked = agent.call("session/fork", json!({"sessionId": parent, "cwd": env.cwd()})).await;
    let fork = forked["sessionId"].as_str().unwrap().to_owned();
    let (_, listed) = say(&mut agent, &fork, "/permissions").await;
    assert!(listed.contains("No remembered permission rules"), "{listed}");
    let (_, listed) = say(&mut agent, &parent, "/permissions").await;
    assert!(listed.contains("1. allow `echo` on files in this workspace (this session)"), "{listed}");

    let db = rusqlite::Connection::open(env.database()).unwrap();
    let totals = |id: &str| -> (i64, i64, String, String) {
        db.query_row(
            "SELECT total_tokens, prompt_tokens, coalesce(parent_id, ''), coalesce(parent_message_id, '') FROM sessions WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
    };
    let (parent_total, parent_prompt, _, _) = totals(&parent);
    let (fork_total, fork_prompt, fork_parent, fork_point) = totals(&fork);
    assert_eq!((fork_total, fork_prompt), (parent_total, parent_prompt), "two steps of 17 tokens each");
    assert_eq!(fork_total, 34);
    assert_eq!(fork_parent, parent);
    assert!(fork_point.starts_with("msg_"));
    let copied: i64 =
        db.query_row("SELECT count(*) FROM messages WHERE session_id = ?1", [&fork], |r| r.get(0)).unwrap();
    let shared: i64 = db
        .query_row(
            "SELECT count(*) FROM messages a JOIN messages b ON a.id = b.id WHERE a.session_id = ?1 AND b.session_id = ?2",
            [&fork, &parent],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!((copied, shared), (3, 0), "every message copied under a new id");
}

#[tokio::test]
async fn a_session_retrying_a_request_is_listed_as_retrying() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::status(503, "busy").retry_after("1"));
    env.mock.push(Reply::text(&["made it"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["_meta"]["cairn"]["status"], "retrying");
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["_meta"]["cairn"]["status"], "idle");
}

#[tokio::test]
async fn forking_a_busy_session_is_refused_and_fork_by_command_works_when_idle() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text_with_delay(&["slow ", "answer"], Duration::from_millis(300)));
    let mut agent = env.ready().await;
    let parent = agent.new_session(&env.cwd()).await;
    let running = agent.prompt(&parent, "busy now").await;
    agent.next_chunk().await;
    let error = agent.call_err("session/fork", json!({"sessionId": parent, "cwd": env.cwd()})).await;
    assert_eq!(error["code"], -32602);
    assert!(error["message"].as_str().unwrap().contains("is busy"), "{error}");
    agent.response(running).await;
    let (stop, said) = say(&mut agent, &parent, "/fork").await;
    assert_eq!(stop, "end_turn");
    assert!(said.starts_with("Forked into session ses_"), "{said}");
    let listed = agent.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn what_is_not_stored_carries_no_message_id_and_load_does_not_show_it() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(20)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let running = agent.prompt(&session, "go on").await;
    agent.next_chunk().await;
    let queued = agent.prompt(&session, "and then this").await;
    let status = agent.prompt(&session, "/status").await;
    let (_, shown) = agent.response(status).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (_, rest) = agent.responses(&[running, queued]).await;
    let asides: Vec<&Value> = updates(&shown, &session)
        .into_iter()
        .chain(updates(&rest, &session))
        .filter(|u| {
            let text = u["content"]["text"].as_str().or_else(|| u["message"].as_str()).unwrap_or_default();
            text.contains("is queued behind") || text.starts_with("Status:")
        })
        .collect();
    assert_eq!(asides.len(), 2, "the queue notice and the /status answer: {asides:?}");
    for aside in &asides {
        assert!(aside.get("messageId").is_none(), "not stored, so no message id: {aside}");
    }

    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replayed = text_of(&updates(&replay, &session), "agent_message_chunk");
    assert!(!replayed.contains("is queued behind") && !replayed.contains("Status:"), "{replayed}");
}

/// A session that revoked a rule of the project takes it again once another session keeps it
/// for the project anew, at its next turn: what it revoked is skipped only until the removal
/// is written.
#[tokio::test]
async fn a_rule_revoked_for_the_project_and_kept_again_reaches_the_session_that_revoked_it() {
    let env = TestEnv::new().await;
    let editor = Editor::default();
    editor.answer(&["allow_session", "allow_session"]);
    let mut agent = env.ready_with(editor).await;
    let first = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "echo hi"}))]));
    env.mock.push(Reply::text(&["ran"]));
    say(&mut agent, &first, "run echo").await;
    let (_, kept) = say(&mut agent, &first, "/permissions project 1").await;
    assert!(kept.contains("Kept rule 1"), "{kept}");

    let second = agent.new_session(&env.cwd()).await;
    let (_, revoked) = say(&mut agent, &second, "/permissions revoke 1").await;
    assert!(revoked.contains("Revoked 1 rule"), "{revoked}");
    let third = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "echo again"}))]));
    env.mock.push(Reply::text(&["ran again"]));
    say(&mut agent, &third, "run echo").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2, "revoked for the project: asked again");
    let (_, kept) = say(&mut agent, &third, "/permissions project 1").await;
    assert!(kept.contains("Kept rule 1"), "{kept}");

    env.mock.push(Reply::tool_calls(&[("c3", "bash", json!({"command": "echo third"}))]));
    env.mock.push(Reply::text(&["ran third"]));
    let (stop, _) = say(&mut agent, &second, "run echo").await;
    assert_eq!(stop, "end_turn");
    assert_eq!(agent.editor.requests("session/request_permission").len(), 2, "the project's rule covered it");
}

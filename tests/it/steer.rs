//! Steering a running turn (`[session] busy_prompt = "steer"`, or the session's `steer`
//! option): a prompt sent while a turn runs joins it before its next model request, is stored
//! where it joined, and is answered when that turn ends. Turns are held at a permission
//! question, so nothing here depends on timing.

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv, updates, user_texts};

const STEER: &str = "[session]\nbusy_prompt = \"steer\"\n";
const JOINS: &str = "This prompt joins the running turn";

fn write(id: &str, path: &str) -> Reply {
    Reply::tool_calls(&[(id, "write", json!({"path": path, "content": "x\n"}))])
}

/// Sends `text` and reads on until the permission question that holds its turn.
async fn held_turn(agent: &mut Agent, session: &str, text: &str) -> (i64, Value) {
    let prompt = agent.prompt(session, text).await;
    loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            return (prompt, message);
        }
    }
}

/// Sends `text` while the turn is held, and reads on until the session says what it did with it.
async fn busy_prompt(agent: &mut Agent, session: &str, text: &str, said: &str) -> i64 {
    let prompt = agent.prompt(session, text).await;
    agent.until_said(said).await;
    prompt
}

/// The conversation as the updates show it: `(kind, text or call id)`, chunks of one message
/// joined, a call's updates as one `tool` entry, notes of the session left out.
fn conversation(updates: &[&Value]) -> Vec<(String, String)> {
    let mut shown: Vec<(String, String)> = Vec::new();
    for update in updates {
        let kind = update["sessionUpdate"].as_str().unwrap_or_default().to_owned();
        let what = match kind.as_str() {
            "user_message_chunk" | "agent_message_chunk" => update["content"]["text"].as_str().unwrap().to_owned(),
            "tool_call" | "tool_call_update" => update["toolCallId"].as_str().unwrap().to_owned(),
            _ => continue,
        };
        let kind = if kind.starts_with("tool_call") { "tool".to_owned() } else { kind };
        if what.contains(JOINS) || what.contains("queued") {
            continue;
        }
        match shown.last_mut() {
            Some((last, text)) if *last == kind && kind != "tool" => text.push_str(&what),
            Some((last, id)) if *last == kind && *id == what => {}
            _ => shown.push((kind, what)),
        }
    }
    shown
}

/// How many stored parts of `session` hold `text`.
fn stored(env: &TestEnv, session: &str, text: &str) -> i64 {
    rusqlite::Connection::open(env.database())
        .unwrap()
        .query_row(
            "SELECT count(*) FROM parts p JOIN messages m ON m.id = p.message_id
             WHERE m.session_id = ?1 AND instr(p.data_json, ?2) > 0",
            (session, text),
            |row| row.get(0),
        )
        .unwrap()
}

/// A turn whose prompt asks to write `a.txt`, with "then say hi" steered in and joined: the
/// request that carries it is streaming, held after its first chunk. Returns both prompts' ids.
async fn joined_and_streaming(env: &TestEnv, agent: &mut Agent, session: &str) -> (i64, i64) {
    let (partial, _release) = Reply::text(&["Partial", " rest."]).held(1);
    env.mock.push(write("c1", "a.txt")).push(partial).push(Reply::text(&["A turn nobody asked for."]));
    let (first, question) = held_turn(agent, session, "write a.txt").await;
    let second = busy_prompt(agent, session, "then say hi", JOINS).await;
    agent.allow_once(&question).await;
    assert_eq!(agent.next_chunk().await, "Partial", "the steered prompt joined; the next request streams");
    (first, second)
}

fn pair(kind: &str, what: &str) -> (String, String) {
    (kind.to_owned(), what.to_owned())
}

#[tokio::test]
async fn a_steered_prompt_joins_after_the_tool_results_is_sent_once_and_replays_where_it_joined() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Wrote it, and hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.allow_once(&question).await;

    let (answers, notifications) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "end_turn");
    assert_eq!(answers[1]["result"], answers[0]["result"], "answered with the turn it joined");
    let live = conversation(&updates(&notifications, &session));
    assert_eq!(
        live,
        [
            pair("tool", "c1"),
            pair("user_message_chunk", "then say hi"),
            pair("agent_message_chunk", "Wrote it, and hi.")
        ]
    );

    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2, "one turn, two model requests");
    assert_eq!(user_texts(&requests[0]), ["write a.txt"]);
    assert_eq!(user_texts(&requests[1]), ["write a.txt", "then say hi"], "once, after the tool results");
    let messages = requests[1]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);

    // Another process replays the turn in the order it happened.
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    assert_eq!(
        conversation(&updates(&replay, &session)),
        [
            pair("user_message_chunk", "write a.txt"),
            pair("tool", "c1"),
            pair("user_message_chunk", "then say hi"),
            pair("agent_message_chunk", "Wrote it, and hi."),
        ]
    );
}

#[tokio::test]
async fn a_turn_the_model_would_end_answers_again_for_text_that_joined_meanwhile() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    let (first_answer, release) = Reply::text(&["First", " answer."]).held(1);
    env.mock.push(first_answer).push(Reply::text(&["Second answer."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let first = agent.prompt(&session, "say something").await;
    assert_eq!(agent.next_chunk().await, "First", "the answer is under way, and held");
    let second = busy_prompt(&mut agent, &session, "and then more", JOINS).await;
    release.notify_one();

    let (answers, notifications) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "end_turn");
    assert_eq!(answers[1]["result"], answers[0]["result"]);
    assert_eq!(
        conversation(&updates(&notifications, &session)),
        [
            pair("agent_message_chunk", " answer."),
            pair("user_message_chunk", "and then more"),
            pair("agent_message_chunk", "Second answer."),
        ]
    );
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2, "one more request in the same turn");
    assert_eq!(user_texts(&requests[1]), ["say something", "and then more"]);
    assert_eq!(requests[1]["messages"][2]["content"], "First answer.", "after the answer it followed");
}

#[tokio::test]
async fn by_default_a_prompt_sent_while_busy_runs_as_its_own_turn_after_the_running_one() {
    let env = TestEnv::new().await;
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Wrote it."])).push(Reply::text(&["Hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", "queued").await;
    agent.allow_once(&question).await;

    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "end_turn");
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(user_texts(&requests[1]), ["write a.txt"], "the first turn never saw it");
    assert_eq!(user_texts(&requests[2]), ["write a.txt", "then say hi"]);
    assert_eq!(requests[2]["messages"][4]["content"], "Wrote it.", "after the first turn's answer");
}

#[tokio::test]
async fn a_steered_prompt_the_turn_did_not_take_runs_next() {
    // The limit ends the turn at its first step boundary, before the prompt can join.
    let env = TestEnv::new().await;
    env.write_config(&format!("{STEER}[limits]\nmax_rounds = 1\n"));
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.allow_once(&question).await;

    let (answers, notifications) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "max_turn_requests");
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn", "it ran as a turn of its own");
    let told = crate::support::text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(told.contains("before a steered prompt could join it"), "the user is told: {told}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[1]), ["write a.txt", "then say hi"]);
}

#[tokio::test]
async fn cancel_answers_a_steered_prompt_that_has_not_joined_cancelled_and_stores_nothing_of_it() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Fresh start."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, _question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;

    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"]["stopReason"], "cancelled", "like a queued prompt: the editor keeps its text");
    assert_eq!(stored(&env, &session, "then say hi"), 0, "neither stored nor half-joined");

    let next = agent.prompt(&session, "start over").await;
    let (answer, _) = agent.response(next).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(!user_texts(&requests[1]).iter().any(|text| text.contains("say hi")));
}

#[tokio::test]
async fn withdrawing_the_turns_own_prompt_leaves_a_steered_one_that_had_not_joined_to_run_next() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, _question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.notify("$/cancel_request", json!({"requestId": first})).await;

    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["error"]["code"], -32800, "{}", answers[0]);
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn", "it ran as a turn of its own");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[1]).last().map(String::as_str), Some("then say hi"));
}

#[tokio::test]
async fn withdrawing_a_steered_prompt_before_it_joined_answers_it_alone() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Wrote it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.notify("$/cancel_request", json!({"requestId": second})).await;
    let (answer, _) = agent.response(second).await;
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    // The abort woke the request's task, whose drop tells the session; the turn can take nothing
    // before the permission answer, which comes only after this answer's round trip.
    agent.allow_once(&question).await;

    let (answer, _) = agent.response(first).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "the turn went on");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[1]), ["write a.txt"], "without the withdrawn prompt");
}

/// `initialize` for a client that takes boolean config options.
async fn ready_with_booleans(env: &TestEnv) -> Agent {
    let mut agent = env.spawn().await;
    let capabilities = json!({"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false,
        "session": {"configOptions": {"boolean": {}}}});
    agent.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await;
    agent
}

fn steer_option(result: &Value) -> Option<Value> {
    result["configOptions"].as_array().unwrap().iter().find(|option| option["id"] == "steer").cloned()
}

#[tokio::test]
async fn the_steer_option_is_a_boolean_set_per_session_checked_and_kept_across_a_load() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Noted."])).push(write("c1", "a.txt")).push(Reply::text(&["Done."]));
    let mut plain = env.ready().await;
    let created = plain.call("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(steer_option(&created), None, "a client without boolean options is not offered one");
    plain.close_stdin();
    plain.wait_exit().await;

    let mut agent = ready_with_booleans(&env).await;
    let created = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let option = steer_option(&created).unwrap();
    assert_eq!((&option["type"], &option["currentValue"]), (&json!("boolean"), &json!(false)), "{option}");

    let set = json!({"sessionId": session, "configId": "steer", "type": "boolean", "value": true});
    let id = agent.request("session/set_config_option", set).await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(steer_option(&response["result"]).unwrap()["currentValue"], true);
    let announced = updates(&notifications, &session)
        .into_iter()
        .find(|update| update["sessionUpdate"] == "config_option_update")
        .expect("announced with config_option_update");
    assert_eq!(steer_option(announced).unwrap()["currentValue"], true);
    let status = agent.prompt(&session, "/status").await;
    let (_, said) = agent.response(status).await;
    let said = crate::support::text_of(&updates(&said, &session), "agent_message_chunk");
    assert!(said.contains("Prompts sent while a turn runs: steer"), "{said}");

    // What clients send for a boolean besides the typed form: a bare `false`, the word "true".
    for (value, steering) in [(json!(false), false), (json!("true"), true)] {
        let set = json!({"sessionId": session, "configId": "steer", "value": value});
        let result = agent.call("session/set_config_option", set).await;
        assert_eq!(steer_option(&result).unwrap()["currentValue"], steering, "{value}: {result}");
    }
    for (bad, says) in [
        (json!({"configId": "steer", "value": "on"}), "`steer` takes a boolean"),
        (json!({"configId": "mode", "type": "boolean", "value": true}), "`mode` takes one of its string values"),
    ] {
        let mut params = bad;
        params["sessionId"] = json!(session);
        let error = agent.call_err("session/set_config_option", params).await;
        assert_eq!(error["code"], -32602, "{error}");
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }

    // Kept with the session: another process loads it steering, and steers. (Prompted first: a
    // session never prompted is removed when its process exits.)
    let id = agent.prompt(&session, "Note this").await;
    assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = ready_with_booleans(&env).await;
    let loaded = agent.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(steer_option(&loaded).unwrap()["currentValue"], true);
    let (first, question) = held_turn(&mut agent, &session, "write a.txt").await;
    let second = busy_prompt(&mut agent, &session, "then say hi", JOINS).await;
    agent.allow_once(&question).await;
    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[1]["result"]["stopReason"], "end_turn");
    assert_eq!(env.mock.requests().len(), 3, "it joined the turn (after the first process's one request)");
}

#[tokio::test]
async fn a_bad_busy_prompt_setting_is_refused_naming_it() {
    let env = TestEnv::new().await;
    env.write_config("[session]\nbusy_prompt = \"interrupt\"\n");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("[session] busy_prompt = \"interrupt\""), "{error}");
    assert!(message.contains("\"steer\""), "the fix is named: {error}");
}

#[tokio::test]
async fn cancel_after_a_steered_prompt_joined_answers_both_cancelled_and_runs_nothing_more() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, second) = joined_and_streaming(&env, &mut agent, &session).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;

    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"]["stopReason"], "cancelled", "it joined the cancelled turn");
    assert_eq!(env.mock.requests().len(), 2, "no turn after the cancel");
    assert_eq!(stored(&env, &session, "then say hi"), 1, "stored once, where it joined");
}

#[tokio::test]
async fn withdrawing_a_steered_prompt_that_joined_cancels_its_turn_and_runs_nothing_more() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, second) = joined_and_streaming(&env, &mut agent, &session).await;
    agent.notify("$/cancel_request", json!({"requestId": second})).await;

    let (answers, _) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    env.mock.push(Reply::text(&["After."]));
    let after = agent.prompt(&session, "after").await;
    let (answer, _) = agent.response(after).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 3, "only the turn prompted after it");
    assert_eq!(user_texts(&requests[2]), ["write a.txt", "then say hi", "after"]);
}

#[tokio::test]
async fn closing_a_session_whose_turn_a_steered_prompt_joined_runs_nothing_more() {
    let env = TestEnv::new().await;
    env.write_config(STEER);
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (first, second) = joined_and_streaming(&env, &mut agent, &session).await;
    let closed = agent.request("session/close", json!({"sessionId": session})).await;
    let (answers, _) = agent.responses(&[first, second, closed]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "cancelled");
    assert_eq!(answers[1]["result"]["stopReason"], "cancelled");
    assert!(answers[2].get("result").is_some(), "{}", answers[2]);
    assert_eq!(stored(&env, &session, "then say hi"), 1);

    // Reopened, the session is free: its next turn is the only one, with the steered text once.
    let load = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    agent.response(load).await;
    env.mock.push(Reply::text(&["Back."]));
    let next = agent.prompt(&session, "again").await;
    let (answer, _) = agent.response(next).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 3, "nothing ran between the close and this prompt");
    assert_eq!(user_texts(&requests[2]), ["write a.txt", "then say hi", "again"]);
}

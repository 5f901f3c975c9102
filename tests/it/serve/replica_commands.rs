//! `cairn serve` replicas sharing one PostgreSQL database: the commands besides prompts and
//! cancels that a client sends to a replica not running the session's turn reach the one that
//! is, as they would on one replica (one sent while the replica's own prompt is starting, before
//! the lease refuses it, too). A mode change reaches the running turn's next decision, a
//! model change its queued prompts, a steered prompt joins it, and a prompt the client
//! withdraws never runs, whether handed already or starting (with its claim queued:
//! `replica_withdrawn.rs`); a setting changed while nobody runs a turn is shown live to every
//! replica's clients and is the next turn's, on whichever replica runs it, or handed on to
//! the turn another replica started while it was being stored.

use std::time::Duration;

use serde_json::{Value, json};

use super::postgres::fixture;
use super::replicas::{last_mode_shown, until_answer_starts, until_quiet, until_shown};
use crate::support::served::{Client, Server};
use crate::support::{Reply, TestEnv};

/// Two replicas of one database, with `config` besides the store's.
async fn two_replicas(mut env: TestEnv, config: &str) -> (TestEnv, Server, Server) {
    let url = fixture::database().await;
    env.set_env("CAIRN_MODEL", "openai/mock-model");
    env.write_config(&format!("[store]\nurl = \"{url}\"\n{config}"));
    let (a, b) = (Server::start(&env).await, Server::start(&env).await);
    (env, a, b)
}

/// Two replicas of the database at `url`, their turns answered by the mock model.
pub(super) async fn replicas_of(url: &str) -> (TestEnv, Server, Server) {
    let env = replicas_env(url).await;
    let (a, b) = (Server::start(&env).await, Server::start(&env).await);
    (env, a, b)
}

/// What the replicas of the database at `url` run with, their turns answered by the mock model.
pub(super) async fn replicas_env(url: &str) -> TestEnv {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/mock-model");
    env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
    env
}

/// A client of `server` that loaded `session`.
pub(super) async fn viewer(server: &Server, env: &TestEnv, session: &str) -> Client {
    let mut client = server.client().await;
    client.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    client
}

/// A client of `server` that loaded `session` with an MCP server that starts once the file
/// returned is written: a turn of `server`'s waits for it before its claim (the lease's take,
/// or its refusal) comes.
async fn held_viewer(server: &Server, env: &TestEnv, session: &str) -> (Client, std::path::PathBuf) {
    let go = env.workspace().join("mcp-go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let mcp = json!({"name": "slow", "command": "sh", "args": ["-c", wait], "env": []});
    let mut client = server.client().await;
    client.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": [mcp]})).await;
    (client, go)
}

/// A reply that says `text`, then calls a tool, held after the text until released.
fn text_then_call(text: &str, call: (&str, &str, Value)) -> (Reply, std::sync::Arc<tokio::sync::Notify>) {
    let mut events = Reply::text(&[text]).events();
    events.truncate(1);
    events.extend(Reply::tool_calls(&[call]).events());
    Reply::Stream { events, delay: Duration::ZERO }.held(1)
}

/// Reads until the answer to `prompt`, failing if the turn asks a permission question; what came.
async fn answered_unasked(client: &mut Client, prompt: i64) -> (Value, Vec<Value>) {
    let mut seen = Vec::new();
    loop {
        let message = client.recv().await;
        assert_ne!(message["method"], "session/request_permission", "the turn asked: it kept the old mode");
        if message.get("method").is_none() && message["id"] == prompt {
            return (message, seen);
        }
        seen.push(message);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_sent_to_another_replica_mid_turn_decides_the_running_turns_next_call() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let path = env.workspace().join("note.txt");
    let (first, release) = text_then_call("Writing it. ", ("c1", "write", json!({"path": path, "content": "x\n"})));
    env.mock.push(first);
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    until_answer_starts(&mut on_b, &session).await;
    // Answered once a, running the turn, took it.
    on_b.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    release.notify_one();

    let (done, seen) = answered_unasked(&mut on_a, prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n", "the call ran in bypass, unasked");
    let told = seen.iter().any(|message| {
        message["params"]["update"]["sessionUpdate"] == "current_mode_update"
            && message["params"]["update"]["currentModeId"] == "bypass"
    });
    assert!(told, "a's client is told of the mode b's client chose: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_sent_while_a_prompt_the_lease_refuses_is_starting_reaches_the_running_turn_too() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "[mcp]\nstartup_timeout_secs = 120\n").await;
    let path = env.workspace().join("note.txt");
    let (first, release) = text_then_call("Writing it. ", ("c1", "write", json!({"path": path, "content": "x\n"})));
    env.mock.push(first);
    env.mock.push(Reply::text(&["written"]));
    env.mock.push(Reply::text(&["and then"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let (mut on_b, go) = held_viewer(&b, &env, &session).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    until_answer_starts(&mut on_b, &session).await;
    // b starts a turn for its prompt, and the mode comes while it waits for the server.
    let handed = on_b.prompt(&session, "and then?").await;
    on_b.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    std::fs::write(&go, "").unwrap();
    // a's client is told of the mode once a took it (never, if it stayed on b).
    let told = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let message = on_a.recv().await;
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "current_mode_update" && update["currentModeId"] == "bypass" {
                return;
            }
        }
    });
    assert!(told.await.is_ok(), "the mode never reached the replica running the turn:\nB:\n{}", b.stderr());
    release.notify_one();

    let (done, _) = answered_unasked(&mut on_a, prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n", "the call ran in bypass, unasked");
    let (answer, _) = on_b.response(handed).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_withdrawn_while_its_turn_is_starting_under_another_replicas_lease_is_answered_cancelled_and_never_handed_on()
 {
    let (env, a, b) = two_replicas(TestEnv::new().await, "[mcp]\nstartup_timeout_secs = 120\n").await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["never"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let (mut on_b, go) = held_viewer(&b, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    // b's turn for it waits before its claim; its client withdraws it meanwhile.
    let withdrawn = on_b.prompt(&session, "withdrawn before its refusal").await;
    on_b.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": withdrawn}})).await;
    std::fs::write(&go, "").unwrap();
    let (answer, _) = on_b.response(withdrawn).await;
    let cancelled = answer["result"]["stopReason"] == "cancelled" || answer["error"]["code"] == -32800;
    assert!(cancelled, "{answer}");
    release.notify_one();
    let (done, _) = on_a.response(one).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(!b.stderr().contains("a prompt was handed"), "b handed it on:\n{}", b.stderr());
    let ran = env.mock.requests().iter().any(|body| body.to_string().contains("withdrawn before its refusal"));
    assert!(!ran, "the withdrawn prompt ran\nA:\n{}\nB:\n{}", a.stderr(), b.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_sent_to_another_replica_mid_turn_is_the_one_its_queued_prompt_runs_with() {
    let config = "[providers.openai]\nmodels = [\"mock-model\", \"mock-large\"]\n";
    let (env, a, b) = two_replicas(TestEnv::new().await, config).await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["bigger"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    let two = on_a.prompt(&session, "two").await;
    // a says the prompt is queued: it runs after the turn, with the settings a has then.
    loop {
        let message = on_a.recv().await;
        if message.to_string().contains("queued behind") {
            break;
        }
    }
    let switched = on_b
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "openai/mock-large"}),
        )
        .await;
    assert_eq!(switched["configOptions"][0]["currentValue"], "openai/mock-large", "{switched}");
    release.notify_one();

    assert_eq!(on_a.response(one).await.0["result"]["stopReason"], "end_turn");
    assert_eq!(on_a.response(two).await.0["result"]["stopReason"], "end_turn");
    let models: Vec<String> = env.mock.requests().iter().map(|r| r["model"].as_str().unwrap().to_owned()).collect();
    assert_eq!(models, ["mock-model", "mock-large"], "the running turn keeps its model; the queued one has b's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_steered_through_another_replica_joins_the_running_turn() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    std::fs::write(env.workspace().join("notes.md"), "notes\n").unwrap();
    let (first, release) = text_then_call("Reading. ", ("r1", "read", json!({"path": "notes.md"})));
    env.mock.push(first);
    env.mock.push(Reply::text(&["done"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let prompt = on_a.prompt(&session, "read the notes").await;
    until_answer_starts(&mut on_b, &session).await;
    let steer = json!({"sessionId": session, "prompt": [{"type": "text", "text": "STEERED-IN"}],
        "idleBehavior": "promptRequired"});
    let steered = on_b.call("_session/steering", steer).await;
    assert_eq!(steered, json!({"outcome": "injected"}), "a's turn took it");
    release.notify_one();

    assert_eq!(on_a.response(prompt).await.0["result"]["stopReason"], "end_turn");
    let asked = env.mock.requests();
    assert_eq!(asked.len(), 2, "one turn, not a second");
    assert!(asked[1].to_string().contains("STEERED-IN"), "the steered prompt reached the turn's next request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_prompt_its_client_withdraws_never_runs_where_it_was_handed() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["later"]));
    // For the withdrawn prompt, should it run after all: then it shows in what the model was asked.
    env.mock.push(Reply::text(&["unwanted"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    let withdrawn = on_b.prompt(&session, "WITHDRAWN-PROMPT").await;
    b.until_said("handed to the replica running the session's turn").await;
    a.until_said("a command handed by another replica").await;
    on_b.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": withdrawn}})).await;
    let (answer, _) = on_b.response(withdrawn).await;
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    a.until_said("a handed prompt was withdrawn by its client").await;
    release.notify_one();

    assert_eq!(on_a.response(one).await.0["result"]["stopReason"], "end_turn");
    // Queued behind `one`, the withdrawn prompt would run before this one.
    let later = on_a.prompt(&session, "LATER-PROMPT").await;
    assert_eq!(on_a.response(later).await.0["result"]["stopReason"], "end_turn");
    let asked: Vec<String> = env.mock.requests().iter().map(Value::to_string).collect();
    assert_eq!(asked.len(), 2, "the withdrawn prompt never ran: {asked:?}");
    assert!(asked[1].contains("LATER-PROMPT") && !asked[1].contains("WITHDRAWN-PROMPT"), "{asked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_set_on_another_replica_while_idle_is_the_next_turns_where_it_runs() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let path = env.workspace().join("idle.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = a.client().await;
    // a's actor is live, in the mode the session had when a made it.
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;
    on_b.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    let (done, _) = answered_unasked(&mut on_a, prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n", "the call ran in b's mode, unasked");
}

/// Whether `message` shows `session`'s options with its mode `mode`.
fn options_in_mode(message: &Value, session: &str, mode: &str) -> bool {
    let update = &message["params"]["update"];
    message["method"] == "session/update"
        && message["params"]["sessionId"] == session
        && update["sessionUpdate"] == "config_option_update"
        && update["configOptions"]
            .as_array()
            .is_some_and(|options| options.iter().any(|o| o["id"] == "mode" && o["currentValue"] == mode))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_set_through_another_replica_while_idle_is_shown_live_to_each_replicas_clients_once() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;
    let mut also_on_b = viewer(&b, &env, &session).await;
    let set = on_b.request("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    let (answer, mut by_the_setter) = on_b.response(set).await;
    assert!(answer.get("error").is_none(), "{answer}");

    // a's client, watching the idle session, is shown the change as b's other client is.
    let shown = loop {
        let message = on_a.recv().await;
        if options_in_mode(&message, &session, "bypass") {
            break message;
        }
    };
    let seq = shown["params"]["_meta"]["cairn"]["seq"].as_u64();
    assert!(seq.is_some(), "numbered by the session's log: {shown}");
    let shown_on = |seen: &[Value]| seen.iter().filter(|m| options_in_mode(m, &session, "bypass")).count();
    assert_eq!(shown_on(&until_quiet(&mut on_a).await), 0, "a's client is shown it once");
    assert_eq!(shown_on(&until_quiet(&mut also_on_b).await), 1, "b's other client once, by b, not again from the log");
    by_the_setter.extend(until_quiet(&mut on_b).await);
    assert_eq!(shown_on(&by_the_setter), 1, "the client that set it, once");

    // The next turn, on a, runs in it, its updates numbered after the change.
    let path = env.workspace().join("idle.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let prompt = on_a.prompt(&session, "Write it").await;
    let (done, seen) = answered_unasked(&mut on_a, prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let numbers: Vec<u64> = seen.iter().filter_map(|m| m["params"]["_meta"]["cairn"]["seq"].as_u64()).collect();
    assert!(numbers.first().is_some_and(|first| Some(*first) > seq), "{numbers:?} after {seq:?}");
    assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "each once, in order: {numbers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_handed_to_the_replica_running_the_turn_is_shown_once_on_every_replica() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let c = Server::start(&env).await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;
    let mut also_on_b = viewer(&b, &env, &session).await;
    let mut on_c = viewer(&c, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_c, &session).await;
    on_b.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    release.notify_one();
    let (done, mut on_a_seen) = on_a.response(one).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");

    on_a_seen.extend(until_quiet(&mut on_a).await);
    let shown = |seen: &[Value]| seen.iter().filter(|m| options_in_mode(m, &session, "bypass")).count();
    assert_eq!(shown(&on_a_seen), 1, "a, running the turn, shows it its client once");
    assert_eq!(shown(&until_quiet(&mut also_on_b).await), 1, "b, which handed it, once (with a's answer)");
    assert_eq!(shown(&until_quiet(&mut on_c).await), 1, "c, following, once (from the log)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_set_through_another_replica_mid_turn_is_shown_where_the_turn_runs() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    on_b.call("session/set_title", json!({"sessionId": session, "title": "Named on b"})).await;
    release.notify_one();

    let (done, seen) = on_a.response(one).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let told = seen.iter().any(|message| message.to_string().contains("Named on b"));
    assert!(told, "a's client is shown the title b's client set: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_the_running_replica_refuses_is_refused_through_another_replica_with_the_same_error() {
    let (env, a, b) = two_replicas(TestEnv::new().await, "").await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;
    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;

    let unknown = json!({"sessionId": session, "configId": "model", "value": "openai/no-such-model"});
    let on_a_itself = on_a.request("session/set_config_option", unknown.clone()).await;
    let (here, _) = on_a.response(on_a_itself).await;
    let handed = on_b.request("session/set_config_option", unknown).await;
    let (through_b, _) = on_b.response(handed).await;
    release.notify_one();
    assert_eq!(on_a.response(one).await.0["result"]["stopReason"], "end_turn");

    assert_eq!(here["error"]["code"], -32602, "a bad value is the client's mistake: {here}");
    assert_eq!(through_b["error"]["code"], here["error"]["code"], "the same mistake through b: {through_b}");
    let said = through_b["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("no-such-model"), "it names the value: {through_b}");
}

/// A connection of the test's holding `session`'s row locked (`FOR UPDATE`) until it commits:
/// every write of that row, on any replica, waits behind it.
pub(super) async fn row_locked(url: &str, session: &str) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    db.batch_execute("BEGIN").await.unwrap();
    db.execute("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", &[&session]).await.unwrap();
    db
}

/// Waits until `count` statements of the test's database wait on a lock.
pub(super) async fn until_waiting(db: &tokio_postgres::Client, count: i64) {
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()";
    while db.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) < count {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_stored_through_another_replica_as_a_turn_takes_the_lease_is_handed_on_to_that_turn() {
    raced_with_a_turn(Order::TurnFirst).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_stored_through_another_replica_just_before_a_turn_takes_the_lease_reaches_it_through_the_log() {
    raced_with_a_turn(Order::SettingFirst).await;
}

/// Which of a's lease take and b's settings change waits first on the session's row.
#[derive(PartialEq)]
enum Order {
    TurnFirst,
    SettingFirst,
}

/// b's client sets the mode while a starts a turn, having read the settings before the change
/// committed, the two writes waiting on the session's row (locked from the test) in `order`:
/// the turn runs in b's mode all the same, either handed on to it (b found the lease taken
/// once its change committed) or read from the log (b logged it, nobody holding the lease).
async fn raced_with_a_turn(order: Order) {
    let url = fixture::database().await;
    let (env, a, b) = replicas_of(&url).await;
    let path = env.workspace().join("raced.txt");
    let (call, release) = Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]).held(0);
    env.mock.push(call);
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = viewer(&b, &env, &session).await;

    let db = row_locked(&url, &session).await;
    let mode = json!({"sessionId": session, "modeId": "bypass"});
    let (prompt, set) = match order {
        Order::TurnFirst => {
            let prompt = on_a.prompt(&session, "Write it").await;
            until_waiting(&db, 1).await;
            (prompt, on_b.request("session/set_mode", mode).await)
        }
        Order::SettingFirst => {
            let set = on_b.request("session/set_mode", mode).await;
            until_waiting(&db, 1).await;
            (on_a.prompt(&session, "Write it").await, set)
        }
    };
    until_waiting(&db, 2).await;
    db.batch_execute("COMMIT").await.unwrap();
    let (answer, _) = on_b.response(set).await;
    assert!(answer.get("error").is_none(), "{answer}");
    if order == Order::TurnFirst {
        b.until_said("handed on to it").await;
    }

    // a's running turn took it (its client is told) before the model asks to write.
    loop {
        let message = on_a.recv().await;
        if options_in_mode(&message, &session, "bypass") {
            break;
        }
    }
    release.notify_one();
    let (done, seen) = answered_unasked(&mut on_a, prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n", "the call ran in b's mode, unasked");
    let numbers: Vec<u64> = seen.iter().filter_map(|m| m["params"]["_meta"]["cairn"]["seq"].as_u64()).collect();
    assert!(numbers.windows(2).all(|pair| pair[0] < pair[1]), "each once, in order: {numbers:?}");
}

/// Two replicas store a mode each at once: every replica's clients are left shown the one
/// stored last, though a's own change commits (and its request is answered) around the time
/// a's follower reads b's: each replica's actor shows its clients its own change as it
/// commits, in the log's order with the other replica's rows, not the request's handler after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_modes_set_through_two_replicas_at_once_leave_every_replica_in_the_one_stored_last() {
    let url = fixture::database().await;
    let (env, a, b) = replicas_of(&url).await;
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut watching_a = viewer(&a, &env, &session).await;
    let mut on_b = viewer(&b, &env, &session).await;
    let mut watching_b = viewer(&b, &env, &session).await;

    // a's change waits first on the session's row (locked from the test), b's behind it: b has
    // put its own in effect before a's row, numbered before b's, is in the log.
    let db = row_locked(&url, &session).await;
    let to_plan = on_a.request("session/set_mode", json!({"sessionId": session, "modeId": "plan"})).await;
    until_waiting(&db, 1).await;
    let to_bypass = on_b.request("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    until_waiting(&db, 2).await;
    db.batch_execute("COMMIT").await.unwrap();
    let mut by_the_setters = Vec::new();
    for (client, request) in [(&mut on_a, to_plan), (&mut on_b, to_bypass)] {
        let (answer, before) = client.response(request).await;
        assert!(answer.get("error").is_none(), "{answer}");
        by_the_setters.push(before);
    }
    let stored: Option<String> =
        db.query_one("SELECT mode FROM sessions WHERE id = $1", &[&session]).await.unwrap().get(0);
    assert_eq!(stored.as_deref(), Some("bypass"), "b's change committed last");

    // Every replica's clients are left shown the mode the session is in, as a load shows it.
    let on_a_shown = last_mode_shown(&until_shown(&mut watching_a, &session, "bypass").await, &session);
    assert_eq!(on_a_shown.as_deref(), Some("bypass"), "a's watching client");
    let on_b_shown = last_mode_shown(&until_shown(&mut watching_b, &session, "bypass").await, &session);
    assert_eq!(on_b_shown.as_deref(), Some("bypass"), "b's watching client: b's own change, not a's before it");
    // So are the clients that set them: their answers carry no mode.
    for (mut seen, client) in by_the_setters.into_iter().zip([&mut on_a, &mut on_b]) {
        if last_mode_shown(&seen, &session).as_deref() != Some("bypass") {
            seen.extend(until_shown(client, &session, "bypass").await);
        }
        seen.extend(until_quiet(client).await);
        assert_eq!(last_mode_shown(&seen, &session).as_deref(), Some("bypass"), "a client that set a mode");
    }
    for server in [&a, &b] {
        let mut fresh = server.client().await;
        let loaded =
            fresh.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
        assert_eq!(loaded["modes"]["currentModeId"], "bypass", "a load on {}: {loaded}", server.url);
    }
}

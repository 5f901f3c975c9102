//! Questions across `cairn serve` replicas, as on one: a client of another replica that answers
//! a permission question with an error, a dismissal or an option it was not offered has answered
//! (the call is rejected, as on the turn's own replica), though its replica withdrew its copies; and a
//! client that opens the session on another replica after the question was asked is asked it
//! too, as a client attaching on the turn's own replica is; a replica that stops following the
//! session withdraws the question, so a client opening it there after it was settled is not.

use serde_json::{Value, json};

use super::replicas::{Replicas, allow_once, until_asked};
use crate::support::Reply;
use crate::support::served::Client;

/// A JSON-RPC error answer to `request`, as an editor whose dialog failed sends.
fn failed(request: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": "the dialog broke"}})
}

/// A dismissal of `request`, as an editor closing the dialog sends.
fn dismissed(request: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": {"outcome": "cancelled"}}})
}

/// An answer choosing an option `request` did not offer.
fn not_offered(request: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_everything_forever"}}})
}

/// A turn on the first of two replicas asks to write a file; the second's client answers with
/// `answer` while the first's never does. The turn ends, and the file is not written.
async fn answered_elsewhere_with(answer: fn(&Value) -> Value, name: &str) {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join(name);
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["not written"]));
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    until_asked(&mut on_a).await;
    let to_b = until_asked(&mut on_b).await;
    on_b.send(answer(&to_b)).await;
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(!path.exists(), "the call was rejected, as a local client's answer would have it");
    assert_eq!(env.mock.requests().len(), 2, "the turn went on after the rejection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_answer_on_another_replica_rejects_the_call_as_on_the_turns_own() {
    answered_elsewhere_with(failed, "failed.txt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_question_dismissed_on_another_replica_is_a_rejection_there_too() {
    answered_elsewhere_with(dismissed, "never.txt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_option_not_offered_chosen_on_another_replica_rejects_the_call_as_on_the_turns_own() {
    answered_elsewhere_with(not_offered, "unoffered.txt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_opening_the_session_on_another_replica_after_the_question_was_asked_is_asked_too() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join("late.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "late\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;

    // Nobody views the session on b when the question is asked.
    let prompt = on_a.prompt(&session, "Write it").await;
    let to_a = until_asked(&mut on_a).await;
    let (mut late, before) = load(&replicas, &session).await;
    let to_late = match before.into_iter().find(asks) {
        Some(asked) => asked,
        None => until_asked(&mut late).await,
    };
    assert_eq!(to_late["params"]["toolCall"]["toolCallId"], to_a["params"]["toolCall"]["toolCallId"]);
    late.send(allow_once(&to_late)).await;

    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "late\n", "the late client's answer ran the call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_before_another_replica_opens_the_session_is_not_asked_there() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join("first.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "1\n"}))]));
    let (held, release) = Reply::text(&["done ", "now"]).held(1);
    env.mock.push(held);
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    let to_a = until_asked(&mut on_a).await;
    on_a.send(allow_once(&to_a)).await;
    // The turn goes on after the question closed, held in its answer; then b's client opens it.
    until_chunk(&mut on_a, "done ").await;
    let (mut late, mut seen) = load(&replicas, &session).await;
    release.notify_one();
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    seen.extend(until_chunk(&mut late, "now").await);
    assert!(!seen.iter().any(asks), "a closed question is not asked: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_following_the_session_withdraws_the_question_and_a_later_client_there_is_not_asked() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join("withdrawn.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "1\n"}))]));
    let (held, release) = Reply::text(&["done ", "now"]).held(1);
    env.mock.push(held);
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    let to_a = until_asked(&mut on_a).await;
    until_asked(&mut on_b).await;
    // b's only client closes the session there: b follows it no more, and never reads the
    // question's close.
    on_b.call("session/close", json!({"sessionId": session})).await;
    on_a.send(allow_once(&to_a)).await;
    until_chunk(&mut on_a, "done ").await;

    // A client opening the session on b after the question was settled is not asked it.
    let (mut late, mut seen) = load(&replicas, &session).await;
    release.notify_one();
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    seen.extend(until_chunk(&mut late, "now").await);
    assert!(!seen.iter().any(asks), "a settled question is not asked: {seen:?}");
}

/// A new client of the second replica that loads `session`; what came before the load's answer.
async fn load(replicas: &Replicas, session: &str) -> (Client, Vec<Value>) {
    let mut client = replicas.servers[1].client().await;
    let params = json!({"sessionId": session, "cwd": replicas.env.cwd(), "mcpServers": []});
    let id = client.request("session/load", params).await;
    let (loaded, before) = client.response(id).await;
    assert!(loaded.get("error").is_none(), "{loaded}");
    (client, before)
}

fn asks(message: &Value) -> bool {
    message["method"] == "session/request_permission"
}

/// Reads until an answer chunk `text` comes; everything read.
async fn until_chunk(client: &mut Client, text: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let message = client.recv().await;
        let update = &message["params"]["update"];
        let found = update["sessionUpdate"] == "agent_message_chunk" && update["content"]["text"] == text;
        seen.push(message);
        if found {
            return seen;
        }
    }
}

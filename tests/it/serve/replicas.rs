//! `cairn serve` replicas sharing one PostgreSQL database: a client of any replica follows a
//! turn another replica runs, live, each update once and in order; a prompt or a cancel sent to
//! a replica that is not running the session's turn is carried out by the one that is, and the
//! client is answered where it asked, after everything the prompt caused.

use std::time::Duration;

use serde_json::{Value, json};

use super::postgres::fixture;
use crate::support::served::{Client, Server};
use crate::support::{Reply, TestEnv, text_of, updates};

/// Three replicas of one database, and a session made on the first.
pub(super) struct Replicas {
    pub(super) env: TestEnv,
    pub(super) servers: Vec<Server>,
}

impl Replicas {
    pub(super) async fn start(count: usize) -> Self {
        let env = TestEnv::new().await;
        let url = fixture::database().await;
        env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
        let mut servers = Vec::new();
        for _ in 0..count {
            servers.push(Server::start(&env).await);
        }
        Self { env, servers }
    }

    /// A client of replica `n` that loaded `session`.
    pub(super) async fn viewer(&self, n: usize, session: &str) -> Client {
        let mut client = self.servers[n].client().await;
        let loaded =
            client.call("session/load", json!({"sessionId": session, "cwd": self.env.cwd(), "mcpServers": []}));
        loaded.await;
        client
    }
}

/// The answer chunks' texts of `session`, in the order they came.
fn chunks(messages: &[Value], session: &str) -> Vec<String> {
    updates(messages, session)
        .iter()
        .filter(|update| update["sessionUpdate"] == "agent_message_chunk")
        .map(|update| update["content"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Reads until `session`'s answer text is `whole` (never more), then a moment longer to catch
/// any update that would come twice; everything read.
async fn until_answer(client: &mut Client, session: &str, whole: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        seen.push(client.recv().await);
        let text = text_of(&updates(&seen, session), "agent_message_chunk");
        assert!(whole.starts_with(&text), "not a prefix of the answer: {text:?}");
        if text == whole {
            break;
        }
    }
    while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(700), client.next()).await {
        seen.push(more);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_on_one_replica_is_followed_live_from_two_others_each_update_once_in_order() {
    let replicas = Replicas::start(3).await;
    let env = &replicas.env;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    let mut on_c = replicas.viewer(2, &session).await;
    let pieces: Vec<String> = (0..40).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    env.mock.push(Reply::text_with_delay(&refs, Duration::from_millis(20)));

    let prompt = on_a.prompt(&session, "tell me forty things").await;
    let (answer, on_a_seen) = on_a.response(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let whole = pieces.concat();
    for other in [&mut on_b, &mut on_c] {
        let seen = until_answer(other, &session, &whole).await;
        assert_eq!(chunks(&seen, &session), chunks(&on_a_seen, &session), "the same chunks, once each, in order");
        let shown = updates(&seen, &session);
        assert_eq!(text_of(&shown, "user_message_chunk"), "tell me forty things", "the prompt is shown too");
    }

    // Loaded afterwards from any replica, the session shows what the followers were shown.
    let mut late = replicas.servers[2].client().await;
    let id = late.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replayed) = late.response(id).await;
    assert_eq!(text_of(&updates(&replayed, &session), "agent_message_chunk"), whole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_sent_to_another_replica_mid_turn_runs_after_the_turn_where_it_runs() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["second ", "answer"]));

    let one = on_a.prompt(&session, "one").await;
    // b is shown a's turn as it streams.
    until_answer_starts(&mut on_b, &session).await;
    let two = on_b.prompt(&session, "two").await;
    replicas.servers[1].until_said("handed to the replica running the session's turn").await;
    release.notify_one();

    let (answer, _) = on_a.response(one).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let (answer, before) = on_b.response(two).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let shown = updates(&before, &session);
    assert!(
        text_of(&shown, "agent_message_chunk").ends_with("second answer"),
        "the answer came before its end: {shown:?}"
    );
    assert!(text_of(&shown, "user_message_chunk").ends_with("two"), "{shown:?}");
    let asked = env.mock.requests();
    assert_eq!(asked.len(), 2, "each prompt ran once");
    assert!(asked[1].to_string().contains("two"), "the second turn answered the prompt sent to b");
    assert!(
        replicas.servers[0].stderr().contains("a command handed by another replica"),
        "a, running the turn, ran the prompt b was sent"
    );
}

/// The numbers (`_meta.cairn.seq`) of the notes in `seen` telling that a prompt is queued
/// behind one turn, in the order they came.
fn queued_notes(seen: &[Value], session: &str) -> Vec<Option<u64>> {
    seen.iter()
        .filter(|message| message["method"] == "session/update" && message["params"]["sessionId"] == session)
        .filter(|message| message["params"]["update"].to_string().contains("queued behind 1 turn"))
        .map(|message| message["params"]["_meta"]["cairn"]["seq"].as_u64())
        .collect()
}

/// Reads until `session`'s answer text ends with `end`; everything read.
async fn until_text_ends(client: &mut Client, session: &str, end: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    while !text_of(&updates(&seen, session), "agent_message_chunk").ends_with(end) {
        seen.push(client.recv().await);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_handed_mid_turn_is_told_queued_on_every_replica_once_with_the_same_number() {
    let replicas = Replicas::start(3).await;
    let env = &replicas.env;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    let mut on_c = replicas.viewer(2, &session).await;
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["second ", "answer"]));

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    until_answer_starts(&mut on_c, &session).await;
    let two = on_b.prompt(&session, "two").await;
    // a queued the prompt b handed it behind the held turn (its own client is told so) before
    // the turn may end.
    let mut on_a_seen = Vec::new();
    while queued_notes(&on_a_seen, &session).is_empty() {
        on_a_seen.push(on_a.recv().await);
    }
    release.notify_one();

    let (answer, rest) = on_a.response(one).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    on_a_seen.extend(rest);
    let (answer, on_b_seen) = on_b.response(two).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let on_c_seen = until_text_ends(&mut on_c, &session, "second answer").await;
    let told = queued_notes(&on_a_seen, &session);
    assert_eq!(told.len(), 1, "a's client is told once: {on_a_seen:?}");
    assert_eq!(queued_notes(&on_b_seen, &session).len(), 1, "b's client, whose prompt it is: {on_b_seen:?}");
    assert_eq!(queued_notes(&on_c_seen, &session).len(), 1, "c's client, following: {on_c_seen:?}");
    assert!(told[0].is_some(), "numbered by the log, as a client may resume after it");
    assert_eq!(queued_notes(&on_b_seen, &session), told, "the same number on b");
    assert_eq!(queued_notes(&on_c_seen, &session), told, "and on c");
    // In the log's order on every replica: after the held turn's first chunk, before the rest.
    for seen in [&on_b_seen, &on_c_seen] {
        let text = text_of(&updates(seen, &session), "agent_message_chunk");
        let (note, rest) = (text.find("queued behind 1 turn"), text.find("answer"));
        assert!(note.zip(rest).is_some_and(|(note, rest)| note < rest), "{text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_to_another_replica_stops_the_turn_where_it_runs() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    env.mock.push(Reply::endless(Duration::from_millis(20)));

    let prompt = on_a.prompt(&session, "go on forever").await;
    until_answer_starts(&mut on_b, &session).await;
    on_b.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}})).await;
    let (answer, _) = on_a.response(prompt).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
}

/// Reads until the first chunk of `session`'s answer arrives.
pub(super) async fn until_answer_starts(client: &mut Client, session: &str) {
    loop {
        let message = client.recv().await;
        if message["params"]["sessionId"] == session
            && message["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
        {
            return;
        }
    }
}

/// Reads until `session/request_permission` comes; it.
pub(super) async fn until_asked(client: &mut Client) -> Value {
    loop {
        let message = client.recv().await;
        if message["method"] == "session/request_permission" {
            return message;
        }
    }
}

pub(super) fn allow_once(request: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_question_is_answered_from_another_replica_and_the_first_answer_wins() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join("note.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    // A second client of b, which answers too, later: the same answer sent twice is taken once.
    let mut also_on_b = replicas.viewer(1, &session).await;

    let prompt = on_a.prompt(&session, "Write it").await;
    let to_a = until_asked(&mut on_a).await;
    let to_b = until_asked(&mut on_b).await;
    let again = until_asked(&mut also_on_b).await;
    assert_eq!(to_a["params"]["toolCall"]["toolCallId"], to_b["params"]["toolCall"]["toolCallId"]);
    on_b.send(allow_once(&to_b)).await;

    // a's own client's copy is withdrawn, and the turn goes on with b's answer.
    let withdrawn = loop {
        let message = on_a.recv().await;
        if message["method"] == "$/cancel_request" {
            break message;
        }
        assert!(message["id"] != prompt, "the turn ended before a's copy was withdrawn: {message}");
    };
    assert_eq!(withdrawn["params"]["requestId"], to_a["id"], "{withdrawn}");
    // Late answers, on either replica, change nothing.
    also_on_b.send(allow_once(&again)).await;
    on_a.send(allow_once(&to_a)).await;
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "x\n", "the call ran, once");
    assert_eq!(env.mock.requests().len(), 2, "one call, one answer: nothing ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_answer_sent_to_two_replicas_at_once_is_taken_once() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let path = env.workspace().join("once.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "once\n"}))]));
    env.mock.push(Reply::text(&["written"]));
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;

    let prompt = on_a.prompt(&session, "Write it once").await;
    let (to_a, to_b) = (until_asked(&mut on_a).await, until_asked(&mut on_b).await);
    on_b.send(allow_once(&to_b)).await;
    on_a.send(allow_once(&to_a)).await;
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "once\n");
    assert_eq!(env.mock.requests().len(), 2, "the call ran once and the turn went on once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_started_right_after_another_replicas_turn_comes_after_all_of_it() {
    let replicas = Replicas::start(2).await;
    let env = &replicas.env;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    let first: Vec<String> = (0..60).map(|i| format!("[a{i}]")).collect();
    env.mock.push(Reply::text(&first.iter().map(String::as_str).collect::<Vec<_>>()));
    env.mock.push(Reply::text(&["[b]"]));

    let one = on_a.prompt(&session, "one").await;
    assert_eq!(on_a.response(one).await.0["result"]["stopReason"], "end_turn");
    // b's client prompts the moment a's turn is over: the session is idle, so b runs it.
    let two = on_b.prompt(&session, "two").await;
    let (answer, before) = on_b.response(two).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let text = text_of(&updates(&before, &session), "agent_message_chunk");
    assert_eq!(text, first.concat() + "[b]", "a's whole turn, then b's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_handed_to_a_replica_that_shuts_down_before_running_it_is_still_answered() {
    let mut replicas = Replicas::start(2).await;
    let mut on_a = replicas.servers[0].client().await;
    let session = on_a.new_session(&replicas.env.cwd()).await;
    let mut on_b = replicas.viewer(1, &session).await;
    let (first, _release) = Reply::text(&["first ", "answer"]).held(1);
    replicas.env.mock.push(first);

    let _one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    let two = on_b.prompt(&session, "two").await;
    replicas.servers[1].until_said("handed to the replica running the session's turn").await;
    replicas.servers[0].until_said("a command handed by another replica").await;
    // a, which took the prompt to run after its turn, is stopped (a rolling restart) first.
    replicas.servers[0].terminate().await;
    let (answer, _) = on_b.response(two).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_of_a_replica_that_died_is_withdrawn_from_the_other_replicas_clients() {
    let env = TestEnv::new().await;
    let url = fixture::database().await;
    // Short leases: the dead replica's turn is closed within seconds.
    env.write_config(&format!("[store]\nurl = \"{url}\"\nlease_ttl_secs = 2\n"));
    let (mut a, b) = (Server::start(&env).await, Server::start(&env).await);
    let path = env.workspace().join("never.txt");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": path, "content": "x\n"}))]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = b.client().await;
    on_b.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;

    let _prompt = on_a.prompt(&session, "Write it").await;
    until_asked(&mut on_a).await;
    let to_b = until_asked(&mut on_b).await;
    a.child.start_kill().unwrap();
    // b's sweeper closes the dead replica's turn; its question goes from b's client too.
    let withdrawn = loop {
        let message = on_b.recv().await;
        if message["method"] == "$/cancel_request" {
            break message;
        }
    };
    assert_eq!(withdrawn["params"]["requestId"], to_b["id"], "{withdrawn}");
}

/// What `client` is sent until nothing more comes for a moment (to catch what would come twice).
pub async fn until_quiet(client: &mut Client) -> Vec<Value> {
    let mut seen = Vec::new();
    while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(700), client.next()).await {
        seen.push(more);
    }
    seen
}

/// What `client` is shown until its last options update shows `mode` for `session` (within a
/// bound: a replica following the log may be slow on a loaded machine), then until it is quiet.
pub async fn until_shown(client: &mut Client, session: &str, mode: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while last_mode_shown(&seen, session).as_deref() != Some(mode) {
        match tokio::time::timeout_at(deadline, client.next()).await {
            Ok(Some(more)) => seen.push(more),
            _ => break,
        }
    }
    seen.extend(until_quiet(client).await);
    seen
}

/// The mode the last options update in `seen` showed for `session`.
pub fn last_mode_shown(seen: &[Value], session: &str) -> Option<String> {
    seen.iter().rev().find_map(|message| {
        let update = &message["params"]["update"];
        if message["method"] != "session/update" || message["params"]["sessionId"] != session {
            return None;
        }
        let options =
            update["configOptions"].as_array().filter(|_| update["sessionUpdate"] == "config_option_update")?;
        let mode = options.iter().find(|option| option["id"] == "mode")?;
        mode["currentValue"].as_str().map(str::to_owned)
    })
}

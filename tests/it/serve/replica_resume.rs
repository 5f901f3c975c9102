//! `_cairn/stream/resume` across `cairn serve` replicas sharing one PostgreSQL database: the
//! numbers a client saw are the session's event log's, the same on every replica, so a client
//! whose connection dropped, or whose replica died, resumes on any other and gets every update
//! after its last number exactly once, in order, then the rest live. A load racing a setting
//! changed through another replica ends in the new setting.

use std::time::Duration;

use serde_json::{Value, json};

use super::postgres::fixture;
use super::replica_commands::{replicas_of, row_locked, until_waiting};
use super::replica_death::{loaded, open};
use crate::support::served::{Client, Server};
use crate::support::{Reply, TestEnv, text_of, updates};

/// `replicas` replicas of one database whose leases live two seconds unrenewed.
async fn replicas(count: usize) -> (TestEnv, Vec<Server>) {
    let env = TestEnv::new().await;
    let url = fixture::database().await;
    env.write_config(&format!("[store]\nurl = \"{url}\"\nlease_ttl_secs = 2\n"));
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(Server::start(&env).await);
    }
    (env, servers)
}

/// The number a served update carries.
fn seq(message: &Value) -> Option<u64> {
    message["params"]["_meta"]["cairn"]["seq"].as_u64()
}

/// The numbers of `session`'s updates, in the order they came.
fn numbers(messages: &[Value], session: &str) -> Vec<u64> {
    messages.iter().filter(|message| message["params"]["sessionId"] == session).filter_map(seq).collect()
}

fn answer(messages: &[Value], session: &str) -> String {
    text_of(&updates(messages, session), "agent_message_chunk")
}

/// Reads until `session`'s answer contains `piece`; everything read.
async fn until_text(client: &mut Client, session: &str, piece: &str, seen: &mut Vec<Value>) {
    while !answer(seen, session).contains(piece) {
        seen.push(client.recv().await);
    }
}

/// Resumes `session` on `client` after `after`: its answer, and what came before it.
async fn resume(client: &mut Client, session: &str, after: u64) -> (Value, Vec<Value>) {
    let id = client.request("_cairn/stream/resume", json!({"sessionId": session, "afterSeq": after})).await;
    client.response(id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_following_on_one_replica_resumes_on_a_third_and_gets_each_update_once_in_order() {
    let (env, servers) = replicas(3).await;
    let mut on_a = servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = servers[1].client().await;
    on_b.call("session/load", open(&session, &env)).await;
    let pieces: Vec<String> = (0..40).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    // Ten chunks, then the model waits until the test lets it go on.
    let (reply, release) = Reply::text(&refs).held(10);
    env.mock.push(reply);

    let prompt = on_a.prompt(&session, "tell me forty things").await;
    let mut on_a_seen = Vec::new();
    until_text(&mut on_a, &session, "<9>", &mut on_a_seen).await;
    // b's client sees the first five, then loses its connection: "<5>" to "<9>" are committed,
    // and it never saw them.
    let mut on_b_seen = Vec::new();
    until_text(&mut on_b, &session, "<4>", &mut on_b_seen).await;
    let saw = answer(&on_b_seen, &session);
    assert!(saw.ends_with("<4>"), "{saw}");
    let before = numbers(&on_b_seen, &session);
    let last = *before.last().expect("served updates carry _meta.cairn.seq");
    on_b.drop_connection();

    // c has never shown the session: it resumes from the log, then follows the turn live.
    let mut on_c = servers[2].client().await;
    let (resumed, mut after) = resume(&mut on_c, &session, last).await;
    assert!(resumed.get("error").is_none(), "{resumed}");
    assert!(resumed["result"]["lastSeq"].as_u64().unwrap() > last, "{resumed}");
    assert!(answer(&after, &session).starts_with("<5>"), "what was missed comes first: {after:?}");
    release.notify_one();
    let whole = pieces.concat();
    while saw.clone() + &answer(&after, &session) != whole {
        after.push(on_c.recv().await);
        assert!(whole.starts_with(&(saw.clone() + &answer(&after, &session))), "{after:?}");
    }
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    // Anything that would come twice comes now.
    while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(700), on_c.next()).await {
        after.push(more);
    }
    assert_eq!(saw + &answer(&after, &session), whole, "each chunk once, in order, across the drop");
    let numbered = numbers(&after, &session);
    assert!(numbered.first().is_some_and(|first| *first > last), "{numbered:?} after {last}");
    assert!(numbered.windows(2).all(|pair| pair[0] < pair[1]), "{numbered:?}");
    assert_eq!(answer(&loaded(&servers[2], &env, &session).await, &session), whole, "as a load shows it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_a_replica_killed_mid_turn_resumes_on_another_and_gets_all_it_saw_and_more_once() {
    let (env, mut servers) = replicas(2).await;
    let mut on_a = servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    env.mock.push(Reply::endless(Duration::from_millis(20)));
    on_a.prompt(&session, "stream until you are cut off").await;
    let mut on_a_seen = Vec::new();
    while numbers(&on_a_seen, &session).len() < 10 {
        on_a_seen.push(on_a.recv().await);
    }
    // The turn's own replica dies with its client mid-answer.
    servers[0].child.start_kill().unwrap();
    let _ = servers[0].child.wait().await;
    let saw = answer(&on_a_seen, &session);
    let last = *numbers(&on_a_seen, &session).last().unwrap();

    let mut on_b = servers[1].client().await;
    let (resumed, mut after) = resume(&mut on_b, &session, last).await;
    assert!(resumed.get("error").is_none(), "{resumed}");
    // b closes the dead replica's turn (its lease lapses in 2 s): the notice comes live.
    while !answer(&after, &session).contains("stopped answering") {
        after.push(on_b.recv().await);
    }
    while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(700), on_b.next()).await {
        after.push(more);
    }
    let kept = answer(&loaded(&servers[1], &env, &session).await, &session);
    assert_eq!(saw.clone() + &answer(&after, &session), kept, "all it saw and more, nothing twice");
    assert!(kept.len() > saw.len(), "{kept:?}");
    let numbered = numbers(&after, &session);
    assert!(numbered.first().is_some_and(|first| *first > last), "{numbered:?} after {last}");
    assert!(numbered.windows(2).all(|pair| pair[0] < pair[1]), "{numbered:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_on_the_replica_running_the_turn_and_gets_each_update_once_in_order() {
    let (env, servers) = replicas(2).await;
    let mut on_a = servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = servers[1].client().await;
    on_b.call("session/load", open(&session, &env)).await;
    let pieces: Vec<String> = (0..40).map(|i| format!("<{i}>")).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let (reply, release) = Reply::text(&refs).held(10);
    env.mock.push(reply);

    let prompt = on_a.prompt(&session, "tell me forty things").await;
    let mut on_a_seen = Vec::new();
    until_text(&mut on_a, &session, "<9>", &mut on_a_seen).await;
    let mut on_b_seen = Vec::new();
    until_text(&mut on_b, &session, "<4>", &mut on_b_seen).await;
    let saw = answer(&on_b_seen, &session);
    let last = *numbers(&on_b_seen, &session).last().expect("numbered");
    on_b.drop_connection();

    // b's client comes back through a, whose own writer numbers the turn's rows.
    let mut again = servers[0].client().await;
    let (resumed, mut after) = resume(&mut again, &session, last).await;
    assert!(resumed.get("error").is_none(), "{resumed}");
    release.notify_one();
    let whole = pieces.concat();
    while saw.clone() + &answer(&after, &session) != whole {
        after.push(again.recv().await);
        assert!(whole.starts_with(&(saw.clone() + &answer(&after, &session))), "{after:?}");
    }
    let (done, _) = on_a.response(prompt).await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    while let Ok(Some(more)) = tokio::time::timeout(Duration::from_millis(700), again.next()).await {
        after.push(more);
    }
    assert_eq!(saw + &answer(&after, &session), whole, "each chunk once, in order, across the drop");
    let numbered = numbers(&after, &session);
    assert!(numbered.first().is_some_and(|first| *first > last), "{numbered:?} after {last}");
    assert!(numbered.windows(2).all(|pair| pair[0] < pair[1]), "{numbered:?}");

    // A number past the log's end, as a client of another session's longer log would send.
    let mut stranger = servers[0].client().await;
    let (ahead, _) = resume(&mut stranger, &session, 1_000_000).await;
    assert_eq!(ahead["error"]["data"]["reason"], "ahead", "{ahead}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_across_a_setting_and_a_queued_note_gets_the_note_once_in_order_and_skips_the_setting() {
    let (env, servers) = replicas(2).await;
    let mut on_a = servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = servers[1].client().await;
    on_b.call("session/load", open(&session, &env)).await;
    // A setting changed on a while nobody runs a turn: b's client is shown it, numbered.
    on_a.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    let setting = loop {
        let message = on_b.recv().await;
        if message["params"]["update"]["sessionUpdate"] == "config_option_update" {
            break seq(&message).expect("numbered by the log");
        }
    };
    on_b.drop_connection();

    // A turn on a with a prompt queued behind it, which a's client is told.
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["second"]));
    let one = on_a.prompt(&session, "one").await;
    let mut on_a_seen = Vec::new();
    until_text(&mut on_a, &session, "first ", &mut on_a_seen).await;
    let two = on_a.prompt(&session, "two").await;
    until_text(&mut on_a, &session, "queued behind 1 turn", &mut on_a_seen).await;
    release.notify_one();
    let (_, rest) = on_a.response(one).await;
    on_a_seen.extend(rest);
    let (_, rest) = on_a.response(two).await;
    on_a_seen.extend(rest);

    // b's client comes back from before the setting: every row after it, the note once, in
    // order; the setting's row is a gap in the numbers (what it shows is the session's options,
    // which the log does not hold).
    let mut again = servers[1].client().await;
    let (answer, resumed) = resume(&mut again, &session, setting - 1).await;
    assert!(answer.get("error").is_none(), "{answer}");
    let notes = |seen: &[Value]| seen.iter().filter(|m| m.to_string().contains("queued behind 1 turn")).count();
    assert_eq!(notes(&resumed), 1, "{resumed:?}");
    // In its stead the client is shown the options as they are (no number: the log has none).
    let options: Vec<&Value> = resumed.iter().filter(|m| options_in_mode(m, &session, "bypass")).collect();
    assert_eq!(options.len(), 1, "{resumed:?}");
    assert_eq!(seq(options[0]), None, "{resumed:?}");
    let got = numbers(&resumed, &session);
    assert!(got.first().is_some_and(|first| *first > setting), "{got:?} after {setting}");
    assert!(got.windows(2).all(|pair| pair[0] < pair[1]), "each once, in order: {got:?}");
    // Everything a's client was shown after the setting (and the prompts, which it sent).
    let shown_on_a = numbers(&on_a_seen, &session);
    assert!(shown_on_a.iter().all(|seq| *seq <= setting || got.contains(seq)), "{got:?} lacks some of {shown_on_a:?}");
}

/// Whether `message` shows `session`'s options with its mode `mode`.
fn options_in_mode(message: &Value, session: &str, mode: &str) -> bool {
    let update = &message["params"]["update"];
    message["params"]["sessionId"] == session
        && update["sessionUpdate"] == "config_option_update"
        && update["configOptions"]
            .as_array()
            .is_some_and(|options| options.iter().any(|o| o["id"] == "mode" && o["currentValue"] == mode))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resuming_from_before_a_mode_changed_through_another_replica_is_shown_the_mode() {
    let (env, servers) = replicas(2).await;
    let mut on_a = servers[0].client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = servers[1].client().await;
    on_b.call("session/load", open(&session, &env)).await;
    on_b.drop_connection();
    // While b's client is away, a's client changes the mode (the log's first row).
    on_a.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;

    // b's client comes back from the log's start: the row it missed is a setting, which it
    // is shown as the session's options, or its screen keeps the mode it had, for good.
    let mut again = servers[1].client().await;
    let (answer, mut seen) = resume(&mut again, &session, 0).await;
    assert!(answer.get("error").is_none(), "{answer}");
    assert_eq!(answer["result"]["lastSeq"], 1, "{answer}");
    while !seen.iter().any(|message| options_in_mode(message, &session, "bypass")) {
        seen.push(again.recv().await);
    }
}

/// A replica that loads a session while another changes its mode ends in the new mode: the
/// load's history is read first (b's here waits in its writer's queue, behind a change to
/// another session whose row the test locks), the mode changes through a meanwhile, and the
/// settings read after the history have it, although the log's row of it came before the
/// history's `seq` and is never followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_on_one_replica_racing_a_mode_change_on_another_ends_in_the_new_mode() {
    let url = fixture::database().await;
    let (env, a, b) = replicas_of(&url).await;
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let mut on_b = b.client().await;
    let other = on_b.new_session(&env.cwd()).await;

    let db = row_locked(&url, &other).await;
    let held_up = on_b.request("session/set_mode", json!({"sessionId": other, "modeId": "plan"})).await;
    until_waiting(&db, 1).await;
    let mut loading = b.client().await;
    let load = loading.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    // Time for b's actor to start reading the session (nothing tells when it has).
    tokio::time::sleep(Duration::from_millis(300)).await;
    on_a.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
    db.batch_execute("COMMIT").await.unwrap();

    let (loaded, _) = loading.response(load).await;
    assert_eq!(loaded["result"]["modes"]["currentModeId"], "bypass", "{loaded}");
    let (set, _) = on_b.response(held_up).await;
    assert!(set.get("error").is_none(), "{set}");
    let mut fresh = b.client().await;
    let again = fresh.call("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    assert_eq!(again["modes"]["currentModeId"], "bypass", "b's actor is in it: {again}");
}

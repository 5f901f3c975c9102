//! `cairn serve` replicas sharing one PostgreSQL database: a prompt its client withdraws
//! (`$/cancel_request`) while its turn's claim of the session waits in the writer's queue,
//! another replica's turn running, is never stored, run or handed on, whether that turn still
//! holds the lease when the claim comes (the lease refuses it) or ended meanwhile (the claim
//! finds the session moved on and is not sent again). Nor is a model asked to title the
//! session after it.

use std::time::Duration;

use serde_json::json;

use super::postgres::fixture;
use super::replica_commands::{replicas_env, row_locked, until_waiting, viewer};
use super::replicas::until_answer_starts;
use crate::support::Reply;
use crate::support::served::Server;

/// When the other replica's turn ends against the withdrawn prompt's claim.
#[derive(Clone, Copy, PartialEq)]
enum TheirTurn {
    /// After the claim was refused: the turn holds the lease throughout.
    EndsAfterTheClaim,
    /// While the claim waits: the claim finds the lease released and the session written.
    EndsWhileTheClaimWaits,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_withdrawn_as_its_claim_waits_under_another_replicas_lease_is_never_handed_on() {
    withdrawn_as_its_claim_waits(TheirTurn::EndsAfterTheClaim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_withdrawn_as_its_claim_waits_while_another_replicas_turn_ends_is_never_stored() {
    withdrawn_as_its_claim_waits(TheirTurn::EndsWhileTheClaimWaits).await;
}

async fn withdrawn_as_its_claim_waits(their_turn: TheirTurn) {
    let url = fixture::database().await;
    let mut env = replicas_env(&url).await;
    // b's log says when its turn started: the withdrawal comes after, so the turn has it.
    env.set_env("CAIRN_LOG", "cairn=debug,cairn::timing=trace");
    let (a, b) = (Server::start(&env).await, Server::start(&env).await);
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first);
    env.mock.push(Reply::text(&["after it"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    // b's client opened the session before it had a title.
    let mut on_b = viewer(&b, &env, &session).await;

    let one = on_a.prompt(&session, "one").await;
    until_answer_starts(&mut on_b, &session).await;
    // b's writer is held up by a change to another session, whose row the test locks: b's
    // claim waits behind it, and its client cancels meanwhile.
    let other = on_b.new_session(&env.cwd()).await;
    let db = row_locked(&url, &other).await;
    let held_up = on_b.request("session/set_mode", json!({"sessionId": other, "modeId": "plan"})).await;
    until_waiting(&db, 1).await;
    let withdrawn = on_b.prompt(&session, "withdrawn before its claim").await;
    b.until_said("turn spawned").await;
    on_b.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": withdrawn}})).await;
    // A notification: nothing answers it. Time enough for b's actor to take it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if their_turn == TheirTurn::EndsWhileTheClaimWaits {
        release.notify_one();
        let (done, _) = on_a.response(one).await;
        assert!(done.get("error").is_none(), "{done}");
    }
    db.batch_execute("COMMIT").await.unwrap();

    let (set, before) = on_b.response(held_up).await;
    assert!(set.get("error").is_none(), "{set}");
    let answer = match before.into_iter().find(|message| message.get("method").is_none() && message["id"] == withdrawn)
    {
        Some(answer) => answer,
        None => on_b.response(withdrawn).await.0,
    };
    let cancelled = answer["result"]["stopReason"] == "cancelled" || answer["error"]["code"] == -32800;
    assert!(cancelled, "{answer}");
    // The client was answered as it withdrew: b's turn ends once its claim is answered.
    b.until_said("turn state state=Done(").await;
    if their_turn == TheirTurn::EndsAfterTheClaim {
        release.notify_one();
        let (done, _) = on_a.response(one).await;
        assert!(done.get("error").is_none(), "{done}");
    }
    let after = on_a.prompt(&session, "after").await;
    let (quiet, _) = on_a.response(after).await;
    assert!(quiet.get("error").is_none(), "{quiet}");

    assert!(!b.stderr().contains("a prompt was handed"), "b handed it on:\n{}", b.stderr());
    let said = |bodies: Vec<serde_json::Value>| bodies.iter().any(|body| body.to_string().contains("withdrawn before"));
    assert!(!said(env.mock.requests()), "the withdrawn prompt reached the model:\n{}", b.stderr());
    assert!(!said(env.mock.title_requests()), "a title was asked for the withdrawn prompt:\n{}", b.stderr());
    let mut fresh = a.client().await;
    let load = fresh.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (loaded, replayed) = fresh.response(load).await;
    assert!(loaded.get("error").is_none(), "{loaded}");
    assert!(!said(replayed.clone()), "the withdrawn prompt was stored: {replayed:?}");
    assert!(said_after(&replayed), "the load shows the session: {replayed:?}");
}

/// Whether the replay shows the prompt that ran after the withdrawn one.
fn said_after(replayed: &[serde_json::Value]) -> bool {
    replayed.iter().any(|message| message["params"]["update"]["content"]["text"] == "after")
}

//! `cairn serve --auth` with its sessions in PostgreSQL, across two replicas sharing one
//! database: `cairn serve token` makes and revokes tokens in the database, and every replica
//! checks them; a principal's sessions and forks are listed and loaded on either replica, the
//! one started before they were made included; another principal sees none of them.

use serde_json::{Value, json};

use super::auth::{create, token};
use super::postgres::fixture;
use crate::support::served::{Server, try_connect_with};
use crate::support::{Reply, TestEnv};

fn ids(listed: &Value) -> Vec<String> {
    let mut ids: Vec<String> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|info| info["sessionId"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn replicas_sharing_a_database_share_its_tokens_and_each_principals_sessions() {
    let env = TestEnv::new().await;
    let url = fixture::database().await;
    env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
    let (alice_token, alice_secret) = create(&env, "alice");
    let (_, bob_secret) = create(&env, "bob");
    let (ok, listed, _) = token(&env, &["list"]);
    assert!(ok && listed.contains(&alice_token) && listed.contains("bob"), "{listed}");
    // Both replicas start before any session is made.
    let one = Server::start_with(&env, &["--auth"]).await;
    let two = Server::start_with(&env, &["--auth"]).await;

    let mut alice = try_connect_with(&one.url, Some(&alice_secret)).await.unwrap();
    alice.initialize().await;
    let session = alice.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hello Alice."]));
    let id = alice.prompt(&session, "Alice was here").await;
    assert_eq!(alice.response(id).await.0["result"]["stopReason"], "end_turn");
    let cwd = env.cwd();
    let fork = alice.call("session/fork", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})).await;
    let fork = fork["sessionId"].as_str().unwrap().to_owned();
    let mut made = vec![session.clone(), fork.clone()];
    made.sort();
    assert_eq!(ids(&alice.call("session/list", json!({})).await), made);

    let mut elsewhere = try_connect_with(&two.url, Some(&alice_secret)).await.unwrap();
    elsewhere.initialize().await;
    assert_eq!(ids(&elsewhere.call("session/list", json!({})).await), made, "the database's sessions, hers only");
    let loaded = elsewhere.call("session/load", json!({"sessionId": fork, "cwd": cwd, "mcpServers": []})).await;
    assert!(loaded.is_object(), "the fork made on the other replica loads here: {loaded}");

    let mut bob = try_connect_with(&two.url, Some(&bob_secret)).await.unwrap();
    bob.initialize().await;
    assert_eq!(ids(&bob.call("session/list", json!({})).await), Vec::<String>::new(), "bob sees none of alice's");
    let id = bob.request("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})).await;
    assert!(bob.response(id).await.0["error"].is_object(), "nor loads one");

    let (ok, _, said) = token(&env, &["revoke", &alice_token]);
    assert!(ok, "{said}");
    for server in [&one, &two] {
        assert!(try_connect_with(&server.url, Some(&alice_secret)).await.is_err(), "revoked on every replica");
    }
    assert!(try_connect_with(&one.url, Some(&bob_secret)).await.is_ok());
}

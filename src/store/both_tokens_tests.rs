//! Specs of what `cairn serve --auth` keeps, on both backends: tokens (stored by hash, revoked
//! in place, found by one indexed read on a connection of their own) and the owners of
//! sessions (set, inherited by forks and sub-agents, filtered, known to a process or replica
//! that opens the store later, and on PostgreSQL learned from the rows a replica reads).

use super::*;
use crate::history::MessageMeta;

fn row(owner: Option<&str>) -> SessionRow {
    let mut row = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    row.owner = owner.map(str::to_owned);
    row
}

on_both!(
    a_token_is_found_by_its_hash_until_revoked_and_stays_listed,
    checking_a_token_finds_it_among_many,
    a_session_owner_is_kept_inherited_by_forks_and_sub_agents_filtered_and_reloaded,
);

async fn a_token_is_found_by_its_hash_until_revoked_and_stays_listed(pair: Pair) {
    let store = pair.a;
    let check = pair.b.token_check().unwrap();
    assert!(!check.any_live().unwrap());
    let hash = [7u8; 32];
    store.commit(Write::AddToken { id: "tok_a".into(), principal: "alice".into(), hash }).await.unwrap();
    let found = check.find(&hash).unwrap().unwrap();
    assert_eq!((found.id.as_str(), found.principal.as_str(), found.revoked_at), ("tok_a", "alice", None));
    assert!(check.find(&[8u8; 32]).unwrap().is_none());
    assert!(check.any_live().unwrap());

    store.commit(Write::RevokeToken { id: "tok_a".into() }).await.unwrap();
    let revoked = check.find(&hash).unwrap().unwrap().revoked_at.unwrap();
    store.commit(Write::RevokeToken { id: "tok_a".into() }).await.unwrap();
    assert_eq!(check.find(&hash).unwrap().unwrap().revoked_at, Some(revoked), "the first revocation's time stays");
    assert!(!check.any_live().unwrap());
    let unknown = store.commit(Write::RevokeToken { id: "tok_nope".into() }).await.unwrap_err();
    assert_eq!(unknown, StoreError::UnknownToken("tok_nope".into()));
    assert!(unknown.to_string().contains("cairn serve token list"), "{unknown}");
    let twice = store.commit(Write::AddToken { id: "tok_b".into(), principal: "bob".into(), hash }).await;
    assert!(twice.is_err(), "a hash names one token");
    let listed = pair.b.tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_at, Some(revoked));
}

/// A handshake's check, on a connection of its own, finds its token among many and nothing
/// for a secret no token has. (What it costs is a figure for a bench, not a spec: about 7 µs
/// on SQLite and 290 µs on a local PostgreSQL, debug build, 1,000 tokens.)
async fn checking_a_token_finds_it_among_many(pair: Pair) {
    let store = pair.a;
    for i in 0..1000u32 {
        let mut hash = [0u8; 32];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        store.submit(Write::AddToken { id: format!("tok_{i}"), principal: format!("p{i}"), hash }, None);
    }
    store.flush().await.unwrap();
    let check = store.token_check().unwrap();
    let mut hash = [0u8; 32];
    hash[..4].copy_from_slice(&999u32.to_be_bytes());
    for _ in 0..20 {
        assert!(check.find(&hash).unwrap().is_some());
    }
    hash[..4].copy_from_slice(&1000u32.to_be_bytes());
    assert!(check.find(&hash).unwrap().is_none(), "no token has this secret");
}

async fn a_session_owner_is_kept_inherited_by_forks_and_sub_agents_filtered_and_reloaded(pair: Pair) {
    let store = &pair.a;
    let (alice, local) = (row(Some("alice")), row(None));
    // Each prompted, as listings show by default (the fork copies alice's message).
    let prompt = || Message::new(crate::history::Role::User, Vec::new(), MessageMeta::default());
    for session in [&alice, &local] {
        store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
        store.commit(Write::InsertMessage { session_id: session.id.clone(), message: prompt() }).await.unwrap();
    }
    let fork = row(None);
    store.commit(Write::ForkSession { row: Box::new(fork.clone()), parent: alice.id.clone() }).await.unwrap();
    let mut child = row(None);
    child.parent_id = Some(alice.id.clone());
    child.subagent = Some("task".into());
    store.commit(Write::InsertSession(Box::new(child.clone()))).await.unwrap();
    store.commit(Write::InsertMessage { session_id: child.id.clone(), message: prompt() }).await.unwrap();

    for id in [&alice.id, &fork.id, &child.id] {
        assert_eq!(store.owner(id).as_deref(), Some("alice"));
        assert_eq!(store.session(id).await.unwrap().unwrap().owner.as_deref(), Some("alice"));
    }
    assert_eq!(store.owner(&local.id), None);
    let of = |owner: Option<&str>| Listing { owner: owner.map(str::to_owned), subagents: true, ..Listing::default() };
    let theirs = store.list_sessions(of(Some("alice")), None, 50).await.unwrap();
    let mut ids: Vec<_> = theirs.sessions.iter().map(|row| row.id.clone()).collect();
    ids.sort();
    let mut expected = vec![alice.id.clone(), fork.id.clone(), child.id.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(store.list_sessions(of(Some("bob")), None, 50).await.unwrap().sessions.is_empty());
    assert_eq!(store.list_sessions(of(None), None, 50).await.unwrap().sessions.len(), 4);

    let again = pair.open_another().await;
    assert_eq!(again.owner(&fork.id).as_deref(), Some("alice"), "owners are read back when the store opens");
    assert_eq!(again.owner(&local.id), None);
    again.shutdown().await;
}

/// A replica that opened the store before a session was made elsewhere does not know its
/// owner (the check fails closed) until it reads the session's row: a load, or a listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_learns_the_owner_of_a_session_made_elsewhere_from_the_rows_it_reads() {
    let pair = postgres().await;
    let (listed, loaded) = (row(Some("alice")), row(Some("alice")));
    for session in [&listed, &loaded] {
        pair.a.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
        let message = Message::new(crate::history::Role::User, Vec::new(), MessageMeta::default());
        pair.a.commit(Write::InsertMessage { session_id: session.id.clone(), message }).await.unwrap();
    }
    assert_eq!(pair.b.owner(&listed.id), None, "made after b opened: unknown, so refused");
    let alices = Listing { owner: Some("alice".into()), ..Listing::default() };
    let page = pair.b.list_sessions(alices, None, 1).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    let first = page.sessions[0].id.clone();
    assert_eq!(pair.b.owner(&first).as_deref(), Some("alice"), "learned from the listing");
    let other = if first == listed.id { &loaded } else { &listed };
    assert_eq!(pair.b.owner(&other.id), None, "not listed on that page: still unknown");
    pair.b.session(&other.id).await.unwrap();
    assert_eq!(pair.b.owner(&other.id).as_deref(), Some("alice"), "learned from the load's read");
}

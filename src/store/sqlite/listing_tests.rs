//! Unit tests of listings on SQLite (whether a session holds a message is one index probe),
//! and of removing a session never prompted (only while it holds no message, and not from
//! under another live process). What listings show on either backend is in
//! `store::both_listing_tests`.

use super::lease::{self, Holder, LastTurn};
use super::*;
use crate::history::Role;
use crate::history::{MessageMeta, Part};
use crate::ids::now_ms;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("cairn.db")).unwrap();
    (dir, store)
}

fn row(updated_at: i64) -> SessionRow {
    SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), updated_at)
}

fn prompt(text: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: text.into() }], MessageMeta::default())
}

/// A session holding one prompt, updated at `at`.
async fn prompted(store: &Store, at: i64) -> SessionId {
    let session = row(at);
    let messages = vec![prompt("hi")];
    store
        .commit(Write::ImportSession {
            row: Box::new(session.clone()),
            messages,
            checkpoints: Vec::new(),
            blobs: Vec::new(),
        })
        .await
        .unwrap();
    session.id
}

/// A session never prompted, updated at `at`.
async fn unprompted(store: &Store, at: i64) -> SessionId {
    let session = row(at);
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    session.id
}

#[tokio::test]
async fn whether_a_session_holds_a_message_is_one_probe_of_an_index() {
    let (dir, store) = open();
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", listing::page_query())).unwrap();
    let none: Option<String> = None;
    let plan: Vec<String> = stmt
        .query_map(rusqlite::params![none, i64::MAX, "", 51, false, none, false, 0], |row| row.get(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("USING COVERING INDEX messages_by_session (session_id=?)"), "{plan}");
    assert!(!plan.contains("SCAN messages"), "{plan}");
    store.shutdown().await;
}

#[tokio::test]
async fn only_a_session_still_without_a_message_is_removed_with_what_hangs_off_it() {
    let (dir, store) = open();
    let empty = unprompted(&store, now_ms()).await;
    let rule = crate::permissions::Rule::new(
        crate::permissions::Permission::Bash,
        "ls",
        crate::permissions::Action::Allow,
        crate::permissions::Scope::Session,
    );
    store.commit(Write::AddSessionRule { id: empty.clone(), rule }).await.unwrap();
    // A lease row, as a command leaves (it stays after the release).
    let take =
        Write::TakeLease { session_id: empty.clone(), last: LastTurn::Ours, prompt: None, title: None, command: None };
    store.commit(take).await.unwrap();
    store.commit(Write::ReleaseLease { session_id: empty.clone() }).await.unwrap();
    let kept = prompted(&store, now_ms()).await;
    let rewound = prompted(&store, now_ms()).await;
    let from = store.messages(&rewound).await.unwrap()[0].id.clone();
    store.commit(Write::HideFrom { session_id: rewound.clone(), from }).await.unwrap();

    for id in [&empty, &kept, &rewound, &SessionId::from_string("ses_gone")] {
        store.commit(Write::DeleteUnprompted { id: id.clone() }).await.unwrap();
    }
    assert_eq!(store.session(&empty).await.unwrap(), None);
    assert!(store.session(&kept).await.unwrap().is_some(), "a prompted session stays");
    assert!(store.session(&rewound).await.unwrap().is_some(), "so does a rewound one");
    assert_eq!(store.messages(&kept).await.unwrap().len(), 1);
    store.shutdown().await;
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    let leases = "SELECT count(*) FROM session_leases WHERE session_id = ?1";
    let count = |id: &SessionId| -> i64 { conn.query_row(leases, [id.as_str()], |row| row.get(0)).unwrap() };
    assert_eq!(count(&empty), 0, "its lease row went with it");
}

#[tokio::test]
async fn a_session_another_live_process_holds_is_not_removed_from_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let me = Holder::this_process();
    let a = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    let b = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    let id = unprompted(&a, now_ms()).await;
    // A command's lease, which comes with no prompt.
    let take =
        Write::TakeLease { session_id: id.clone(), last: LastTurn::Ours, prompt: None, title: None, command: None };
    b.commit(take).await.unwrap();

    a.commit(Write::DeleteUnprompted { id: id.clone() }).await.unwrap();
    assert!(a.session(&id).await.unwrap().is_some(), "b is using it");
    b.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    a.commit(Write::DeleteUnprompted { id: id.clone() }).await.unwrap();
    assert_eq!(a.session(&id).await.unwrap(), None);
    a.shutdown().await;
    b.shutdown().await;
}

//! Specs of the checkpoints' rows: a capture naming content that was not stored is refused, and
//! trimming to the size limits drops the oldest prompts' captures while every file's last
//! state stays known and the contents nobody names go.

use std::path::PathBuf;

use super::super::{SessionRow, Store, Write};
use super::*;
use crate::ids::now_ms;
use crate::tools::checkpoint::{Blob, Capture, Entry, Stored, latest, plan};

fn blob(text: &str) -> Blob {
    Blob { hash: Digest::of(text.as_bytes()), data: text.as_bytes().to_vec() }
}

fn file(text: &str) -> State {
    State::File { hash: Digest::of(text.as_bytes()), size: text.len() as u64, executable: false }
}

async fn session(store: &Store) -> SessionId {
    let row = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    let id = row.id.clone();
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    id
}

/// Stores one prompt's captures: what was seen, then what was made, of `(path, content)`.
async fn prompt(store: &Store, session: &SessionId, seen: &[(&str, &str)], made: &[(&str, &str)]) {
    let prompt = MessageId::generate();
    let mut captures = Vec::new();
    for (by, files) in [(By::Seen, seen), (By::Made, made)] {
        let blobs = files.iter().map(|(_, text)| blob(text)).collect();
        store.commit(Write::PutBlobs(blobs)).await.unwrap();
        let entries =
            files.iter().map(|(path, text)| Entry { path: PathBuf::from(path), state: file(text), stamp: 0 }).collect();
        captures.push(Capture { by, call_id: Some("c".into()), entries });
    }
    let write = Write::PutCheckpoints { session_id: session.clone(), prompt: Some(prompt), captures, restore: None };
    store.commit(write).await.unwrap();
}

fn contents(stored: &[Stored]) -> Vec<(String, State)> {
    let mut out: Vec<(String, State)> =
        latest(stored).into_iter().map(|entry| (entry.path.display().to_string(), entry.state)).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test]
async fn a_capture_naming_content_not_stored_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("cairn.db")).unwrap();
    let id = session(&store).await;
    let entries = vec![Entry { path: "a".into(), state: file("never stored"), stamp: 0 }];
    let captures = vec![Capture { by: By::Made, call_id: None, entries }];
    let refused = store.commit(Write::PutCheckpoints { session_id: id.clone(), prompt: None, captures, restore: None });
    let err = refused.await.unwrap_err().to_string();
    assert!(err.contains("the content of a for the checkpoint was not stored"), "{err}");
    assert!(store.checkpoints(&id).await.unwrap().is_empty());
}

#[tokio::test]
async fn trimming_folds_the_oldest_prompts_keeping_every_files_last_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("cairn.db")).unwrap();
    let id = session(&store).await;
    prompt(&store, &id, &[("a", "a0"), ("b", "b0")], &[("a", "a1")]).await;
    prompt(&store, &id, &[], &[("a", "a2-longer")]).await;
    prompt(&store, &id, &[], &[("b", "b3")]).await;
    let before = store.checkpoint_captures(&id).await.unwrap();
    let trim = Write::TrimCheckpoints { session_id: id.clone(), session_bytes: 5, total_bytes: 1 << 20 };
    store.commit(trim).await.unwrap();

    let after = store.checkpoint_captures(&id).await.unwrap();
    assert_eq!(contents(&after), contents(&before), "every file's last state is still known");
    let infos = store.checkpoints(&id).await.unwrap();
    assert!(infos[0].is_base(), "{infos:?}");
    assert_eq!(infos.len(), 3, "the base, then the last prompt's two captures: {infos:?}");
    // Going back before the last prompt still works: b returns to what the base holds.
    let planned = plan(&after, infos[1].id);
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].target, file("b0"));
    // a1 is no capture's any more: its content went.
    let kept = store.file_blobs(vec![Digest::of(b"a1"), Digest::of(b"a2-longer")]).await.unwrap();
    assert_eq!(kept.len(), 1, "only a2 is still named");
}

#[tokio::test]
async fn the_total_limit_drops_the_oldest_sessions_captures_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("cairn.db")).unwrap();
    let (old, new) = (session(&store).await, session(&store).await);
    prompt(&store, &old, &[], &[("x", "old one")]).await;
    prompt(&store, &old, &[], &[("x", "old two")]).await;
    prompt(&store, &new, &[], &[("y", "new one")]).await;
    let trim = Write::TrimCheckpoints { session_id: new.clone(), session_bytes: 1 << 20, total_bytes: 10 };
    store.commit(trim).await.unwrap();
    assert!(store.checkpoints(&old).await.unwrap().iter().all(CheckpointInfo::is_base));
    assert!(!store.checkpoints(&new).await.unwrap().iter().any(CheckpointInfo::is_base), "the newest stays");
}

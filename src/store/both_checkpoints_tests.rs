//! Specs of the file checkpoints' rows on both backends: a capture naming content that was not
//! stored is refused, trimming to the size limits drops the oldest prompts' captures while
//! every file's last state stays known and the contents nobody names go, a restore stays
//! pending until finished, and a session's captures read back with their contents.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::*;
use crate::ids::MessageId;
use crate::tools::checkpoint::{Blob, By, Capture, State, latest, plan};

fn blob(text: &str) -> Blob {
    Blob { hash: Digest::of(text.as_bytes()), data: text.as_bytes().to_vec() }
}

fn file(text: &str) -> State {
    State::File { hash: Digest::of(text.as_bytes()), size: text.len() as u64, executable: false }
}

async fn session(store: &Store) -> SessionId {
    let id = new_session(store);
    store.flush().await.unwrap();
    id
}

fn capture(by: By, files: &[(&str, &str)]) -> Capture {
    let entries =
        files.iter().map(|(path, text)| Entry { path: PathBuf::from(path), state: file(text), stamp: 7 }).collect();
    Capture { by, call_id: Some("c".into()), entries }
}

/// Stores one prompt's captures: what was seen, then what was made, of `(path, content)`.
async fn prompt(store: &Store, session: &SessionId, seen: &[(&str, &str)], made: &[(&str, &str)]) {
    let blobs = seen.iter().chain(made).map(|(_, text)| blob(text)).collect();
    store.commit(Write::PutBlobs(blobs)).await.unwrap();
    let captures = vec![capture(By::Seen, seen), capture(By::Made, made)];
    let write = Write::PutCheckpoints {
        session_id: session.clone(),
        prompt: Some(MessageId::generate()),
        captures,
        restore: None,
    };
    store.commit(write).await.unwrap();
}

fn contents(stored: &[Stored]) -> Vec<(String, State)> {
    let mut out: Vec<(String, State)> =
        latest(stored).into_iter().map(|entry| (entry.path.display().to_string(), entry.state)).collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

on_both!(
    a_capture_naming_content_not_stored_is_refused,
    trimming_folds_the_oldest_prompts_keeping_every_files_last_state,
    the_total_limit_drops_the_oldest_sessions_captures_first,
    a_restore_is_pending_until_finished_and_captures_read_back_with_their_contents,
    paths_are_kept_byte_for_byte_and_a_path_listed_twice_keeps_its_last_state,
);

async fn a_capture_naming_content_not_stored_is_refused(pair: Pair) {
    let store = pair.a;
    let id = session(&store).await;
    let captures = vec![capture(By::Made, &[("a", "never stored")])];
    let refused = store.commit(Write::PutCheckpoints { session_id: id.clone(), prompt: None, captures, restore: None });
    let err = refused.await.unwrap_err().to_string();
    assert!(err.contains("the content of a for the checkpoint was not stored"), "{err}");
    assert!(store.checkpoints(&id).await.unwrap().is_empty());
}

async fn trimming_folds_the_oldest_prompts_keeping_every_files_last_state(pair: Pair) {
    let store = pair.a;
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
    assert_eq!((infos[0].files, infos[0].bytes), (2, 11), "a2-longer and b0 folded into the base: {infos:?}");
    // Going back before the last prompt still works: b returns to what the base holds.
    let planned = plan(&after, infos[1].id);
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].target, file("b0"));
    // a1 is no capture's any more: its content went.
    let kept = store.file_blobs(vec![Digest::of(b"a1"), Digest::of(b"a2-longer")]).await.unwrap();
    assert_eq!(kept.len(), 1, "only a2 is still named");
}

async fn the_total_limit_drops_the_oldest_sessions_captures_first(pair: Pair) {
    let store = pair.a;
    let (old, new) = (session(&store).await, session(&store).await);
    prompt(&store, &old, &[], &[("x", "old one")]).await;
    prompt(&store, &old, &[], &[("x", "old two")]).await;
    prompt(&store, &new, &[], &[("y", "new one")]).await;
    let trim = Write::TrimCheckpoints { session_id: new.clone(), session_bytes: 1 << 20, total_bytes: 10 };
    store.commit(trim).await.unwrap();
    assert!(store.checkpoints(&old).await.unwrap().iter().all(CheckpointInfo::is_base));
    assert!(!store.checkpoints(&new).await.unwrap().iter().any(CheckpointInfo::is_base), "the newest stays");
}

async fn a_restore_is_pending_until_finished_and_captures_read_back_with_their_contents(pair: Pair) {
    let (store, other) = (pair.a, pair.b);
    let id = session(&store).await;
    prompt(&store, &id, &[("dir/a", "one")], &[("dir/a", "two"), ("b", "two")]).await;
    store.commit(Write::PutBlobs(vec![blob("one"), blob("one")])).await.unwrap();
    let captures = vec![capture(By::Seen, &[("dir/a", "two")]), capture(By::Made, &[("dir/a", "one")])];
    let restore = Write::PutCheckpoints { session_id: id.clone(), prompt: None, captures, restore: Some("#1".into()) };
    store.commit(restore).await.unwrap();
    let pending: Vec<bool> = other.checkpoints(&id).await.unwrap().iter().map(|info| info.pending).collect();
    assert_eq!(pending, [false, false, false, true], "only the restore's last capture waits");
    store.commit(Write::FinishRestore { session_id: id.clone() }).await.unwrap();
    assert!(other.checkpoints(&id).await.unwrap().iter().all(|info| !info.pending));

    let (captures, blobs) = other.checkpoints_with_contents(&id).await.unwrap();
    let infos = other.checkpoints(&id).await.unwrap();
    assert_eq!(captures.iter().map(|(info, _)| info.clone()).collect::<Vec<_>>(), infos);
    assert_eq!(infos[3].restore.as_deref(), Some("#1"));
    assert_eq!((infos[1].files, infos[1].bytes, infos[1].by), (2, 6, By::Made));
    let paths: Vec<String> = captures[1].1.iter().map(|entry| entry.path.display().to_string()).collect();
    assert_eq!(paths, ["b", "dir/a"], "a capture's files in path order");
    assert_eq!(captures[1].1[0].stamp, 7);
    assert_eq!(blobs.len(), 2, "each content once");
    assert_eq!(blobs[&Digest::of(b"two")], b"two");
    assert_eq!(other.checkpoint_captures(&id).await.unwrap().len(), 4);
}

/// The store keeps what it is given (judging a path is the restore's work, beneath the
/// session's directory): bytes that are not UTF-8, quotes, a newline, `..`, all come back
/// exactly, and no statement is built from them.
async fn paths_are_kept_byte_for_byte_and_a_path_listed_twice_keeps_its_last_state(pair: Pair) {
    let store = pair.a;
    let id = session(&store).await;
    store.commit(Write::PutBlobs(vec![blob("x"), blob("y")])).await.unwrap();
    let odd: Vec<PathBuf> =
        [&b"caf\xe9\xff"[..], b"it's \"quoted\"; DROP TABLE file_blobs; --", b"line\nbreak", b"../outside"]
            .into_iter()
            .map(|bytes| PathBuf::from(OsStr::from_bytes(bytes)))
            .collect();
    let mut entries: Vec<Entry> =
        odd.iter().map(|path| Entry { path: path.clone(), state: file("x"), stamp: 1 }).collect();
    entries.push(Entry { path: odd[0].clone(), state: file("y"), stamp: 2 });
    let captures = vec![Capture { by: By::Seen, call_id: None, entries }];
    store
        .commit(Write::PutCheckpoints { session_id: id.clone(), prompt: None, captures, restore: None })
        .await
        .unwrap();

    let stored = pair.b.checkpoint_captures(&id).await.unwrap();
    let mut read: Vec<(PathBuf, State)> =
        stored[0].entries.iter().map(|entry| (entry.path.clone(), entry.state)).collect();
    read.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected: Vec<(PathBuf, State)> =
        odd.iter().map(|path| (path.clone(), if *path == odd[0] { file("y") } else { file("x") })).collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(read, expected);
    assert_eq!(pair.b.file_blobs(vec![Digest::of(b"x"), Digest::of(b"y")]).await.unwrap().len(), 2, "nothing dropped");
}

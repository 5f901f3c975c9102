//! What file checkpoints cost: `cargo bench --bench checkpoints`.
//!
//! On a real store (a temporary `cairn.db`) and real files, through the same calls a turn makes:
//! the time checkpoints add to an `edit` of a 100 KB file (the capture before it committed, the
//! edit, the capture after it committed, against the edit alone); a workspace capture of 10,000
//! files (about 2 KB each, in 100 directories) the first time, with nothing changed (right after
//! the first, and again 5 s later), and with 10 files changed, each committed; judging and applying a restore of 100 files; and the bytes
//! the store grows by for the first capture and for a capture of 10 changed files. Prints
//! medians and quartiles; nothing here asserts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::config::CheckpointSettings;
use cairn::ids::SessionId;
use cairn::store::{SessionRow, Store, Write};
use cairn::tools::checkpoint::{self, By, Capture, Entry, Restore, State, Tracker};
use cairn::tools::host::UserWait;
use cairn::tools::{Fetching, Host, Images, Jobs, NoEditor, Registry, ToolContext, Workspace};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const EDITS: usize = 200;
const FILES: usize = 10_000;
const SCANS: usize = 20;
const RESTORED: usize = 100;

fn context(cwd: &Path) -> ToolContext {
    ToolContext {
        workspace: Workspace::new(cwd, &[]),
        host: Arc::new(NoEditor),
        cancel: CancellationToken::new(),
        progress: None,
        process: Arc::default(),
        rejected: Vec::new(),
        rulebook: None,
        caller: None,
        call_id: "bench".into(),
        user_wait: UserWait::default(),
        images: Images::default(),
        read_rejections: Vec::new(),
        judged: None,
        trace: None,
        fetch: Fetching::default(),
        jobs: Jobs::none(),
        lsp: cairn::tools::Lsp::none(),
        checks: std::sync::Arc::default(),
    }
}

fn quartiles(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: usize| samples[(samples.len() - 1) * q / 4];
    (at(1), at(2), at(3))
}

fn show(name: &str, samples: Vec<Duration>) {
    let (q1, median, q3) = quartiles(samples);
    println!("{name:<58} median {:>9.3} ms  (q1 {:.3}, q3 {:.3})", ms(median), ms(q1), ms(q3));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Stores a capture and its contents, waiting for the commit, as a turn does.
async fn commit(store: &Store, session: &SessionId, by: By, entries: Vec<Entry>, blobs: Vec<checkpoint::Blob>) {
    if !blobs.is_empty() {
        store.commit(Write::PutBlobs(blobs)).await.unwrap();
    }
    if entries.is_empty() {
        return;
    }
    let captures = vec![Capture { by, call_id: None, entries }];
    let write = Write::PutCheckpoints { session_id: session.clone(), prompt: None, captures, restore: None };
    store.commit(write).await.unwrap();
}

/// Scans the workspace and commits what changed.
async fn scan(tracker: &mut Tracker, store: &Store, session: &SessionId) -> usize {
    let (mut rx, handle) = tracker.scan(&CancellationToken::new());
    let mut blobs = Vec::new();
    while let Some(blob) = rx.recv().await {
        blobs.push(blob);
    }
    let mut scanned = handle.await.unwrap();
    assert!(scanned.failure.is_none(), "{:?}", scanned.failure);
    tracker.give_back(&mut scanned);
    let entries = scanned.entries;
    let changed = entries.len();
    commit(store, session, By::Seen, entries.clone(), blobs).await;
    tracker.settle(&entries);
    changed
}

fn database_bytes(path: &Path) -> u64 {
    let db = rusqlite::Connection::open(path).unwrap();
    let bytes: i64 = db
        .query_row("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", [], |row| row.get(0))
        .unwrap();
    u64::try_from(bytes).unwrap()
}

/// Text of about `size` bytes, different per `seed`.
fn text(seed: usize, size: usize) -> String {
    let mut out = String::with_capacity(size + 64);
    let mut line = 0;
    while out.len() < size {
        out.push_str(&format!("fn item_{seed}_{line}() -> usize {{ {seed} * {line} + 17 }} // filler text\n"));
        line += 1;
    }
    out
}

fn age(root: &Path) {
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
            }
        }
    }
}

#[tokio::main]
async fn main() {
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("cairn.db");
    let store = Store::open(&db).unwrap();
    let session = SessionId::generate();
    let row = SessionRow::new(session.clone(), "/bench".into(), "bench/m".into(), 0);
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    let settings = CheckpointSettings::default();

    // An edit of a 100 KB file, with and without its captures.
    let edits = tempfile::tempdir().unwrap();
    let root = edits.path().canonicalize().unwrap();
    std::fs::write(root.join("big.rs"), text(0, 100 * 1024)).unwrap();
    let ctx = context(&root);
    let registry = Registry::builtin();
    let mut tracker = Tracker::new(&root, settings, Vec::new());
    tracker.load(Vec::new());
    let (mut alone, mut with) = (Vec::new(), Vec::new());
    for n in 0..EDITS {
        let (old, new) = if n % 2 == 0 { ("item_0_5()", "item_0_5b()") } else { ("item_0_5b()", "item_0_5()") };
        let args = json!({"path": "big.rs", "old_string": old, "new_string": new}).to_string();
        let call = registry.parse("edit", &args).unwrap();
        let started = Instant::now();
        if n % 4 < 2 {
            call.run(&ctx).await.unwrap();
            alone.push(started.elapsed());
        } else {
            let (before, blob) = tracker.file(Path::new("big.rs")).await.unwrap();
            commit(&store, &session, By::Seen, vec![before], blob.into_iter().collect()).await;
            call.run(&ctx).await.unwrap();
            let (after, blob) = tracker.file(Path::new("big.rs")).await.unwrap();
            commit(&store, &session, By::Made, vec![after], blob.into_iter().collect()).await;
            with.push(started.elapsed());
        }
    }
    let (_, alone_median, _) = quartiles(alone.clone());
    let (_, with_median, _) = quartiles(with.clone());
    show("edit of a 100 KB file, alone", alone);
    show("edit of a 100 KB file, with both captures committed", with);
    println!("{:<58} {:>16.3} ms", "added by checkpoints (difference of medians)", ms(with_median - alone_median));

    // A workspace of 10,000 files.
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path().canonicalize().unwrap();
    let mut files: Vec<PathBuf> = Vec::new();
    for n in 0..FILES {
        let dir = root.join(format!("dir{:03}", n % 100));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("file{n:05}.rs"));
        std::fs::write(&path, text(n, 2048)).unwrap();
        files.push(path);
    }
    age(&root);
    let mut tracker = Tracker::new(&root, settings, Vec::new());
    tracker.load(Vec::new());
    let bytes_before = database_bytes(&db);
    let started = Instant::now();
    let listed = scan(&mut tracker, &store, &session).await;
    println!("{:<58} {:>16.1} ms  ({listed} files)", "first capture of 10,000 files, committed", ms(started.elapsed()));
    let base_bytes = database_bytes(&db) - bytes_before;
    // Right after the first capture the store folds its write-ahead log (40 MB) into the
    // database, which competes with the walk; then again once that is done.
    let mut unchanged = Vec::new();
    for _ in 0..SCANS {
        let started = Instant::now();
        assert_eq!(scan(&mut tracker, &store, &session).await, 0);
        unchanged.push(started.elapsed());
    }
    show("capture of 10,000 files, nothing changed, right after", unchanged);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut settled = Vec::new();
    for _ in 0..SCANS {
        let started = Instant::now();
        assert_eq!(scan(&mut tracker, &store, &session).await, 0);
        settled.push(started.elapsed());
    }
    show("capture of 10,000 files, nothing changed, store settled", settled);
    let mut changed = Vec::new();
    let mut grown = Vec::new();
    for round in 0..SCANS {
        for (k, path) in files.iter().skip(round * 10).take(10).enumerate() {
            std::fs::write(path, text(100_000 + round * 1000 + k, 2048)).unwrap();
        }
        let before = database_bytes(&db);
        let started = Instant::now();
        assert_eq!(scan(&mut tracker, &store, &session).await, 10);
        changed.push(started.elapsed());
        grown.push(database_bytes(&db).saturating_sub(before));
    }
    show("capture of 10,000 files, 10 changed, committed", changed);
    grown.sort_unstable();
    println!("{:<58} {:>13.1} MiB", "store growth, first capture (10,000 files, 20 MB)", base_bytes as f64 / 1048576.0);
    println!(
        "{:<58} {:>13.1} KiB",
        "store growth, capture of 10 changed files (median)",
        grown[grown.len() / 2] as f64 / 1024.0
    );

    // A restore of 100 files.
    let host: Arc<dyn Host> = Arc::new(NoEditor);
    let mut restores = Vec::new();
    for round in 0..SCANS {
        let targets: Vec<(PathBuf, State)> = files
            .iter()
            .skip(round * RESTORED)
            .take(RESTORED)
            .map(|path| {
                let relative = path.strip_prefix(&root).unwrap().to_owned();
                (relative, tracker.known(path.strip_prefix(&root).unwrap()).unwrap())
            })
            .collect();
        for (relative, _) in &targets {
            std::fs::write(root.join(relative), "changed by the session\n").unwrap();
        }
        let planned = targets.iter().map(|(path, state)| checkpoint::Planned {
            path: path.clone(),
            target: *state,
            last: *state,
        });
        let started = Instant::now();
        let judged = Restore::judge(&root, planned.collect(), settings.max_file_bytes).await.unwrap();
        let blobs = store.file_blobs(judged.hashes()).await.unwrap();
        let applied = checkpoint::apply(&root, &targets, &blobs, &host).await;
        restores.push(started.elapsed());
        assert!(applied.iter().all(|applied| applied.result.is_ok()));
    }
    show("restore of 100 files (judged, contents read, written)", restores);
    store.shutdown().await;
}

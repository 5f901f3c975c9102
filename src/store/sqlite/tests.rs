//! Unit tests of the store: round trips, streaming parts, isolation of failed writes, paging.

use std::sync::{Arc, Mutex};

use super::*;
use crate::history::{Finish, Role};
use crate::history::{MessageMeta, Part};
use crate::ids::MessageId;
use crate::ids::now_ms;

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("cairn.db")).unwrap();
    (dir, store)
}

fn row(cwd: &str) -> SessionRow {
    let now = now_ms();
    SessionRow::new(SessionId::generate(), cwd.into(), "openai/m".into(), now)
}

fn text(text: &str) -> Part {
    Part::Text { text: text.into() }
}

#[tokio::test]
async fn streamed_parts_are_stored_whole_and_read_back_in_order() {
    let (_dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    let user = Message::new(Role::User, vec![text("hi")], MessageMeta::default());
    store.submit(Write::InsertMessage { session_id: session.id.clone(), message: user.clone() }, None);
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message_id = answer.id.clone();
    store.submit(Write::InsertMessage { session_id: session.id.clone(), message: answer }, None);
    store.submit(
        Write::OpenPart { session_id: session.id.clone(), message_id: message_id.clone(), index: 0, part: text("") },
        None,
    );
    let shown = Arc::new(Mutex::new(Vec::new()));
    for (i, delta) in ["Hel", "lo", "!"].iter().enumerate() {
        let seen = Arc::clone(&shown);
        store.submit(
            Write::AppendPart { message_id: message_id.clone(), index: 0, delta: (*delta).into() },
            Some(Box::new(move |result| seen.lock().unwrap().push((i, result.is_ok())))),
        );
    }
    store.submit(Write::ClosePart { message_id: message_id.clone(), index: 0 }, None);
    let meta = MessageMeta { finish: Some(Finish::EndTurn), ..MessageMeta::default() };
    store.commit(Write::SetMessageMeta { message_id: message_id.clone(), meta: meta.clone() }).await.unwrap();

    assert_eq!(*shown.lock().unwrap(), [(0, true), (1, true), (2, true)], "callbacks run in order, after commit");
    let messages = store.messages(&session.id).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0], user);
    assert_eq!(messages[1].id, message_id);
    assert_eq!(messages[1].parts, [text("Hello!")]);
    assert_eq!(messages[1].meta, meta);
}

#[tokio::test]
async fn a_snapshot_sees_exactly_what_was_called_back_before_it_and_comes_before_what_follows() {
    let (_dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message_id = answer.id.clone();
    store.submit(Write::InsertMessage { session_id: session.id.clone(), message: answer }, None);
    store.submit(
        Write::OpenPart { session_id: session.id.clone(), message_id: message_id.clone(), index: 0, part: text("") },
        None,
    );
    // The writer is held in a callback until everything below is queued: one batch, with the
    // snapshot in its middle.
    let (release, held) = std::sync::mpsc::channel::<()>();
    store.submit(
        Write::Barrier,
        Some(Box::new(move |_| {
            let _ = held.recv();
        })),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let chunk = |delta: &'static str| {
        let log = Arc::clone(&log);
        let after: AfterCommit = Box::new(move |result| log.lock().unwrap().push(format!("{delta} {result:?}")));
        (Write::AppendPart { message_id: message_id.clone(), index: 0, delta: delta.into() }, Some(after))
    };
    for delta in ["a", "b"] {
        let (write, after) = chunk(delta);
        store.submit(write, after);
    }
    let seen = Arc::clone(&log);
    store.snapshot(
        &session.id,
        Box::new(move |messages| {
            let parts: Vec<Part> = messages.unwrap().0.into_iter().flat_map(|message| message.parts).collect();
            seen.lock().unwrap().push(format!("snapshot {parts:?}"));
        }),
    );
    let (write, after) = chunk("c");
    store.submit(write, after);
    release.send(()).unwrap();
    store.flush().await.unwrap();

    let snapshot = format!("snapshot {:?}", [text("ab")]);
    assert_eq!(*log.lock().unwrap(), ["a Ok(())", "b Ok(())", snapshot.as_str(), "c Ok(())"]);
    assert_eq!(store.messages(&session.id).await.unwrap()[0].parts, [text("abc")]);

    store.shutdown().await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    store.snapshot(
        &session.id,
        Box::new(move |messages| {
            let _ = tx.send(messages);
        }),
    );
    assert_eq!(rx.await.unwrap(), Err(StoreError::Closed), "a snapshot of a closed store is told so");
}

#[tokio::test]
async fn a_failing_write_fails_alone_and_withholds_only_its_callback() {
    let (_dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    let results = Arc::new(Mutex::new(Vec::new()));
    let record = |name: &'static str| -> Option<AfterCommit> {
        let results = Arc::clone(&results);
        Some(Box::new(move |result: Result<(), StoreError>| results.lock().unwrap().push((name, result.is_ok()))))
    };
    let orphan = Message::new(Role::User, vec![text("x")], MessageMeta::default());
    store.submit(
        Write::InsertMessage { session_id: SessionId::from_string("ses_missing"), message: orphan },
        record("orphan"),
    );
    let good = Message::new(Role::User, vec![text("y")], MessageMeta::default());
    store.submit(Write::InsertMessage { session_id: session.id.clone(), message: good }, record("good"));
    store.submit(
        Write::AppendPart { message_id: MessageId::generate(), index: 0, delta: "z".into() },
        record("stray chunk"),
    );
    store.flush().await.unwrap();
    assert_eq!(*results.lock().unwrap(), [("orphan", false), ("good", true), ("stray chunk", false)]);
    assert_eq!(store.messages(&session.id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn deleting_a_session_removes_its_messages_and_parts() {
    let (_dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    let message = Message::new(Role::User, vec![text("a"), text("b")], MessageMeta::default());
    store.commit(Write::InsertMessage { session_id: session.id.clone(), message }).await.unwrap();
    store.commit(Write::DeleteSession { id: session.id.clone() }).await.unwrap();
    assert_eq!(store.session(&session.id).await.unwrap(), None);
    assert!(store.messages(&session.id).await.unwrap().is_empty());
}

#[tokio::test]
async fn reopening_keeps_everything_and_the_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let session = row("/w");
    {
        let store = Store::open(&path).unwrap();
        store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
        store.shutdown().await;
        assert_eq!(store.commit(Write::Barrier).await, Err(StoreError::Closed));
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.session(&session.id).await.unwrap(), Some(session));
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, migrate::LATEST);
}

#[tokio::test]
async fn an_existing_readable_database_is_made_private_and_its_directory_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared/cairn.db");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Store::open(&path).unwrap().shutdown().await;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&path).unwrap();
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("shared/cairn.db-wal")), 0o600, "SQLite copies the database's mode");
    assert_eq!(mode(path.parent().unwrap()), 0o755, "a directory cairn did not create keeps its mode");
    store.shutdown().await;
}

#[tokio::test]
async fn a_project_rule_row_that_cannot_be_read_stands_in_as_unreadable_until_revoked() {
    let (dir, store) = open();
    {
        // A row the current schema's checks would refuse: written by hand, or by a newer cairn.
        let raw = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
        raw.execute_batch("PRAGMA ignore_check_constraints = ON;").unwrap();
        raw.execute(
            "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES ('/w', 'mcp', 'x', 'allow', 0)",
            [],
        )
        .unwrap();
    }
    let rules = store.project_rules("/w").await.unwrap();
    assert_eq!(rules.len(), 1);
    assert!(crate::permissions::describe_rule(&rules[0]).starts_with("an unreadable rule"), "{rules:?}");
    store.commit(Write::RemoveProjectRule { project: "/w".into(), rule: rules[0].clone() }).await.unwrap();
    assert!(store.project_rules("/w").await.unwrap().is_empty(), "revoking the stand-in removes the row");
}

#[tokio::test]
async fn revoking_the_stand_in_of_an_unreadable_project_rule_removes_that_row_only() {
    use crate::permissions::{Action, Permission, Rule, Scope};
    let (dir, store) = open();
    // Readable rules of every permission, the `tool` permission of MCP tools among them.
    let kept: Vec<Rule> = Permission::ALL
        .into_iter()
        .map(|permission| Rule::new(permission, "mcp__github__*", Action::Allow, Scope::Project))
        .collect();
    for rule in &kept {
        store.commit(Write::AddProjectRule { project: "/w".into(), rule: rule.clone() }).await.unwrap();
    }
    {
        let raw = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
        raw.execute_batch("PRAGMA ignore_check_constraints = ON;").unwrap();
        raw.execute(
            "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES
               ('/w', 'mcp', 'x', 'allow', 0), ('/w', 'bash', 'y', 'maybe', 0)",
            [],
        )
        .unwrap();
    }
    let rules = store.project_rules("/w").await.unwrap();
    assert_eq!(rules.len(), kept.len() + 2, "{rules:?}");
    let stand_in = rules[kept.len()].clone();
    assert!(crate::permissions::describe_rule(&stand_in).starts_with("an unreadable rule"), "{stand_in:?}");
    store.commit(Write::RemoveProjectRule { project: "/w".into(), rule: stand_in }).await.unwrap();
    let left = store.project_rules("/w").await.unwrap();
    assert_eq!(left[..kept.len()], kept[..], "every readable rule survives, MCP tools' included");
    assert_eq!(left.len(), kept.len() + 1, "the other unreadable row stays until its own stand-in is revoked");
    assert_eq!(left[kept.len()], rules[kept.len() + 1]);
    store.shutdown().await;
}

#[tokio::test]
async fn rules_of_every_permission_are_kept_for_the_project_and_an_old_table_keeps_its_rows() {
    use crate::permissions::{Action, Permission, Rule, Scope};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    {
        // A database of schema 3, whose rule table knew read, edit and bash only.
        let mut raw = rusqlite::Connection::open(&path).unwrap();
        let tx = raw.transaction().unwrap();
        for sql in &super::migrate::MIGRATIONS[..3] {
            tx.execute_batch(sql).unwrap();
        }
        tx.pragma_update(None, "user_version", 3).unwrap();
        tx.execute(
            "INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES ('/w', 'bash', 'cargo test', 'allow', 0)",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    for permission in Permission::ALL {
        let rule = Rule::new(permission, "mcp__fx__*", Action::Deny, Scope::Project);
        store.commit(Write::AddProjectRule { project: "/w".into(), rule: rule.clone() }).await.unwrap();
        // Remembered twice, kept once.
        store.commit(Write::AddProjectRule { project: "/w".into(), rule }).await.unwrap();
    }
    let rules = store.project_rules("/w").await.unwrap();
    let kept: Vec<(Permission, &str)> = rules.iter().map(|rule| (rule.permission, rule.pattern.as_str())).collect();
    assert_eq!(
        kept,
        [
            (Permission::Bash, "cargo test"),
            (Permission::Read, "mcp__fx__*"),
            (Permission::Edit, "mcp__fx__*"),
            (Permission::Bash, "mcp__fx__*"),
            (Permission::Tool, "mcp__fx__*"),
            (Permission::Fetch, "mcp__fx__*"),
        ]
    );
    store.shutdown().await;
}

#[tokio::test]
async fn total_tokens_is_the_sum_of_the_token_columns_in_old_and_new_rows() {
    use crate::history::Usage;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let old = SessionId::generate();
    {
        // A database of schema 4, whose total was kept by the writes beside the other columns.
        let mut raw = rusqlite::Connection::open(&path).unwrap();
        let tx = raw.transaction().unwrap();
        for sql in &super::migrate::MIGRATIONS[..4] {
            tx.execute_batch(sql).unwrap();
        }
        tx.pragma_update(None, "user_version", 4).unwrap();
        tx.execute(
            "INSERT INTO sessions (id, cwd, model, created_at, updated_at, prompt_tokens, completion_tokens,
               reasoning_tokens, cache_read, cache_write, total_tokens)
             VALUES (?1, '/w', 'openai/m', 0, 0, 10, 5, 2, 20, 1, 36)",
            [old.as_str()],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let new = row("/w");
    store.commit(Write::InsertSession(Box::new(new.clone()))).await.unwrap();
    let answer = Message::new(Role::Assistant, vec![text("a")], MessageMeta::default());
    let message_id = answer.id.clone();
    store.commit(Write::InsertMessage { session_id: new.id.clone(), message: answer }).await.unwrap();
    let usage = Usage { input: 100, output: 7, reasoning: 3, cache_read: 50, cache_write: 4 };
    let meta = MessageMeta { usage: Some(usage), ..MessageMeta::default() };
    store.commit(Write::FinishMessage { session_id: new.id.clone(), message_id, meta }).await.unwrap();
    store.shutdown().await;

    let raw = rusqlite::Connection::open(&path).unwrap();
    let total = |id: &SessionId| -> i64 {
        raw.query_row("SELECT total_tokens FROM sessions WHERE id = ?1", [id.as_str()], |r| r.get(0)).unwrap()
    };
    assert_eq!(total(&old), 36, "an old row's total survives the migration");
    assert_eq!(total(&new.id), 161, "input, output and both cache counts, reasoning being part of output");
    assert_eq!(u64::try_from(total(&new.id)).unwrap(), usage.context());
}

#[test]
fn text_and_reasoning_parts_read_fast_exactly_as_every_part_reads() {
    let parts = [
        text("plain"),
        text("with \"quotes\", \\ and \u{e9}\n"),
        Part::Reasoning { text: "hmm".into(), signature: None },
        Part::Reasoning { text: "hmm".into(), signature: Some("sig".into()) },
        Part::Notice { text: "a notice has text too".into() },
    ];
    for part in parts {
        let json = serde_json::to_string(&part).unwrap();
        assert_eq!(crate::store::codec::read_part(Some(part.kind()), &json).unwrap(), part, "{json}");
        // A `type` column that disagrees with the JSON is not trusted.
        assert_eq!(crate::store::codec::read_part(Some("text"), &json).unwrap(), part, "{json}");
        assert_eq!(crate::store::codec::read_part(Some("reasoning"), &json).unwrap(), part, "{json}");
    }
}

fn log_len(dir: &tempfile::TempDir) -> u64 {
    std::fs::metadata(dir.path().join("cairn.db-wal")).map_or(0, |meta| meta.len())
}

#[tokio::test]
async fn a_store_that_shuts_down_leaves_an_empty_log_and_everything_in_the_database() {
    let (dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    assert!(store.session(&session.id).await.unwrap().is_some(), "the read connection has the log open too");
    assert!(log_len(&dir) > 0, "a commit goes to the log first");

    // The process may end with the read connection still open, so the writer's close is not
    // the last one (which would fold the log on its own).
    store.shutdown().await;
    assert_eq!(log_len(&dir), 0, "the log was folded into the database at shutdown");
    drop(store);
    let reopened = Store::open(&dir.path().join("cairn.db")).unwrap();
    assert_eq!(reopened.session(&session.id).await.unwrap().map(|row| row.id), Some(session.id));
}

#[tokio::test]
async fn a_reader_elsewhere_does_not_hold_up_a_shutdown_and_its_log_is_folded_later() {
    let (dir, store) = open();
    let session = row("/w");
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    // Another process in the middle of a read: its snapshot needs the log as it is.
    let other = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    other.execute_batch("BEGIN; SELECT count(*) FROM sessions;").unwrap();

    let started = std::time::Instant::now();
    store.shutdown().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "the shutdown waited for the reader");
    assert!(log_len(&dir) > 0, "the reader's log was kept");
    drop(store);

    other.execute_batch("COMMIT").unwrap();
    let next = Store::open(&dir.path().join("cairn.db")).unwrap();
    next.shutdown().await;
    drop(next);
    drop(other);
    assert_eq!(log_len(&dir), 0, "the next process folded it");
}

/// The log's checkpoint sequence number, from its header: SQLite moves it each time the log
/// starts over from its first page.
fn log_restarts(dir: &tempfile::TempDir) -> Option<u32> {
    let header = std::fs::read(dir.path().join("cairn.db-wal")).ok()?;
    Some(u32::from_be_bytes(header.get(12..16)?.try_into().ok()?))
}

#[tokio::test]
async fn a_live_store_folds_its_log_and_starts_it_over_instead_of_letting_it_grow() {
    let (dir, store) = open();
    let session = || Write::InsertSession(Box::new(row("/w")));
    let mut stored = 0;
    // Eight bursts of 200 commits, as a stream writes them, each followed by a pause. Each burst
    // takes the log past the size at which a fold starts; never folded or started over, the
    // log would hold about 9,000 pages.
    for _ in 0..8 {
        store.commit(session()).await.unwrap();
        let before = log_restarts(&dir);
        for _ in 1..200 {
            store.commit(session()).await.unwrap();
        }
        stored += 200;
        // In the pause the fold runs, and the next commit starts the log over. A busy machine
        // may take its time over the fold: wait for it to happen rather than for a fixed time.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while log_restarts(&dir) == before {
            assert!(std::time::Instant::now() < deadline, "the log never started over in a pause");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            store.commit(session()).await.unwrap();
            stored += 1;
        }
    }
    let page = 4096 + 24;
    let most = u64::try_from(3 * super::fold::FOLD_AT).unwrap() * page;
    assert!(log_len(&dir) < most, "the log grew to {} bytes", log_len(&dir));
    let all = Listing { unprompted: true, ..Listing::default() };
    let listed = store.list_sessions(all, None, 5000).await.unwrap();
    assert_eq!(listed.sessions.len(), stored, "every commit is kept");
}

#[test]
fn a_database_being_created_by_another_process_is_never_taken_for_a_foreign_one() {
    // One connection checks the version over and over while another migrates the fresh file:
    // each check must see the file before the migration (empty) or after it (stamped), never
    // its tables without the stamp.
    for _ in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.db");
        let checker = Connection::open(&path).unwrap();
        let mut migrator = Connection::open(&path).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                migrate::to_latest(&mut migrator, &path).unwrap();
                done.store(true, std::sync::atomic::Ordering::Release);
            });
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                migrate::check_version(&checker, &path).unwrap();
            }
        });
    }
}

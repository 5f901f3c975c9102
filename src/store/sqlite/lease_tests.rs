//! Unit tests of session leases: taken with the prompt, refused to another live process with
//! nothing written, released, refreshed, and lapsing when their holder dies.

use std::time::Duration;

use super::lease::{self, Holder, LastTurn, STALE_AFTER};
use super::*;
use crate::history::{CallState, Role};
use crate::history::{MessageMeta, Part};
use crate::ids::MessageId;
use crate::ids::now_ms;

/// Two processes sharing one database: the same file opened under two holders.
fn two_processes() -> (tempfile::TempDir, Store, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let me = Holder::this_process();
    let a = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    let b = Store::open_as(&path, me.sibling(), lease::HEARTBEAT_EVERY).unwrap();
    (dir, a, b)
}

async fn session(store: &Store) -> SessionId {
    let row = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row.clone()))).await.unwrap();
    row.id
}

fn prompt(text: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: text.into() }], MessageMeta::default())
}

fn take(session: &SessionId, last: LastTurn, text: &str) -> Write {
    Write::TakeLease {
        session_id: session.clone(),
        last,
        prompt: Some(prompt(text)),
        title: Some(text.into()),
        command: None,
    }
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().flat_map(|m| crate::history::texts(&m.parts).map(str::to_owned).collect::<Vec<_>>()).collect()
}

#[tokio::test]
async fn the_lease_comes_with_the_prompt_and_another_live_process_is_refused_with_nothing_written() {
    let (_dir, a, b) = two_processes();
    let id = session(&a).await;
    a.commit(take(&id, LastTurn::Ours, "from a")).await.unwrap();

    let refused = b.commit(take(&id, LastTurn::Ours, "from b")).await;
    let Err(StoreError::Leased(holder)) = refused else { panic!("expected a refusal, got {refused:?}") };
    assert_eq!((holder.session.clone(), holder.pid), (id.clone(), std::process::id()));
    assert_eq!(holder.host, Holder::this_process().host);
    let message = holder.to_string();
    assert!(message.contains(&format!("pid {}", std::process::id())) && message.contains("try again"), "{message}");

    assert_eq!(texts(&b.messages(&id).await.unwrap()), ["from a"], "the refused prompt left no row");
    assert_eq!(b.session(&id).await.unwrap().unwrap().title.as_deref(), Some("from a"));
    assert!(a.held_elsewhere(&id).await.unwrap().is_none(), "a's own lease does not stand in its way");
    assert!(b.held_elsewhere(&id).await.unwrap().is_some());
    a.commit(take(&id, LastTurn::Ours, "again from a")).await.unwrap();
}

#[tokio::test]
async fn after_a_release_the_next_process_reads_the_history_again_before_it_takes_the_lease() {
    let (_dir, a, b) = two_processes();
    let id = session(&a).await;
    a.commit(take(&id, LastTurn::Ours, "from a")).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_none());

    // b's copy predates a's turn: it is told to read the history again, and nothing is written.
    let moved = b.commit(take(&id, LastTurn::Ours, "stale b")).await;
    let Err(StoreError::LeaseMoved { last, .. }) = moved else { panic!("expected LeaseMoved, got {moved:?}") };
    let (stored, seen) = b.messages_and_last_turn(&id).await.unwrap();
    assert_eq!((texts(&stored), &seen), (vec!["from a".to_owned()], &last));
    b.commit(take(&id, LastTurn::By(seen), "from b")).await.unwrap();
    assert_eq!(texts(&b.messages(&id).await.unwrap()), ["from a", "from b"]);

    // Now a's copy is the stale one.
    let moved = a.commit(take(&id, LastTurn::Ours, "stale a")).await;
    assert!(matches!(moved, Err(StoreError::Leased(_))), "b still holds it: {moved:?}");
    b.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let moved = a.commit(take(&id, LastTurn::Ours, "stale a")).await;
    assert!(matches!(moved, Err(StoreError::LeaseMoved { .. })), "{moved:?}");
}

#[tokio::test]
async fn a_lease_whose_process_died_or_whose_pid_was_reused_lapses_at_once_on_the_same_host() {
    let (dir, a, b) = two_processes();
    let (dead_pid, reused, live) = (SessionId::generate(), SessionId::generate(), SessionId::generate());
    for id in [&dead_pid, &reused, &live] {
        let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
        a.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    }
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let me = Holder::this_process();
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    let now = now_ms();
    let mut dead = me.sibling();
    dead.pid = gone;
    lease::take(&conn, &dead, &dead_pid, now).unwrap();
    let mut before = me.sibling();
    before.started = Some("another boot/42".into());
    lease::take(&conn, &before, &reused, now).unwrap();
    lease::take(&conn, &me.sibling(), &live, now).unwrap();

    assert!(b.held_elsewhere(&dead_pid).await.unwrap().is_none(), "its pid is gone");
    assert!(b.held_elsewhere(&reused).await.unwrap().is_none(), "its pid now belongs to a process started later");
    assert!(b.held_elsewhere(&live).await.unwrap().is_some());
    let (_, last) = b.messages_and_last_turn(&dead_pid).await.unwrap();
    b.commit(take(&dead_pid, LastTurn::By(last), "after the crash")).await.unwrap();
    assert_eq!(texts(&b.messages(&dead_pid).await.unwrap()), ["after the crash"]);
}

#[tokio::test]
async fn from_another_host_a_lease_lapses_only_once_its_heartbeat_is_older_than_the_bound() {
    let (dir, a, _b) = two_processes();
    let id = session(&a).await;
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    let me = Holder::this_process();
    let remote = Holder::remote("elsewhere", std::process::id());
    let bound = i64::try_from(STALE_AFTER.as_millis()).unwrap();
    let t0 = 1_000_000;
    lease::take(&conn, &remote, &id, t0).unwrap();
    let held = |at: i64| lease::held_elsewhere(&conn, &me, &id, at).unwrap().is_some();
    assert!(held(t0 + bound), "a heartbeat {STALE_AFTER:?} old still holds");
    assert!(!held(t0 + bound + 1));

    lease::beat(&conn, &remote, t0 + 20_000).unwrap();
    assert!(held(t0 + 20_000 + bound), "the heartbeat keeps it");
    let holder = lease::held_elsewhere(&conn, &me, &id, t0 + 20_000).unwrap().unwrap();
    assert_eq!((holder.host.as_str(), holder.since, holder.heartbeat), ("elsewhere", t0, t0 + 20_000));

    lease::release(&conn, &remote, &id, t0 + 21_000).unwrap();
    assert!(!held(t0 + 21_000), "released");
}

#[tokio::test]
async fn the_writer_refreshes_the_leases_it_holds_while_idle_and_stops_once_they_are_released() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = Store::open_as(&path, Holder::this_process(), Duration::from_millis(5)).unwrap();
    let id = session(&store).await;
    store.commit(take(&id, LastTurn::Ours, "go")).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let times = || -> (i64, i64) {
        conn.query_row("SELECT taken_at, heartbeat_at FROM session_leases", [], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
    };
    // Nothing else is written: only the heartbeat moves it.
    let patience = std::time::Instant::now() + Duration::from_secs(10);
    while times().1 == times().0 {
        assert!(std::time::Instant::now() < patience, "no heartbeat within 10 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    store.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let released = times();
    store.flush().await.unwrap();
    std::thread::sleep(Duration::from_millis(30));
    store.flush().await.unwrap();
    assert_eq!(times(), released, "a released lease is not refreshed");
}

#[tokio::test]
async fn delete_and_rewind_are_refused_while_another_process_holds_the_session_or_a_sub_agent_below_it() {
    let (_dir, a, b) = two_processes();
    let id = session(&a).await;
    let mut child = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    child.parent_id = Some(id.clone());
    child.subagent = Some("task".into());
    a.commit(Write::InsertSession(Box::new(child.clone()))).await.unwrap();
    a.commit(take(&child.id, LastTurn::Ours, "the child's task")).await.unwrap();
    let refused = b.commit(Write::DeleteSession { id: id.clone() }).await;
    assert!(matches!(refused, Err(StoreError::Leased(_))), "{refused:?}");
    assert_eq!(b.messages(&child.id).await.unwrap().len(), 1, "the running child keeps its rows");

    a.commit(Write::ReleaseLease { session_id: child.id.clone() }).await.unwrap();
    a.commit(take(&id, LastTurn::Ours, "the parent's prompt")).await.unwrap();
    let from = a.messages(&id).await.unwrap()[0].id.clone();
    let refused = b.commit(Write::HideFrom { session_id: id.clone(), from }).await;
    assert!(matches!(refused, Err(StoreError::Leased(_))), "{refused:?}");
    assert_eq!(a.messages(&id).await.unwrap().len(), 1);

    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    b.commit(Write::DeleteSession { id: id.clone() }).await.unwrap();
    assert_eq!(b.session(&id).await.unwrap(), None);
    assert_eq!(b.session(&child.id).await.unwrap(), None);
}

#[tokio::test]
async fn shutting_down_releases_every_lease_this_process_holds() {
    let (_dir, a, b) = two_processes();
    let (one, two) = (session(&a).await, session(&a).await);
    a.commit(take(&one, LastTurn::Ours, "one")).await.unwrap();
    a.commit(take(&two, LastTurn::Ours, "two")).await.unwrap();
    assert!(b.held_elsewhere(&one).await.unwrap().is_some());
    a.shutdown().await;
    assert!(b.held_elsewhere(&one).await.unwrap().is_none());
    assert!(b.held_elsewhere(&two).await.unwrap().is_none());
}

#[tokio::test]
async fn a_turn_another_process_ran_after_the_history_was_read_again_is_noticed_even_by_the_same_holder() {
    let (_dir, a, b) = two_processes();
    let id = session(&a).await;
    a.commit(take(&id, LastTurn::Ours, "a's first")).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let (_, seen) = b.messages_and_last_turn(&id).await.unwrap();

    // Between b's read and b's take, a runs a whole turn: same process, same token.
    a.commit(take(&id, LastTurn::Ours, "a's second")).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    let moved = b.commit(take(&id, LastTurn::By(seen), "b on a stale copy")).await;
    assert!(matches!(moved, Err(StoreError::LeaseMoved { .. })), "{moved:?}");
    assert_eq!(texts(&b.messages(&id).await.unwrap()), ["a's first", "a's second"]);
}

/// A tool call part in `state` (moved there from New the legal way).
fn call(states: &[CallState]) -> Part {
    let mut tool = crate::history::ToolPart::new("c1".into(), "bash".into());
    for state in states {
        tool.state.advance(*state).unwrap();
    }
    tool.output = tool.state.is_terminal().then(|| "done".to_owned());
    Part::Tool(tool)
}

fn state_of(messages: &[Message]) -> Vec<CallState> {
    messages
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|part| match part {
            Part::Tool(tool) => Some(tool.state),
            _ => None,
        })
        .collect()
}

/// `store` runs a turn in `id` whose call is running: answers the message holding it.
async fn running_call(store: &Store, id: &SessionId, last: LastTurn) -> MessageId {
    store.commit(take(id, last, "run it")).await.unwrap();
    let message = Message::new(Role::Assistant, vec![call(&[CallState::Running])], MessageMeta::default());
    let message_id = message.id.clone();
    store.commit(Write::InsertMessage { session_id: id.clone(), message }).await.unwrap();
    message_id
}

#[tokio::test]
async fn a_restore_never_overwrites_a_call_its_process_finished_after_the_restore_read_it() {
    let (_dir, a, b) = two_processes();
    let id = session(&a).await;
    let message_id = running_call(&a, &id, LastTurn::Ours).await;
    let finalize = || Write::FinalizeOrphans { session_id: id.clone() };

    // b restores the session and reads the running call; a still holds the lease.
    assert_eq!(state_of(&b.messages(&id).await.unwrap()), [CallState::Running]);
    b.commit(finalize()).await.unwrap();
    assert_eq!(state_of(&a.messages(&id).await.unwrap()), [CallState::Running], "a's running call is left alone");

    // a finishes the call and gives the lease back before b's finalization runs.
    let done = call(&[CallState::Running, CallState::Succeeded]);
    let put = Write::PutPart { session_id: id.clone(), message_id: message_id.clone(), index: 0, part: done };
    a.commit(put).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    b.commit(finalize()).await.unwrap();
    let stored = b.messages(&id).await.unwrap();
    assert_eq!(state_of(&stored), [CallState::Succeeded]);
    let Part::Tool(tool) = &stored[1].parts[0] else { panic!("{stored:?}") };
    assert_eq!(tool.output.as_deref(), Some("done"), "the result a wrote stays");

    // Nor is a call running under the restoring process's own lease.
    let (_, last) = b.messages_and_last_turn(&id).await.unwrap();
    running_call(&b, &id, LastTurn::By(last)).await;
    b.commit(finalize()).await.unwrap();
    assert_eq!(state_of(&b.messages(&id).await.unwrap()), [CallState::Succeeded, CallState::Running]);
}

#[tokio::test]
async fn a_restore_finishes_the_calls_of_a_holder_that_died() {
    let (dir, a, b) = two_processes();
    let id = session(&a).await;
    let message_id = running_call(&a, &id, LastTurn::Ours).await;
    // a's process dies: its pid is gone.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    conn.execute("UPDATE session_leases SET pid = ?1", [gone]).unwrap();

    b.commit(Write::FinalizeOrphans { session_id: id.clone() }).await.unwrap();
    let stored = b.messages(&id).await.unwrap();
    assert_eq!(state_of(&stored), [CallState::Failed]);
    assert_eq!(stored[1].id, message_id);
    let Part::Tool(tool) = &stored[1].parts[0] else { panic!("{stored:?}") };
    assert!(tool.output.as_deref().unwrap().contains("Interrupted by a restart"), "{tool:?}");
}

#[tokio::test]
async fn a_release_that_fails_is_held_still_and_tried_again_until_it_commits() {
    let (dir, a, b) = two_processes();
    let id = session(&a).await;
    a.commit(take(&id, LastTurn::Ours, "from a")).await.unwrap();
    // The release's UPDATE fails (as SQLITE_BUSY or a failed commit would).
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER no_release BEFORE UPDATE OF released_at ON session_leases
         BEGIN SELECT RAISE(ABORT, 'the release fails'); END",
    )
    .unwrap();
    let failed = a.commit(Write::ReleaseLease { session_id: id.clone() }).await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(b.held_elsewhere(&id).await.unwrap().is_some(), "still held");

    conn.execute_batch("DROP TRIGGER no_release").unwrap();
    a.flush().await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_none(), "released with a's next batch");
    let (_, last) = b.messages_and_last_turn(&id).await.unwrap();
    b.commit(take(&id, LastTurn::By(last), "from b")).await.unwrap();
}

#[tokio::test]
async fn a_retried_release_never_gives_back_a_lease_taken_again_since() {
    let (dir, a, b) = two_processes();
    let id = session(&a).await;
    a.commit(take(&id, LastTurn::Ours, "first")).await.unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("cairn.db")).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER no_release BEFORE UPDATE OF released_at ON session_leases
         WHEN NEW.released_at IS NOT NULL BEGIN SELECT RAISE(ABORT, 'the release fails'); END",
    )
    .unwrap();
    assert!(a.commit(Write::ReleaseLease { session_id: id.clone() }).await.is_err());
    a.commit(take(&id, LastTurn::Ours, "second")).await.unwrap();
    conn.execute_batch("DROP TRIGGER no_release").unwrap();
    a.flush().await.unwrap();
    assert!(b.held_elsewhere(&id).await.unwrap().is_some(), "the second turn's lease stays");
}

#[tokio::test]
async fn a_lease_guard_gives_the_lease_back_when_its_work_is_dropped_mid_await_or_panics() {
    let (_dir, a, b) = two_processes();
    let (dropped, panicked) = (session(&a).await, session(&a).await);
    for id in [&dropped, &panicked] {
        a.commit(take(id, LastTurn::Ours, "a sub-agent's task")).await.unwrap();
    }
    let guard = a.release_on_drop(dropped.clone());
    let work = tokio::spawn(async move {
        let _guard = guard;
        std::future::pending::<()>().await;
    });
    work.abort();
    assert!(work.await.unwrap_err().is_cancelled());
    let guard = a.release_on_drop(panicked.clone());
    let work = tokio::spawn(async move {
        let _guard = guard;
        panic!("the sub-agent's code failed");
    });
    assert!(work.await.unwrap_err().is_panic());
    a.flush().await.unwrap();
    assert!(b.held_elsewhere(&dropped).await.unwrap().is_none());
    assert!(b.held_elsewhere(&panicked).await.unwrap().is_none());
}

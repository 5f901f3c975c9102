//! Streamed text with its pieces behind the log: any replica reads a streaming part whole while
//! its writer has written few or no pieces of it; the pieces catch up within about a second
//! with no write to bring them, at the part's end, at its turn's end and at shutdown; a chunk
//! that logs no row is a piece at once, a NUL in one fails nothing; a part written whole or
//! opened again forgets the chunks before it; the text a dead writer left only in the log
//! outlives the prune and is folded into pieces by the sweeper, or by a take of its lapsed
//! lease that comes first; and a writer whose lease was taken over never writes that text again.

use std::time::Duration;

use tokio_postgres::Client;

use super::tests::{fresh, took};
use super::{Prepared, fixture, lease, prune, rows, sweeper};
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId, now_ms};
use crate::store::{LastTurn, SessionRow, Store, Write};

async fn store(url: &str, me: &str) -> Store {
    Store::open_postgres_as(url, me, Duration::from_secs(30)).await.unwrap()
}

/// A session of `a`'s whose turn `a` runs, with an answer open to chunks, starting as `text`.
pub(super) async fn streaming(a: &Store, text: &str) -> (SessionId, MessageId) {
    let id = SessionId::generate();
    let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
    a.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    let prompt = Message::new(Role::User, vec![Part::Text { text: "go".into() }], MessageMeta::default());
    let take = Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::Ours,
        prompt: Some(prompt),
        title: None,
        command: None,
    };
    a.commit(take).await.unwrap();
    let reply = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message = reply.id.clone();
    a.commit(Write::InsertMessage { session_id: id.clone(), message: reply }).await.unwrap();
    let part = Part::Text { text: text.into() };
    a.commit(Write::OpenPart { session_id: id.clone(), message_id: message.clone(), index: 0, part }).await.unwrap();
    (id, message)
}

/// Streams `deltas` as chunks each shown as a row of the log (none with `shown` false).
async fn stream(a: &Store, message: &MessageId, deltas: &[&str], shown: bool) {
    for delta in deltas {
        let chunk = Write::AppendPart { message_id: message.clone(), index: 0, delta: (*delta).into() };
        let bodies = if shown { vec![format!("{{\"chunk\":{delta:?}}}")] } else { Vec::new() };
        a.submit_shown(chunk, bodies, None);
    }
    a.flush().await.unwrap();
}

/// The answer's text as `store` reads it.
async fn text_of(store: &Store, id: &SessionId) -> String {
    let messages = store.messages(id).await.unwrap();
    match messages.last().and_then(|message| message.parts.first()) {
        Some(Part::Text { text }) => text.clone(),
        other => panic!("no text part: {other:?}"),
    }
}

/// The part's pieces: their text joined, and how many there are.
async fn pieces(client: &Client, message: &MessageId) -> (String, i64) {
    let row = client
        .query_one(
            "SELECT coalesce(string_agg(text, '' ORDER BY id), ''), count(*) FROM part_pieces WHERE message_id = $1",
            &[&message.as_str()],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

async fn streams(client: &Client, message: &MessageId) -> bool {
    let row =
        client.query_one("SELECT streaming_from FROM parts WHERE message_id = $1", &[&message.as_str()]).await.unwrap();
    row.get::<_, Option<i64>>(0).is_some()
}

async fn client(url: &str) -> Client {
    super::PgTarget::parse(url).unwrap().connect().await.unwrap()
}

/// Two replicas on a database of the test's own, and a connection to read it with.
async fn replicas() -> (Store, Store, Client) {
    let url = fixture::database().await;
    let (a, b) = (store(&url, "host-a:1:a").await, store(&url, "host-b:2:b").await);
    (a, b, client(&url).await)
}

/// Waits until the part's pieces hold `text` with no write to bring them (the writer's catch-up).
async fn caught_up(sql: &Client, message: &MessageId, text: &str) {
    let started = std::time::Instant::now();
    while pieces(sql, message).await.0 != text {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the pieces never caught up: {:?}",
            pieces(sql, message).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_part_reads_whole_from_another_replica_while_its_pieces_lag_and_from_its_pieces_once_ended() {
    let (a, b, sql) = replicas().await;
    let (id, message) = streaming(&a, "He").await;
    let deltas: Vec<String> = (0..20).map(|n| format!("{n},")).collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    stream(&a, &message, &deltas, true).await;
    let whole = format!("He{}", deltas.concat());

    assert_eq!(text_of(&b, &id).await, whole, "another replica reads every chunk shown");
    let (loaded, seq) = b.messages_at_seq(&id).await.unwrap();
    assert_eq!(
        seq,
        sql.query_one("SELECT max(seq) FROM session_events WHERE session_id = $1", &[&id.as_str()])
            .await
            .unwrap()
            .get::<_, i64>(0)
    );
    assert!(matches!(loaded.last().and_then(|m| m.parts.first()), Some(Part::Text { text }) if *text == whole));
    let carried: i64 = sql
        .query_one("SELECT count(*) FROM session_events WHERE part_message = $1", &[&message.as_str()])
        .await
        .unwrap()
        .get(0);
    let (_, written) = pieces(&sql, &message).await;
    assert!(carried > 0 && written < 20, "{carried} of twenty chunks carried by the log's rows, {written} pieces");
    assert!(streams(&sql, &message).await);

    a.commit(Write::ClosePart { message_id: message.clone(), index: 0 }).await.unwrap();
    assert_eq!(pieces(&sql, &message).await.0, deltas.concat(), "the part's end writes what the pieces lacked");
    assert!(!streams(&sql, &message).await, "an ended part is not looked up in the log");
    assert_eq!(text_of(&b, &id).await, whole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_catch_up_within_about_a_second_with_no_write_to_bring_them_and_at_shutdown() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let sql = client(&url).await;
    let (_, message) = streaming(&a, "").await;
    stream(&a, &message, &["a", "b", "c"], true).await;
    caught_up(&sql, &message, "abc").await;
    assert!(streams(&sql, &message).await, "caught up, the part still streams");

    stream(&a, &message, &["d", "e"], true).await;
    a.shutdown().await;
    assert_eq!(pieces(&sql, &message).await.0, "abcde", "a replica that stops writes its text as pieces first");
    assert!(!streams(&sql, &message).await, "and ends its parts' streaming");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_giving_back_its_lease_writes_its_open_parts_text_and_a_part_opened_again_reads_only_its_new_chunks() {
    let (a, b, sql) = replicas().await;
    let (id, message) = streaming(&a, "").await;
    stream(&a, &message, &["a", "b"], true).await;
    let part = Part::Text { text: String::new() };
    a.commit(Write::OpenPart { session_id: id.clone(), message_id: message.clone(), index: 0, part }).await.unwrap();
    stream(&a, &message, &["c"], true).await;
    assert_eq!(text_of(&b, &id).await, "c", "the rows of the part before it was opened again are not its text");

    stream(&a, &message, &["d"], true).await;
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();
    assert_eq!(pieces(&sql, &message).await.0, "cd", "the turn's end writes what its open part lacked");
    assert!(!streams(&sql, &message).await);
    assert_eq!(text_of(&b, &id).await, "cd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_streamed_into_a_part_written_whole_is_stored_as_a_replacement_and_fails_nothing() {
    let (a, b, _) = replicas().await;
    let (id, message) = streaming(&a, "").await;
    let whole = Part::Text { text: "x".into() };
    a.commit(Write::PutPart { session_id: id.clone(), message_id: message.clone(), index: 0, part: whole })
        .await
        .unwrap();
    let chunk = Write::AppendPart { message_id: message.clone(), index: 0, delta: "a\0b".into() };
    a.commit(chunk).await.unwrap();
    stream(&a, &message, &["c\0"], true).await;
    assert_eq!(text_of(&b, &id).await, "xa\u{fffd}bc\u{fffd}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_that_logs_no_row_is_a_piece_at_once_and_a_part_written_whole_forgets_the_chunks_before() {
    let (a, b, sql) = replicas().await;
    let (id, message) = streaming(&a, "").await;
    stream(&a, &message, &["shown "], true).await;
    stream(&a, &message, &["unshown"], false).await;
    assert_eq!(pieces(&sql, &message).await.0, "shown unshown", "nothing in the log holds the second chunk");
    assert_eq!(text_of(&b, &id).await, "shown unshown", "and the first is not read twice");

    stream(&a, &message, &[" more"], true).await;
    let whole = Part::Text { text: "Whole".into() };
    a.commit(Write::PutPart { session_id: id.clone(), message_id: message.clone(), index: 0, part: whole })
        .await
        .unwrap();
    assert_eq!(text_of(&b, &id).await, "Whole");
    assert!(!streams(&sql, &message).await);
    a.shutdown().await;
    assert_eq!(text_of(&b, &id).await, "Whole", "nothing of before comes back at shutdown");
}

/// A dead replica's streaming part: its pieces hold its first three chunks, the log six.
async fn left_streaming(client: &Client, target: &super::PgTarget) -> (SessionId, MessageId) {
    let id = SessionId::generate();
    rows::insert_session(client, &SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms())).await.unwrap();
    let lease = took(lease::take(client, target, &id, "deadhost:4242:x", Duration::from_secs(60)).await.unwrap());
    let reply = Message::new(Role::Assistant, vec![Part::Text { text: String::new() }], MessageMeta::default());
    rows::insert_message(client, &Prepared::default(), &id, &reply, now_ms()).await.unwrap();
    client.execute("UPDATE parts SET streaming_from = 0 WHERE message_id = $1", &[&reply.id.as_str()]).await.unwrap();
    client
        .execute(
            "INSERT INTO part_pieces (session_id, message_id, idx, text, upto) VALUES ($1, $2, 0, 'abc', 3)",
            &[&id.as_str(), &reply.id.as_str()],
        )
        .await
        .unwrap();
    for (n, piece) in (1..).zip(["a", "b", "c", "d", "e", "f"]) {
        client
            .execute(
                "INSERT INTO session_events (session_id, seq, epoch, body, origin, part_message, part_idx, part_chunk, piece, created_at)
                 VALUES ($1, $2, $3, '{}', $4, $5, 0, $6, $7, now() - interval '1 hour')",
                &[&id.as_str(), &i64::from(n), &lease.epoch, &lease.holder, &reply.id.as_str(), &n, &piece],
            )
            .await
            .unwrap();
    }
    client.execute("UPDATE session_leases SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
    (id, reply.id)
}

#[tokio::test]
async fn text_a_dead_writer_left_only_in_the_log_outlives_the_prune_and_the_sweeper_folds_it_into_pieces() {
    let (target, mut client) = fresh().await;
    let (id, message) = left_streaming(&client, &target).await;
    let text = |messages: Vec<Message>| match messages[0].parts.first() {
        Some(Part::Text { text }) => text.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(text(rows::messages(&client, &id).await.unwrap()), "abcdef");

    let stop = tokio_util::sync::CancellationToken::new();
    prune::prune_once(&client, &target, Duration::ZERO, prune::BATCH, &stop).await.unwrap();
    assert_eq!(text(rows::messages(&client, &id).await.unwrap()), "abcdef", "the rows of a streaming part are kept");
    let kept: Vec<i32> = client
        .query("SELECT part_chunk FROM session_events WHERE session_id = $1 ORDER BY seq", &[&id.as_str()])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kept, [4, 5, 6], "only those its pieces lack");

    let ttl = Duration::from_secs(60);
    assert_eq!(sweeper::sweep_once(&mut client, &target, "alive:1:y", ttl).await.unwrap(), std::slice::from_ref(&id));
    assert_eq!(pieces(&client, &message).await, ("abcdef".to_owned(), 2), "the last three chunks folded as one piece");
    assert!(!streams(&client, &message).await);
    prune::prune_once(&client, &target, Duration::ZERO, prune::BATCH, &stop).await.unwrap();
    assert_eq!(text(rows::messages(&client, &id).await.unwrap()), "abcdef", "folded, the rows may go");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_of_a_dead_writers_lapsed_lease_before_the_sweeper_folds_its_text_into_pieces() {
    let url = fixture::database().await;
    // Its sweeper would take the lapsed leases first: it sleeps a quarter of the ttl first.
    let a = Store::open_postgres_as(&url, "host-a:1:a", Duration::from_secs(600)).await.unwrap();
    let (target, sql) = (super::PgTarget::parse(&url).unwrap(), client(&url).await);
    // Once by a prompt's claim (the batch's takes together), once by a take with no prompt.
    let (prompted, prompted_reply) = left_streaming(&sql, &target).await;
    let (bare, bare_reply) = left_streaming(&sql, &target).await;
    for (id, prompt) in [(&prompted, true), (&bare, false)] {
        let prompt =
            prompt.then(|| Message::new(Role::User, vec![Part::Text { text: "on".into() }], MessageMeta::default()));
        let take = Write::TakeLease {
            session_id: id.clone(),
            last: LastTurn::By(Some(lease::mark_of(1))),
            prompt,
            title: None,
            command: None,
        };
        a.commit(take).await.unwrap();
    }
    for (id, reply, by) in [(&prompted, &prompted_reply, "a prompt"), (&bare, &bare_reply, "a bare take")] {
        assert_eq!(pieces(&sql, reply).await, ("abcdef".to_owned(), 2), "the log's last three chunks folded by {by}");
        assert!(!streams(&sql, reply).await, "the part no longer streams");
        let messages = a.messages(id).await.unwrap();
        assert!(matches!(messages[0].parts.first(), Some(Part::Text { text }) if text == "abcdef"), "read once");
    }

    // This replica's own lease, taken again bare or by a prompt, holds no text of another
    // writer to fold.
    let (id, message) = streaming(&a, "").await;
    stream(&a, &message, &["x"], true).await;
    let again =
        Write::TakeLease { session_id: id.clone(), last: LastTurn::Ours, prompt: None, title: None, command: None };
    a.commit(again).await.unwrap();
    let prompt = Message::new(Role::User, vec![Part::Text { text: "more".into() }], MessageMeta::default());
    let claim = Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::Ours,
        prompt: Some(prompt),
        title: None,
        command: None,
    };
    a.commit(claim).await.unwrap();
    assert!(streams(&sql, &message).await, "its own part still streams");
    stream(&a, &message, &["y"], true).await;
    a.commit(Write::ClosePart { message_id: message.clone(), index: 0 }).await.unwrap();
    assert_eq!(pieces(&sql, &message).await.0, "xy", "written once, by its writer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopping_after_its_pieces_caught_up_ends_its_parts_streaming() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let sql = client(&url).await;
    let (_, message) = streaming(&a, "").await;
    stream(&a, &message, &["a", "b"], true).await;
    caught_up(&sql, &message, "ab").await;
    a.shutdown().await;
    assert!(!streams(&sql, &message).await, "no reader looks in the log for a part nobody streams");
    assert_eq!(pieces(&sql, &message).await.0, "ab");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_lease_was_taken_over_never_writes_the_text_the_new_holder_folded() {
    let (a, b, sql) = replicas().await;
    let (id, message) = streaming(&a, "").await;
    stream(&a, &message, &["a", "b"], true).await;
    // Another replica takes the lease over and folds what the log holds, as its sweeper does.
    sql.execute(
        "UPDATE session_leases SET holder = 'host-c:3:c', epoch = epoch + 1 WHERE session_id = $1",
        &[&id.as_str()],
    )
    .await
    .unwrap();
    rows::fold_streams(&sql, &[&id]).await.unwrap();
    assert_eq!(pieces(&sql, &message).await.0, "ab");

    // Neither the old holder's sweep, which finds its lease taken, nor its shutdown writes the
    // text again, and its next chunk is refused.
    tokio::time::sleep(super::streams::LAG * 2).await;
    assert_eq!(pieces(&sql, &message).await.0, "ab");
    let chunk = Write::AppendPart { message_id: message.clone(), index: 0, delta: "c".into() };
    assert!(a.commit(chunk).await.is_err(), "fenced");
    a.shutdown().await;
    assert_eq!(pieces(&sql, &message).await.0, "ab");
    assert_eq!(text_of(&b, &id).await, "ab", "read once");
}

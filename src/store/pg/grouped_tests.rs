//! A batch's messages and parts sent grouped (`grouped.rs`): many turns starting in one batch,
//! a part written whole over the text streamed into it, and a part written twice in the batch
//! read back as written; a write that cannot go in fails alone, and the rest of its batch is
//! written.

use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId};
use crate::store::{StoreError, Write};

use super::claims_tests::{new_session, one_batch, store, texts};
use super::fixture;

fn text(text: &str) -> Part {
    Part::Text { text: text.into() }
}

fn answer() -> Message {
    Message::new(Role::Assistant, Vec::new(), MessageMeta::default())
}

/// A step's start as a turn writes it: the answer's message, its first part opened, a chunk,
/// the part closed.
fn step(session: &SessionId, message: &Message, said: &str) -> Vec<Write> {
    let (message_id, index) = (message.id.clone(), 0);
    vec![
        Write::InsertMessage { session_id: session.clone(), message: message.clone() },
        Write::OpenPart { session_id: session.clone(), message_id: message_id.clone(), index, part: text("") },
        Write::AppendPart { message_id: message_id.clone(), index, delta: said.into() },
        Write::ClosePart { message_id, index },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_parts_of_many_turns_in_one_batch_read_back_as_written_and_a_bad_write_fails_alone() {
    let url = fixture::database().await;
    let a = store(&url, "host-a:1:a").await;
    let sessions: Vec<SessionId> = futures::future::join_all((0..6).map(|_| new_session(&a))).await;
    // An answer of an earlier batch with streamed text, written whole in this one.
    let earlier = answer();
    for write in step(&sessions[0], &earlier, "streamed before") {
        a.commit(write).await.unwrap();
    }
    let answers: Vec<Message> = sessions.iter().map(|_| answer()).collect();
    let mut writes: Vec<Write> = Vec::new();
    for (n, (session, message)) in sessions.iter().zip(&answers).enumerate() {
        writes.extend(step(session, message, &format!("hello {n}")));
    }
    let first = (&sessions[0], answers[0].id.clone());
    let rewrite = |message_id: &MessageId, index, said: &str| Write::PutPart {
        session_id: first.0.clone(),
        message_id: message_id.clone(),
        index,
        part: text(said),
    };
    writes.push(rewrite(&earlier.id, 0, "written whole"));
    // One part written twice in the batch: opened, then written whole.
    writes.push(Write::OpenPart { session_id: first.0.clone(), message_id: first.1.clone(), index: 1, part: text("") });
    writes.push(rewrite(&first.1, 1, "second part"));
    let results = one_batch(&a, writes).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(texts(&a.messages(&sessions[0]).await.unwrap()), ["written whole", "hello 0", "second part"]);
    for (n, session) in sessions.iter().enumerate().skip(1) {
        assert_eq!(texts(&a.messages(session).await.unwrap()), [format!("hello {n}")]);
    }

    // A part of a message nobody wrote, among a turn's start and a message with its parts.
    let (next, whole) = (answer(), Message::new(Role::User, vec![text("after the bad one")], MessageMeta::default()));
    let mut writes = step(&sessions[2], &next, "next");
    let missing = MessageId::generate();
    writes.push(Write::OpenPart { session_id: first.0.clone(), message_id: missing, index: 0, part: text("") });
    writes.push(Write::InsertMessage { session_id: sessions[1].clone(), message: whole });
    let results = one_batch(&a, writes).await;
    assert!(results[..4].iter().all(Result::is_ok), "{results:?}");
    assert!(matches!(results[4], Err(StoreError::Postgres(_))), "the part of no message fails: {:?}", results[4]);
    assert!(results[5].is_ok(), "{:?}", results[5]);
    assert_eq!(texts(&a.messages(&sessions[1]).await.unwrap()), ["hello 1", "after the bad one"]);
    assert_eq!(texts(&a.messages(&sessions[2]).await.unwrap()), ["hello 2", "next"]);
    a.shutdown().await;
}

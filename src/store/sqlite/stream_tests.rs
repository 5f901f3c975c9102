//! Unit tests of streaming parts as stored: appended in pieces, folded when short, replaced when
//! written whole, read back (and exported) with all their text.

use std::path::Path;

use super::*;
use crate::history::Role;
use crate::history::{MessageMeta, Part};
use crate::ids::MessageId;
use crate::ids::now_ms;

struct Streamed {
    _dir: tempfile::TempDir,
    path: PathBuf,
    store: Store,
    session: SessionId,
    message: MessageId,
}

/// A store with a session whose assistant message has part 0 open (a `kind` part).
async fn streaming(part: Part) -> Streamed {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let store = Store::open(&path).unwrap();
    let session = SessionId::generate();
    let row = SessionRow::new(session.clone(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    let answer = Message::new(Role::Assistant, Vec::new(), MessageMeta::default());
    let message = answer.id.clone();
    store.submit(Write::InsertMessage { session_id: session.clone(), message: answer }, None);
    let open = Write::OpenPart { session_id: session.clone(), message_id: message.clone(), index: 0, part };
    store.commit(open).await.unwrap();
    Streamed { _dir: dir, path, store, session, message }
}

impl Streamed {
    /// Appends `chunks` in one batch, waiting for its commit.
    async fn append(&self, chunks: &[String]) {
        // The writer waits in a callback until every chunk is queued.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (entered, waiting) = std::sync::mpsc::channel::<()>();
        let wait: AfterCommit = Box::new(move |_| {
            let _ = entered.send(());
            let _ = held.recv();
        });
        self.store.submit(Write::Barrier, Some(wait));
        waiting.recv().unwrap();
        for delta in chunks {
            let write = Write::AppendPart { message_id: self.message.clone(), index: 0, delta: delta.clone() };
            self.store.submit(write, None);
        }
        release.send(()).unwrap();
        self.store.flush().await.unwrap();
    }

    async fn close(&self) {
        self.store.commit(Write::ClosePart { message_id: self.message.clone(), index: 0 }).await.unwrap();
    }

    /// The part's row and its pieces, as stored.
    fn stored(&self) -> (String, Vec<String>) {
        stored(&self.path, &self.message)
    }

    async fn parts(&self) -> Vec<Part> {
        self.store.messages(&self.session).await.unwrap().remove(0).parts
    }
}

fn stored(path: &Path, message: &MessageId) -> (String, Vec<String>) {
    let raw = rusqlite::Connection::open(path).unwrap();
    let row = raw.query_row("SELECT data_json FROM parts WHERE message_id = ?1", [message.as_str()], |r| r.get(0));
    let mut pieces = raw.prepare("SELECT text FROM part_pieces WHERE message_id = ?1 ORDER BY id").unwrap();
    let pieces = pieces.query_map([message.as_str()], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    (row.unwrap(), pieces)
}

fn text(text: &str) -> Part {
    Part::Text { text: text.into() }
}

#[tokio::test]
async fn a_long_part_is_appended_batch_by_batch_and_never_written_again() {
    let s = streaming(text("")).await;
    let chunk = |i: usize| format!("{i:07} ") + &".".repeat(992);
    let mut whole = String::new();
    for batch in 0..30 {
        let chunks: Vec<String> = (batch * 100..(batch + 1) * 100).map(chunk).collect();
        s.append(&chunks).await;
        whole.extend(chunks);
        let (row, pieces) = s.stored();
        assert_eq!(row, r#"{"type":"text","text":""}"#, "the part's row is not rewritten");
        assert_eq!(pieces.len(), batch + 1, "each 100 kB batch is one piece");
        assert_eq!(pieces.concat(), whole);
        assert_eq!(s.parts().await, [text(&whole)], "read back with its text so far");
    }
    s.close().await;
    let (row, pieces) = s.stored();
    assert_eq!((row.as_str(), pieces.len()), (r#"{"type":"text","text":""}"#, 30), "3 MB stay in pieces");
    assert_eq!(s.parts().await, [text(&whole)]);
    let exported = s.store.stored_messages(&s.session).await.unwrap();
    let part: Part = serde_json::from_str(exported[0].parts[0].get()).unwrap();
    assert_eq!(part, text(&whole), "an export carries the pieces' text");
}

#[tokio::test]
async fn small_batches_grow_the_last_piece_and_a_short_part_is_folded_into_its_row() {
    let s = streaming(Part::Reasoning { text: "So: ".into(), signature: None }).await;
    let mut whole = "So: ".to_owned();
    for i in 0..1000 {
        let delta = format!("token{i} ");
        s.append(std::slice::from_ref(&delta)).await;
        whole.push_str(&delta);
    }
    let (_, pieces) = s.stored();
    assert!((2..=4).contains(&pieces.len()), "about 9 kB in 4 kB pieces, not 1,000 rows: {}", pieces.len());
    assert!(pieces[..pieces.len() - 1].iter().all(|piece| piece.len() >= 4096), "{pieces:?}");
    s.close().await;
    let (row, pieces) = s.stored();
    assert_eq!(pieces, Vec::<String>::new(), "folded");
    assert_eq!(serde_json::from_str::<Part>(&row).unwrap(), Part::Reasoning { text: whole.clone(), signature: None });
    assert_eq!(s.parts().await, [Part::Reasoning { text: whole, signature: None }]);
}

#[tokio::test]
async fn a_part_written_whole_replaces_its_pieces() {
    let s = streaming(Part::Reasoning { text: String::new(), signature: None }).await;
    let long = "x".repeat(2 * 1024 * 1024);
    s.append(std::slice::from_ref(&long)).await;
    s.close().await;
    assert_eq!(s.stored().1.len(), 1, "too long to fold");
    // A signature arrives after the thinking text (Anthropic): the part is written whole.
    let signed = Part::Reasoning { text: long, signature: Some("sig".into()) };
    let put = Write::PutPart { session_id: s.session.clone(), message_id: s.message.clone(), index: 0, part: signed };
    s.store.commit(put).await.unwrap();
    assert_eq!(s.stored().1.len(), 0);
    let Part::Reasoning { text, signature } = &s.parts().await[0] else { panic!() };
    assert_eq!((text.len(), signature.as_deref()), (2 * 1024 * 1024, Some("sig")), "the text once, not twice");
}

#[tokio::test]
async fn a_session_deleted_mid_stream_leaves_no_pieces_and_its_chunks_are_refused() {
    let s = streaming(text("")).await;
    s.append(&["abc".to_owned()]).await;
    s.store.commit(Write::DeleteSession { id: s.session.clone() }).await.unwrap();
    let raw = rusqlite::Connection::open(&s.path).unwrap();
    let left: i64 = raw.query_row("SELECT count(*) FROM part_pieces", [], |r| r.get(0)).unwrap();
    assert_eq!(left, 0);
    let chunk = Write::AppendPart { message_id: s.message.clone(), index: 0, delta: "d".into() };
    let refused = s.store.commit(chunk).await.unwrap_err();
    assert!(refused.to_string().contains("not open"), "{refused}");
}

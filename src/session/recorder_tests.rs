//! The recorder's claim against another process sharing the database: a refused turn records
//! nothing, even what it is given after the refusal; notices held until the claim sort after
//! the turn another process ran while they waited; on a store shared by replicas, every update
//! the log keeps is shown with its `seq` there.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::StoreRecorder;
use crate::agent::{AgentEvent, RecordError, Recorder};
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId, now_ms};
use crate::session::{Status, Update, UpdateSink};
use crate::store::{LastTurn, SessionRow, Store, Write};
use crate::tools::Host;

/// The updates a recorder showed.
#[derive(Default)]
struct Shown(Mutex<Vec<Update>>);

impl UpdateSink for Shown {
    fn send(&self, _session: &SessionId, update: Update) {
        self.0.lock().unwrap().push(update);
    }

    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::new(crate::tools::NoEditor)
    }
}

/// Two processes sharing one database (each `Store` is a lease holder of its own), and a
/// session in it.
async fn two_processes() -> (tempfile::TempDir, Store, Store, SessionId) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.db");
    let (a, b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    let row = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    a.commit(Write::InsertSession(Box::new(row.clone()))).await.unwrap();
    (dir, a, b, row.id)
}

fn turn_recorder(store: &Store, id: &SessionId, shown: &Arc<Shown>) -> StoreRecorder {
    let status = Arc::new(watch::Sender::new(Status::Idle));
    let sink: Arc<dyn UpdateSink> = Arc::clone(shown) as Arc<dyn UpdateSink>;
    StoreRecorder::new(id.clone(), "/w".into(), store.clone(), sink, status).for_turn(None)
}

fn prompt(text: &str) -> Message {
    Message::new(Role::User, vec![Part::Text { text: text.into() }], MessageMeta::default())
}

/// Each stored message as its first part's text.
/// Process a's take of `id`'s lease for a turn of its own, with its prompt.
fn a_turn(id: &SessionId) -> Write {
    Write::TakeLease {
        session_id: id.clone(),
        last: LastTurn::Ours,
        prompt: Some(prompt("a's")),
        title: None,
        command: None,
    }
}

async fn stored(store: &Store, id: &SessionId) -> Vec<String> {
    let messages = store.messages(id).await.unwrap();
    messages
        .iter()
        .map(|message| match message.parts.first() {
            Some(Part::Text { text } | Part::Notice { text }) => text.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn after_a_refused_claim_nothing_the_turn_records_is_written_not_even_its_stop_notice() {
    let (_dir, a, b, id) = two_processes().await;
    a.commit(a_turn(&id)).await.unwrap();

    let shown = Arc::new(Shown::default());
    let mut recorder = turn_recorder(&b, &id, &shown);
    recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: "held, then dropped".into() });
    let refused = recorder.claim(&mut Vec::new(), Some(prompt("b's"))).await;
    assert!(matches!(&refused, Err(RecordError::Refused(holder)) if holder.session == id), "{refused:?}");
    // The turn's deadline passed while it waited for the claim: the limit's notice.
    recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: "the turn's time is up".into() });
    let model = "m".to_owned();
    recorder.record(AgentEvent::AssistantStarted { message: MessageId::generate(), model });
    recorder.flush().await.unwrap();

    assert_eq!(stored(&b, &id).await, ["a's"], "only the holder's rows");
    assert!(shown.0.lock().unwrap().is_empty(), "{:?}", shown.0.lock().unwrap());
}

#[tokio::test]
async fn notices_held_until_a_claim_that_read_the_history_again_sort_after_the_turn_that_came_meanwhile() {
    let (_dir, a, b, id) = two_processes().await;
    let shown = Arc::new(Shown::default());
    // b's turn starts on the history as b read it (empty): a notice before the prompt.
    let mut recorder = turn_recorder(&b, &id, &shown);
    recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: "b's notice".into() });
    let b_prompt = prompt("b's prompt");

    // Meanwhile a runs a whole turn.
    a.commit(a_turn(&id)).await.unwrap();
    let answer = Message::new(Role::Assistant, vec![Part::Text { text: "a's answer".into() }], MessageMeta::default());
    a.commit(Write::InsertMessage { session_id: id.clone(), message: answer }).await.unwrap();
    a.commit(Write::ReleaseLease { session_id: id.clone() }).await.unwrap();

    let mut history = Vec::new();
    assert!(recorder.claim(&mut history, Some(b_prompt)).await.unwrap(), "the history was read again");
    recorder.flush().await.unwrap();
    assert_eq!(stored(&b, &id).await, ["a's", "a's answer", "b's notice", "b's prompt"]);
    let messages = b.messages(&id).await.unwrap();
    let notice = &messages[2].id;
    let shown = shown.0.lock().unwrap();
    assert!(
        shown.iter().any(|update| matches!(update, Update::Notice { message, .. } if message == notice)),
        "the notice is shown under its stored id: {shown:?}"
    );
}

/// The updates a recorder showed, with the event log's `seq` of those shown with one.
#[derive(Default)]
struct Numbered(Mutex<Vec<(Option<i64>, Update)>>);

impl UpdateSink for Numbered {
    fn send(&self, _session: &SessionId, update: Update) {
        self.0.lock().unwrap().push((None, update));
    }

    fn send_logged(&self, _session: &SessionId, logged: i64, update: Update) {
        self.0.lock().unwrap().push((Some(logged), update));
    }

    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::new(crate::tools::NoEditor)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_store_the_turns_replica_shows_each_logged_update_with_its_seq_in_the_log() {
    use crate::agent::StreamKind;
    use crate::store::pg::events::Missed;
    let url = crate::store::pg::fixture::database().await;
    let kept = std::time::Duration::from_secs(900);
    let store = Store::open_postgres(&url, std::time::Duration::from_secs(30), kept).await.unwrap();
    let id = SessionId::generate();
    let row = SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    let numbered = Arc::new(Numbered::default());
    let status = Arc::new(watch::Sender::new(Status::Idle));
    let sink = Arc::clone(&numbered) as Arc<dyn UpdateSink>;
    let mut recorder =
        StoreRecorder::new(id.clone(), "/w".into(), store.clone(), sink, status).for_turn(Some("A title".into()));

    recorder.claim(&mut Vec::new(), Some(prompt("go"))).await.unwrap();
    let message = MessageId::generate();
    recorder.record(AgentEvent::AssistantStarted { message: message.clone(), model: "openai/m".into() });
    recorder.record(AgentEvent::PartStarted { message: message.clone(), index: 0, kind: StreamKind::Text });
    for text in ["one ", "two ", "three"] {
        let (message, kind, text) = (message.clone(), StreamKind::Text, text.to_owned());
        recorder.record(AgentEvent::Delta { message, index: 0, kind, text });
    }
    recorder.record(AgentEvent::PartFinished { message, index: 0 });
    recorder.record(AgentEvent::ContextUsage { used: 10, size: 100, cost: None });
    recorder.record(AgentEvent::Notice { message: MessageId::generate(), text: "a notice".into() });
    recorder.flush().await.unwrap();

    let Some(Missed::Rows(rows)) = store.missed(&id, 0).await.unwrap() else { panic!("the log is read") };
    let shown = numbered.0.lock().unwrap().clone();
    let seqs: Vec<i64> = shown.iter().filter_map(|(seq, _)| *seq).collect();
    // The title, three chunks, the notice; the prompt's chunk is logged but its client sent it.
    assert_eq!(seqs.len(), 5, "{shown:?}");
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    for (seq, update) in &shown {
        match seq {
            Some(seq) => {
                let logged = rows.iter().find(|row| row.seq == *seq).unwrap_or_else(|| panic!("no row {seq}"));
                assert_eq!(Update::from_event(&logged.body).as_ref(), Some(update), "row {seq}");
            }
            None => assert!(matches!(update, Update::Usage { .. }), "only what the log does not keep: {update:?}"),
        }
    }
}

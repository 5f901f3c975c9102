//! Questions across replicas: a permission question (or a `question` tool's) that a turn asks
//! on the replica running it reaches the clients of every replica viewing the session, and the
//! first valid answer, from any of them, wins.
//!
//! The hub of the replica running the turn asks its own viewers as always, and also logs the
//! question in the session's event log ([`Signal::Asked`], through a [`Write::Show`]). Every
//! other replica's actor reads it back and hands it to its hub, which puts it to its viewers (and
//! newcomers) and hands the first answer to the turn's replica through the command inbox
//! ([`super::handoff::Handed::Answer`]), whatever it is: an option, a dismissal, an option the
//! question did not offer, or an error ([`Answer::Failed`]), since the replica withdraws its
//! copies once one of its clients answered. There it joins the answers of the local viewers and
//! counts as theirs would: the first answer is taken and the others ignored, so a client
//! answering on two replicas answers once; a valid one (an option offered, or a dismissal) is
//! the turn's answer, an error or an option not offered is an error answer, which the turn takes
//! as a rejection, as it takes a local client's. Once the question is settled, however it
//! ended, [`Signal::Closed`] is logged and every replica withdraws its copies. A replica that
//! dies mid-question logs no close: the sweeper's close of its turn withdraws them instead.
//!
//! A replica that starts following the session after the question was asked (a client opened
//! it there later) is handed the questions still open with the first rows it follows
//! (`store::pg::events`): the log's question rows of the turn the lease holds now, asked and not
//! closed. So its clients are asked too, as a client that attaches on the turn's own replica is.
//! A replica that stops following the session withdraws its copies at once
//! ([`Elsewhere::Unfollowed`]): it would never read their close, and a client opening the
//! session there later would be asked a question settled long before. An answer that comes
//! after its question was settled is ignored, and said so in the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::history::ToolPart;
use crate::ids::SessionId;
use crate::store::{Store, Write};
use crate::tools::host::{PermissionAnswer, PermissionOption, Question, Reply};

/// A question as another replica's clients are asked it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Asked {
    Permission { call: ToolPart, options: Vec<PermissionOption> },
    Question { call_id: String, question: Question },
}

/// An answer given on another replica.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Permission(PermissionAnswer),
    Question(Reply),
    /// The client answered with an error: it answered (as on one replica), and the turn takes
    /// the error as a client's own.
    Failed {
        message: String,
    },
}

/// What the event log carries about questions, besides the updates it shows.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    Asked { id: String, asked: Box<Asked> },
    Closed { id: String },
}

impl Signal {
    /// A row of the log that is a signal; `None` for an update (or anything else).
    pub fn read(body: &str) -> Option<Self> {
        // Updates are `{"update": …}`: only a body that starts otherwise is looked at.
        if body.starts_with("{\"update\"") {
            return None;
        }
        serde_json::from_str(body).ok()
    }
}

/// What reaches a hub about questions of other replicas: from the log (asked, closed) or from
/// the inbox (an answer to one asked here).
#[derive(Clone, Debug, PartialEq)]
pub enum Elsewhere {
    Asked {
        id: String,
        asked: Box<Asked>,
    },
    Closed {
        id: String,
    },
    Answered {
        id: String,
        answer: Answer,
    },
    /// The sweeper closed the session's turn (its replica died): the questions that turn asked
    /// are settled, though no [`Signal::Closed`] will ever say so.
    TurnClosed,
    /// This replica stopped following the session (it closed here, or the store stops): it
    /// would never read the close of a question put to its clients, so they are withdrawn now.
    /// A follow that starts again is handed those still open.
    Unfollowed,
}

impl From<Signal> for Elsewhere {
    fn from(signal: Signal) -> Self {
        match signal {
            Signal::Asked { id, asked } => Self::Asked { id, asked },
            Signal::Closed { id } => Self::Closed { id },
        }
    }
}

/// A hub's side of the questions across replicas (see the module's paragraph).
pub struct Across {
    store: Store,
    /// Questions asked here and published, by id: where answers from elsewhere go.
    waiting: Mutex<HashMap<String, mpsc::UnboundedSender<Answer>>>,
    /// Questions other replicas asked, put to this one's viewers, by id: their session and
    /// withdrawal.
    asking: Mutex<HashMap<String, (SessionId, CancellationToken)>>,
}

impl Across {
    pub fn new(store: Store) -> Arc<Self> {
        Arc::new(Self { store, waiting: Mutex::default(), asking: Mutex::default() })
    }

    /// Logs `asked` for the other replicas' clients; their answers come on the guard's
    /// receiver until it drops, which logs the question closed.
    pub fn publish(self: &Arc<Self>, session: &SessionId, asked: Asked) -> Published {
        let id = crate::ids::random_hex::<8>().unwrap_or_default();
        let (answers, received) = mpsc::unbounded_channel();
        lock(&self.waiting).insert(id.clone(), answers);
        self.show(session, &Signal::Asked { id: id.clone(), asked: Box::new(asked) });
        Published { across: Arc::clone(self), session: session.clone(), id, received }
    }

    /// An answer from another replica to question `id` asked here; ignored once it is settled.
    pub fn answered(&self, id: &str, answer: Answer) {
        match lock(&self.waiting).get(id) {
            Some(answers) => {
                let _ = answers.send(answer);
            }
            None => {
                tracing::info!(
                    question = id,
                    "an answer from another replica came after the question was settled; it was ignored"
                )
            }
        }
    }

    /// Another replica asked question `id` in `session`: the token that withdraws this
    /// replica's copies; `None` when they are out already (a session followed again here while
    /// the question is open is handed it again, and its viewers must not be asked twice).
    pub fn asking(&self, session: &SessionId, id: &str) -> Option<CancellationToken> {
        let mut asking = lock(&self.asking);
        if asking.contains_key(id) {
            return None;
        }
        let token = CancellationToken::new();
        asking.insert(id.to_owned(), (session.clone(), token.clone()));
        Some(token)
    }

    /// Question `id` of another replica is settled, or answered here: withdrawn.
    pub fn closed(&self, id: &str) {
        if let Some((_, token)) = lock(&self.asking).remove(id) {
            token.cancel();
        }
    }

    /// The turn of `session` that another replica ran was closed by the sweeper: every question
    /// it asked is withdrawn.
    pub fn turn_closed(&self, session: &SessionId) {
        lock(&self.asking).retain(|_, (asked_in, token)| {
            let keep = asked_in != session;
            if !keep {
                token.cancel();
            }
            keep
        });
    }

    /// Hands this replica's clients' answer to the replica running the turn.
    pub async fn send_answer(&self, session: &SessionId, id: String, answer: Answer) {
        let handed = super::handoff::Handed::Answer { question: id, answer };
        let Ok(body) = serde_json::to_string(&handed) else { return };
        if let Some(Err(err)) = self.store.send_command(session, body).await {
            tracing::warn!(%session, %err, "an answer could not be handed to the replica running the turn");
        }
    }

    fn show(&self, session: &SessionId, signal: &Signal) {
        let Ok(body) = serde_json::to_string(signal) else { return };
        self.store.submit_shown(Write::Show { session_id: session.clone() }, vec![body], None);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A question published to other replicas: their answers, and its close when dropped.
pub struct Published {
    across: Arc<Across>,
    session: SessionId,
    id: String,
    pub received: mpsc::UnboundedReceiver<Answer>,
}

impl Drop for Published {
    fn drop(&mut self) {
        lock(&self.across.waiting).remove(&self.id);
        self.across.show(&self.session, &Signal::Closed { id: self.id.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Update;
    use crate::tools::host::OptionKind;

    #[test]
    fn a_signal_reads_back_and_an_update_is_never_taken_for_one() {
        let asked = Asked::Permission {
            call: ToolPart::new("c1".into(), "bash".into()),
            options: vec![PermissionOption {
                id: "allow_once".into(),
                label: "Allow".into(),
                kind: OptionKind::AllowOnce,
            }],
        };
        let signal = Signal::Asked { id: "q1".into(), asked: Box::new(asked) };
        assert_eq!(Signal::read(&serde_json::to_string(&signal).unwrap()), Some(signal));
        let update = Update::Title("t".into()).to_event().unwrap();
        assert_eq!(Signal::read(&update), None);
    }

    #[test]
    fn a_question_handed_again_while_its_copies_are_out_is_not_asked_twice() {
        let dir = tempfile::tempdir().unwrap();
        let across = Across::new(Store::open(&dir.path().join("s.db")).unwrap());
        let session = SessionId::generate();
        let first = across.asking(&session, "q1").expect("asked the first time");
        assert!(across.asking(&session, "q1").is_none(), "its copies are out already");
        across.closed("q1");
        assert!(first.is_cancelled(), "the close withdraws them");
    }

    #[test]
    fn question_rows_have_the_shape_the_store_finds_open_questions_by() {
        // `store::pg::events::open_questions` knows a question's rows by their start and reads
        // the id at `asked.id` and `closed.id`.
        let question = Question { text: "why?".into(), choices: Vec::new(), typed: true };
        let asked =
            Signal::Asked { id: "q1".into(), asked: Box::new(Asked::Question { call_id: "c1".into(), question }) };
        let asked = serde_json::to_string(&asked).unwrap();
        assert!(asked.starts_with(crate::store::pg::events::ASKED), "{asked}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&asked).unwrap()["asked"]["id"], "q1");
        let closed = serde_json::to_string(&Signal::Closed { id: "q1".into() }).unwrap();
        assert!(closed.starts_with(crate::store::pg::events::CLOSED), "{closed}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&closed).unwrap()["closed"]["id"], "q1");
    }
}

//! Commands handed between the replicas of a shared store (`cairn serve --store postgres://…`).
//!
//! A prompt sent to a replica whose session's lease another replica holds (a turn runs there)
//! is handed to that holder through the store's inbox ([`crate::store::Store::send_command`]),
//! as a [`Handed`] in JSON; a `session/cancel` is too. The holder carries it out with today's
//! semantics (a prompt is queued or steered into the running turn, as the session's settings
//! say), and answers it with an [`Outcome`] once everything it caused is committed. The sending
//! replica's actor answers its client's request from that outcome once it has forwarded the
//! session's events up to where the answer was written (`actor/remote.rs`). [`serve`] is the
//! task that carries out what the inbox hands this replica and delivers the answers to its own.

use crate::agent::StopReason;
use crate::history::{Part, Usage};
use crate::ids::SessionId;
use crate::store::pg::inbox::Inbound;

use super::registry::WeakRegistry;
use super::{SessionError, TurnEnd};

/// A command another replica's client sent.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handed {
    /// `session/prompt`: run it as this replica would have (queued behind the running turn,
    /// or steered into it).
    Prompt { parts: Vec<Part> },
    /// `session/cancel`: stop the running turn and the queued prompts.
    Cancel {},
    /// A client's answer to question `question` a turn here asked (`asked`).
    Answer { question: String, answer: super::asked::Answer },
}

/// What came of a handed command.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The prompt's turn ended.
    End {
        stop: StopReason,
        #[serde(default)]
        usage: Usage,
    },
    /// It failed; what the holder's error said.
    Error { message: String },
    /// Done; nothing to tell (a cancel).
    Done {},
}

impl Outcome {
    pub fn of(result: &Result<TurnEnd, SessionError>) -> Self {
        match result {
            Ok(end) => Self::End { stop: end.stop, usage: end.usage },
            Err(err) => Self::Error { message: err.to_string() },
        }
    }

    /// The answer to give the client whose prompt was handed.
    pub fn answer(self, session: &SessionId) -> Result<TurnEnd, SessionError> {
        match self {
            Self::End { stop, usage } => Ok(TurnEnd { stop, usage }),
            Self::Done {} => Ok(StopReason::EndTurn.into()),
            Self::Error { message } => Err(SessionError::Elsewhere { session: session.clone(), message }),
        }
    }

    /// An answer's JSON as stored; one this build cannot read (a replica of another version
    /// wrote it) is an error naming that.
    pub fn read(body: &str) -> Self {
        serde_json::from_str(body).unwrap_or_else(|err| Self::Error {
            message: format!("its answer could not be read ({err}); are all replicas the same cairn version?"),
        })
    }

    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Carries out what the store's inbox hands this replica and delivers the answers to the
/// commands it handed others, until the store stops (or the registry is gone).
pub async fn serve(registry: WeakRegistry, mut inbound: tokio::sync::mpsc::UnboundedReceiver<Inbound>) {
    while let Some(inbound) = inbound.recv().await {
        let Some(registry) = registry.upgrade() else { return };
        match inbound {
            Inbound::Command { id, session, body, returned } => {
                let store = registry.store().clone();
                let handed = serde_json::from_str::<Handed>(&body);
                tracing::debug!(%session, command = id, "a command handed by another replica");
                match handed {
                    Ok(Handed::Prompt { parts }) => {
                        // Queued now, in the order the commands were sent.
                        let prompt = registry.prompt(&session, parts);
                        tokio::spawn(async move {
                            let outcome = Outcome::of(&prompt.await);
                            answer(&store, id, &outcome).await;
                        });
                    }
                    Ok(Handed::Answer { question, answer: given }) => {
                        registry.elsewhere(&session, super::asked::Elsewhere::Answered { id: question, answer: given });
                        tokio::spawn(async move { answer(&store, id, &Outcome::Done {}).await });
                    }
                    Ok(Handed::Cancel {}) => {
                        // Taken back by this replica, which sent it: the turn it was meant to
                        // stop ended before its holder took it, and one running here now is
                        // another, started after the cancel.
                        if !returned {
                            registry.cancel_here(&session);
                        }
                        tokio::spawn(async move { answer(&store, id, &Outcome::Done {}).await });
                    }
                    Err(err) => {
                        let message = format!(
                            "the replica holding the session could not read the command ({err}); are all replicas the same cairn version?"
                        );
                        tokio::spawn(async move { answer(&store, id, &Outcome::Error { message }).await });
                    }
                }
            }
            Inbound::Answer { id, session, seq, body } => registry.answered(&session, id, seq, body),
        }
    }
}

/// Answers command `id`; the store writes it again until it goes in, so this fails only when
/// the store stops (then the sweeper of another replica answers it once this one's heart stops).
async fn answer(store: &crate::store::Store, id: i64, outcome: &Outcome) {
    if let Err(err) = store.answer_command(id, outcome.json()).await {
        tracing::warn!(command = id, %err, "a command another replica handed could not be answered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MessageId;
    use crate::session::Update;

    #[test]
    fn the_sweepers_answer_reads_as_a_cancelled_turn() {
        let session = SessionId::generate();
        let answer = Outcome::read(crate::store::pg::sweeper::CANCELLED).answer(&session);
        assert_eq!(answer, Ok(StopReason::Cancelled.into()));
    }

    #[test]
    fn an_answer_this_build_cannot_read_fails_the_prompt_saying_so() {
        let session = SessionId::generate();
        let Err(SessionError::Elsewhere { message, .. }) = Outcome::read(r#"{"later":1}"#).answer(&session) else {
            panic!("an error")
        };
        assert!(message.contains("same cairn version"), "{message}");
    }

    #[test]
    fn a_handed_prompt_and_its_outcome_read_back_as_they_were() {
        let handed = Handed::Prompt { parts: vec![Part::Text { text: "hi".into() }] };
        let json = serde_json::to_string(&handed).unwrap();
        assert_eq!(serde_json::from_str::<Handed>(&json).unwrap(), handed);
        let end = Outcome::of(&Ok(TurnEnd { stop: StopReason::MaxTokens, usage: Usage::default() }));
        assert_eq!(Outcome::read(&end.json()), end);
    }

    #[test]
    fn what_the_sweeper_logs_reads_as_the_updates_it_shows() {
        // The sweeper writes these without the session layer's types (the store is below it).
        let message = MessageId::generate();
        let notice = serde_json::json!({ "update": "notice", "data": { "message": message, "text": "cut off" } });
        assert_eq!(Update::from_event(&notice.to_string()), Some(Update::Notice { message, text: "cut off".into() }));
        let tool = crate::history::ToolPart::new("c1".into(), "bash".into());
        let update = serde_json::json!({ "update": "tool_call_update", "data": tool });
        assert_eq!(Update::from_event(&update.to_string()), Some(Update::ToolCallUpdate(tool)));
    }
}

//! Whoever views a session, as the host of its turns: a question goes to every viewer that can
//! answer it, newcomers included, and the first answer wins. With a store shared by replicas
//! the question is also published to the other replicas' viewers, whose first valid answer
//! joins the race (`session::asked`); a question another replica published is put to this
//! replica's viewers the same way ([`Viewers::ask_here`]).

use std::sync::{Arc, Weak};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;

use super::Hub;
use crate::ids::SessionId;
use crate::session::asked::{Answer, Asked, Published};
use crate::tools::Host;
use crate::tools::host::{
    FileReader, FileWriter, HostError, PermissionAnswer, PermissionOption, Permissions, Question, Questions, Reply,
    Terminals,
};

/// Reads an answer from another replica: the turn's answer for a valid one (an option the
/// question offered, or a dismissal), an error answer for anything else (a client's error, or
/// an option not offered), which the turn takes as a rejection, as it does a local client's.
type Valid<T> = Box<dyn Fn(Answer) -> Result<T, HostError> + Send + Sync>;

/// An answer from another replica that is not one the question offered: an error answer.
fn not_offered(answer: Answer) -> HostError {
    match answer {
        Answer::Failed { message } => HostError(message),
        Answer::Permission(_) | Answer::Question(_) => {
            HostError("a client of another replica answered with something the question did not offer".to_owned())
        }
    }
}

/// Whoever views a session, as the host of its turns.
pub(super) struct Viewers {
    pub(super) hub: Weak<Hub>,
    pub(super) session: SessionId,
    /// The viewer whose prompt the turn answers, and its host, when it was viewing at the start.
    pub(super) driver: Option<(u64, Arc<dyn Host>)>,
}

impl Viewers {
    /// The driver's host while it still views the session: once it has gone, the tools act
    /// where the server runs and the turn goes on.
    fn driving(&self) -> Option<&dyn Host> {
        let (viewer, host) = self.driver.as_ref()?;
        let hub = self.hub.upgrade()?;
        hub.is_viewing(&self.session, *viewer).then_some(host.as_ref())
    }
}

impl Viewers {
    /// Asks every viewer that can answer (with `ask`), newcomers included, until one answers
    /// (an error from a client that is still there is its answer); the other copies are dropped
    /// (withdrawn). A viewer that went away is not asked again. With `elsewhere`, the question
    /// is also published to other replicas, whose first answer joins the race as a local one
    /// does (an invalid one, or an error, is an error answer).
    async fn first_answer<T: Send + 'static>(
        &self,
        ask: impl Fn(Arc<dyn Host>) -> Option<BoxFuture<'static, Result<T, HostError>>>,
        elsewhere: Option<(Asked, Valid<T>)>,
    ) -> Result<T, HostError> {
        let Some(hub) = self.hub.upgrade() else { return Err(HostError::unavailable()) };
        let mut published: Option<(Published, Valid<T>)> = match (elsewhere, hub.across.get()) {
            (Some((asked, valid)), Some(across)) => Some((across.publish(&self.session, asked), valid)),
            _ => None,
        };
        let mut attached = hub.attached.subscribe();
        let mut asked: Vec<u64> = Vec::new();
        let mut pending = FuturesUnordered::new();
        loop {
            attached.mark_unchanged();
            for (viewer, host) in hub.hosts(&self.session) {
                if asked.contains(&viewer) {
                    continue;
                }
                asked.push(viewer);
                tracing::debug!(session = %self.session, viewer, "asking a viewer");
                if let Some(question) = ask(host) {
                    pending.push(question);
                }
            }
            tokio::select! {
                Some(answer) = pending.next() => match answer {
                    Ok(answer) => return Ok(answer),
                    // Its connection closed: those who remain or come may answer.
                    Err(err) if err.is_gone() => tracing::debug!(session = %self.session, "a viewer left unanswered"),
                    // A client that answers with an error has answered (as on stdio).
                    Err(err) => return Err(err),
                },
                Some(answer) = from_elsewhere(&mut published) => {
                    // That replica withdrew its copies once its client answered: whatever the
                    // answer, it is the first, as a local client's would be.
                    let Some((_, valid)) = published.as_ref() else { continue };
                    tracing::debug!(session = %self.session, "answered on another replica");
                    return valid(answer);
                }
                changed = attached.changed() => {
                    tracing::debug!(session = %self.session, "a viewer attached");
                    if changed.is_err() {
                        return Err(HostError::unavailable());
                    }
                }
            }
        }
    }

    /// Puts a question another replica published to this replica's viewers; their answer.
    pub(super) async fn ask_here(&self, asked: Box<Asked>) -> Result<Answer, HostError> {
        match *asked {
            Asked::Permission { call, options } => {
                self.permission(&call, &options, false).await.map(Answer::Permission)
            }
            Asked::Question { call_id, question } => {
                self.question(&call_id, &question, false).await.map(Answer::Question)
            }
        }
    }

    async fn permission(
        &self,
        call: &crate::history::ToolPart,
        options: &[PermissionOption],
        publish: bool,
    ) -> Result<PermissionAnswer, HostError> {
        let offered: Vec<String> = options.iter().map(|option| option.id.to_string()).collect();
        let valid: Valid<PermissionAnswer> = Box::new(move |answer| match answer {
            Answer::Permission(PermissionAnswer::Selected(id)) if offered.contains(&id) => {
                Ok(PermissionAnswer::Selected(id))
            }
            // Dismissed (a rejection), as a client of this replica may answer.
            Answer::Permission(PermissionAnswer::Cancelled) => Ok(PermissionAnswer::Cancelled),
            other => Err(not_offered(other)),
        });
        let elsewhere = publish.then(|| (Asked::Permission { call: call.clone(), options: options.to_vec() }, valid));
        let (call, options) = (Arc::new(call.clone()), Arc::new(options.to_vec()));
        self.first_answer(
            move |host| {
                host.permissions()?;
                let (call, options) = (Arc::clone(&call), Arc::clone(&options));
                Some(Box::pin(async move {
                    match host.permissions() {
                        Some(permissions) => permissions.request_permission(&call, &options).await,
                        None => Err(HostError::unavailable()),
                    }
                }))
            },
            elsewhere,
        )
        .await
    }

    async fn question(&self, call_id: &str, question: &Question, publish: bool) -> Result<Reply, HostError> {
        let shape = question.clone();
        let valid: Valid<Reply> = Box::new(move |answer| match answer {
            Answer::Question(Reply::Answered { choice, text }) => {
                let chosen = choice.as_ref().is_none_or(|choice| shape.choices.iter().any(|c| c.label == *choice));
                let typed = text.is_none() || shape.typed;
                let answer = Answer::Question(Reply::Answered { choice: choice.clone(), text: text.clone() });
                match chosen && typed && (choice.is_some() || text.is_some()) {
                    true => Ok(Reply::Answered { choice, text }),
                    false => Err(not_offered(answer)),
                }
            }
            Answer::Question(Reply::Declined) => Ok(Reply::Declined),
            other => Err(not_offered(other)),
        });
        let elsewhere =
            publish.then(|| (Asked::Question { call_id: call_id.to_owned(), question: question.clone() }, valid));
        let (call_id, question) = (Arc::new(call_id.to_owned()), Arc::new(question.clone()));
        self.first_answer(
            move |host| {
                host.questions()?;
                let (call_id, question) = (Arc::clone(&call_id), Arc::clone(&question));
                Some(Box::pin(async move {
                    match host.questions() {
                        Some(questions) => questions.ask(&call_id, &question).await,
                        None => Err(HostError::unavailable()),
                    }
                }))
            },
            elsewhere,
        )
        .await
    }
}

/// The next answer another replica gave; never, when the question was not published.
async fn from_elsewhere<T>(published: &mut Option<(Published, Valid<T>)>) -> Option<Answer> {
    match published {
        Some((published, _)) => published.received.recv().await,
        None => std::future::pending().await,
    }
}

impl Host for Viewers {
    fn reader(&self) -> Option<&dyn FileReader> {
        self.driving()?.reader()
    }

    fn writer(&self) -> Option<&dyn FileWriter> {
        self.driving()?.writer()
    }

    fn terminals(&self) -> Option<&dyn Terminals> {
        self.driving()?.terminals()
    }

    fn permissions(&self) -> Option<&dyn Permissions> {
        Some(self)
    }

    fn questions(&self) -> Option<&dyn Questions> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl Permissions for Viewers {
    async fn request_permission(
        &self,
        call: &crate::history::ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        self.permission(call, options, true).await
    }
}

#[async_trait::async_trait]
impl Questions for Viewers {
    async fn ask(&self, call_id: &str, question: &Question) -> Result<Reply, HostError> {
        self.question(call_id, question, true).await
    }
}

//! A turn's claim of its session: the lease taken with the turn's first write (its prompt and
//! a first prompt's title), tried again on the history as stored when another process's turn
//! came after the one this process read, refused while another process's lease runs, and not
//! sent any more once the turn's user withdrew the prompt ([`StoreRecorder::withdrawn_by`]).
//! The claim may be sent ahead, while the turn is set up ([`StoreRecorder::claim_early`]).

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Gate, StoreRecorder, failed};
use crate::agent::RecordError;
use crate::agent::Recorder as _;
use crate::history::{Message, finalize_orphans};
use crate::ids::MessageId;
use crate::session::Update;
use crate::store::{LastTurn, StoreError, Write};

/// How many times a claim reads a history another process changed before it gives up (each
/// time another process must have run a whole turn in between).
const CLAIM_TRIES: usize = 3;

/// A claim sent ahead: its prompt, and where the store's answer comes.
pub(super) struct Early {
    prompt: Message,
    answer: oneshot::Receiver<Result<(), StoreError>>,
}

impl StoreRecorder {
    /// Takes the session's lease with the turn's first write, `prompt` (and the title), and waits
    /// until it is committed; then appends the prompt to `history` and sends what was held. If
    /// another process's turn came after `history` was read, `history` is replaced by the stored
    /// one first (the calls a dead holder left unfinished marked failed) and the prompt gets a
    /// fresh id, so it sorts after that turn (the held notices too, before it); answers whether
    /// that happened. Refused while another process holds the lease: nothing is written, what was
    /// held is dropped, and so is whatever the recorder is given afterwards.
    pub async fn claim(
        &mut self,
        history: &mut Vec<Message>,
        mut prompt: Option<Message>,
    ) -> Result<bool, RecordError> {
        let mut last = LastTurn::Ours;
        let mut orphans = Vec::new();
        for _ in 0..CLAIM_TRIES {
            let result = match self.early.take() {
                // The prompt sent early is the turn's prompt.
                Some(early) => {
                    prompt = Some(early.prompt);
                    early.answer
                }
                None => {
                    let (send, answer) = self.claim_write(last.clone(), prompt.clone());
                    send();
                    answer
                }
            };
            let answer = match result.await {
                Ok(answer) => answer,
                // The claim was not sent: its turn was cancelled first.
                Err(_) if self.is_withdrawn() => break,
                Err(_) => Err(StoreError::Closed),
            };
            match answer {
                Ok(()) => {
                    tracing::trace!(target: "cairn::timing", session = %self.session, "lease claim committed");
                    let reread = last != LastTurn::Ours;
                    history.extend(prompt);
                    for (message_id, index, part) in orphans {
                        let session_id = self.session.clone();
                        self.write(Write::PutPart { session_id, message_id, index, part }, Vec::new());
                    }
                    if let Gate::Holding(held) = std::mem::replace(&mut self.gate, Gate::Open) {
                        for (write, updates) in held {
                            self.write(write, updates);
                        }
                    }
                    return self.failure().map_or(Ok(reread), Err);
                }
                Err(StoreError::LeaseMoved { .. }) => {
                    let (stored, seen) = self
                        .store
                        .messages_and_last_turn(&self.session)
                        .await
                        .map_err(|err| RecordError::Failed(err.to_string()))?;
                    tracing::info!(session = %self.session, "another process wrote to the session; its history is read again");
                    *history = stored;
                    orphans = finalize_orphans(history);
                    self.renumber_held();
                    if let Some(prompt) = &mut prompt {
                        prompt.id = MessageId::generate();
                    }
                    last = LastTurn::By(seen);
                }
                Err(StoreError::Leased(holder)) => {
                    self.gate = Gate::Shut;
                    return Err(RecordError::Refused(holder));
                }
                Err(err @ StoreError::CommandAnswered(_)) => {
                    tracing::warn!(session = %self.session, "{err}");
                    self.gate = Gate::Shut;
                    return Err(failed(&err));
                }
                Err(err) => {
                    self.gate = Gate::Shut;
                    return Err(failed(&err));
                }
            }
        }
        self.gate = Gate::Shut;
        if self.is_withdrawn() {
            return Err(RecordError::Withdrawn);
        }
        Err(RecordError::Failed(StoreError::LeaseMoved { session: self.session.clone(), last: None }.to_string()))
    }

    fn is_withdrawn(&self) -> bool {
        self.withdrawn.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Sends the claim of a turn for `prompt` (see [`StoreRecorder::claim`]) as soon as `after`
    /// is done, instead of when the turn asks for it, so that it commits while the turn is set
    /// up; the turn's claim then waits for its answer. `after` is what the claim must not come
    /// before (the session's log forwarded to this replica's clients). Nothing is sent once the
    /// recorder is gone.
    pub fn claim_early(&mut self, prompt: Message, after: Option<impl Future<Output = ()> + Send + 'static>) {
        let (send, answer) = self.claim_write(LastTurn::Ours, Some(prompt.clone()));
        match after {
            Some(after) => {
                tokio::spawn(async move {
                    after.await;
                    send();
                });
            }
            None => send(),
        }
        self.early = Some(Early { prompt, answer });
    }

    /// A claim's write, ready to queue (`send`), and where its answer comes: once committed,
    /// the title is shown, numbered as logged. The write is not queued if the answer is no
    /// longer awaited, or the turn was withdrawn (its answer then never comes).
    fn claim_write(
        &self,
        last: LastTurn,
        prompt: Option<Message>,
    ) -> (impl FnOnce() + Send + 'static, oneshot::Receiver<Result<(), StoreError>>) {
        let (sink, session, title) = (Arc::clone(&self.sink), self.session.clone(), self.title.clone());
        // Its client sent the prompt; a client following from another replica is shown it.
        let mut shown: Vec<Update> = prompt
            .iter()
            .flat_map(|prompt| {
                prompt.parts.iter().map(|part| Update::UserChunk { message: prompt.id.clone(), part: part.clone() })
            })
            .collect();
        shown.extend(title.clone().map(Update::Title));
        let (shown, logged) = self.logged(&shown);
        // The title is the last update logged, when every one was.
        let title_at = logged.iter().all(|logged| *logged).then(|| shown.len().saturating_sub(1));
        let write =
            Write::TakeLease { session_id: session.clone(), last, prompt, title: title.clone(), command: self.command };
        let (done, answer) = oneshot::channel();
        let (store, withdrawn) = (self.store.clone(), self.withdrawn.clone());
        let send = move || {
            if done.is_closed() {
                tracing::debug!(%session, "a claim no turn waits for any more is not sent");
                return;
            }
            if withdrawn.as_ref().is_some_and(CancellationToken::is_cancelled) {
                tracing::debug!(%session, "the claim of a turn cancelled before it was sent is not sent");
                return;
            }
            tracing::trace!(target: "cairn::timing", %session, "lease claim submitted");
            let then = move |result: Result<Option<i64>, StoreError>| {
                if let (Ok(first), Some(title)) = (&result, title) {
                    let at = title_at.and_then(|at| i64::try_from(at).ok());
                    match first.zip(at) {
                        Some((first, at)) => sink.send_logged(&session, first + at, Update::Title(title)),
                        None => sink.send(&session, Update::Title(title)),
                    }
                }
                let _ = done.send(result.map(|_| ()));
            };
            store.submit_logged(write, shown, Box::new(then));
        };
        (send, answer)
    }

    /// Gives the held notices fresh ids, in the order they were recorded: ids made before the
    /// history was read again would sort inside the turn another process ran meanwhile.
    fn renumber_held(&mut self) {
        let Gate::Holding(held) = &mut self.gate else { return };
        for (write, updates) in held {
            let Write::InsertMessage { message, .. } = write else { continue };
            let fresh = MessageId::generate();
            for update in updates.iter_mut() {
                if let Update::Notice { message: shown, .. } = update
                    && *shown == message.id
                {
                    *shown = fresh.clone();
                }
            }
            message.id = fresh;
        }
    }
}

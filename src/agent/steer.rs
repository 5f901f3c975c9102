//! Steering: prompts the user sends while a turn runs, joining it at a step boundary.
//!
//! The session hands each such prompt to the running turn ([`Steered`], through the channel of
//! its [`Steering`]). The turn takes them before it prepares a request: each is recorded as a
//! user message where it joins (`AgentEvent::Steered`, committed before the model is called,
//! like the turn's prompt) and is then part of the history, so the model sees it once, in place.
//! A turn whose model answered without tool calls does not end while steered text waits: it
//! takes the text and samples again, unless a stop condition holds (then the turn ends as the
//! model ended it, and the text waits for the session). Each prompt is told when it joins; one
//! whose session no longer waits for it (withdrawn, or the turn was cancelled) is left out, so
//! a prompt is either in this turn or answered by the session, never both.

use std::collections::VecDeque;

use tokio::sync::{mpsc, oneshot};

use super::Turn;
use super::events::{AgentEvent, RecordError};
use crate::history::{Message, MessageMeta, Part, Role};

/// A prompt sent while the turn runs.
#[derive(Debug)]
pub struct Steered {
    pub parts: Vec<Part>,
    /// Told when the prompt joins the turn. A sender whose receiver is closed is not taken.
    pub joined: oneshot::Sender<()>,
}

/// Where a turn finds the prompts steered into it.
#[derive(Debug)]
pub struct Steering {
    rx: mpsc::UnboundedReceiver<Steered>,
    /// Taken from the channel, not joined yet.
    waiting: VecDeque<Steered>,
}

impl Steering {
    pub fn new(rx: mpsc::UnboundedReceiver<Steered>) -> Self {
        Self { rx, waiting: VecDeque::new() }
    }

    /// Whether a prompt waits to join (one nobody waits for any more does not count).
    pub(super) fn waiting(&mut self) -> bool {
        while let Ok(steered) = self.rx.try_recv() {
            self.waiting.push_back(steered);
        }
        self.waiting.retain(|steered| !steered.joined.is_closed());
        !self.waiting.is_empty()
    }
}

/// Records every prompt waiting to join as a user message, in the order they were sent, and
/// waits until they are committed; answers how many joined. Nothing happens when none waits.
pub(super) async fn join(turn: &mut Turn<'_>) -> Result<usize, RecordError> {
    let Some(steering) = turn.run.steering.as_mut() else { return Ok(0) };
    if !steering.waiting() {
        return Ok(0);
    }
    let (mut joined, mut unseen) = (0, 0);
    while let Some(steered) = steering.waiting.pop_front() {
        // The session stopped waiting for it meanwhile: it answers the prompt itself.
        if steered.joined.send(()).is_err() {
            continue;
        }
        let meta = MessageMeta { model: Some(turn.model_ref.clone()), ..MessageMeta::default() };
        let message = Message::new(Role::User, steered.parts, meta);
        turn.recorder.record(AgentEvent::Steered(message.clone()));
        unseen += super::images_in(&message);
        turn.history.push(message);
        joined += 1;
    }
    if joined == 0 {
        return Ok(0);
    }
    tracing::debug!(joined, "steered prompts joined the turn");
    turn.note_unseen(unseen);
    turn.recorder.flush().await.map(|()| joined)
}

/// Whether the turn has steered text waiting to join (a turn about to end goes on for it).
pub(super) fn pending(turn: &mut Turn<'_>) -> bool {
    turn.run.steering.as_mut().is_some_and(Steering::waiting)
}

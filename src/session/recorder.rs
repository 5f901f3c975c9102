//! The bridge from a turn's events to the store and then the editor.
//!
//! Each event becomes one queued store write whose after-commit callback emits the matching
//! [`Update`]; a failed write emits nothing and is kept as the turn's failure. This is how "no
//! update before its row is committed" holds without a round trip per chunk: the writer thread
//! commits in batches and runs the callbacks in order.

use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;

use super::{Update, UpdateSink};
use crate::agent::{AgentEvent, RecordError, Recorder, StreamKind};
use crate::history::{Message, MessageMeta, Part, Role, ToolState};
use crate::ids::SessionId;
use crate::store::{AfterCommit, Store, StoreError, Write};

pub struct StoreRecorder {
    session: SessionId,
    store: Store,
    sink: Arc<dyn UpdateSink>,
    failure: Arc<OnceLock<RecordError>>,
}

impl StoreRecorder {
    pub fn new(session: SessionId, store: Store, sink: Arc<dyn UpdateSink>) -> Self {
        Self { session, store, sink, failure: Arc::new(OnceLock::new()) }
    }

    /// A callback that shows `update` once committed, or remembers the failure.
    fn then_show(&self, update: Option<Update>) -> AfterCommit {
        let failure = Arc::clone(&self.failure);
        let sink = Arc::clone(&self.sink);
        let session = self.session.clone();
        Box::new(move |result: Result<(), StoreError>| match result {
            Ok(()) => {
                if let Some(update) = update {
                    sink.send(&session, update);
                }
            }
            Err(err) => {
                tracing::error!(%session, %err, "a write failed; its update is withheld");
                let _ = failure.set(RecordError(err.to_string()));
            }
        })
    }

    fn write(&self, write: Write, update: Option<Update>) {
        self.store.submit(write, Some(self.then_show(update)));
    }
}

impl Recorder for StoreRecorder {
    fn record(&mut self, event: AgentEvent) {
        let session_id = self.session.clone();
        match event {
            AgentEvent::UserMessage(message) => self.write(Write::InsertMessage { session_id, message }, None),
            AgentEvent::AssistantStarted { message, model } => {
                let meta = MessageMeta { model: Some(model), ..MessageMeta::default() };
                let message = Message { id: message, role: Role::Assistant, parts: Vec::new(), meta };
                self.write(Write::InsertMessage { session_id, message }, None);
            }
            AgentEvent::PartStarted { message, index, kind } => {
                self.write(Write::OpenPart { session_id, message_id: message, index, part: kind.empty_part() }, None);
            }
            AgentEvent::Delta { message, index, kind, text } => {
                let update = match kind {
                    StreamKind::Text => Update::AgentText { message: message.clone(), text: text.clone() },
                    StreamKind::Reasoning => Update::AgentThought { message: message.clone(), text: text.clone() },
                };
                self.write(Write::AppendPart { message_id: message, index, delta: text }, Some(update));
            }
            AgentEvent::PartFinished { message, index } => {
                self.write(Write::ClosePart { message_id: message, index }, None);
            }
            AgentEvent::PartUpdated { message, index, part } => {
                let update = match &part {
                    Part::Tool(tool) if tool.state == ToolState::InputAvailable => Some(Update::ToolCall(tool.clone())),
                    Part::Tool(tool) => Some(Update::ToolCallUpdate(tool.clone())),
                    Part::Text { .. }
                    | Part::Reasoning { .. }
                    | Part::Image { .. }
                    | Part::ResourceLink { .. }
                    | Part::Resource { .. }
                    | Part::BlobResource { .. } => None,
                };
                self.write(Write::PutPart { session_id, message_id: message, index, part }, update);
            }
            AgentEvent::AssistantFinished { message, meta } => {
                self.write(Write::SetMessageMeta { message_id: message, meta }, None);
            }
            AgentEvent::Retrying { attempt, delay, reason } => {
                self.sink.send(&self.session, Update::Retrying { attempt, delay, reason });
            }
        }
    }

    fn flush(&mut self) -> BoxFuture<'static, Result<(), RecordError>> {
        let store = self.store.clone();
        let failure = Arc::clone(&self.failure);
        Box::pin(async move {
            store.flush().await.map_err(|err| RecordError(err.to_string()))?;
            failure.get().cloned().map_or(Ok(()), Err)
        })
    }

    fn failure(&self) -> Option<RecordError> {
        self.failure.get().cloned()
    }
}

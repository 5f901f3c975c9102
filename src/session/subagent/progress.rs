//! A sub-agent's progress as its parent's call shows it.
//!
//! The child's recorder commits its rows like any session's and hands each [`Update`] to a
//! [`ChildSink`] instead of the editor; the updates travel over a channel to the task's run,
//! which folds them into a [`Progress`] (the child's tool calls with their state, and its latest
//! text) and shows that, at most every [`EVERY`], as the content of the parent's call. Its latest
//! notice is kept too: when a limit stopped the child, the one naming that limit.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::history::{CallState, ToolContent};
use crate::ids::{MessageId, SessionId};
use crate::session::{Update, UpdateSink};
use crate::tools::Host;

/// The least time between two progress updates of one sub-agent.
pub const EVERY: Duration = Duration::from_millis(100);
/// The child's calls a card lists (the latest).
const CALLS_SHOWN: usize = 12;
/// How much of the child's latest text a card shows (its end).
const TEXT_SHOWN: usize = 600;

/// Where a child's updates go once committed: to its parent's call and, under the child's own
/// id, through the session's sink (`shown`: that sink and the session it routes with), for
/// clients that take sub-agents.
pub struct ChildSink {
    pub updates: mpsc::UnboundedSender<Update>,
    pub host: Arc<dyn Host>,
    pub child: SessionId,
    pub shown: Option<(Arc<dyn UpdateSink>, SessionId)>,
}

impl UpdateSink for ChildSink {
    fn send(&self, _session: &SessionId, update: Update) {
        if let Some((sink, session)) = &self.shown {
            let elsewhere = match update {
                // Its own sub-agents' updates already name their session.
                Update::Elsewhere { .. } => update.clone(),
                _ => Update::Elsewhere { session: self.child.clone(), update: Box::new(update.clone()) },
            };
            sink.send(session, elsewhere);
        }
        let _ = self.updates.send(update);
    }

    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::clone(&self.host)
    }
}

/// What a sub-agent has done so far.
#[derive(Debug, Default)]
pub struct Progress {
    /// Its session, linked from the card.
    child: Option<String>,
    /// Call id, title and state of each of its tool calls, in order.
    calls: Vec<(String, String, CallState)>,
    /// The message its latest text belongs to, and that text.
    text: Option<(MessageId, String)>,
    /// Its latest notice: when a limit stopped it, the one naming that limit.
    notice: Option<String>,
}

impl Progress {
    /// The progress of the sub-agent whose session is `child`.
    pub fn of(child: &SessionId) -> Self {
        Self { child: Some(child.as_str().to_owned()), ..Self::default() }
    }

    /// Takes in one update; `true` if what the card shows changed.
    pub fn fold(&mut self, update: Update) -> bool {
        match update {
            Update::ToolCall(part) | Update::ToolCallUpdate(part) => {
                match self.calls.iter_mut().find(|(id, _, _)| *id == part.call_id) {
                    Some(call) => {
                        call.1 = part.title;
                        call.2 = part.state;
                    }
                    None => self.calls.push((part.call_id, part.title, part.state)),
                }
                true
            }
            Update::AgentText { message, text } => {
                match &mut self.text {
                    Some((id, all)) if *id == message => all.push_str(&text),
                    _ => self.text = Some((message, text)),
                }
                true
            }
            Update::Notice { text, .. } => {
                self.notice = Some(text);
                false
            }
            Update::UserChunk { .. }
            | Update::AgentThought { .. }
            | Update::Plan(_)
            | Update::PlanDocument(_)
            | Update::Mode(_)
            | Update::Title(_)
            | Update::EphemeralText { .. }
            | Update::EphemeralNotice { .. }
            | Update::Usage { .. }
            | Update::Options(_)
            | Update::Commands(_)
            | Update::Compaction { .. }
            | Update::CompactionSummary { .. }
            | Update::Subagent(_)
            | Update::SessionMessage(_)
            | Update::Elsewhere { .. } => false,
        }
    }

    /// The latest notice the sub-agent recorded (a turn a limit stopped ends with one naming it).
    pub fn notice(&self) -> Option<&str> {
        self.notice.as_deref()
    }

    /// The card's content: the latest calls with a mark for their state, then the latest text.
    pub fn content(&self) -> Vec<ToolContent> {
        let mut lines = Vec::new();
        let skipped = self.calls.len().saturating_sub(CALLS_SHOWN);
        if skipped > 0 {
            lines.push(format!("… {skipped} earlier calls"));
        }
        for (_, title, state) in self.calls.iter().skip(skipped) {
            let mark = match state {
                CallState::Succeeded => "✓",
                CallState::Failed => "✗",
                CallState::Cancelled => "–",
                CallState::New | CallState::Suspended | CallState::Resuming | CallState::Running => "…",
            };
            lines.push(format!("{mark} {title}"));
        }
        if let Some((_, text)) = self.text.as_ref().filter(|(_, text)| !text.trim().is_empty()) {
            if !lines.is_empty() {
                lines.push(String::new());
            }
            lines.push(tail(text.trim(), TEXT_SHOWN));
        }
        if lines.is_empty() {
            lines.push("Starting…".to_owned());
        }
        let link = self.child.iter().map(|id| ToolContent::Session { session_id: id.clone() });
        link.chain(std::iter::once(ToolContent::Text { text: lines.join("\n") })).collect()
    }
}

/// The last `keep` characters of `text`, marked when cut.
fn tail(text: &str, keep: usize) -> String {
    let count = text.chars().count();
    if count <= keep {
        return text.to_owned();
    }
    let rest: String = text.chars().skip(count - keep).collect();
    format!("…{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ToolPart;

    #[test]
    fn calls_keep_their_place_and_text_follows_the_latest_message() {
        let mut progress = Progress::default();
        let mut read = ToolPart::new("c1".into(), "read".into());
        read.title = "Read a.txt".into();
        assert!(progress.fold(Update::ToolCall(read.clone())));
        read.state = CallState::Succeeded;
        progress.fold(Update::ToolCallUpdate(read));
        let first = MessageId::generate();
        progress.fold(Update::AgentText { message: first.clone(), text: "Looking".into() });
        progress.fold(Update::AgentText { message: first, text: " around".into() });
        assert!(!progress.fold(Update::Title("x".into())));
        assert!(!progress.fold(Update::Notice { message: MessageId::generate(), text: "Stopped: a limit".into() }));
        assert_eq!(progress.notice(), Some("Stopped: a limit"));
        let ToolContent::Text { text } = &progress.content()[0] else { panic!() };
        assert_eq!(text, "✓ Read a.txt\n\nLooking around");
        let linked = Progress::of(&SessionId::from_string("ses_child")).content();
        assert_eq!(linked[0], ToolContent::Session { session_id: "ses_child".into() });
        progress.fold(Update::AgentText { message: MessageId::generate(), text: "Done".into() });
        let ToolContent::Text { text } = &progress.content()[0] else { panic!() };
        assert!(text.ends_with("\n\nDone"), "{text}");
    }
}

//! A session read from the store as its actor starts (the calls a crash left open finished
//! first), and what an actor that is gone, or never started, answers.

use tokio::sync::mpsc;

use super::Command;
use crate::agent::StopReason;
use crate::history::{Message, Part};
use crate::ids::SessionId;
use crate::session::SessionError;
use crate::store::{SessionRow, Store, Write};

/// Reads a session from the store, finishing the tool calls a crash left open. The writer does
/// that under its write transaction, and only while no live process holds the session's lease:
/// calls another process is running, or finished since they were read here, are left as they
/// are. The history is then read again, as the writer left it. With a store shared by
/// replicas, the `seq` of the session's event log the history reaches comes with it (0
/// otherwise): following the log from there gives what came after it.
pub async fn restore(store: &Store, id: &SessionId) -> Result<(SessionRow, Vec<Message>, i64), SessionError> {
    let (history, logged) = store.messages_at_seq(id).await?;
    let unfinished = history
        .iter()
        .flat_map(|message| &message.parts)
        .any(|part| matches!(part, Part::Tool(tool) if !tool.state.is_terminal()));
    let (history, logged) = match unfinished {
        true => {
            store.commit(Write::FinalizeOrphans { session_id: id.clone() }).await?;
            store.messages_at_seq(id).await?
        }
        false => (history, logged),
    };
    // The settings are read after the history: one another replica changed before the history's
    // `seq` is in the row, and one changed since is both there and in the log after that `seq`
    // (followed, it changes nothing). Read before, a change in between would be in neither.
    let row = store.session(id).await?.ok_or_else(|| SessionError::NotFound(id.clone()))?;
    Ok((row, history, logged))
}

/// Answers whatever was sent to an actor that is gone.
pub(super) fn refuse_all(rx: &mut mpsc::UnboundedReceiver<Command>, err: &SessionError) {
    rx.close();
    while let Ok(command) = rx.try_recv() {
        match command {
            Command::Prompt { reply, .. } => {
                let _ = reply.send(match err {
                    SessionError::Closed(_) => Ok(StopReason::Cancelled.into()),
                    other => Err(other.clone()),
                });
            }
            Command::Fork { reply, .. } => {
                let _ = reply.send(Err(err.clone()));
            }
            Command::Set { reply, .. }
            | Command::SetForTurn { reply, .. }
            | Command::Attach { reply, .. }
            | Command::SetTitle { reply, .. } => {
                let _ = reply.send(Err(err.clone()));
            }
            Command::Steer { reply, .. } => {
                let _ = reply.send(Err(err.clone()));
            }
            Command::Follow { reply } => {
                let _ = reply.send(Err(err.clone()));
            }
            Command::Close { reply } => {
                let _ = reply.send(());
            }
            Command::Cancel | Command::CancelPrompt { .. } | Command::Answered { .. } => {}
        }
    }
}

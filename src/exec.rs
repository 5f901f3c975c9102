//! Headless mode: `cairn exec` runs one turn through the same session machinery and prints the
//! answer as it streams; `cairn sessions list` prints the stored sessions.
//!
//! Besides `acp::rpc` this is the only code that writes stdout, and only in these modes. Answer
//! text goes to stdout; reasoning, tool calls, retries and the session id go to stderr, so the
//! output can be piped.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::agent::StopReason;
use crate::config::Config;
use crate::history::PlanStatus;
use crate::ids::{SessionId, iso8601};
use crate::permissions::Mode;
use crate::session::{Attach, Registry, SessionError, Update, UpdateSink};
use crate::store::Store;
use crate::tools::{Host, NoEditor};

/// Prints a turn as it streams.
struct Printer {
    printed: AtomicBool,
}

impl UpdateSink for Printer {
    fn send(&self, _session: &SessionId, update: Update) {
        match update {
            Update::AgentText { text, .. } | Update::EphemeralText { text } => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                self.printed.store(!text.ends_with('\n'), Ordering::Relaxed);
            }
            Update::AgentThought { text, .. } => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            Update::ToolCall(tool) => {
                let _ = writeln!(std::io::stderr().lock(), "\n[tool call: {} {}]", tool.name, tool.input);
            }
            Update::ToolCallUpdate(tool) => {
                let _ = writeln!(std::io::stderr().lock(), "[tool {}: {}]", tool.name, tool.output.unwrap_or_default());
            }
            Update::Notice { text, .. } | Update::EphemeralNotice { text, .. } => {
                let _ = writeln!(std::io::stderr().lock(), "[{text}]");
            }
            Update::Usage { .. } | Update::Options(_) | Update::CompactionSummary { .. } => {}
            Update::Compaction {
                note,
                state: crate::session::CompactionState::Completed | crate::session::CompactionState::Failed,
                ..
            } => {
                let _ = writeln!(std::io::stderr().lock(), "[{note}]");
            }
            Update::Compaction { .. } => {}
            Update::Plan(entries) => {
                let mut out = std::io::stderr().lock();
                let _ = writeln!(out, "[plan]");
                for entry in entries {
                    let mark = match entry.status {
                        PlanStatus::Completed => "x",
                        PlanStatus::InProgress => ">",
                        PlanStatus::Pending => " ",
                    };
                    let _ = writeln!(out, "  [{mark}] {}", entry.content);
                }
            }
            Update::UserChunk { .. } | Update::Title(_) => {}
        }
    }

    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::new(NoEditor)
    }
}

/// Why `cairn exec` failed.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("the turn was cancelled")]
    Cancelled,
    #[error("the prompt is empty; give the task as an argument, e.g. cairn exec \"fix the failing test\"")]
    EmptyPrompt,
    #[error("session {0} not found; `cairn sessions list` shows the stored sessions")]
    UnknownSession(String),
}

/// What `cairn exec` was asked to do.
pub struct ExecRequest {
    pub prompt: String,
    /// Continue this session instead of starting one in `cwd`.
    pub session: Option<String>,
    pub cwd: PathBuf,
    pub mode: Option<Mode>,
    /// Switch the session to this model (`provider/model`, normalized); a new session starts
    /// with it.
    pub model: Option<String>,
}

/// Runs the request's prompt in a new session, or continues its session. Returns the session id.
pub async fn exec(store: Store, config: Arc<Config>, request: ExecRequest) -> Result<SessionId, ExecError> {
    let printer = Arc::new(Printer { printed: AtomicBool::new(false) });
    let mut config = config;
    if let Some(model) = &request.model {
        // The default of this run: a new session starts with it, and it is on the menu a
        // continued session's switch is checked against.
        Arc::make_mut(&mut config).model.clone_from(model);
    }
    let registry = Registry::new(store, config, printer.clone());
    let result = run(&registry, request).await;
    registry.shutdown().await;
    if printer.printed.load(Ordering::Relaxed) {
        let _ = std::io::stdout().lock().write_all(b"\n");
    }
    result
}

async fn run(registry: &Registry, request: ExecRequest) -> Result<SessionId, ExecError> {
    let ExecRequest { prompt, session, cwd, mode, model } = request;
    if prompt.trim().is_empty() {
        return Err(ExecError::EmptyPrompt);
    }
    let (id, created) = match session {
        Some(id) => match registry.resume(&SessionId::from_string(id.clone()), Attach::alone()).await {
            Ok(view) => (view.id, false),
            Err(SessionError::NotFound(_)) => return Err(ExecError::UnknownSession(id)),
            Err(err) => return Err(err.into()),
        },
        None => (registry.create(&cwd, Attach::alone()).await?.id, true),
    };
    if let (Some(model), false) = (model, created) {
        registry.set_model(&id, model).await?;
    }
    if let Some(mode) = mode {
        registry.set_mode(&id, mode).await?;
    }
    if !created {
        let _ = writeln!(std::io::stderr().lock(), "session: {id}");
    }
    let turn = registry.prompt(&id, vec![crate::history::Part::Text { text: prompt }]);
    tokio::pin!(turn);
    let stop = tokio::select! {
        stop = &mut turn => stop,
        _ = tokio::signal::ctrl_c() => {
            registry.cancel(&id);
            turn.await
        }
    };
    let stop = match stop {
        Ok(stop) => stop,
        // A new session whose only turn failed holds nothing worth keeping.
        Err(err) if created => {
            if let Err(removed) = registry.delete(&id).await {
                tracing::warn!(session = %id, %removed, "the failed run's session could not be removed");
            }
            return Err(err.into());
        }
        Err(err) => return Err(err.into()),
    };
    if created {
        let _ = writeln!(std::io::stderr().lock(), "session: {id}");
    }
    match stop {
        StopReason::Cancelled => Err(ExecError::Cancelled),
        StopReason::MaxTokens => {
            let _ = writeln!(std::io::stderr().lock(), "\n[stopped: the model hit its output limit]");
            Ok(id)
        }
        StopReason::MaxTurnRequests => {
            let _ = writeln!(std::io::stderr().lock(), "\n[stopped: too many model requests in one turn]");
            Ok(id)
        }
        StopReason::Refusal => {
            let _ = writeln!(std::io::stderr().lock(), "\n[stopped: the model refused]");
            Ok(id)
        }
        StopReason::EndTurn => Ok(id),
    }
}

/// Prints every stored session (optionally only those in `cwd`), newest first.
pub async fn list_sessions(store: Store, cwd: Option<String>, json: bool) -> Result<(), SessionError> {
    let mut cursor = None;
    let mut out = Vec::new();
    if !json {
        out.extend_from_slice(format!("{:<30}  {:<20}  {:<40}  {}\n", "ID", "UPDATED", "TITLE", "CWD").as_bytes());
    }
    loop {
        let page = store.list_sessions(cwd.clone(), cursor.take(), 200, false).await?;
        for row in &page.sessions {
            let updated = chrono::DateTime::from_timestamp_millis(row.updated_at)
                .map(|at| at.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            let line = if json {
                serde_json::json!({
                    "id": row.id.as_str(), "cwd": row.cwd, "title": row.title, "model": row.model,
                    "createdAt": iso8601(row.created_at), "updatedAt": iso8601(row.updated_at),
                })
                .to_string()
                    + "\n"
            } else {
                let title: String = row.title.as_deref().unwrap_or("(untitled)").chars().take(40).collect();
                format!("{:<30}  {updated:<20}  {title:<40}  {}\n", row.id.as_str(), row.cwd)
            };
            out.extend_from_slice(line.as_bytes());
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let _ = std::io::stdout().lock().write_all(&out);
    store.shutdown().await;
    Ok(())
}

//! Headless mode: `cairn exec` runs one turn through the same session machinery (the same
//! registry) and prints the answer as it streams; `cairn sessions list` prints the stored
//! sessions.
//!
//! The prompt goes to a new session, a named one, the latest of the directory (`--continue`) or
//! a fork ([`Target`]). `--mode` and `--model` take effect at once and are stored with the prompt
//! (`Registry::set_for_turn`); `--allow`/`--deny` rules hold for this run only. The exit status
//! comes from the stop reason: 0 done, 3 a limit stopped the turn, 130 interrupted, 1 an error,
//! 2 a mistake in how cairn was called.
//!
//! With `acp::rpc`, `inspect` and `doctor`, this is code that writes stdout, and only in these
//! modes. Answer text goes to stdout; reasoning, tool calls, retries and the session id go to
//! stderr, so the output can be piped.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::acp::headless::JsonLines;
use crate::agent::StopReason;
use crate::config::Config;
use crate::history::PlanStatus;
use crate::ids::{SessionId, iso8601};
use crate::permissions::{Mode, Rule};
use crate::session::{Attach, Registry, SessionError, Update, UpdateSink};
use crate::settings::Setting;
use crate::store::{Listing, Store};
use crate::tools::{Host, NoEditor};
use crate::visible;

/// Prints a turn as it streams.
struct Printer {
    printed: AtomicBool,
    /// Reasoning was the last thing written to stderr, and did not end its line.
    thinking: AtomicBool,
}

impl Printer {
    /// Ends the reasoning's line on stderr, if it was left open, before a line of another kind.
    fn end_thought(&self) {
        if self.thinking.swap(false, Ordering::Relaxed) {
            let _ = std::io::stderr().lock().write_all(b"\n");
        }
    }
}

impl UpdateSink for Printer {
    fn send(&self, _session: &SessionId, update: Update) {
        if !matches!(update, Update::AgentThought { .. } | Update::AgentText { .. } | Update::EphemeralText { .. }) {
            self.end_thought();
        }
        match update {
            Update::AgentText { text, .. } | Update::EphemeralText { text } => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(visible::text(&text).as_bytes()).and_then(|()| out.flush());
                self.printed.store(!text.ends_with('\n'), Ordering::Relaxed);
            }
            Update::AgentThought { text, .. } => {
                let _ = std::io::stderr().lock().write_all(visible::text(&text).as_bytes());
                if !text.is_empty() {
                    self.thinking.store(!text.ends_with('\n'), Ordering::Relaxed);
                }
            }
            Update::ToolCall(tool) => {
                let (name, input) = (visible::line(&tool.name), visible::line(&tool.input));
                let _ = writeln!(std::io::stderr().lock(), "\n[tool call: {name} {input}]");
            }
            Update::ToolCallUpdate(tool) => {
                let output = tool.output.unwrap_or_default();
                let (name, output) = (visible::line(&tool.name), visible::text(&output));
                let _ = writeln!(std::io::stderr().lock(), "[tool {name}: {output}]");
            }
            Update::Notice { text, .. } | Update::EphemeralNotice { text, .. } => {
                let _ = writeln!(std::io::stderr().lock(), "[{}]", visible::text(&text));
            }
            Update::Usage { .. }
            | Update::Options(_)
            | Update::Commands(_)
            | Update::Mode(_)
            | Update::CompactionSummary { .. } => {}
            // What a plan-mode run is for: the plan, on stdout, apart from any text before it.
            Update::PlanDocument(text) => {
                let mut out = std::io::stdout().lock();
                let apart = if self.printed.swap(false, Ordering::Relaxed) { "\n\n" } else { "" };
                let text = visible::text(&text);
                let _ = writeln!(out, "{apart}{}", text.trim_end()).and_then(|()| out.flush());
            }
            // A failed one is told by its stored notice.
            Update::Compaction { note, state: crate::session::CompactionState::Completed, .. } => {
                let _ = writeln!(std::io::stderr().lock(), "[{}]", visible::text(&note));
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
                    let _ = writeln!(out, "  [{mark}] {}", visible::line(&entry.content));
                }
            }
            // A sub-agent shows on its `task` call's line.
            Update::UserChunk { .. }
            | Update::Title(_)
            | Update::Subagent(_)
            | Update::SessionMessage(_)
            | Update::Elsewhere { .. } => {}
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
    #[error(
        "the prompt is empty; give the task as an argument, e.g. cairn exec \"fix the failing test\", or on stdin with `-`"
    )]
    EmptyPrompt,
    #[error("session {0} not found; `cairn sessions list` shows the stored sessions")]
    UnknownSession(String),
    #[error("no session to continue in {0}; run `cairn exec` without --continue to start one")]
    NothingToContinue(String),
}

impl ExecError {
    /// The process's exit status: 2 for a mistake in how cairn was called, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            ExecError::EmptyPrompt | ExecError::UnknownSession(_) | ExecError::NothingToContinue(_) => 2,
            // The directory it was run in (or the session's) cannot be a workspace.
            ExecError::Session(SessionError::Workspace(_) | SessionError::StoredWorkspace { .. }) => 2,
            ExecError::Session(_) => 1,
        }
    }
}

/// Which session the prompt goes to.
pub enum Target {
    /// A new session in the request's `cwd`.
    New,
    /// This stored session.
    Session(String),
    /// The latest session of the request's `cwd`.
    Continue,
    /// A new session copied from this one.
    Fork(String),
}

/// What `cairn exec` was asked to do.
pub struct ExecRequest {
    pub prompt: String,
    pub target: Target,
    /// The working directory of a new session or fork, and whose latest session `--continue`
    /// takes.
    pub cwd: PathBuf,
    pub mode: Option<Mode>,
    /// Switch the session to this model (`provider/model`, normalized); a new session starts
    /// with it.
    pub model: Option<String>,
    /// Print every update as a JSON line (see `acp::headless`) instead of the answer's text.
    pub json: bool,
    /// `--allow`/`--deny` rules for this run (`Scope::Run`), with the session's own.
    pub rules: Vec<Rule>,
}

/// How a run ended.
pub struct Finished {
    pub session: SessionId,
    pub stop: StopReason,
}

impl Finished {
    /// The process's exit status: 0 done, 3 a limit stopped the turn, 130 interrupted.
    pub fn exit_code(&self) -> u8 {
        match self.stop {
            StopReason::EndTurn | StopReason::Refusal => 0,
            StopReason::MaxTokens | StopReason::MaxTurnRequests => 3,
            StopReason::Cancelled => 130,
        }
    }
}

/// Runs the request's prompt in the session it names (or a new one).
pub async fn exec(store: Store, config: Arc<Config>, request: ExecRequest) -> Result<Finished, ExecError> {
    let mut config = config;
    if let Some(model) = &request.model {
        // The default of this run: a new session starts with it, and it is on the menu a
        // continued session's switch is checked against.
        Arc::make_mut(&mut config).model.clone_from(model);
    }
    if request.json {
        let lines = Arc::new(JsonLines::default());
        let registry = Registry::new(store, config, lines.clone());
        let mut started = None;
        let result = run(&registry, request, &mut started, &|| {}).await;
        registry.shutdown().await;
        match &result {
            Ok(finished) => lines.finish(&finished.session, finished.stop),
            Err(err) => lines.fail(started.as_ref(), &err.to_string()),
        }
        return result;
    }
    let printer = Arc::new(Printer { printed: AtomicBool::new(false), thinking: AtomicBool::new(false) });
    let registry = Registry::new(store, config, printer.clone());
    let result = run(&registry, request, &mut None, &|| printer.end_thought()).await;
    registry.shutdown().await;
    printer.end_thought();
    if printer.printed.load(Ordering::Relaxed) {
        let _ = std::io::stdout().lock().write_all(b"\n");
    }
    if let Ok(finished) = &result {
        let why = match finished.stop {
            StopReason::MaxTokens => "the model hit its output limit",
            StopReason::MaxTurnRequests => "a limit of the turn stopped it",
            StopReason::Refusal => "the model refused",
            StopReason::EndTurn | StopReason::Cancelled => "",
        };
        if !why.is_empty() {
            let _ = writeln!(std::io::stderr().lock(), "[stopped: {why}]");
        }
    }
    result
}

/// The session of `target`, and whether this run made it (a fork or a new session).
async fn open(registry: &Registry, target: Target, cwd: &Path, rules: &[Rule]) -> Result<(SessionId, bool), ExecError> {
    let attach = || Attach { rules: rules.to_vec(), ..Attach::alone() };
    let stored = |id: String| async move {
        match registry.resume(&SessionId::from_string(id.clone()), attach()).await {
            Ok(view) => Ok(view.id),
            Err(SessionError::NotFound(_)) => Err(ExecError::UnknownSession(id)),
            Err(err) => Err(err.into()),
        }
    };
    Ok(match target {
        Target::New => (registry.create(cwd, None, attach()).await?.id, true),
        Target::Session(id) => (stored(id).await?, false),
        Target::Continue => {
            let project = cwd.to_string_lossy().into_owned();
            // The latest session with a conversation: one never prompted (perhaps another
            // process's, just opened) is nothing to continue.
            let listing = Listing { cwd: Some(project.clone()), ..Listing::default() };
            let page = registry.store().list_sessions(listing, None, 1).await.map_err(SessionError::from)?;
            match page.sessions.into_iter().next() {
                Some(row) => (stored(row.id.as_str().to_owned()).await?, false),
                None => return Err(ExecError::NothingToContinue(project)),
            }
        }
        Target::Fork(id) => match registry.fork(&SessionId::from_string(id.clone()), cwd, attach()).await {
            Ok(view) => (view.id, true),
            Err(SessionError::NotFound(_)) => return Err(ExecError::UnknownSession(id)),
            Err(err) => return Err(err.into()),
        },
    })
}

/// Runs the turn; `started` is set to the session once there is one. `end_line` ends a line the
/// turn left open on stderr before the session is named there.
async fn run(
    registry: &Registry,
    request: ExecRequest,
    started: &mut Option<SessionId>,
    end_line: &(dyn Fn() + Sync),
) -> Result<Finished, ExecError> {
    let ExecRequest { prompt, target, cwd, mode, model, json, rules } = request;
    if prompt.trim().is_empty() {
        return Err(ExecError::EmptyPrompt);
    }
    let (id, created) = open(registry, target, &cwd, &rules).await?;
    *started = Some(id.clone());
    // Stored with the prompt: a run another process's turn refuses changes nothing stored.
    let model = model.filter(|_| !created);
    let settings: Vec<Setting> = model.map(Setting::Model).into_iter().chain(mode.map(Setting::Mode)).collect();
    if !settings.is_empty() {
        registry.set_for_turn(&id, settings).await?;
    }
    if !created && !json {
        let _ = writeln!(std::io::stderr().lock(), "session: {}", visible::line(id.as_str()));
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
        Ok(end) => end.stop,
        // A new session whose only turn failed holds nothing worth keeping.
        Err(err) if created => {
            if let Err(removed) = registry.delete(&id).await {
                tracing::warn!(session = %id, %removed, "the failed run's session could not be removed");
            }
            *started = None;
            return Err(err.into());
        }
        Err(err) => return Err(err.into()),
    };
    if created && !json {
        end_line();
        let _ = writeln!(std::io::stderr().lock(), "session: {}", visible::line(id.as_str()));
    }
    Ok(Finished { session: id, stop })
}

/// Prints the stored sessions `listing` shows (never those never prompted, nor sub-agents'),
/// newest first.
pub async fn list_sessions(store: Store, listing: Listing, json: bool) -> Result<(), SessionError> {
    let mut cursor = None;
    let mut out = Vec::new();
    if !json {
        out.extend_from_slice(format!("{:<30}  {:<20}  {:<40}  {}\n", "ID", "UPDATED", "TITLE", "CWD").as_bytes());
    }
    loop {
        let page = store.list_sessions(listing.clone(), cursor.take(), 200).await?;
        for row in &page.sessions {
            let updated = chrono::DateTime::from_timestamp_millis(row.updated_at)
                .map(|at| at.format("%Y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_default();
            let line = if json {
                let line = serde_json::json!({
                    "id": row.id.as_str(), "cwd": row.cwd, "title": row.title, "model": row.model,
                    "createdAt": iso8601(row.created_at), "updatedAt": iso8601(row.updated_at),
                    "archived": row.archived_at.is_some(),
                });
                visible::json(&line.to_string()).into_owned() + "\n"
            } else {
                let title =
                    visible::line(row.title.as_deref().unwrap_or("(untitled)")).chars().take(40).collect::<String>();
                let (id, cwd) = (visible::line(row.id.as_str()), visible::line(&row.cwd));
                format!("{id:<30}  {updated:<20}  {title:<40}  {cwd}\n")
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

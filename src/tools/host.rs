//! What the editor can do for the tools: read and write its buffers, run terminals, ask the user
//! for permission or a question's answer.
//!
//! A [`Host`] offers each capability as an object of its own ([`FileReader`], [`FileWriter`],
//! [`Terminals`], [`Permissions`], [`Questions`]) or `None`. `acp::client` offers over ACP the
//! files and terminals the client advertised, and always the questions; headless runs use
//! [`NoEditor`], which offers nothing and cannot ask, so every "ask" becomes a refusal.
//! [`UserWait`] counts the waits for the user's answer, during which the turn's time limit stops.

use std::path::{Path, PathBuf};

/// What [`HostError::gone`] says.
const GONE: &str = "the client went away before it answered";

/// A failed request to the editor.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("the editor could not do it: {0}")]
pub struct HostError(pub String);

/// Lines of a file to read: `limit` lines from `line` (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRange {
    pub line: u32,
    pub limit: u32,
}

/// How a command in a terminal ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: Option<u32>,
    pub signal: Option<String>,
}

/// What a terminal printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalOutput {
    pub output: String,
    pub truncated: bool,
}

/// A command for the editor to run in a terminal it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalRequest {
    pub command: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub output_byte_limit: u64,
}

/// A choice offered to the user for one tool call. Serializable, as are the questions and
/// answers below: a shared store carries them between replicas.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PermissionOption {
    pub id: std::borrow::Cow<'static, str>,
    pub label: String,
    pub kind: OptionKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// The user's answer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionAnswer {
    Selected(String),
    /// The editor withdrew the question (the turn is being cancelled).
    Cancelled,
}

/// A question for the user, from the `question` tool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Question {
    /// The question as the user reads it.
    pub text: String,
    /// The answers offered, in order; empty for a typed answer only.
    pub choices: Vec<Choice>,
    /// Whether the user may type an answer (besides, or instead of, the choices).
    pub typed: bool,
}

/// One answer offered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Choice {
    pub label: String,
    pub description: Option<String>,
}

/// What the user did with a [`Question`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// A choice (one of the labels offered), a typed answer, or both.
    Answered { choice: Option<String>, text: Option<String> },
    /// The user chose not to answer.
    Declined,
    /// The question was dismissed (closed, or the turn is being cancelled).
    Dismissed,
}

/// Whether the turn waits for the user (a permission question, a `question`): its time limit
/// does not run meanwhile. Each clone is the same count; [`UserWait::hold`] counts one wait
/// until the guard drops.
#[derive(Clone, Debug)]
pub struct UserWait(std::sync::Arc<tokio::sync::watch::Sender<usize>>);

impl Default for UserWait {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl UserWait {
    /// Counts a wait for the user until the returned guard drops.
    pub fn hold(&self) -> Waiting {
        self.0.send_modify(|waits| *waits += 1);
        Waiting(self.clone())
    }

    /// How many waits are under way, watched.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<usize> {
        self.0.subscribe()
    }
}

/// One wait for the user, over when dropped.
#[derive(Debug)]
pub struct Waiting(UserWait);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.0.send_modify(|waits| *waits = waits.saturating_sub(1));
    }
}

/// The editor's services, one capability at a time: each is `None` when the editor does not
/// offer it (the client did not advertise it, or there is no editor), so a tool can only call
/// what is there, and a host implements only what it has.
pub trait Host: Send + Sync {
    /// Reading its buffers (the client advertised `fs.readTextFile`).
    fn reader(&self) -> Option<&dyn FileReader> {
        None
    }
    /// Writing its buffers (the client advertised `fs.writeTextFile`).
    fn writer(&self) -> Option<&dyn FileWriter> {
        None
    }
    /// Running commands in terminals it shows (the client advertised `terminal`).
    fn terminals(&self) -> Option<&dyn Terminals> {
        None
    }
    /// Asking the user whether a call may run: `None` when there is nobody to ask.
    fn permissions(&self) -> Option<&dyn Permissions> {
        None
    }
    /// Asking the user a `question`: `None` when there is nobody to ask.
    fn questions(&self) -> Option<&dyn Questions> {
        None
    }
}

/// The editor's buffers, read.
#[async_trait::async_trait]
pub trait FileReader: Send + Sync {
    /// The buffer's text, or only the lines of `range` (the editor cuts them out).
    async fn read_text_file(&self, path: &Path, range: Option<LineRange>) -> Result<String, HostError>;
}

/// The editor's buffers, written.
#[async_trait::async_trait]
pub trait FileWriter: Send + Sync {
    async fn write_text_file(&self, path: &Path, content: &str) -> Result<(), HostError>;
}

/// Terminals the editor runs and shows, by the id it gave each.
#[async_trait::async_trait]
pub trait Terminals: Send + Sync {
    async fn create_terminal(&self, request: &TerminalRequest) -> Result<String, HostError>;
    async fn wait_for_terminal_exit(&self, id: &str) -> Result<ExitStatus, HostError>;
    async fn terminal_output(&self, id: &str) -> Result<TerminalOutput, HostError>;
    async fn kill_terminal(&self, id: &str) -> Result<(), HostError>;
    async fn release_terminal(&self, id: &str) -> Result<(), HostError>;
}

/// Permission questions about tool calls.
#[async_trait::async_trait]
pub trait Permissions: Send + Sync {
    /// Shows `call` (its title, kind, input) and asks which of `options` the user picks.
    async fn request_permission(
        &self,
        call: &crate::history::ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError>;
}

/// The `question` tool's questions.
#[async_trait::async_trait]
pub trait Questions: Send + Sync {
    /// Asks the user `question` on the card of the call `call_id`. A choice in the reply is
    /// always one of the labels offered.
    async fn ask(&self, call_id: &str, question: &Question) -> Result<Reply, HostError>;
}

impl HostError {
    /// The capability is not there (the editor stopped offering it, or there is no editor).
    pub fn unavailable() -> Self {
        HostError("there is no editor to ask".to_owned())
    }

    /// The editor went away before it answered (its connection closed), as opposed to
    /// answering with an error.
    pub fn gone() -> Self {
        HostError(GONE.to_owned())
    }

    pub fn is_gone(&self) -> bool {
        self.0 == GONE
    }
}

/// No editor: tools use the local disk and processes, and nobody can be asked.
pub struct NoEditor;

impl Host for NoEditor {}

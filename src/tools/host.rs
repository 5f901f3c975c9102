//! What the editor can do for the tools: read and write its buffers, run terminals, ask the user
//! for permission or a question's answer.
//!
//! `acp::client` implements [`Host`] over ACP for the capabilities the client advertised; headless
//! runs use [`NoEditor`], which offers nothing and cannot ask, so every "ask" becomes a refusal.

use std::path::{Path, PathBuf};

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

/// A choice offered to the user for one tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionOption {
    pub id: &'static str,
    pub label: String,
    pub kind: OptionKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// The user's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermissionAnswer {
    Selected(String),
    /// The editor withdrew the question (the turn is being cancelled).
    Cancelled,
}

/// A question for the user, from the `question` tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// The question as the user reads it.
    pub text: String,
    /// The answers offered, in order; empty for a typed answer only.
    pub choices: Vec<Choice>,
    /// Whether the user may type an answer (besides, or instead of, the choices).
    pub typed: bool,
}

/// One answer offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub label: String,
    pub description: Option<String>,
}

/// What the user did with a [`Question`].
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// The editor's services. Methods for capabilities the client did not advertise are never called.
#[async_trait::async_trait]
pub trait Host: Send + Sync {
    /// The client advertised `fs.readTextFile`.
    fn reads_files(&self) -> bool;
    /// The client advertised `fs.writeTextFile`.
    fn writes_files(&self) -> bool;
    /// The client advertised `terminal`.
    fn runs_terminals(&self) -> bool;
    /// Whether there is a user to ask at all.
    fn can_ask(&self) -> bool;

    /// The buffer's text, or only the lines of `range` (the editor cuts them out).
    async fn read_text_file(&self, path: &Path, range: Option<LineRange>) -> Result<String, HostError>;
    async fn write_text_file(&self, path: &Path, content: &str) -> Result<(), HostError>;
    async fn create_terminal(&self, request: &TerminalRequest) -> Result<String, HostError>;
    async fn wait_for_terminal_exit(&self, id: &str) -> Result<ExitStatus, HostError>;
    async fn terminal_output(&self, id: &str) -> Result<TerminalOutput, HostError>;
    async fn kill_terminal(&self, id: &str) -> Result<(), HostError>;
    async fn release_terminal(&self, id: &str) -> Result<(), HostError>;
    /// Shows `call` (its title, kind, input) and asks which of `options` the user picks.
    async fn request_permission(
        &self,
        call: &crate::history::ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError>;
    /// Asks the user `question` on the card of the call `call_id`. A choice in the reply is
    /// always one of the labels offered.
    async fn ask(&self, call_id: &str, question: &Question) -> Result<Reply, HostError>;
}

/// No editor: tools use the local disk and processes, and nobody can be asked.
pub struct NoEditor;

fn unavailable() -> HostError {
    HostError("there is no editor to ask".to_owned())
}

#[async_trait::async_trait]
impl Host for NoEditor {
    fn reads_files(&self) -> bool {
        false
    }
    fn writes_files(&self) -> bool {
        false
    }
    fn runs_terminals(&self) -> bool {
        false
    }
    fn can_ask(&self) -> bool {
        false
    }
    async fn read_text_file(&self, _path: &Path, _range: Option<LineRange>) -> Result<String, HostError> {
        Err(unavailable())
    }
    async fn write_text_file(&self, _path: &Path, _content: &str) -> Result<(), HostError> {
        Err(unavailable())
    }
    async fn create_terminal(&self, _request: &TerminalRequest) -> Result<String, HostError> {
        Err(unavailable())
    }
    async fn wait_for_terminal_exit(&self, _id: &str) -> Result<ExitStatus, HostError> {
        Err(unavailable())
    }
    async fn terminal_output(&self, _id: &str) -> Result<TerminalOutput, HostError> {
        Err(unavailable())
    }
    async fn kill_terminal(&self, _id: &str) -> Result<(), HostError> {
        Err(unavailable())
    }
    async fn release_terminal(&self, _id: &str) -> Result<(), HostError> {
        Err(unavailable())
    }
    async fn request_permission(
        &self,
        _call: &crate::history::ToolPart,
        _options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        Err(unavailable())
    }
    async fn ask(&self, _call_id: &str, _question: &Question) -> Result<Reply, HostError> {
        Err(unavailable())
    }
}

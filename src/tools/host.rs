//! What the editor can do for the tools: read and write its buffers, run terminals, ask the user.
//!
//! `acp::client` implements [`Host`] over ACP for the capabilities the client advertised; headless
//! runs use [`NoEditor`], which offers nothing and cannot ask, so every "ask" becomes a refusal.

use std::path::{Path, PathBuf};

use futures::FutureExt;
use futures::future::BoxFuture;

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

/// The editor's services. Methods for capabilities the client did not advertise are never called.
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
    fn read_text_file<'a>(
        &'a self,
        path: &'a Path,
        range: Option<LineRange>,
    ) -> BoxFuture<'a, Result<String, HostError>>;
    fn write_text_file<'a>(&'a self, path: &'a Path, content: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    fn create_terminal<'a>(&'a self, request: &'a TerminalRequest) -> BoxFuture<'a, Result<String, HostError>>;
    fn wait_for_terminal_exit<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<ExitStatus, HostError>>;
    fn terminal_output<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>>;
    fn kill_terminal<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    fn release_terminal<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), HostError>>;
    /// Shows `call` (its title, kind, input) and asks which of `options` the user picks.
    fn request_permission<'a>(
        &'a self,
        call: &'a crate::history::ToolPart,
        options: &'a [PermissionOption],
    ) -> BoxFuture<'a, Result<PermissionAnswer, HostError>>;
}

/// No editor: tools use the local disk and processes, and nobody can be asked.
pub struct NoEditor;

fn unavailable<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, HostError>> {
    async { Err(HostError("there is no editor to ask".to_owned())) }.boxed()
}

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
    fn read_text_file<'a>(
        &'a self,
        _path: &'a Path,
        _range: Option<LineRange>,
    ) -> BoxFuture<'a, Result<String, HostError>> {
        unavailable()
    }
    fn write_text_file<'a>(&'a self, _path: &'a Path, _content: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        unavailable()
    }
    fn create_terminal<'a>(&'a self, _request: &'a TerminalRequest) -> BoxFuture<'a, Result<String, HostError>> {
        unavailable()
    }
    fn wait_for_terminal_exit<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<ExitStatus, HostError>> {
        unavailable()
    }
    fn terminal_output<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<TerminalOutput, HostError>> {
        unavailable()
    }
    fn kill_terminal<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        unavailable()
    }
    fn release_terminal<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        unavailable()
    }
    fn request_permission<'a>(
        &'a self,
        _call: &'a crate::history::ToolPart,
        _options: &'a [PermissionOption],
    ) -> BoxFuture<'a, Result<PermissionAnswer, HostError>> {
        unavailable()
    }
}

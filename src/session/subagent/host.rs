//! The editor as a sub-agent sees it: the parent's [`Host`], with every permission question
//! (and every `question` the sub-agent asks) asked on the card of the `task` call that started the sub-agent (the one card of it the
//! editor knows: the sub-agent's own calls are shown inside that card, never as cards of their
//! own, and the parent's calls may carry the same provider-made ids, `call_0`), titled with the
//! sub-agent and its call, and showing what that call would do.

use std::path::Path;
use std::sync::Arc;

use crate::history::ToolPart;
use crate::tools::Host;
use crate::tools::host::{
    ExitStatus, HostError, LineRange, PermissionAnswer, PermissionOption, Question, Reply, TerminalOutput,
    TerminalRequest,
};

/// The parent's host; questions are asked as `{who} › {call title}`.
pub struct NamedHost {
    pub inner: Arc<dyn Host>,
    /// The sub-agent's card title in the parent (`Sub-agent reviewer: check the parser`).
    pub who: String,
    /// The id of the `task` call in the parent: the card every question is asked on.
    pub card: String,
}

#[async_trait::async_trait]
impl Host for NamedHost {
    fn reads_files(&self) -> bool {
        self.inner.reads_files()
    }
    fn writes_files(&self) -> bool {
        self.inner.writes_files()
    }
    fn runs_terminals(&self) -> bool {
        self.inner.runs_terminals()
    }
    fn can_ask(&self) -> bool {
        self.inner.can_ask()
    }
    async fn read_text_file(&self, path: &Path, range: Option<LineRange>) -> Result<String, HostError> {
        self.inner.read_text_file(path, range).await
    }
    async fn write_text_file(&self, path: &Path, content: &str) -> Result<(), HostError> {
        self.inner.write_text_file(path, content).await
    }
    async fn create_terminal(&self, request: &TerminalRequest) -> Result<String, HostError> {
        self.inner.create_terminal(request).await
    }
    async fn wait_for_terminal_exit(&self, id: &str) -> Result<ExitStatus, HostError> {
        self.inner.wait_for_terminal_exit(id).await
    }
    async fn terminal_output(&self, id: &str) -> Result<TerminalOutput, HostError> {
        self.inner.terminal_output(id).await
    }
    async fn kill_terminal(&self, id: &str) -> Result<(), HostError> {
        self.inner.kill_terminal(id).await
    }
    async fn release_terminal(&self, id: &str) -> Result<(), HostError> {
        self.inner.release_terminal(id).await
    }
    async fn request_permission(
        &self,
        call: &ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        let mut named = call.clone();
        named.title = format!("{} › {}", self.who, call.title);
        named.call_id.clone_from(&self.card);
        self.inner.request_permission(&named, options).await
    }
    async fn ask(&self, _call_id: &str, question: &Question) -> Result<Reply, HostError> {
        let mut named = question.clone();
        named.text = format!("{}: {}", self.who, question.text);
        self.inner.ask(&self.card, &named).await
    }
}

//! The editor as a sub-agent sees it: the parent's [`Host`], with every permission question
//! (and every `question` the sub-agent asks) asked on the card of the `task` call that started the sub-agent (the one card of it the
//! editor knows: the sub-agent's own calls are shown inside that card, never as cards of their
//! own, and the parent's calls may carry the same provider-made ids, `call_0`), titled with the
//! sub-agent and its call, and showing what that call would do.

use std::sync::Arc;

use crate::history::ToolPart;
use crate::tools::Host;
use crate::tools::host::{
    FileReader, FileWriter, HostError, PermissionAnswer, PermissionOption, Permissions, Question, Questions, Reply,
    Terminals,
};

/// The parent's host; questions are asked as `{who} › {call title}`.
pub struct NamedHost {
    pub inner: Arc<dyn Host>,
    /// The sub-agent's card title in the parent (`Sub-agent reviewer: check the parser`).
    pub who: String,
    /// The id of the `task` call in the parent: the card every question is asked on.
    pub card: String,
}

/// Files and terminals are the parent's own; the two ways of asking are renamed here.
impl Host for NamedHost {
    fn reader(&self) -> Option<&dyn FileReader> {
        self.inner.reader()
    }
    fn writer(&self) -> Option<&dyn FileWriter> {
        self.inner.writer()
    }
    fn terminals(&self) -> Option<&dyn Terminals> {
        self.inner.terminals()
    }
    fn permissions(&self) -> Option<&dyn Permissions> {
        self.inner.permissions().map(|_| self as &dyn Permissions)
    }
    fn questions(&self) -> Option<&dyn Questions> {
        self.inner.questions().map(|_| self as &dyn Questions)
    }
}

#[async_trait::async_trait]
impl Permissions for NamedHost {
    async fn request_permission(
        &self,
        call: &ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        let inner = self.inner.permissions().ok_or_else(HostError::unavailable)?;
        let mut named = call.clone();
        named.title = format!("{} › {}", self.who, call.title);
        named.call_id.clone_from(&self.card);
        inner.request_permission(&named, options).await
    }
}

#[async_trait::async_trait]
impl Questions for NamedHost {
    async fn ask(&self, _call_id: &str, question: &Question) -> Result<Reply, HostError> {
        let inner = self.inner.questions().ok_or_else(HostError::unavailable)?;
        let mut named = question.clone();
        named.text = format!("{}: {}", self.who, question.text);
        inner.ask(&self.card, &named).await
    }
}

//! The editor's services over ACP: `fs/*`, `terminal/*`, `session/request_permission` and
//! `elicitation/create` (a `question`, see `question` and `form`), as a [`Host`] for one
//! session's tools.
//!
//! Files and terminals are offered only when the client advertised them at `initialize` (else
//! `None`), so a tool never calls a method the client did not announce; permission questions
//! and `question`s, which every client answers through `session/request_permission`, always are
//! ([`ClientFeatures`] keeps what it advertised). Dropping a pending request (a cancelled turn)
//! sends `$/cancel_request` for it, which withdraws a permission question from the editor's UI.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agent_client_protocol_schema::v1 as acp;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::convert::{Shown, tool_update};
use super::rpc::Peer;
use super::{form, question};
use crate::history::ToolPart;
use crate::ids::SessionId;
use crate::tools::host::{
    ExitStatus, FileReader, FileWriter, Host, HostError, LineRange, OptionKind, PermissionAnswer, PermissionOption,
    Permissions, Question, Questions, Reply, TerminalOutput, TerminalRequest, Terminals,
};

/// What the client said it can do, set at `initialize`.
#[derive(Default)]
pub struct ClientFeatures {
    pub read_files: AtomicBool,
    pub write_files: AtomicBool,
    pub terminals: AtomicBool,
    pub notices: AtomicBool,
    pub compaction: AtomicBool,
    /// `elicitation.form`: questions can be asked as forms.
    pub forms: AtomicBool,
    pub booleans: AtomicBool,
    /// `plan`: the checklist as `plan_update` / `plan_removed` (ACP 1.20); otherwise `plan`.
    pub plans: AtomicBool,
    /// `subagents`: sub-agents as sessions of their own (ACP 1.20).
    pub subagents: AtomicBool,
}

impl ClientFeatures {
    pub fn learn(&self, capabilities: &acp::ClientCapabilities) {
        self.read_files.store(capabilities.fs.read_text_file, Ordering::Relaxed);
        self.write_files.store(capabilities.fs.write_text_file, Ordering::Relaxed);
        self.terminals.store(capabilities.terminal, Ordering::Relaxed);
        let notices = capabilities.session.as_ref().is_some_and(|s| s.notices.is_some());
        self.notices.store(notices, Ordering::Relaxed);
        let compaction = capabilities.session.as_ref().is_some_and(|s| s.compaction.is_some());
        self.compaction.store(compaction, Ordering::Relaxed);
        let forms = capabilities.elicitation.as_ref().is_some_and(|e| e.form.is_some());
        self.forms.store(forms, Ordering::Relaxed);
        let booleans =
            capabilities.session.as_ref().and_then(|s| s.config_options.as_ref()).is_some_and(|c| c.boolean.is_some());
        self.booleans.store(booleans, Ordering::Relaxed);
        self.plans.store(capabilities.plan.is_some(), Ordering::Relaxed);
        self.subagents.store(capabilities.subagents.is_some(), Ordering::Relaxed);
    }

    /// Which optional updates this client takes.
    pub fn shown(&self) -> Shown {
        Shown {
            notices: self.notices.load(Ordering::Relaxed),
            compaction: self.compaction.load(Ordering::Relaxed),
            booleans: self.booleans.load(Ordering::Relaxed),
            plans: self.plans.load(Ordering::Relaxed),
            subagents: self.subagents.load(Ordering::Relaxed),
        }
    }
}

/// One session's view of the editor.
pub struct AcpHost {
    pub peer: Peer,
    pub session: SessionId,
    pub features: Arc<ClientFeatures>,
}

impl AcpHost {
    async fn call<P: Serialize, R: DeserializeOwned>(&self, method: &str, params: &P) -> Result<R, HostError> {
        let value = self.peer.request(method, params).await.map_err(|err| host_error(method, &err))?;
        decode(method, value)
    }

    fn id(&self) -> acp::SessionId {
        acp::SessionId::new(self.session.as_str())
    }
}

impl Host for AcpHost {
    fn reader(&self) -> Option<&dyn FileReader> {
        self.features.read_files.load(Ordering::Relaxed).then_some(self)
    }

    fn writer(&self) -> Option<&dyn FileWriter> {
        self.features.write_files.load(Ordering::Relaxed).then_some(self)
    }

    fn terminals(&self) -> Option<&dyn Terminals> {
        self.features.terminals.load(Ordering::Relaxed).then_some(self)
    }

    fn permissions(&self) -> Option<&dyn Permissions> {
        Some(self)
    }

    fn questions(&self) -> Option<&dyn Questions> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl FileReader for AcpHost {
    async fn read_text_file(&self, path: &Path, range: Option<LineRange>) -> Result<String, HostError> {
        let request =
            acp::ReadTextFileRequest::new(self.id(), path).line(range.map(|r| r.line)).limit(range.map(|r| r.limit));
        let response: acp::ReadTextFileResponse =
            self.call(acp::CLIENT_METHOD_NAMES.fs_read_text_file, &request).await?;
        Ok(response.content)
    }
}

#[async_trait::async_trait]
impl FileWriter for AcpHost {
    async fn write_text_file(&self, path: &Path, content: &str) -> Result<(), HostError> {
        let request = acp::WriteTextFileRequest::new(self.id(), path, content);
        let _: acp::WriteTextFileResponse = self.call(acp::CLIENT_METHOD_NAMES.fs_write_text_file, &request).await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Terminals for AcpHost {
    async fn create_terminal(&self, request: &TerminalRequest) -> Result<String, HostError> {
        let create = acp::CreateTerminalRequest::new(self.id(), request.command.clone())
            .args(request.args.clone())
            .cwd(request.cwd.clone())
            .output_byte_limit(request.output_byte_limit);
        let response: acp::CreateTerminalResponse =
            self.call(acp::CLIENT_METHOD_NAMES.terminal_create, &create).await?;
        Ok(response.terminal_id.0.to_string())
    }

    async fn wait_for_terminal_exit(&self, id: &str) -> Result<ExitStatus, HostError> {
        let request = acp::WaitForTerminalExitRequest::new(self.id(), id.to_owned());
        let response: acp::WaitForTerminalExitResponse =
            self.call(acp::CLIENT_METHOD_NAMES.terminal_wait_for_exit, &request).await?;
        Ok(exit_status(response.exit_status))
    }

    async fn terminal_output(&self, id: &str) -> Result<TerminalOutput, HostError> {
        let request = acp::TerminalOutputRequest::new(self.id(), id.to_owned());
        let response: acp::TerminalOutputResponse =
            self.call(acp::CLIENT_METHOD_NAMES.terminal_output, &request).await?;
        Ok(TerminalOutput { output: response.output, truncated: response.truncated })
    }

    async fn kill_terminal(&self, id: &str) -> Result<(), HostError> {
        let request = acp::KillTerminalRequest::new(self.id(), id.to_owned());
        let _: acp::KillTerminalResponse = self.call(acp::CLIENT_METHOD_NAMES.terminal_kill, &request).await?;
        Ok(())
    }

    async fn release_terminal(&self, id: &str) -> Result<(), HostError> {
        let request = acp::ReleaseTerminalRequest::new(self.id(), id.to_owned());
        let _: acp::ReleaseTerminalResponse = self.call(acp::CLIENT_METHOD_NAMES.terminal_release, &request).await?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl Permissions for AcpHost {
    async fn request_permission(
        &self,
        call: &ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        let options = options
            .iter()
            .map(|option| {
                let kind = match option.kind {
                    OptionKind::AllowOnce => acp::PermissionOptionKind::AllowOnce,
                    OptionKind::AllowAlways => acp::PermissionOptionKind::AllowAlways,
                    OptionKind::RejectOnce => acp::PermissionOptionKind::RejectOnce,
                    OptionKind::RejectAlways => acp::PermissionOptionKind::RejectAlways,
                };
                acp::PermissionOption::new(option.id.to_string(), option.label.clone(), kind)
            })
            .collect();
        let request = acp::RequestPermissionRequest::new(self.id(), tool_update(call, false), options);
        let response: acp::RequestPermissionResponse =
            self.call(acp::CLIENT_METHOD_NAMES.session_request_permission, &request).await?;
        Ok(match response.outcome {
            acp::RequestPermissionOutcome::Selected(selected) => {
                PermissionAnswer::Selected(selected.option_id.0.to_string())
            }
            acp::RequestPermissionOutcome::Cancelled => PermissionAnswer::Cancelled,
            _ => PermissionAnswer::Cancelled,
        })
    }
}

#[async_trait::async_trait]
impl Questions for AcpHost {
    async fn ask(&self, call_id: &str, question: &Question) -> Result<Reply, HostError> {
        if self.features.forms.load(Ordering::Relaxed) {
            let request = question::form(&self.id(), call_id, question);
            if let Some(response) = form::send(&self.peer, &request, false).await? {
                return question::form_reply(question, response);
            }
        }
        let request = question::as_permission(&self.id(), call_id, question)?;
        let response = self.call(acp::CLIENT_METHOD_NAMES.session_request_permission, &request).await?;
        question::permission_reply(question, response)
    }
}

/// A request's failure as the tools see it: gone, or the client's error.
pub(super) fn host_error(method: &str, err: &acp::Error) -> HostError {
    if super::rpc::is_disconnected(err) { HostError::gone() } else { HostError(format!("{method}: {err}")) }
}

/// A client's answer to `method` read as `R`.
pub(super) fn decode<R: DeserializeOwned>(method: &str, value: serde_json::Value) -> Result<R, HostError> {
    // Some clients answer `null` for empty results.
    let value = if value.is_null() { serde_json::json!({}) } else { value };
    serde_json::from_value(value).map_err(|err| HostError(format!("{method} answered something unexpected: {err}")))
}

fn exit_status(status: acp::TerminalExitStatus) -> ExitStatus {
    ExitStatus { code: status.exit_code, signal: status.signal }
}

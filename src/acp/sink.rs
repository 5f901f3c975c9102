//! The client as a session sees it: its updates sent as `session/update` notifications, and
//! the client's services for its tools (`client::AcpHost`). Used as the sessions' sink on stdio,
//! and as one connection's wire behind the server's hub on `cairn serve`.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;
use futures::FutureExt;
use futures::future::BoxFuture;

use super::client::{AcpHost, ClientFeatures};
use super::convert::{available_commands, config_options, notification_json, update_to_wire};
use super::rpc::Peer;
use crate::agent::prompt::ClientPrompt;
use crate::ids::SessionId;
use crate::session::{Advertised, Attach, Update, UpdateSink};
use crate::tools::Host;

/// The editor seen from the sessions: `session/update` notifications, and its services.
pub struct WireSink {
    pub(super) peer: Peer,
    pub(super) features: Arc<ClientFeatures>,
}

impl WireSink {
    pub fn new(peer: Peer) -> Self {
        Self { peer, features: Arc::new(ClientFeatures::default()) }
    }

    /// The session's config options as this client takes them.
    pub(super) fn options(&self, view: &crate::session::SessionView) -> Vec<acp::SessionConfigOption> {
        config_options(view, self.features.shown())
    }

    /// Sends an update that has no row behind it (mode and option changes).
    pub(super) fn send_wire(&self, session: &SessionId, update: acp::SessionUpdate) {
        self.peer.notify(
            acp::CLIENT_METHOD_NAMES.session_update,
            &acp::SessionNotification::new(session.as_str().to_owned(), update),
        );
    }

    /// What a session the running request opens gets: the client's MCP servers, and the signal
    /// that the response announcing the session is on its way (call it inside the request's
    /// future).
    pub(super) fn attach(
        &self,
        servers: Vec<acp::McpServer>,
        directories: Vec<PathBuf>,
        system_prompt: Option<ClientPrompt>,
    ) -> Attach {
        let (mcp, notes) = super::convert::mcp_servers(servers);
        let announced = self.peer.after_response();
        Attach { mcp, notes, announced, rules: Vec::new(), directories: Some(directories), system_prompt }
    }

    /// [`Self::attach`] for the synchronous part of a handler, which queues the session's
    /// command in wire order: the returned signal must be handed to
    /// [`Peer::signal_after_response`] inside the request's future.
    pub(super) fn attach_early(
        &self,
        servers: Vec<acp::McpServer>,
        directories: Vec<PathBuf>,
        system_prompt: Option<ClientPrompt>,
    ) -> (Attach, tokio::sync::oneshot::Sender<()>) {
        let (mcp, notes) = super::convert::mcp_servers(servers);
        let (signal, announced) = tokio::sync::oneshot::channel();
        let directories = Some(directories);
        (Attach { mcp, notes, announced, rules: Vec::new(), directories, system_prompt }, signal)
    }

    /// Sends the slash commands right after the response that tells the client about the session.
    pub(super) fn send_commands_after_response(&self, session: &SessionId, commands: &[Advertised]) {
        self.peer.notify_after_response(
            acp::CLIENT_METHOD_NAMES.session_update,
            &acp::SessionNotification::new(session.as_str().to_owned(), available_commands(commands)),
        );
    }
}

impl WireSink {
    /// `update` as a `session/update`, with `_meta.cairn.seq` when it is numbered.
    fn notify(&self, session: &SessionId, seq: Option<u64>, update: Update) {
        let shown = self.features.shown();
        // A sub-agent's update, under its own id for a client that takes sub-agents, without a
        // number: the session's numbers do not count it.
        if let Update::Elsewhere { session: child, update } = update {
            if shown.subagents {
                self.notify(&child, None, *update);
            }
            return;
        }
        let Some(update) = update_to_wire(update, shown) else { return };
        let meta = seq.map(|seq| {
            let mut meta = acp::Meta::new();
            meta.insert("cairn".to_owned(), serde_json::json!({ "seq": seq }));
            meta
        });
        if matches!(update, acp::SessionUpdate::ToolCall(_)) {
            if let Some(mut value) = notification_json(session.as_str(), update) {
                if let (Some(meta), Some(object)) = (meta, value.as_object_mut()) {
                    object.insert("_meta".to_owned(), serde_json::Value::Object(meta));
                }
                self.peer.notify(acp::CLIENT_METHOD_NAMES.session_update, &value);
            }
        } else {
            // Serialized straight from the struct: the hot path of streamed chunks.
            self.peer.notify(
                acp::CLIENT_METHOD_NAMES.session_update,
                &acp::SessionNotification::new(session.as_str().to_owned(), update).meta(meta),
            );
        }
    }
}

impl UpdateSink for WireSink {
    fn send(&self, session: &SessionId, update: Update) {
        self.notify(session, None, update);
    }

    fn send_numbered(&self, session: &SessionId, seq: u64, update: Update) {
        self.notify(session, Some(seq), update);
    }

    fn writable(&self) -> BoxFuture<'static, ()> {
        self.peer.writable().boxed()
    }

    fn host(&self, session: &SessionId) -> Arc<dyn Host> {
        Arc::new(AcpHost { peer: self.peer.clone(), session: session.clone(), features: Arc::clone(&self.features) })
    }
}

//! MCP (Model Context Protocol) clients: the servers of one session, whose tools the model may
//! call.
//!
//! [`Servers::start`] returns at once; every server starts in the background, all at the same
//! time, each owned by its own actor (`server.rs`) that publishes its state and tools on a
//! `watch` board (`board.rs`). A prompt waits for servers still starting with
//! [`Servers::ready`], at most `[mcp] startup_timeout_secs`, then goes on without them.
//! [`Servers::call`] borrows the live connection and makes the call on the caller's task;
//! cancelling its token abandons the request and the server is sent `notifications/cancelled`.
//! A server that stops is started again by the next call, at most three times a session.
//!
//! A stdio server is a local process (`stdio.rs`) run under the session's [`Sandbox`] (the
//! process policy local commands get, the session's roots and the programs its rules reject,
//! with the network kept), with the environment every child gets (no provider keys, an absolute
//! `PATH`) plus its configured variables, in the session's directory. It and everything it
//! started are killed at [`Servers::shutdown`] and when the last [`Servers`] handle is dropped.
//! HTTP servers speak streamable HTTP (`http.rs`, an exchange in `http/reply.rs`, its events in
//! `sse.rs`). The client is cairn's own: JSON-RPC in `rpc.rs`, the MCP messages it sends in
//! `protocol.rs`, a stdio server's lines in `lines.rs`. What servers send is read leniently
//! (`content.rs`): a tool with an unusable schema or an unknown content block is left out with
//! a notice, not the whole server. This module knows neither `acp` nor `session`: the editor's
//! servers arrive already converted to [`ServerConfig`]s.

mod board;
mod config;
mod content;
mod http;
mod lines;
mod protocol;
mod rpc;
mod server;
mod sse;
mod stdio;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::{CancellationToken, DropGuard};

use board::Snapshot;
pub use board::{Notice, ServerState, ServerStatus};
pub use config::{
    DEFAULT_STARTUP_TIMEOUT, MAX_TOOL_NAME, McpSettings, ServerConfig, Transport, TransportKind, check_name, qualified,
};
pub use content::{Block, CallOutcome, MAX_DESCRIPTION, MAX_SCHEMA, MAX_TOOLS, McpTool};
pub use http::{check_url, header as check_header};
pub use server::MAX_RESTARTS;

use crate::process::ProcessPolicy;

/// What the user should be told about the servers, in order.
pub type Notices = mpsc::UnboundedReceiver<Notice>;

/// Why a tool call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("there is no MCP server `{server}` in this session")]
    UnknownServer { server: String },
    #[error("MCP server `{server}` is not available: {why}")]
    Unavailable { server: String, why: String },
    #[error("MCP server `{server}` stopped during the call to `{tool}`: {why}")]
    Crashed { server: String, tool: String, why: String },
    #[error("MCP server `{server}` answered the call to `{tool}` with an error: {message}")]
    Refused { server: String, tool: String, message: String },
    #[error("the call to `{tool}` of MCP server `{server}` failed: {message}")]
    Failed { server: String, tool: String, message: String },
    #[error("the call to `{tool}` of MCP server `{server}` was cancelled")]
    Cancelled { server: String, tool: String },
}

/// Where and how a session's stdio servers run: under the policy local commands get (the
/// supervisor, its sandbox and namespace, the exec check of the programs the session's rules
/// reject), in the session's roots, but with the network, which reaching a service is often
/// what a server is for.
#[derive(Clone, Debug)]
pub struct Sandbox {
    policy: Arc<ProcessPolicy>,
    /// The same for a server configured with `sandbox = false`: supervised, the environment
    /// scrubbed, killed with the session, nothing else.
    unsandboxed: Arc<ProcessPolicy>,
    /// The session's roots, the first its working directory.
    pub roots: Vec<PathBuf>,
    pub rejected: Vec<Vec<String>>,
    /// The session's rules as they change, followed by each server's exec gate.
    pub rulebook: Option<Arc<crate::process::Rulebook>>,
}

impl Sandbox {
    /// `roots` must hold at least the working directory.
    pub fn new(policy: &ProcessPolicy, roots: Vec<PathBuf>, rejected: Vec<Vec<String>>) -> Self {
        let sandboxed = ProcessPolicy { network: true, ..policy.clone() };
        let unsandboxed =
            ProcessPolicy { sandbox: crate::process::SandboxMode::Off, namespace: false, ..sandboxed.clone() };
        Self { policy: Arc::new(sandboxed), unsandboxed: Arc::new(unsandboxed), roots, rejected, rulebook: None }
    }

    /// The same, its servers following `rulebook` (the session's rules as they change).
    #[must_use]
    pub fn following(self, rulebook: Option<Arc<crate::process::Rulebook>>) -> Self {
        Self { rulebook, ..self }
    }

    /// The policy a server runs under.
    pub(crate) fn policy(&self, sandboxed: bool) -> &ProcessPolicy {
        if sandboxed { &self.policy } else { &self.unsandboxed }
    }

    /// The directory servers start in.
    pub(crate) fn cwd(&self) -> &Path {
        self.roots.first().map_or(Path::new("/"), PathBuf::as_path)
    }
}

/// One session's MCP servers; cheap to clone. The servers stop when the last clone is dropped.
#[derive(Clone)]
pub struct Servers {
    shared: Arc<Shared>,
}

struct Shared {
    names: Vec<String>,
    actors: Vec<mpsc::Sender<server::Request>>,
    view: watch::Receiver<Snapshot>,
    stop: CancellationToken,
    _stop_when_dropped: DropGuard,
}

impl Servers {
    /// Starts every server in the background and returns at once, with the receiver of the
    /// notices. A name given twice keeps its first server. Must be called within a Tokio runtime.
    pub fn start(configs: Vec<ServerConfig>, settings: &McpSettings, sandbox: Sandbox) -> (Self, Notices) {
        Self::start_after(configs, settings, sandbox, std::future::ready(()))
    }

    /// [`Self::start`], but the servers start only once `begin` resolves (meanwhile they are
    /// `Starting`): a session starts its servers once the response that announces it is sent,
    /// so that spawning them never delays that response.
    pub fn start_after(
        configs: Vec<ServerConfig>,
        settings: &McpSettings,
        sandbox: Sandbox,
        begin: impl Future<Output = ()> + Send + 'static,
    ) -> (Self, Notices) {
        use futures::FutureExt;
        let (notices_tx, notices) = mpsc::unbounded_channel();
        let mut unique: Vec<ServerConfig> = Vec::new();
        let mut duplicates = Vec::new();
        for config in configs {
            if unique.iter().any(|kept| kept.name == config.name) {
                duplicates.push(config.name);
            } else {
                unique.push(config);
            }
        }
        let statuses = unique
            .iter()
            .map(|config| ServerStatus {
                name: config.name.clone(),
                transport: config.transport.kind(),
                state: ServerState::Starting,
                restarts: 0,
            })
            .collect();
        let board = board::Board::new(statuses, notices_tx);
        for name in duplicates {
            board.notice(&name, format!("MCP server `{name}` is configured twice; the first one is used"));
        }
        let stop = CancellationToken::new();
        let launch = Arc::new(server::Launch {
            sandbox,
            startup_timeout: settings.startup_timeout,
            begin: begin.boxed().shared(),
        });
        let names = unique.iter().map(|config| config.name.clone()).collect();
        let actors = unique
            .into_iter()
            .enumerate()
            .map(|(index, config)| server::spawn(index, config, launch.clone(), board.clone(), stop.clone()))
            .collect();
        let shared =
            Shared { names, actors, view: board.subscribe(), _stop_when_dropped: stop.clone().drop_guard(), stop };
        (Self { shared: Arc::new(shared) }, notices)
    }

    /// Whether the session has no servers.
    pub fn is_empty(&self) -> bool {
        self.shared.names.is_empty()
    }

    /// Waits until no server is starting, or `timeout`; whether none is.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let mut view = self.shared.view.clone();
        matches!(tokio::time::timeout(timeout, view.wait_for(Snapshot::settled)).await, Ok(Ok(_)))
    }

    /// The tools offered now: those of ready servers, and of servers the next call restarts.
    pub fn tools(&self) -> Vec<McpTool> {
        self.shared.view.borrow().tools.as_ref().clone()
    }

    /// The offered tool the model calls `qualified`, which says which server and tool to call.
    pub fn find(&self, qualified: &str) -> Option<McpTool> {
        self.shared.view.borrow().tools.iter().find(|tool| tool.qualified == qualified).cloned()
    }

    /// Every server's state, in configuration order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.shared.view.borrow().servers.clone()
    }

    /// Calls `tool` (the server's own name for it) of `server`. Cancelling `cancel` abandons
    /// the call at once; the server is told with `notifications/cancelled`.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<CallOutcome, McpError> {
        let (server, tool) = (server.to_owned(), tool.to_owned());
        let Some(index) = self.shared.names.iter().position(|name| *name == server) else {
            return Err(McpError::UnknownServer { server });
        };
        let Some(actor) = self.shared.actors.get(index) else { return Err(McpError::UnknownServer { server }) };
        let (reply, answer) = oneshot::channel();
        let connection = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(McpError::Cancelled { server, tool }),
            connection = async {
                actor.send(server::Request::Acquire(reply)).await.ok()?;
                answer.await.ok()
            } => connection,
        };
        let connection = match connection {
            Some(Ok(connection)) => connection,
            Some(Err(why)) => return Err(McpError::Unavailable { server, why }),
            None => return Err(McpError::Unavailable { server, why: "it was shut down".to_owned() }),
        };
        // Dropped when cancelled, the request is abandoned and the server told.
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(McpError::Cancelled { server, tool }),
            result = protocol::call(&connection.client, &tool, arguments) => result,
        };
        match result {
            Ok(result) if result.is_object() => Ok(CallOutcome::read(&result)),
            Ok(other) => {
                let shown: String = other.to_string().chars().take(100).collect();
                Err(McpError::Failed { server, tool, message: format!("its result is not an object: {shown}") })
            }
            Err(rpc::RpcError::Server { message, .. }) => Err(McpError::Refused { server, tool, message }),
            Err(error @ (rpc::RpcError::Closed | rpc::RpcError::Transport(_))) => {
                let cause = match error {
                    rpc::RpcError::Transport(why) => Some(why),
                    rpc::RpcError::Closed | rpc::RpcError::Server { .. } => None,
                };
                let (reply, answer) = oneshot::channel();
                let lost = server::Request::Lost { generation: connection.generation, cause, reply };
                // The actor may take a while to answer (it waits for the process to exit, or is
                // restarting the server for another call): a cancel does not wait for it.
                let why = tokio::select! {
                    biased;
                    () = cancel.cancelled() => return Err(McpError::Cancelled { server, tool }),
                    why = async {
                        actor.send(lost).await.ok()?;
                        answer.await.ok()
                    } => why.unwrap_or_else(|| "it was shut down".to_owned()),
                };
                Err(McpError::Crashed { server, tool, why })
            }
        }
    }

    /// Stops every server: a stdio server's stdin is closed, it gets half a second to exit,
    /// then its process group is killed. Returns once all are stopped.
    pub async fn shutdown(&self) {
        self.shared.stop.cancel();
        let mut view = self.shared.view.clone();
        let stopped = |snapshot: &Snapshot| snapshot.servers.iter().all(|server| server.state == ServerState::Stopped);
        let _ = view.wait_for(stopped).await;
    }
}

//! What a session's servers publish: each server's state and tools, the tools the model is
//! offered (merged in server order, a name two tools would share kept by the first), and the
//! notices for the user. Each server's actor writes only its own slot; readers borrow the
//! latest snapshot from a `watch` channel.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::config::TransportKind;
use super::content::McpTool;

/// Where a server is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Being started (or restarted), handshake and tool list included.
    Starting,
    Ready {
        tools: usize,
    },
    Failed {
        why: String,
        /// The last lines it wrote to stderr (at most 20 lines, 2 KiB); empty if none.
        stderr: String,
        /// The next call of one of its tools starts it again (it stopped while running and has
        /// restarts left). Its tools stay offered meanwhile.
        restarts_on_call: bool,
    },
    /// Shut down with its session.
    Stopped,
}

/// One server as `/status` would show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    pub transport: TransportKind,
    pub state: ServerState,
    /// How many times it was restarted after stopping.
    pub restarts: u32,
}

/// Something the user should be told, e.g. "MCP server `x` failed to start: …".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub server: String,
    pub text: String,
}

/// The latest state of every server.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub servers: Vec<ServerStatus>,
    /// The tools offered, in server order then each server's order, names unique.
    pub tools: Arc<Vec<McpTool>>,
    /// Each server's own tools, as last listed.
    listed: Vec<Vec<McpTool>>,
    /// Collisions already reported, so each is told once.
    reported: BTreeSet<(String, String, String)>,
}

impl Snapshot {
    /// Whether no server is starting any more.
    pub fn settled(&self) -> bool {
        !self.servers.iter().any(|server| server.state == ServerState::Starting)
    }
}

/// The writing side, shared by the actors of one session.
#[derive(Clone)]
pub(super) struct Board {
    published: Arc<watch::Sender<Snapshot>>,
    notices: mpsc::UnboundedSender<Notice>,
}

impl Board {
    pub fn new(servers: Vec<ServerStatus>, notices: mpsc::UnboundedSender<Notice>) -> Self {
        let listed = vec![Vec::new(); servers.len()];
        let snapshot = Snapshot { servers, listed, ..Snapshot::default() };
        Self { published: Arc::new(watch::channel(snapshot).0), notices }
    }

    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.published.subscribe()
    }

    /// Sets server `index`'s state and restarts, and its tools when `tools` is given.
    pub fn set(&self, index: usize, state: ServerState, restarts: u32, tools: Option<Vec<McpTool>>) {
        self.published.send_modify(|snapshot| {
            if let Some(server) = snapshot.servers.get_mut(index) {
                tracing::debug!(server = %server.name, ?state, restarts, "MCP server state");
                server.state = state;
                server.restarts = restarts;
            }
            if let (Some(tools), Some(slot)) = (tools, snapshot.listed.get_mut(index)) {
                *slot = tools;
            }
            let collisions = merge(snapshot);
            for notice in collisions {
                let _ = self.notices.send(notice);
            }
        });
    }

    pub fn notice(&self, server: &str, text: String) {
        tracing::info!(server, "{text}");
        let _ = self.notices.send(Notice { server: server.to_owned(), text });
    }
}

/// Recomputes the offered tools; returns the collisions not reported before.
fn merge(snapshot: &mut Snapshot) -> Vec<Notice> {
    let mut offered: Vec<McpTool> = Vec::new();
    let mut notices = Vec::new();
    for (server, tools) in snapshot.servers.iter().zip(&snapshot.listed) {
        let usable = match &server.state {
            ServerState::Ready { .. } => true,
            ServerState::Failed { restarts_on_call, .. } => *restarts_on_call,
            ServerState::Starting | ServerState::Stopped => false,
        };
        if !usable {
            continue;
        }
        for tool in tools {
            let Some(first) = offered.iter().find(|kept| kept.qualified == tool.qualified) else {
                offered.push(tool.clone());
                continue;
            };
            let key = (tool.qualified.clone(), tool.server.clone(), tool.name.clone());
            if snapshot.reported.insert(key) {
                notices.push(Notice {
                    server: tool.server.clone(),
                    text: format!(
                        "MCP tool `{}` of server `{}` is left out: its name `{}` is already taken by tool `{}` of server `{}`",
                        tool.name, tool.server, tool.qualified, first.name, first.server
                    ),
                });
            }
        }
    }
    snapshot.tools = Arc::new(offered);
    notices
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::config::qualified;

    fn tool(server: &str, name: &str) -> McpTool {
        McpTool {
            server: server.to_owned(),
            name: name.to_owned(),
            qualified: qualified(server, name),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
            read_only: false,
        }
    }

    fn status(name: &str) -> ServerStatus {
        ServerStatus {
            name: name.to_owned(),
            transport: TransportKind::Stdio,
            state: ServerState::Starting,
            restarts: 0,
        }
    }

    #[test]
    fn a_shared_name_keeps_the_first_tool_and_is_reported_once() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let board = Board::new(vec![status("a_b"), status("a b")], tx);
        let view = board.subscribe();
        board.set(0, ServerState::Ready { tools: 2 }, 0, Some(vec![tool("a_b", "x"), tool("a_b", "y.z")]));
        board.set(1, ServerState::Ready { tools: 1 }, 0, Some(vec![tool("a b", "x")]));
        let names: Vec<String> = view.borrow().tools.iter().map(|t| format!("{}/{}", t.server, t.name)).collect();
        assert_eq!(names, ["a_b/x", "a_b/y.z"]);
        let notice = rx.try_recv().unwrap();
        assert_eq!(notice.server, "a b");
        assert!(notice.text.contains("`mcp__a_b__x` is already taken by tool `x` of server `a_b`"), "{}", notice.text);
        board.set(1, ServerState::Ready { tools: 1 }, 0, None);
        assert!(rx.try_recv().is_err(), "told once");
        board.set(0, ServerState::Stopped, 0, None);
        let names: Vec<String> = view.borrow().tools.iter().map(|t| t.server.clone()).collect();
        assert_eq!(names, ["a b"], "a stopped server's tools are no longer offered");
    }
}

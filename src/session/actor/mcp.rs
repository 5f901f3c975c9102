//! The session's MCP servers: given when a client opens the session (`session::Attach`, from
//! new, load, resume or fork: its servers first, then those of `config.toml`) and started once
//! the response that announces the session is written, kept while the client sends the same
//! list again, replaced when it sends another, stopped with the session. What the servers have
//! to tell the user (a server that failed to start, with its stderr) is sent as notices, after
//! that response too. A turn waits for servers still starting at most
//! `[mcp] startup_timeout_secs`, then offers the tools of those that are ready, and a stored
//! notice names the servers left behind (`setup::session_tools`).

use std::fmt::Write as _;

use futures::FutureExt;

use super::Actor;
use crate::mcp::{Sandbox, ServerConfig, ServerState, Servers};
use crate::session::{Attach, Update};

/// Resolves once the response that announces the session has been written (or will not be).
pub(super) type Announced = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// The running servers and the list they were started from.
pub(super) struct Mcp {
    configs: Vec<ServerConfig>,
    pub(super) servers: Servers,
}

impl Actor {
    /// Uses the client's servers (with the configured ones); the same list keeps the servers
    /// running, another one replaces them. Rules the opener gives (`exec --allow/--deny`) join
    /// the session's for as long as it stays live here; the client's additional directories
    /// replace the earlier ones.
    /// Returns the future that resolves once the response announcing the session is written.
    pub(super) fn attach(&mut self, attach: Attach) -> Announced {
        let Attach { mcp, notes, announced, rules, directories, system_prompt: _ } = attach;
        if let Some(directories) = directories {
            self.directories = directories;
        }
        for rule in rules {
            if !self.rules.contains(&rule) {
                self.rules.push(rule);
            }
        }
        self.publish_rules();
        let announced = async move {
            let _ = announced.await;
        }
        .boxed()
        .shared();
        let mut configs = mcp;
        configs.extend(self.services.config.mcp_servers.iter().cloned());
        if self.mcp.as_ref().is_some_and(|running| running.configs == configs) {
            self.announce(notes, announced.clone(), None);
            return announced;
        }
        // The old servers stop when their last handle goes: at once, or when the running turn,
        // which holds one, ends (its calls are not cut off under it).
        drop(self.mcp.take());
        let config = &self.services.config;
        let cwd = self.root.as_path();
        // The servers run where the session's commands do, refused what its rules reject.
        let roots = crate::tools::Workspace::new(cwd, &self.directories).roots().to_vec();
        let sandbox = Sandbox::new(&config.process, roots, crate::permissions::rejected_programs(&self.rules))
            .following(self.rulebook.clone());
        let (servers, notices) = Servers::start_after(configs.clone(), &config.mcp, sandbox, announced.clone());
        self.mcp = Some(Mcp { configs, servers });
        self.announce(notes, announced.clone(), Some(notices));
        announced
    }

    /// Sends `notes`, then every notice of the servers, once the session is announced.
    fn announce(
        &self,
        notes: Vec<String>,
        announced: impl Future<Output = ()> + Send + 'static,
        notices: Option<crate::mcp::Notices>,
    ) {
        if notes.is_empty() && notices.is_none() {
            return;
        }
        let sink = std::sync::Arc::clone(&self.services.sink);
        let id = self.row.id.clone();
        tokio::spawn(async move {
            announced.await;
            for text in notes {
                sink.send(&id, Update::EphemeralNotice { text, warning: true });
            }
            let Some(mut notices) = notices else { return };
            while let Some(notice) = notices.recv().await {
                sink.send(&id, Update::EphemeralNotice { text: notice.text, warning: true });
            }
        });
    }

    /// The servers a turn may use: those attached, or (a prompt for a session no client opened
    /// here, `cairn exec`) the configured ones, started now.
    pub(super) fn servers_for_turn(&mut self) -> Option<Servers> {
        if self.mcp.is_none() {
            let _announced = self.attach(Attach::alone());
        }
        self.mcp.as_ref().map(|mcp| mcp.servers.clone()).filter(|servers| !servers.is_empty())
    }

    /// Stops every server (killing each stdio server's process group).
    pub(super) async fn stop_mcp(&mut self) {
        if let Some(mcp) = self.mcp.take() {
            mcp.servers.shutdown().await;
        }
    }

    /// `/mcp`: every server, its state and its tools.
    pub(super) fn mcp_text(&self) -> String {
        let Some(mcp) = self.mcp.as_ref().filter(|mcp| !mcp.servers.is_empty()) else {
            return "No MCP servers: the editor passed none, and config.toml has no [mcp_servers].".to_owned();
        };
        let tools = mcp.servers.tools();
        let mut text = String::from("MCP servers:");
        for server in mcp.servers.status() {
            let offered: Vec<&str> =
                tools.iter().filter(|tool| tool.server == server.name).map(|tool| tool.qualified.as_str()).collect();
            let _ = write!(text, "\n- {} ({}): {}", server.name, server.transport.id(), state_text(&server.state));
            if server.restarts > 0 {
                let _ = write!(text, "; restarted {} of {} times", server.restarts, crate::mcp::MAX_RESTARTS);
            }
            if !offered.is_empty() {
                let _ = write!(text, "\n  tools: {}", offered.join(", "));
            }
            if let ServerState::Failed { stderr, .. } = &server.state
                && !stderr.trim().is_empty()
            {
                let _ = write!(text, "\n  stderr:\n{}", indent(stderr));
            }
        }
        text
    }

    /// One line for `/status`, if the session has servers.
    pub(super) fn mcp_status_line(&self) -> Option<String> {
        let mcp = self.mcp.as_ref().filter(|mcp| !mcp.servers.is_empty())?;
        let servers = mcp.servers.status();
        let count = |wanted: fn(&ServerState) -> bool| servers.iter().filter(|server| wanted(&server.state)).count();
        let ready = count(|state| matches!(state, ServerState::Ready { .. }));
        let starting = count(|state| matches!(state, ServerState::Starting));
        let failed = count(|state| matches!(state, ServerState::Failed { .. }));
        Some(format!(
            "MCP: {} servers, {ready} ready, {starting} starting, {failed} failed; {} tools (details: /mcp).",
            servers.len(),
            mcp.servers.tools().len()
        ))
    }
}

/// A server's state in words.
fn state_text(state: &ServerState) -> String {
    match state {
        ServerState::Starting => "starting".to_owned(),
        ServerState::Ready { tools } => format!("ready, {tools} tools"),
        ServerState::Failed { why, restarts_on_call: true, .. } => {
            format!("stopped ({why}); the next call of one of its tools starts it again")
        }
        ServerState::Failed { why, restarts_on_call: false, .. } => format!("failed: {why}"),
        ServerState::Stopped => "stopped".to_owned(),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    {line}")).collect::<Vec<_>>().join("\n")
}

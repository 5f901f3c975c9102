//! What an MCP server is before it runs: its name and how to reach it ([`ServerConfig`],
//! [`Transport`]), the session-wide settings ([`McpSettings`]), and the names its tools get.
//!
//! Server names from `config.toml` are checked by [`check_name`]: letters, digits, `_` and `-`,
//! and no `__`, because a tool is offered to the model as `mcp__<server>__<tool>` and `__` is
//! what separates the parts. Servers the editor passes are not refused for their names:
//! [`qualified`] replaces what a model API would not accept, and two tools that end up with the
//! same name are reported and only the first is kept.

use std::time::Duration;

/// At most this many characters in a tool name (the limit of the model APIs).
pub const MAX_TOOL_NAME: usize = 64;

/// How long a server gets to start and list its tools, unless `[mcp] startup_timeout_secs` says
/// otherwise.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One MCP server of a session, from `config.toml` or from the editor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
}

/// How a server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A program cairn starts, speaking JSON-RPC lines on its stdin and stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Set on top of the environment every child gets (which has no provider keys).
        env: Vec<(String, String)>,
        /// Whether it runs in the sandbox commands get (`[mcp_servers.<name>] sandbox`, on
        /// unless the user turned it off for this server).
        sandboxed: bool,
    },
    /// A streamable HTTP endpoint.
    Http { url: String, headers: Vec<(String, String)> },
}

/// Which kind of [`Transport`] a server uses, for status lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    Stdio,
    Http,
}

impl TransportKind {
    pub fn id(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::Http => "http",
        }
    }
}

impl Transport {
    pub fn kind(&self) -> TransportKind {
        match self {
            Transport::Stdio { .. } => TransportKind::Stdio,
            Transport::Http { .. } => TransportKind::Http,
        }
    }
}

impl ServerConfig {
    /// A server started as a program.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self {
            name: name.into(),
            transport: Transport::Stdio { command: command.into(), args, env: Vec::new(), sandboxed: true },
        }
    }

    /// A server reached over streamable HTTP.
    pub fn http(name: impl Into<String>, url: impl Into<String>, headers: Vec<(String, String)>) -> Self {
        Self { name: name.into(), transport: Transport::Http { url: url.into(), headers } }
    }

    /// The same server with `env` added to its environment (stdio servers only).
    #[must_use]
    pub fn with_env(mut self, vars: Vec<(String, String)>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.extend(vars);
        }
        self
    }
}

/// Settings for every session's servers (`[mcp]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpSettings {
    /// How long one start (spawn or connect, handshake, tool list) may take, and how long a
    /// prompt waits for servers still starting.
    pub startup_timeout: Duration,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self { startup_timeout: DEFAULT_STARTUP_TIMEOUT }
    }
}

/// Whether `name` may name a server in `config.toml`; the error says why not.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a server needs a name".to_owned());
    }
    if let Some(bad) = name.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "`{name}` holds `{bad}`; a server name may hold only letters, digits, `_` and `-` \
             (its tools are offered as mcp__<server>__<tool>)"
        ));
    }
    if name.contains("__") {
        return Err(format!(
            "`{name}` contains `__`, which separates server and tool in tool names (mcp__<server>__<tool>)"
        ));
    }
    Ok(())
}

/// The name a server's tool is offered under: `mcp__<server>__<tool>`, every character outside
/// `[A-Za-z0-9_-]` replaced by `_`, at most [`MAX_TOOL_NAME`] characters.
pub fn qualified(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}").chars().map(|c| if allowed(c) { c } else { '_' }).take(MAX_TOOL_NAME).collect()
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_tool_names_sanitized_and_capped() {
        assert!(check_name("github").is_ok());
        assert!(check_name("my-server_2").is_ok());
        for bad in ["", "my server", "a.b", "a__b", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("a b").unwrap_err().contains("`a b` holds ` `"));
        assert_eq!(qualified("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(qualified("my server", "get.thing/é"), "mcp__my_server__get_thing__");
        let long = qualified("s", &"x".repeat(100));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert!(long.starts_with("mcp__s__xxx"));
    }
}

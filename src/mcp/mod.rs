//! MCP (Model Context Protocol) clients: the servers of one session, whose tools the model may
//! call.
//!
//! So far what a server is before it runs (`config.rs`: names, transports, settings, the names
//! tools are offered under) and the checks of an HTTP server's URL and headers (`http.rs`),
//! which `config` runs when it reads `config.toml`.

mod config;
mod http;

pub use config::{
    DEFAULT_STARTUP_TIMEOUT, MAX_TOOL_NAME, McpSettings, ServerConfig, Transport, TransportKind, check_name, qualified,
};
pub use http::{check_url, header as check_header};

//! MCP over a connection (`rpc.rs`), the part of it cairn uses as a client: the handshake
//! (`initialize` offering [`PROTOCOL_VERSION`], the server's choice taken if it is one of
//! [`VERSIONS`], then `notifications/initialized`), the tool list read page by page (at most
//! [`MAX_PAGES`]), and a tool call. cairn declares no client capabilities: it offers the server
//! no roots, sampling or elicitation (`rpc.rs` answers those requests all the same).

use serde_json::{Map, Value, json};

use super::content::{McpTool, read_tools};
use super::rpc::{Client, RpcError};

/// The version of MCP cairn offers: the newest it speaks.
pub(super) const PROTOCOL_VERSION: &str = "2025-11-25";
/// The versions cairn speaks; what it uses of MCP is the same in each.
pub(super) const VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", PROTOCOL_VERSION];
/// At most this many pages of `tools/list`.
const MAX_PAGES: usize = 100;

/// The handshake, then the tool list; the error says which failed.
pub(super) async fn start(server: &str, client: &Client) -> Result<(Vec<McpTool>, Vec<String>), String> {
    let offers_tools = initialize(client).await.map_err(|why| format!("the MCP handshake failed: {why}"))?;
    if offers_tools { list_tools(server, client).await } else { Ok((Vec::new(), Vec::new())) }
}

/// `initialize` and `notifications/initialized`; whether the server offers tools.
async fn initialize(client: &Client) -> Result<bool, String> {
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "cairn", "version": env!("CARGO_PKG_VERSION")},
    });
    let result = client.request("initialize", params).await.map_err(|err| match err {
        RpcError::Server { message, .. } => format!("it refused `initialize`: {message}"),
        RpcError::Closed | RpcError::Transport(_) => err.to_string(),
    })?;
    let version = result.get("protocolVersion").and_then(Value::as_str);
    if !version.is_some_and(|version| VERSIONS.contains(&version)) {
        let named = match version {
            Some(version) => format!("MCP version `{}`", version.escape_debug().take(40).collect::<String>()),
            None => "no MCP version".to_owned(),
        };
        return Err(format!("it answered with {named}; cairn speaks {}", VERSIONS.join(", ")));
    }
    client
        .notify("notifications/initialized", Value::Null)
        .await
        .map_err(|err| format!("sending `notifications/initialized` failed: {err}"))?;
    Ok(result.pointer("/capabilities/tools").is_some_and(|tools| !tools.is_null()))
}

/// Every page of `tools/list`, read leniently: a tool that cannot be offered is left out with
/// a reason instead of failing the list.
pub(super) async fn list_tools(server: &str, client: &Client) -> Result<(Vec<McpTool>, Vec<String>), String> {
    let (mut tools, mut skipped) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match cursor.take() {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let page =
            client.request("tools/list", params).await.map_err(|err| format!("listing its tools failed: {err}"))?;
        let full = read_tools(server, &page, &mut tools, &mut skipped);
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        if full || cursor.is_none() {
            break;
        }
    }
    Ok((tools, skipped))
}

/// Calls `tool` with `arguments`; the result as the server sent it.
pub(super) async fn call(client: &Client, tool: &str, arguments: Map<String, Value>) -> Result<Value, RpcError> {
    client.request("tools/call", json!({"name": tool, "arguments": arguments})).await
}

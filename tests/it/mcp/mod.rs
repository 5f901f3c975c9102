//! MCP servers of a session, driven through `cairn::mcp::Servers` against the fixture server
//! (`fixture.rs`): over stdio as the `mcp_fixture` example, over HTTP in this process.
//!
//! This file: discovery and results. `failures.rs`: servers that fail to start or stop
//! mid-call, restarts and their limit, bad HTTP endpoints. `lifecycle.rs`: cancellation,
//! shutdown, the environment a server gets, tools that change. `streamable.rs`: the HTTP
//! client against servers that misbehave.

mod failures;
pub mod fixture;
mod http;
mod lifecycle;
mod sandbox;
mod session;
mod streamable;

use std::path::PathBuf;
use std::time::Duration;

use cairn::mcp::{Block, McpSettings, McpTool, Notices, Sandbox, ServerConfig, ServerState, Servers};
use cairn::process::{ChildEnv, ProcessPolicy};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// The fixture executable, which `cargo test` builds as an example next to the test binary.
pub fn fixture_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("examples").join("mcp_fixture");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it; after `cargo test --test it` alone, run `cargo build --example mcp_fixture`",
        path.display()
    );
    path
}

/// The fixture as a stdio server, started with `args`.
pub fn fixture(name: &str, args: &[&str]) -> ServerConfig {
    let args = args.iter().map(|arg| (*arg).to_owned()).collect();
    ServerConfig::stdio(name, fixture_exe().to_string_lossy(), args)
}

/// A session's servers in a fresh directory, whose children lose `HOME` (standing in for the
/// provider keys, which this process does not have) and get a fixed `PATH`.
pub struct Session {
    pub servers: Servers,
    pub notices: Notices,
    pub dir: tempfile::TempDir,
}

pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub fn start(configs: Vec<ServerConfig>) -> Session {
    start_with(configs, McpSettings::default())
}

pub fn start_with(configs: Vec<ServerConfig>, settings: McpSettings) -> Session {
    let dir = tempfile::tempdir().unwrap();
    let env = ChildEnv { remove: vec!["HOME".into()], path: Some(PATH.into()), set: Vec::new() };
    let policy = ProcessPolicy { env, ..ProcessPolicy::default() };
    let sandbox = Sandbox::new(&policy, vec![dir.path().to_path_buf()], Vec::new());
    let (servers, notices) = Servers::start(configs, &settings, sandbox);
    Session { servers, notices, dir }
}

impl Session {
    pub async fn ready(&self) {
        assert!(self.servers.ready(Duration::from_secs(20)).await, "{:?}", self.servers.status());
    }

    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: Value,
    ) -> Result<cairn::mcp::CallOutcome, cairn::mcp::McpError> {
        let arguments: Map<String, Value> = serde_json::from_value(arguments).unwrap();
        self.servers.call(server, tool, arguments, &CancellationToken::new()).await
    }

    /// Every notice so far.
    pub fn drain(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.notices.try_recv().ok()).map(|notice| notice.text).collect()
    }

    pub fn state(&self, server: &str) -> ServerState {
        self.servers.status().into_iter().find(|status| status.name == server).unwrap().state
    }
}

fn names(tools: &[McpTool]) -> Vec<&str> {
    tools.iter().map(|tool| tool.qualified.as_str()).collect()
}

#[tokio::test]
async fn tools_are_discovered_with_their_names_schemas_and_hints() {
    let mut session = start(vec![fixture("fx", &[])]);
    session.ready().await;
    let tools = session.servers.tools();
    assert_eq!(
        names(&tools),
        [
            "mcp__fx__echo",
            "mcp__fx__picture",
            "mcp__fx__fail",
            "mcp__fx__crash",
            "mcp__fx__slow",
            "mcp__fx__about",
            "mcp__fx__structured",
            "mcp__fx__grow",
            "mcp__fx__peek"
        ],
        "bad_schema is left out"
    );
    let peek = tools.iter().find(|tool| tool.name == "peek").unwrap();
    assert!(peek.read_only);
    assert!(!tools[0].read_only);
    assert_eq!(tools[0].description, "the echo tool");
    assert_eq!(tools[0].input_schema["properties"]["text"]["type"], "string");
    assert_eq!(session.state("fx"), ServerState::Ready { tools: 9 });
    let found = session.servers.find("mcp__fx__peek").unwrap();
    assert_eq!((found.server.as_str(), found.name.as_str()), ("fx", "peek"));
    assert!(session.servers.find("mcp__fx__bad_schema").is_none());
    let notices = session.drain();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("MCP server `fx`: tool `bad_schema` was left out: its input schema has type \"string\""),
        "{notices:?}"
    );
}

#[tokio::test]
async fn text_images_errors_and_structured_content_come_back() {
    let session = start(vec![fixture("fx", &[])]);
    session.ready().await;

    let echo = session.call("fx", "echo", json!({"text": "hi"})).await.unwrap();
    assert_eq!(echo.blocks, [Block::Text("echo: hi".into())]);
    assert!(!echo.is_error);
    assert_eq!(echo.model_text(), "echo: hi");

    let picture = session.call("fx", "picture", json!({})).await.unwrap();
    assert_eq!(picture.blocks[1], Block::Image { data: fixture::PNG.into(), mime_type: "image/png".into() });
    assert!(picture.model_text().starts_with("a red dot\n[image (image/png, 70 bytes)"), "{}", picture.model_text());
    assert_eq!(
        picture.editor_content(),
        [
            cairn::history::ToolContent::Text { text: "a red dot".into() },
            cairn::history::ToolContent::Image { mime_type: "image/png".into(), data: fixture::PNG.into() },
        ]
    );

    let failed = session.call("fx", "fail", json!({})).await.unwrap();
    assert!(failed.is_error);
    assert_eq!(failed.model_text(), "it failed on purpose");

    let structured = session.call("fx", "structured", json!({})).await.unwrap();
    assert_eq!(structured.model_text(), "{\"answer\":42}");

    let unknown = session.call("fx", "nope", json!({})).await.unwrap_err().to_string();
    assert!(
        unknown.contains("MCP server `fx` answered the call to `nope` with an error: unknown tool nope"),
        "{unknown}"
    );
    let nowhere = session.call("other", "echo", json!({})).await.unwrap_err().to_string();
    assert_eq!(nowhere, "there is no MCP server `other` in this session");
}

#[tokio::test]
async fn the_http_transport_lists_and_calls_tools() {
    let url = http::serve().await;
    let session = start(vec![ServerConfig::http("web", url, vec![("X-Test".into(), "1".into())])]);
    session.ready().await;
    assert_eq!(session.state("web"), ServerState::Ready { tools: 9 });
    assert!(names(&session.servers.tools()).contains(&"mcp__web__echo"));
    let echo = session.call("web", "echo", json!({"text": "over http"})).await.unwrap();
    assert_eq!(echo.model_text(), "echo: over http");
    let picture = session.call("web", "picture", json!({})).await.unwrap();
    assert_eq!(picture.blocks.len(), 2);
}

#[tokio::test]
async fn starting_waits_for_no_server() {
    // Servers that never answer the handshake: a start that waited for them would return only
    // after the startup timeout, and find them failed.
    let mute = (0..5).map(|i| ServerConfig::stdio(format!("mute{i}"), "sleep", vec!["60".into()])).collect();
    let session = start_with(mute, McpSettings { startup_timeout: Duration::from_secs(60) });
    assert!(session.servers.status().iter().all(|status| status.state == ServerState::Starting));
    assert!(session.servers.tools().is_empty());
    drop(session);
    // Servers that answer come in on their own.
    let session = start((0..5).map(|i| fixture(&format!("fx{i}"), &[])).collect());
    session.ready().await;
    assert_eq!(session.servers.tools().len(), 45);
}

//! The tools of a session's MCP servers, each offered to the model as `mcp__<server>__<tool>`
//! with the server's own description and input schema.
//!
//! cairn cannot see what such a tool does, so a call is judged by its name ([`Permission::Tool`]
//! through `PermissionRequest::for_tool`): it asks unless a rule or the mode allows it, and a
//! tool that declares itself read-only runs beside other reads. The arguments are passed on as
//! the model wrote them (an object); the server checks them against its schema. A result
//! becomes text for the model and content for the editor; a server's `isError` is a failed call.
//!
//! [`Permission::Tool`]: crate::permissions::Permission::Tool

use serde_json::{Map, Value};

use super::{Access, Registry, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::ToolKind;
use crate::mcp::{McpTool, Servers};
use crate::permissions::PermissionRequest;

/// One tool of one server, with the handle its calls go through.
pub struct ServerTool {
    tool: McpTool,
    servers: Servers,
}

impl ServerTool {
    pub fn new(tool: McpTool, servers: Servers) -> Self {
        Self { tool, servers }
    }
}

/// Adds the tools the session's servers offer now to `registry`, after the built-in ones.
pub fn add_server_tools(registry: &mut Registry, servers: &Servers) {
    for tool in servers.tools() {
        let name = tool.qualified.clone();
        if let Err(err) = registry.add(ServerTool::new(tool, servers.clone())) {
            tracing::warn!(%name, %err, "an MCP tool was left out");
        }
    }
}

#[async_trait::async_trait]
impl Tool for ServerTool {
    type Args = Map<String, Value>;

    /// The name the model calls it by, `mcp__<server>__<tool>` (not the server's own name).
    #[allow(clippy::misnamed_getters)]
    fn name(&self) -> &str {
        &self.tool.qualified
    }

    fn description(&self) -> &str {
        &self.tool.description
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }

    fn parameters(&self) -> Value {
        self.tool.input_schema.clone()
    }

    fn access(&self, _args: &Self::Args) -> Access {
        if self.tool.read_only { Access::ReadOnly } else { Access::Other }
    }

    fn title(&self, _args: &Self::Args, _workspace: &Workspace) -> String {
        format!("{} ({} MCP server)", self.tool.name, self.tool.server)
    }

    fn permission(&self, _args: &Self::Args, _workspace: &Workspace) -> Option<PermissionRequest> {
        let owner = format!("the MCP server `{}`", self.tool.server);
        Some(PermissionRequest::for_tool(&self.tool.qualified, &owner, self.tool.read_only))
    }

    async fn run(&self, args: &Self::Args, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let outcome = self
            .servers
            .call(&self.tool.server, &self.tool.name, args.clone(), &ctx.cancel)
            .await
            .map_err(|err| ToolError::Tell(format!("{err}.")))?;
        Ok(ToolOutcome {
            output: outcome.model_text(),
            content: outcome.editor_content(),
            failed: outcome.is_error,
            ..ToolOutcome::default()
        })
    }
}

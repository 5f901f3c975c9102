//! `bash`: a shell command in the working directory, in an editor terminal or as a local process
//! ([`super::shell`] runs it). The permission is judged on the command line as bash would read
//! it, wrappers and nested commands included (`crate::permissions`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, shell};
use crate::history::{ToolContent, ToolKind};
use crate::permissions::PermissionRequest;

/// The longest a shell command may run when the model does not say.
pub const BASH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest a shell command may run at all.
pub const BASH_MAX_TIMEOUT: Duration = Duration::from_secs(600);

pub struct Bash;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    pub command: String,
    /// Default 120000, at most 600000
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// A few words saying what the command does
    #[serde(default)]
    pub description: Option<String>,
}

impl BashArgs {
    /// How long the command may run: what the model asked for, within the maximum.
    pub fn timeout(&self) -> Duration {
        self.timeout_ms.map_or(BASH_DEFAULT_TIMEOUT, Duration::from_millis).min(BASH_MAX_TIMEOUT)
    }
}

#[async_trait::async_trait]
impl Tool for Bash {
    type Args = BashArgs;

    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        "Run a shell command in the working directory with bash. Output (stdout and stderr) and the exit status are returned."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }

    fn parameters(&self) -> Value {
        super::schema_of::<BashArgs>()
    }

    fn access(&self, _args: &BashArgs) -> Access {
        Access::Execute
    }

    fn title(&self, args: &BashArgs, _workspace: &Workspace) -> String {
        match &args.description {
            Some(description) if !description.trim().is_empty() => description.trim().to_owned(),
            _ => format!("Run `{}`", args.command.lines().next().unwrap_or_default()),
        }
    }

    fn permission(&self, args: &BashArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_command(&args.command, workspace))
    }

    async fn preview(&self, args: &BashArgs, _ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        Ok(vec![ToolContent::Text { text: args.command.clone() }])
    }

    fn timeout(&self, args: &BashArgs, _default: Duration) -> Duration {
        args.timeout()
    }

    async fn run(&self, args: &BashArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let timeout = args.timeout();
        if ctx.host.runs_terminals() {
            shell::delegated(args, ctx, timeout).await
        } else {
            shell::local(args, ctx, timeout).await
        }
    }
}

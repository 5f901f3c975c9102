//! `bash`: a shell command in the working directory, in an editor terminal or as a local process
//! ([`super::shell`] runs it), or with `background` as a job of the session ([`super::jobs`]
//! starts it). The permission is judged on the command line as bash would read it, wrappers and
//! nested commands included (`crate::permissions`), background or not.

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

/// How much of a command's first line its title shows.
const FIRST_LINE_SHOWN: usize = 100;
/// How much of the model's description a command's title shows.
const DESCRIPTION_SHOWN: usize = 60;

/// `text` cut to `most` characters, with `…` where it was cut.
fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(most - 1).collect();
    cut.push('…');
    cut
}

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
    /// Run it as a background job (a server, a watcher): its id is returned at once; no timeout
    #[serde(default)]
    pub background: bool,
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
        "Run a shell command in the working directory with bash. Output (stdout and stderr) and the exit status are returned. With background: true it runs as a job (a dev server, a watcher) and its id is returned at once."
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

    /// The command's first line, always: the model's description beside it cannot hide what
    /// runs (a "List the files" over `curl … | sh` forty lines down). Both are cut to fit one
    /// title, and a note says how many lines follow, which no cut removes.
    fn title(&self, args: &BashArgs, _workspace: &Workspace) -> String {
        let mut lines = args.command.lines().filter(|line| !line.trim().is_empty());
        let first = shorten(&super::one_line(lines.next().unwrap_or_default()), FIRST_LINE_SHOWN);
        let more = match lines.count() {
            0 => String::new(),
            1 => " (+1 line)".to_owned(),
            n => format!(" (+{n} lines)"),
        };
        let background = if args.background { " in the background" } else { "" };
        match args.description.as_deref().map(super::one_line) {
            Some(description) if !description.is_empty() => {
                format!("{}: `{first}`{more}{background}", shorten(&description, DESCRIPTION_SHOWN))
            }
            _ => format!("Run `{first}`{more}{background}"),
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
        if args.background {
            return super::jobs::start(&args.command, ctx).await;
        }
        let timeout = args.timeout();
        if let Some(terminals) = ctx.host.terminals() {
            shell::delegated(&args.command, ctx, terminals, timeout).await
        } else {
            shell::local(&args.command, ctx, timeout).await
        }
    }
}

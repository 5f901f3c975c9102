//! The tools the model can call. Each built-in tool is one file that implements [`Tool`]: `read`,
//! `write`, `edit`, `glob`, `grep`, `bash`, `todo`, `question` and `exit_plan` (plan mode's
//! way out, reviewed by the user), and `fetch` (a module of its
//! own: web pages, their addresses judged, HTML made Markdown); `jobs` (a module of its own)
//! holds a session's background jobs and `job_output`, `job_input` and `job_kill`;
//! `web_search` (through a search endpoint of the user's) joins them when one is configured,
//! `task` (a sub-agent) when the session can run sub-agents, through a [`task::Delegate`] the
//! session layer provides, and the tools of the session's MCP servers through
//! [`add_server_tools`] (`mcp.rs`). Named
//! agents are read in `agents`, skills found and loaded in `skill` (its tool joins them when
//! there are skills); what tools share is in `fs`, `beneath`, `page`, `search`, `shell` and
//! `front` (front matter), and what the editor offers in `host`; `diagnostics` runs the
//! project's checkers (or the file's language server) around `write` and `edit` and says what
//! an edit introduced.
//!
//! A [`Tool`] is typed by its arguments: it names itself, describes itself to the model (the
//! argument schema is derived from the argument struct, never written beside it), and for one
//! parsed call says how it touches the world ([`Access`]), how the editor shows it (title, kind,
//! locations), what permission it needs, what the user is shown when asked (its preview), how long
//! it may run, and how it runs (a [`ToolOutcome`], or a [`ToolError`] for the model) through a
//! [`ToolContext`]: through the
//! editor ([`Host`]) when it offers the capability, else on the local disk and in local
//! processes. A [`Registry`] holds a session's tools behind one object-safe face: the turn asks
//! it for the catalog, to parse a call into an [`Invocation`], and runs that. Nothing here knows
//! the wire protocol or the database.

pub mod agents;
mod bash;
pub mod checkpoint;
mod diagnostics;
mod edit;
mod exit_plan;
mod fetch;
pub mod front;
pub(crate) mod fs;
mod glob;
mod grep;
pub mod host;
pub mod image;
pub mod jobs;
mod mcp;
mod page;
mod question;
mod read;
mod registry;
mod schema;
mod search;
mod shell;
pub mod skill;
pub mod task;
mod todo;
pub mod web_search;
mod write;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::history::{Location, PlanEntry, ToolContent, ToolImage, ToolKind};
use crate::permissions::{Mode, PermissionRequest, Rule};

pub use crate::workspace::Workspace;
pub use bash::{BASH_DEFAULT_TIMEOUT, BASH_MAX_TIMEOUT};
pub use diagnostics::allowance as check_allowance;
pub use diagnostics::lsp::Lsp;
pub use exit_plan::NAME as EXIT_PLAN;
pub use fetch::Fetching;
pub use host::{Host, NoEditor};
pub use image::{Images, ImagesRead};
pub use jobs::Jobs;
pub use mcp::add_server_tools;
pub use registry::{Invocation, Registry, one_line};
pub use schema::schema_of;

/// What a tool needs while it runs.
pub struct ToolContext {
    pub workspace: Workspace,
    pub host: Arc<dyn Host>,
    /// Cancelled with the turn; a tool that outlives it is killed.
    pub cancel: CancellationToken,
    /// Partial content (a shell's output so far, a terminal id) to show while the tool runs.
    pub progress: Option<mpsc::UnboundedSender<Vec<ToolContent>>>,
    /// How local commands are started: environment, sandbox, supervisor.
    pub process: Arc<crate::process::ProcessPolicy>,
    /// The programs the turn's rules reject (`permissions::rejected_programs`): a local
    /// command's supervisor refuses to start them.
    pub rejected: Vec<Vec<String>>,
    /// The session's rules as they change, for what lives across turns (a background job, a
    /// language server) to follow; `None` keeps the rules a process starts with.
    pub rulebook: Option<Arc<crate::process::Rulebook>>,
    /// For a call that starts a sub-agent ([`Access::Delegate`]): what the sub-agent inherits.
    pub caller: Option<Caller>,
    /// The id of the call being run: the card the editor shows it on.
    pub call_id: String,
    /// Held while the call waits for the user, which stops the turn's clock.
    pub user_wait: host::UserWait,
    /// What the model in use does with images (`read` of a picture).
    pub images: Images,
    /// The rules that reject reads, for a tool that reads files the permission did not name one
    /// by one (`grep` over a directory skips what they cover).
    pub read_rejections: Vec<Rule>,
    /// The target the call's permission was decided on (`PermissionRequest::target`), when it
    /// was: `read`, `write` and `edit` act only while their path still leads there.
    pub judged: Option<String>,
    /// The client's trace context of the turn's prompt: a sub-agent's model requests carry it too.
    pub trace: Option<crate::trace::TraceContext>,
    /// What `fetch` may reach, and the mode and rules its redirects are judged under.
    pub fetch: Fetching,
    /// The session's background jobs (`bash` with `background`, `job_output`, …).
    pub jobs: Jobs,
    /// The checkers `write` and `edit` run on the file they change (`[checks]`).
    pub checks: Arc<crate::config::Checks>,
    /// The session's language servers, asked about a file no checker covers (`[lsp]`).
    pub lsp: Lsp,
}

/// What a sub-agent inherits from the turn whose call starts it: never more than that turn has.
pub struct Caller {
    /// The session's mode, the same watch: a change reaches the sub-agent's next decision.
    pub mode: watch::Receiver<Mode>,
    /// A copy of the turn's permission rules as they are when the call starts.
    pub rules: Vec<Rule>,
    /// Whether the session is a principal's of `cairn serve --auth` (see `Toolbox::confined`).
    pub confined: bool,
}

/// A finished tool run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutcome {
    /// The result for the model.
    pub output: String,
    /// Images the model is sent with `output` (and the editor shows).
    pub images: Vec<ToolImage>,
    /// What the editor shows.
    pub content: Vec<ToolContent>,
    /// The plan to show, for `todo`.
    pub plan: Option<Vec<PlanEntry>>,
    /// The tool ran but reports failure (a non-zero exit status).
    pub failed: bool,
    /// A note for the model's next request only (not part of the result).
    pub reminder: Option<String>,
    /// What the call spent on model requests (a sub-agent's), in USD; it counts toward the
    /// session's cost.
    pub cost: f64,
}

/// A tool call that could not happen, split by who hears of it.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ToolError {
    /// The call failed and the model is told why (so is the user): it may try another way,
    /// and the turn goes on.
    #[error("{0}")]
    Tell(String),
    /// Nothing the model could do would mend it (the session can no longer be saved, say):
    /// the turn ends with it.
    #[error(transparent)]
    Fatal(Fatal),
}

/// Why a tool call ends the turn: the error as it happened, whatever its type (the turn gives
/// one of its own, such as a sub-agent's failed save, back as it was).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct Fatal(pub Arc<dyn std::error::Error + Send + Sync>);

impl ToolError {
    /// A failure that ends the turn.
    pub fn fatal(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        ToolError::Fatal(Fatal(Arc::new(err)))
    }
}

/// How a call touches the world, which decides whether calls may run side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads only: runs beside other reads.
    ReadOnly,
    /// Changes files.
    Write,
    /// Runs a command.
    Execute,
    /// Does what cairn cannot see (a tool of another program): runs alone.
    Other,
    /// Starts a sub-agent, whose own calls are judged one by one: runs beside other sub-agents.
    Delegate,
}

/// One tool, typed by its arguments. Implementations are registered in a [`Registry`], which
/// erases the argument type so that every tool, built-in or not, has one face to the turn.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The parsed arguments of one call.
    type Args: DeserializeOwned + std::fmt::Debug + Send + Sync + 'static;

    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What the model reads about it.
    fn description(&self) -> &str;
    /// The editor's icon for it, known from its name before its arguments arrive.
    fn kind(&self) -> ToolKind;
    /// The JSON schema of its arguments.
    fn parameters(&self) -> Value;

    /// Parses a call's JSON arguments; the error tells the model what to fix.
    fn parse(&self, input: &str) -> Result<Self::Args, ToolError> {
        registry::parse_args(self.name(), input, &|| self.parameters())
    }
    fn access(&self, args: &Self::Args) -> Access;
    /// A short description of the call for the editor.
    fn title(&self, args: &Self::Args, workspace: &Workspace) -> String;
    /// The files the call touches, at their final targets.
    fn locations(&self, _args: &Self::Args, _workspace: &Workspace) -> Vec<Location> {
        Vec::new()
    }
    /// What must be allowed before the call runs; `None` needs nothing.
    fn permission(&self, args: &Self::Args, workspace: &Workspace) -> Option<PermissionRequest>;
    /// Reading the file the call changes, for calls that change one (what its preview reads).
    fn read_request(&self, _args: &Self::Args, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }
    /// What the user sees when asked about the call (an edit's diff, a command line). `Err` when
    /// the call cannot succeed as it is.
    async fn preview(&self, _args: &Self::Args, _ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        Ok(Vec::new())
    }
    /// How long the call may run, given the turn's default for tools.
    fn timeout(&self, _args: &Self::Args, default: Duration) -> Duration {
        default
    }
    /// Runs the call. Dropping the future stops it (and kills any process it started).
    async fn run(&self, args: &Self::Args, ctx: &ToolContext) -> Result<ToolOutcome, ToolError>;
}

/// A path argument resolved to where an access lands: every symlink followed, so what the
/// tool touches is what the permission judged (and a link is never written through blindly).
fn target(ctx: &ToolContext, path: &str) -> PathBuf {
    real_target(&ctx.workspace, &ctx.workspace.resolve(path))
}

/// [`target`], for a tool that opens the file: when the call's permission was decided on a
/// target, the path must lead there still. A symlink swapped since then (to send the access out
/// of the workspace) fails the call instead; the file is then opened without following any
/// symlink on the way (`beneath`), so what it opens is what was judged.
fn judged_target(ctx: &ToolContext, path: &str) -> Result<PathBuf, ToolError> {
    let landed = target(ctx, path);
    match &ctx.judged {
        Some(judged) if *judged != landed.display().to_string() => Err(ToolError::Tell(format!(
            "{path} now leads to {}, not to {judged} where it led when this call was allowed, so nothing was done; \
             make the call again to have it judged anew",
            landed.display()
        ))),
        Some(_) | None => Ok(landed),
    }
}

/// Opens a read's judged final target as `read` does: beneath the workspace root that holds it,
/// following no symlink, only a regular file; `None` when it is missing. For the session's
/// `@file` references of a command.
pub fn open_judged(workspace: &Workspace, target: &std::path::Path) -> Result<Option<(std::fs::File, u64)>, ToolError> {
    fs::open_regular(workspace.roots(), target, &workspace.display(target))
}

/// `path`'s final target, or `path` itself when it cannot be resolved (the OS then reports why).
fn real_target(workspace: &Workspace, path: &std::path::Path) -> PathBuf {
    workspace.locate(path).real.unwrap_or_else(|| path.to_path_buf())
}

/// How a path argument is shown in a title: where a symlink sends it too, as
/// `notes.txt → /elsewhere/notes.txt`.
fn shown(workspace: &Workspace, path: &str) -> String {
    let given = workspace.resolve(path);
    let landed = real_target(workspace, &given);
    if landed == given {
        workspace.display(&given)
    } else {
        format!("{} → {}", workspace.display(&given), workspace.display(&landed))
    }
}

/// The location of a path argument, at its final target.
fn location(workspace: &Workspace, path: &str, line: Option<u32>) -> Vec<Location> {
    let landed = real_target(workspace, &workspace.resolve(path));
    vec![Location { path: landed.display().to_string(), line }]
}

/// Runs blocking work (a walk, a read) on a blocking thread; dropping the returned future cancels
/// the token the work is given, which it checks to stop early.
async fn blocking<T, F>(ctx: &ToolContext, work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(CancellationToken) -> Result<T, ToolError> + Send + 'static,
{
    let cancel = ctx.cancel.child_token();
    let _stop_on_drop = cancel.clone().drop_guard();
    tokio::task::spawn_blocking(move || work(cancel))
        .await
        .map_err(|err| ToolError::Tell(format!("the tool stopped unexpectedly: {err}")))?
}

#[cfg(test)]
mod tests;

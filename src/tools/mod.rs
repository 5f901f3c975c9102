//! The tools the model can call: `read`, `write`, `edit`, `glob`, `grep`, `bash` and `todo`.
//!
//! [`Invocation::parse`] turns a model's call (name + JSON arguments) into a typed invocation or an
//! error the model can act on. An invocation knows how to describe itself (title, kind,
//! locations), what permission it needs, and how to run through a [`ToolContext`]: through the
//! editor ([`Host`]) when it offers the capability, else on the local disk and in local processes.
//! Nothing here knows the wire protocol or the database.

mod fs;
pub mod host;
mod page;
mod search;
mod shell;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::history::{Location, PlanEntry, PlanPriority, PlanStatus, ToolContent, ToolKind};
use crate::permissions::{Permission, PermissionRequest};

pub use crate::workspace::Workspace;
pub use host::{Host, NoEditor};

/// Every tool, in the order the model sees them.
pub const NAMES: [&str; 7] = ["read", "write", "edit", "glob", "grep", "bash", "todo"];

/// The editor's icon for a tool, known from its name before its arguments arrive.
pub fn kind_for(name: &str) -> ToolKind {
    match name {
        "read" => ToolKind::Read,
        "write" | "edit" => ToolKind::Edit,
        "glob" | "grep" => ToolKind::Search,
        "bash" => ToolKind::Execute,
        "todo" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

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
}

/// A finished tool run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutcome {
    /// The result for the model.
    pub output: String,
    /// What the editor shows.
    pub content: Vec<ToolContent>,
    /// The plan to show, for `todo`.
    pub plan: Option<Vec<PlanEntry>>,
    /// The tool ran but reports failure (a non-zero exit status).
    pub failed: bool,
    /// A note for the model's next request only (not part of the result).
    pub reminder: Option<String>,
}

/// A tool run that could not happen; the message is for the model and the user.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// Whether calls may run side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    Write,
    Execute,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    pub path: String,
    #[serde(default)]
    pub offset: Option<u32>,
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    pub pattern: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    pub command: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TodoArgs {
    pub items: Vec<TodoItem>,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    pub content: String,
    pub status: PlanStatus,
    #[serde(default)]
    pub priority: Option<PlanPriority>,
}

/// A validated tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum Invocation {
    Read(ReadArgs),
    Write(WriteArgs),
    Edit(EditArgs),
    Glob(GlobArgs),
    Grep(GrepArgs),
    Bash(BashArgs),
    Todo(TodoArgs),
}

/// The longest a shell command may run when the model does not say.
pub const BASH_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest a shell command may run at all.
pub const BASH_MAX_TIMEOUT: Duration = Duration::from_secs(600);

fn args<T: DeserializeOwned>(name: &str, input: &str) -> Result<T, ToolError> {
    let value: Value = if input.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(input).map_err(|err| {
            ToolError(format!(
                "The arguments of `{name}` are not valid JSON ({err}). Send a JSON object matching its schema."
            ))
        })?
    };
    serde_path_to_error::deserialize(value).map_err(|err| {
        let schema = spec(name).map(|s| s["parameters"].to_string()).unwrap_or_default();
        ToolError(format!("Invalid arguments for `{name}`: {} (at `{}`). Expected: {schema}", err.inner(), err.path()))
    })
}

impl Invocation {
    /// Validates a model's call; the error tells the model what to fix.
    pub fn parse(name: &str, input: &str) -> Result<Self, ToolError> {
        Ok(match name {
            "read" => Invocation::Read(args(name, input)?),
            "write" => Invocation::Write(args(name, input)?),
            "edit" => Invocation::Edit(args(name, input)?),
            "glob" => Invocation::Glob(args(name, input)?),
            "grep" => Invocation::Grep(args(name, input)?),
            "bash" => Invocation::Bash(args(name, input)?),
            "todo" => Invocation::Todo(args(name, input)?),
            _ => return Err(ToolError(format!("Unknown tool `{name}`. Available tools: {}.", NAMES.join(", ")))),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Invocation::Read(_) => "read",
            Invocation::Write(_) => "write",
            Invocation::Edit(_) => "edit",
            Invocation::Glob(_) => "glob",
            Invocation::Grep(_) => "grep",
            Invocation::Bash(_) => "bash",
            Invocation::Todo(_) => "todo",
        }
    }

    pub fn kind(&self) -> ToolKind {
        kind_for(self.name())
    }

    pub fn access(&self) -> Access {
        match self {
            Invocation::Read(_) | Invocation::Glob(_) | Invocation::Grep(_) | Invocation::Todo(_) => Access::ReadOnly,
            Invocation::Write(_) | Invocation::Edit(_) => Access::Write,
            Invocation::Bash(_) => Access::Execute,
        }
    }

    /// A short description for the editor. A path that a symlink sends elsewhere is shown with
    /// where it lands: `Write notes.txt → /elsewhere/notes.txt`.
    pub fn title(&self, workspace: &Workspace) -> String {
        let shown = |path: &str| {
            let given = workspace.resolve(path);
            let landed = real_target(workspace, &given);
            if landed == given {
                workspace.display(&given)
            } else {
                format!("{} → {}", workspace.display(&given), workspace.display(&landed))
            }
        };
        match self {
            Invocation::Read(read) => match (read.offset, read.limit) {
                (None, None) => format!("Read {}", shown(&read.path)),
                (offset, limit) => {
                    let from = offset.unwrap_or(1);
                    let to = limit
                        .map_or_else(String::new, |limit| from.saturating_add(limit.saturating_sub(1)).to_string());
                    format!("Read {} ({from}–{to})", shown(&read.path))
                }
            },
            Invocation::Write(write) => format!("Write {}", shown(&write.path)),
            Invocation::Edit(edit) => format!("Edit {}", shown(&edit.path)),
            Invocation::Glob(glob) => {
                format!("Find `{}` in {}", glob.pattern, shown(glob.path.as_deref().unwrap_or(".")))
            }
            Invocation::Grep(grep) => {
                format!("Search `{}` in {}", grep.pattern, shown(grep.path.as_deref().unwrap_or(".")))
            }
            Invocation::Bash(bash) => match &bash.description {
                Some(description) if !description.trim().is_empty() => description.trim().to_owned(),
                _ => format!("Run `{}`", bash.command.lines().next().unwrap_or_default()),
            },
            Invocation::Todo(_) => "Update the plan".to_owned(),
        }
    }

    /// The files this call touches, at their final targets.
    pub fn locations(&self, workspace: &Workspace) -> Vec<Location> {
        let at = |path: &str, line: Option<u32>| {
            let landed = real_target(workspace, &workspace.resolve(path));
            vec![Location { path: landed.display().to_string(), line }]
        };
        match self {
            Invocation::Read(read) => at(&read.path, read.offset),
            Invocation::Write(WriteArgs { path, .. }) | Invocation::Edit(EditArgs { path, .. }) => at(path, None),
            Invocation::Glob(GlobArgs { path, .. }) | Invocation::Grep(GrepArgs { path, .. }) => {
                path.as_deref().map(|p| at(p, None)).unwrap_or_default()
            }
            Invocation::Bash(_) | Invocation::Todo(_) => Vec::new(),
        }
    }

    /// Reading the file this call changes, for calls that change one (what its preview reads).
    pub fn read_request(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        match self {
            Invocation::Write(WriteArgs { path, .. }) | Invocation::Edit(EditArgs { path, .. }) => {
                Some(PermissionRequest::for_path(Permission::Read, workspace, &workspace.resolve(path)))
            }
            Invocation::Read(_)
            | Invocation::Glob(_)
            | Invocation::Grep(_)
            | Invocation::Bash(_)
            | Invocation::Todo(_) => None,
        }
    }

    /// What must be allowed before this call runs; `None` needs nothing.
    pub fn permission(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        let path_request = |permission: Permission, path: &str| {
            let resolved = workspace.resolve(path);
            PermissionRequest::for_path(permission, workspace, &resolved)
        };
        match self {
            Invocation::Read(read) => Some(path_request(Permission::Read, &read.path)),
            Invocation::Glob(GlobArgs { path, .. }) | Invocation::Grep(GrepArgs { path, .. }) => {
                Some(path_request(Permission::Read, path.as_deref().unwrap_or(".")))
            }
            Invocation::Write(WriteArgs { path, .. }) | Invocation::Edit(EditArgs { path, .. }) => {
                Some(path_request(Permission::Edit, path))
            }
            Invocation::Bash(bash) => Some(PermissionRequest::for_command(&bash.command, workspace)),
            Invocation::Todo(_) => None,
        }
    }

    /// What the user sees when asked about this call: the whole-file diff an edit would make,
    /// the command line a shell call would run. `Err` when the call cannot succeed as it is.
    pub async fn preview(&self, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        match self {
            Invocation::Write(write) => fs::preview_write(write, ctx).await,
            Invocation::Edit(edit) => fs::preview_edit(edit, ctx).await,
            Invocation::Bash(bash) => Ok(vec![ToolContent::Text { text: bash.command.clone() }]),
            Invocation::Read(_) | Invocation::Glob(_) | Invocation::Grep(_) | Invocation::Todo(_) => Ok(Vec::new()),
        }
    }

    /// How long the call may run.
    pub fn timeout(&self, default: Duration) -> Duration {
        match self {
            Invocation::Bash(bash) => {
                bash.timeout_ms.map_or(BASH_DEFAULT_TIMEOUT, Duration::from_millis).min(BASH_MAX_TIMEOUT)
            }
            Invocation::Read(_)
            | Invocation::Write(_)
            | Invocation::Edit(_)
            | Invocation::Glob(_)
            | Invocation::Grep(_)
            | Invocation::Todo(_) => default,
        }
    }

    /// Runs the call. Dropping the future stops it (and kills any process it started).
    pub async fn run(&self, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        match self {
            Invocation::Read(read) => fs::read(read, ctx).await,
            Invocation::Write(write) => fs::write(write, ctx).await,
            Invocation::Edit(edit) => fs::edit(edit, ctx).await,
            Invocation::Glob(glob) => search::glob(glob, ctx).await,
            Invocation::Grep(grep) => search::grep(grep, ctx).await,
            Invocation::Bash(bash) => shell::bash(bash, ctx).await,
            Invocation::Todo(todo) => Ok(todo_plan(todo)),
        }
    }
}

fn todo_plan(todo: &TodoArgs) -> ToolOutcome {
    let plan: Vec<PlanEntry> = todo
        .items
        .iter()
        .map(|item| PlanEntry {
            content: item.content.clone(),
            status: item.status,
            priority: item.priority.unwrap_or(PlanPriority::Medium),
        })
        .collect();
    let done = plan.iter().filter(|e| e.status == PlanStatus::Completed).count();
    let working = plan.iter().filter(|e| e.status == PlanStatus::InProgress).count();
    let reminder = (working > 1).then(|| {
        format!(
            "{working} todo items are in_progress at once. Work on one item at a time: finish it, mark it completed, then start the next."
        )
    });
    ToolOutcome {
        output: format!("The plan now has {} items, {done} completed.", plan.len()),
        content: Vec::new(),
        plan: Some(plan),
        failed: false,
        reminder,
    }
}

/// Every tool's schema, built once.
pub fn specs() -> &'static [Value] {
    static SPECS: std::sync::LazyLock<Vec<Value>> =
        std::sync::LazyLock::new(|| NAMES.iter().filter_map(|name| spec(name)).collect());
    &SPECS
}

/// The schema of one tool as the model sees it: `{name, description, parameters}`.
pub fn spec(name: &str) -> Option<Value> {
    let (description, parameters) = match name {
        "read" => (
            "Read a text file. Lines are numbered from 1; by default the first 2000 lines are returned. Use offset and limit for more.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Absolute, or relative to the working directory"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"}
            }, "required": ["path"], "additionalProperties": false}),
        ),
        "write" => (
            "Create or overwrite a file with the given content.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"}
            }, "required": ["path", "content"], "additionalProperties": false}),
        ),
        "edit" => (
            "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true; include enough context to make it unique.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
                "replace_all": {"type": "boolean", "default": false}
            }, "required": ["path", "old_string", "new_string"], "additionalProperties": false}),
        ),
        "glob" => (
            "Find files whose path matches a glob pattern such as **/*.rs, skipping files ignored by .gitignore.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"}, "path": {"type": "string", "description": "Directory to search (default: the working directory)"}
            }, "required": ["pattern"], "additionalProperties": false}),
        ),
        "grep" => (
            "Search file contents with a regular expression, skipping files ignored by .gitignore. Returns path:line:text matches.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "A regular expression"},
                "path": {"type": "string", "description": "File or directory to search (default: the working directory)"},
                "glob": {"type": "string", "description": "Only files matching this glob, e.g. *.rs"},
                "case_insensitive": {"type": "boolean", "default": false}
            }, "required": ["pattern"], "additionalProperties": false}),
        ),
        "bash" => (
            "Run a shell command in the working directory with bash. Output (stdout and stderr) and the exit status are returned.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Default 120000, at most 600000"},
                "description": {"type": "string", "description": "A few words saying what the command does"}
            }, "required": ["command"], "additionalProperties": false}),
        ),
        "todo" => (
            "Replace the plan (the todo list shown to the user) with these items.",
            json!({"type": "object", "properties": {
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "content": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    "priority": {"type": "string", "enum": ["high", "medium", "low"]}
                }, "required": ["content", "status"], "additionalProperties": false}}
            }, "required": ["items"], "additionalProperties": false}),
        ),
        _ => return None,
    };
    Some(json!({"name": name, "description": description, "parameters": parameters}))
}

/// A path argument resolved to where an access lands: every symlink followed, so what the
/// tool touches is what the permission judged (and a link is never written through blindly).
fn target(ctx: &ToolContext, path: &str) -> PathBuf {
    real_target(&ctx.workspace, &ctx.workspace.resolve(path))
}

/// `path`'s final target, or `path` itself when it cannot be resolved (the OS then reports why).
fn real_target(workspace: &Workspace, path: &std::path::Path) -> PathBuf {
    workspace.locate(path).real.unwrap_or_else(|| path.to_path_buf())
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
        .map_err(|err| ToolError(format!("the tool stopped unexpectedly: {err}")))?
}

#[cfg(test)]
mod tests;

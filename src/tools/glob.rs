//! `glob`: the files under a directory whose paths match a pattern, `.gitignore` respected,
//! at most [`MAX_PATHS`] of them, found on a blocking thread that stops when the call does.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::search::{compile_glob, text, walk};
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, blocking, location, shown, target};
use crate::history::{Location, ToolKind};
use crate::permissions::{Permission, PermissionRequest};

pub struct Glob;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    pub pattern: String,
    /// Directory to search (default: the working directory)
    #[serde(default)]
    pub path: Option<String>,
}

#[async_trait::async_trait]
impl Tool for Glob {
    type Args = GlobArgs;

    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files whose path matches a glob pattern such as **/*.rs, skipping files ignored by .gitignore."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Search
    }

    fn parameters(&self) -> Value {
        super::schema_of::<GlobArgs>()
    }

    fn access(&self, _args: &GlobArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &GlobArgs, workspace: &Workspace) -> String {
        format!("Find `{}` in {}", args.pattern, shown(workspace, args.path.as_deref().unwrap_or(".")))
    }

    fn locations(&self, args: &GlobArgs, workspace: &Workspace) -> Vec<Location> {
        args.path.as_deref().map(|path| location(workspace, path, None)).unwrap_or_default()
    }

    fn permission(&self, args: &GlobArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        let path = workspace.resolve(args.path.as_deref().unwrap_or("."));
        Some(PermissionRequest::for_path(Permission::Read, workspace, &path))
    }

    async fn run(&self, args: &GlobArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        glob(args, ctx).await
    }
}

/// The most paths `glob` returns.
const MAX_PATHS: usize = 1_000;

async fn glob(args: &GlobArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let root = target(ctx, args.path.as_deref().unwrap_or("."));
    let matcher = compile_glob(&args.pattern)?;
    let shown_root = ctx.workspace.display(&root);
    let found = blocking(ctx, {
        let root = root.clone();
        move |cancel| {
            let mut found = Vec::new();
            let mut more = false;
            for path in walk(&root, &cancel)? {
                let relative = path.strip_prefix(&root).unwrap_or(&path);
                if matcher.is_match(relative) {
                    if found.len() == MAX_PATHS {
                        more = true;
                        break;
                    }
                    found.push(path);
                }
            }
            found.sort();
            Ok((found, more))
        }
    })
    .await?;
    let (paths, more) = found;
    if paths.is_empty() {
        return Ok(text(format!("No files match `{}` in {shown_root}.", args.pattern)));
    }
    let mut output: String = paths.iter().map(|p| ctx.workspace.display(p) + "\n").collect();
    if more {
        output.push_str(&format!("(only the first {MAX_PATHS} matches are listed; narrow the pattern)\n"));
    }
    Ok(text(output))
}

//! `write`: creates or replaces a whole file, showing the diff against what it held.
//!
//! Through the editor when it offers `fs/writeTextFile` (it then tracks and reviews the change),
//! else on the disk through [`super::fs`]'s safe replacement. The project's checkers run around
//! it ([`super::diagnostics`]) and the result says what it introduced.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::fs::{Old, load, save};
use super::page::human_size;
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, judged_target, location, shown, target};
use crate::history::{Location, ToolContent, ToolKind};
use crate::permissions::{Permission, PermissionRequest};

pub struct Write;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

#[async_trait::async_trait]
impl Tool for Write {
    type Args = WriteArgs;

    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Create or overwrite a file with the given content."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }

    fn parameters(&self) -> Value {
        super::schema_of::<WriteArgs>()
    }

    fn access(&self, _args: &WriteArgs) -> Access {
        Access::Write
    }

    fn title(&self, args: &WriteArgs, workspace: &Workspace) -> String {
        format!("Write {}", shown(workspace, &args.path))
    }

    fn locations(&self, args: &WriteArgs, workspace: &Workspace) -> Vec<Location> {
        location(workspace, &args.path, None)
    }

    fn permission(&self, args: &WriteArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_path(Permission::Edit, workspace, &workspace.resolve(&args.path)))
    }

    fn read_request(&self, args: &WriteArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_path(Permission::Read, workspace, &workspace.resolve(&args.path)))
    }

    async fn preview(&self, args: &WriteArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        preview(args, ctx).await
    }

    async fn run(&self, args: &WriteArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        write(args, ctx).await
    }
}

async fn write(args: &WriteArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = judged_target(ctx, &args.path)?;
    let old = load(ctx, &path).await?;
    let checks = super::diagnostics::before(ctx, &path, !matches!(old, Old::Missing)).await?;
    // The checks take a while: the diff is against the file as it is replaced.
    let old = match checks {
        Some(_) => load(ctx, &path).await?,
        None => old,
    };
    save(ctx, &path, &args.content).await?;
    let shown = ctx.workspace.display(&path);
    let lines = args.content.lines().count();
    let mut output = match &old {
        Old::Missing => format!("Created {shown} ({lines} lines)."),
        Old::Text(_) | Old::NotUtf8 { .. } | Old::TooLarge(_) => format!("Wrote {shown} ({lines} lines)."),
    };
    let (old_text, unshown) = match old {
        Old::Missing => (None, None),
        Old::Text(text) | Old::NotUtf8 { shown: text, .. } => (Some(text), None),
        Old::TooLarge(size) => (None, Some(size)),
    };
    let mut content =
        vec![ToolContent::Diff { path: path.display().to_string(), old_text, new_text: args.content.clone() }];
    if let Some(size) = unshown {
        let note = format!(
            "The previous content ({}) is too large to show; the diff shows only the new text.",
            human_size(size)
        );
        output.push(' ');
        output.push_str(&note);
        content.push(ToolContent::Text { text: note });
    }
    let mut outcome = ToolOutcome { output, content, ..ToolOutcome::default() };
    super::diagnostics::after(ctx, checks, &mut outcome).await;
    Ok(outcome)
}

/// The diff `write` would show, for the permission question. A file that cannot be read
/// (a link loop, no access) shows no diff; the question still comes, and says why.
async fn preview(args: &WriteArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
    let path = target(ctx, &args.path);
    let old_text = match load(ctx, &path).await {
        Ok(Old::Text(text) | Old::NotUtf8 { shown: text, .. }) => Some(text),
        Ok(Old::Missing | Old::TooLarge(_)) | Err(_) => None,
    };
    Ok(vec![ToolContent::Diff { path: path.display().to_string(), old_text, new_text: args.content.clone() }])
}

//! `edit`: replaces exact text in a file, once or everywhere, showing the diff.
//!
//! The old text must occur exactly once unless `replace_all` is set, so an edit never lands
//! somewhere the model did not mean. Files that are not UTF-8 or larger than
//! [`super::fs::MAX_WHOLE_BYTES`] are refused with the way to change them instead. The
//! project's checkers run around it ([`super::diagnostics`]) and the result says what it
//! introduced; the edit applies to the file as it is once they ran, so a change saved meanwhile
//! is kept.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::fs::{MAX_WHOLE_BYTES, Old, load, not_found, save};
use super::page::human_size;
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, judged_target, location, shown, target};
use crate::history::{Location, ToolContent, ToolKind};
use crate::permissions::{Permission, PermissionRequest};

pub struct Edit;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

#[async_trait::async_trait]
impl Tool for Edit {
    type Args = EditArgs;

    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true; include enough context to make it unique."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }

    fn parameters(&self) -> Value {
        super::schema_of::<EditArgs>()
    }

    fn access(&self, _args: &EditArgs) -> Access {
        Access::Write
    }

    fn title(&self, args: &EditArgs, workspace: &Workspace) -> String {
        format!("Edit {}", shown(workspace, &args.path))
    }

    fn locations(&self, args: &EditArgs, workspace: &Workspace) -> Vec<Location> {
        location(workspace, &args.path, None)
    }

    fn permission(&self, args: &EditArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_path(Permission::Edit, workspace, &workspace.resolve(&args.path)))
    }

    fn read_request(&self, args: &EditArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_path(Permission::Read, workspace, &workspace.resolve(&args.path)))
    }

    async fn preview(&self, args: &EditArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        preview(args, ctx).await
    }

    async fn run(&self, args: &EditArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        edit(args, ctx).await
    }
}

async fn edit(args: &EditArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = judged_target(ctx, &args.path)?;
    let shown = ctx.workspace.display(&path);
    let old = editable(load(ctx, &path).await?, &shown)?;
    // An edit that cannot apply is refused before any check runs.
    let applied = apply(args, &old, &shown)?;
    let checks = super::diagnostics::before(ctx, &path, true).await?;
    // The checks take a while: a change saved meanwhile (the user's editor) is edited, not lost.
    let (old, (new, replaced)) = match checks {
        Some(_) => {
            let old = editable(load(ctx, &path).await?, &shown)?;
            let applied = apply(args, &old, &shown)?;
            (old, applied)
        }
        None => (old, applied),
    };
    save(ctx, &path, &new).await?;
    let content = vec![ToolContent::Diff { path: path.display().to_string(), old_text: Some(old), new_text: new }];
    let mut outcome = ToolOutcome {
        output: format!("Edited {shown}: replaced {replaced} occurrence{}.", if replaced == 1 { "" } else { "s" }),
        content,
        ..ToolOutcome::default()
    };
    super::diagnostics::after(ctx, checks, &mut outcome).await;
    Ok(outcome)
}

/// The diff `edit` would show, for the permission question; `Err` if the edit cannot apply to
/// the file as it is (then there is nothing to ask about).
async fn preview(args: &EditArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
    let path = target(ctx, &args.path);
    let shown = ctx.workspace.display(&path);
    let Ok(old) = load(ctx, &path).await else { return Ok(Vec::new()) };
    let old = editable(old, &shown)?;
    let (new, _) = apply(args, &old, &shown)?;
    Ok(vec![ToolContent::Diff { path: path.display().to_string(), old_text: Some(old), new_text: new }])
}

/// The text `edit` may change, or why it may not.
fn editable(old: Old, shown: &str) -> Result<String, ToolError> {
    match old {
        Old::Text(text) => Ok(text),
        Old::Missing => Err(not_found(shown)),
        Old::NotUtf8 { valid_up_to, .. } => Err(ToolError::Tell(format!(
            "{shown} is not valid UTF-8 (from byte {valid_up_to}); edit would replace every invalid byte in it. Change it with a command (sed, iconv, a script) through bash."
        ))),
        Old::TooLarge(size) => Err(ToolError::Tell(format!(
            "{shown} is {}; edit changes files of up to {}. Change a file this large with a command (sed, a script) through bash.",
            human_size(size),
            human_size(MAX_WHOLE_BYTES)
        ))),
    }
}

/// `old` with the edit applied, and how many occurrences it replaced.
fn apply(args: &EditArgs, old: &str, shown: &str) -> Result<(String, usize), ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::Tell("old_string is empty; use `write` to create or replace a whole file".into()));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::Tell("old_string and new_string are the same; there is nothing to change".into()));
    }
    let found = old.matches(&args.old_string).count();
    match (found, args.replace_all) {
        (0, _) => Err(ToolError::Tell(format!(
            "old_string was not found in {shown}. Read the file and copy the text exactly, whitespace included."
        ))),
        (_, true) => Ok((old.replace(&args.old_string, &args.new_string), found)),
        (1, false) => Ok((old.replacen(&args.old_string, &args.new_string, 1), 1)),
        (_, false) => Err(ToolError::Tell(format!(
            "old_string occurs {found} times in {shown}; include more surrounding lines to make it unique, or set replace_all"
        ))),
    }
}

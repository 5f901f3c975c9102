//! `read`, `write` and `edit`: through the editor's buffers when it offers `fs/*`, else on disk.
//!
//! Reading through the editor sees unsaved changes; writing through it lets the editor track and
//! review the edit. Local writes go to a temporary file that replaces the target, keeping its
//! permissions, so a crash never leaves half a file.

use std::io::ErrorKind;
use std::path::Path;

use super::{EditArgs, ReadArgs, ToolContext, ToolError, ToolOutcome, WriteArgs, target};
use crate::history::ToolContent;

/// Lines `read` returns when the model gives no limit.
const DEFAULT_LINES: u32 = 2_000;
/// The most `read` returns at once, whatever the limit.
const MAX_READ_BYTES: usize = 200 * 1024;
/// Longer lines are cut, so one minified line cannot fill the context.
const MAX_LINE_CHARS: usize = 2_000;

pub async fn read(args: &ReadArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let text = load(ctx, &path).await?.ok_or_else(|| not_found(ctx, &path))?;
    let total = text.lines().count();
    let first = usize::try_from(args.offset.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
    let limit = usize::try_from(args.limit.unwrap_or(DEFAULT_LINES).max(1)).unwrap_or(usize::MAX);
    if first > total.max(1) {
        return Err(ToolError(format!(
            "{} has {total} lines; offset {first} is past its end",
            ctx.workspace.display(&path)
        )));
    }
    let mut output = String::new();
    let mut last = first - 1;
    for (number, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        if output.len() + line.len() > MAX_READ_BYTES {
            break;
        }
        let line: String = if line.chars().count() > MAX_LINE_CHARS {
            line.chars().take(MAX_LINE_CHARS).chain(" [line cut]".chars()).collect()
        } else {
            line.to_owned()
        };
        output.push_str(&format!("{:>6}\t{line}\n", number + 1));
        last = number + 1;
    }
    if total == 0 {
        output.push_str("(the file is empty)\n");
    } else if first > 1 || last < total {
        output.push_str(&format!("(lines {first}–{last} of {total}; use offset and limit to read others)\n"));
    }
    Ok(ToolOutcome { output, ..ToolOutcome::default() })
}

pub async fn write(args: &WriteArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let old = load(ctx, &path).await?;
    save(ctx, &path, &args.content).await?;
    let shown = ctx.workspace.display(&path);
    let lines = args.content.lines().count();
    let output = match &old {
        Some(_) => format!("Wrote {shown} ({lines} lines)."),
        None => format!("Created {shown} ({lines} lines)."),
    };
    let content =
        vec![ToolContent::Diff { path: path.display().to_string(), old_text: old, new_text: args.content.clone() }];
    Ok(ToolOutcome { output, content, ..ToolOutcome::default() })
}

pub async fn edit(args: &EditArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let shown = ctx.workspace.display(&path);
    let old = load(ctx, &path).await?.ok_or_else(|| not_found(ctx, &path))?;
    let (new, replaced) = apply(args, &old, &shown)?;
    save(ctx, &path, &new).await?;
    let content = vec![ToolContent::Diff { path: path.display().to_string(), old_text: Some(old), new_text: new }];
    Ok(ToolOutcome {
        output: format!("Edited {shown}: replaced {replaced} occurrence{}.", if replaced == 1 { "" } else { "s" }),
        content,
        ..ToolOutcome::default()
    })
}

/// The diff `write` would show, for the permission question. A file that cannot be read
/// (a link loop, no access) shows no diff; the question still comes, and says why.
pub async fn preview_write(args: &WriteArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
    let path = target(ctx, &args.path);
    let Ok(old) = load(ctx, &path).await else { return Ok(Vec::new()) };
    Ok(vec![ToolContent::Diff { path: path.display().to_string(), old_text: old, new_text: args.content.clone() }])
}

/// The diff `edit` would show, for the permission question; `Err` if the edit cannot apply to
/// the file as it is (then there is nothing to ask about).
pub async fn preview_edit(args: &EditArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
    let path = target(ctx, &args.path);
    let shown = ctx.workspace.display(&path);
    let Ok(old) = load(ctx, &path).await else { return Ok(Vec::new()) };
    let old = old.ok_or_else(|| not_found(ctx, &path))?;
    let (new, _) = apply(args, &old, &shown)?;
    Ok(vec![ToolContent::Diff { path: path.display().to_string(), old_text: Some(old), new_text: new }])
}

/// `old` with the edit applied, and how many occurrences it replaced.
fn apply(args: &EditArgs, old: &str, shown: &str) -> Result<(String, usize), ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError("old_string is empty; use `write` to create or replace a whole file".into()));
    }
    if args.old_string == args.new_string {
        return Err(ToolError("old_string and new_string are the same; there is nothing to change".into()));
    }
    let found = old.matches(&args.old_string).count();
    match (found, args.replace_all) {
        (0, _) => Err(ToolError(format!(
            "old_string was not found in {shown}. Read the file and copy the text exactly, whitespace included."
        ))),
        (_, true) => Ok((old.replace(&args.old_string, &args.new_string), found)),
        (1, false) => Ok((old.replacen(&args.old_string, &args.new_string, 1), 1)),
        (_, false) => Err(ToolError(format!(
            "old_string occurs {found} times in {shown}; include more surrounding lines to make it unique, or set replace_all"
        ))),
    }
}

fn not_found(ctx: &ToolContext, path: &Path) -> ToolError {
    ToolError(format!("{} does not exist; use glob to find the right path", ctx.workspace.display(path)))
}

/// The file's text, or `None` if it does not exist.
async fn load(ctx: &ToolContext, path: &Path) -> Result<Option<String>, ToolError> {
    let shown = ctx.workspace.display(path);
    if ctx.host.reads_files() {
        // The editor reports a missing file as an error; check the disk to tell it apart.
        if tokio::fs::metadata(path).await.is_err() {
            return Ok(None);
        }
        return ctx
            .host
            .read_text_file(path)
            .await
            .map(Some)
            .map_err(|err| ToolError(format!("cannot read {shown}: {err}")));
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => {
            if bytes.iter().take(8192).any(|b| *b == 0) {
                return Err(ToolError(format!("{shown} is a binary file; it cannot be read as text")));
            }
            Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
        }
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) if err.kind() == ErrorKind::IsADirectory => {
            Err(ToolError(format!("{shown} is a directory; use glob to list its files")))
        }
        Err(err) => Err(ToolError(format!("cannot read {shown}: {err}"))),
    }
}

async fn save(ctx: &ToolContext, path: &Path, text: &str) -> Result<(), ToolError> {
    let shown = ctx.workspace.display(path);
    let failed = |err: &dyn std::fmt::Display| ToolError(format!("cannot write {shown}: {err}"));
    if ctx.host.writes_files() {
        return ctx.host.write_text_file(path, text).await.map_err(|err| failed(&err));
    }
    let Some(dir) = path.parent() else { return Err(failed(&"it has no parent directory")) };
    tokio::fs::create_dir_all(dir).await.map_err(|err| failed(&err))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = dir.join(format!(".{name}.cairn-{}", std::process::id()));
    tokio::fs::write(&temporary, text).await.map_err(|err| failed(&err))?;
    if let Ok(metadata) = tokio::fs::metadata(path).await {
        let _ = tokio::fs::set_permissions(&temporary, metadata.permissions()).await;
    }
    if let Err(err) = tokio::fs::rename(&temporary, path).await {
        let _ = tokio::fs::remove_file(&temporary).await;
        return Err(failed(&err));
    }
    Ok(())
}

//! `glob` and `grep`: gitignore-aware walks with capped results, on a blocking thread that stops
//! when the call is cancelled or times out.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use tokio_util::sync::CancellationToken;

use super::{GlobArgs, GrepArgs, ToolContext, ToolError, ToolOutcome, blocking, target};
use crate::history::ToolContent;

/// The most paths `glob` returns.
const MAX_PATHS: usize = 1_000;
/// The most matching lines `grep` returns.
const MAX_MATCHES: usize = 200;
/// Matching lines longer than this are cut.
const MAX_MATCH_CHARS: usize = 500;

pub async fn glob(args: &GlobArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
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

pub async fn grep(args: &GrepArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let root = target(ctx, args.path.as_deref().unwrap_or("."));
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .build(&args.pattern)
        .map_err(|err| ToolError(format!("`{}` is not a valid regular expression: {err}", args.pattern)))?;
    let only = args.glob.as_deref().map(compile_glob).transpose()?;
    let workspace = ctx.workspace.clone();
    let shown_root = ctx.workspace.display(&root);
    let (lines, more) = blocking(ctx, move |cancel| {
        let mut searcher = SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
        let mut lines: Vec<String> = Vec::new();
        let mut more = false;
        for path in walk(&root, &cancel)? {
            if let Some(only) = &only {
                let relative = path.strip_prefix(&root).unwrap_or(&path);
                let name = path.file_name().map(Path::new).unwrap_or(relative);
                if !only.is_match(relative) && !only.is_match(name) {
                    continue;
                }
            }
            let shown = workspace.display(&path);
            let result = searcher.search_path(
                &matcher,
                &path,
                UTF8(|number, line| {
                    if lines.len() == MAX_MATCHES {
                        more = true;
                        return Ok(false);
                    }
                    let line = line.trim_end_matches(['\n', '\r']);
                    let line: String = line.chars().take(MAX_MATCH_CHARS).collect();
                    lines.push(format!("{shown}:{number}:{line}"));
                    Ok(true)
                }),
            );
            if let Err(err) = result {
                tracing::debug!(path = %path.display(), %err, "grep skipped a file");
            }
            if more {
                break;
            }
        }
        Ok((lines, more))
    })
    .await?;
    if lines.is_empty() {
        return Ok(text(format!("No matches for `{}` in {shown_root}.", args.pattern)));
    }
    let mut output = lines.join("\n");
    output.push('\n');
    if more {
        output
            .push_str(&format!("(only the first {MAX_MATCHES} matches are listed; narrow the pattern or the path)\n"));
    }
    Ok(text(output))
}

fn text(output: String) -> ToolOutcome {
    ToolOutcome { content: vec![ToolContent::Text { text: output.clone() }], output, ..ToolOutcome::default() }
}

fn compile_glob(pattern: &str) -> Result<GlobMatcher, ToolError> {
    Glob::new(pattern)
        .map(|glob| glob.compile_matcher())
        .map_err(|err| ToolError(format!("`{pattern}` is not a valid glob: {err}")))
}

/// Every file under `root` (or `root` itself if it is a file) that `.gitignore` does not exclude.
fn walk(root: &Path, cancel: &CancellationToken) -> Result<Vec<PathBuf>, ToolError> {
    if !root.exists() {
        return Err(ToolError(format!("{} does not exist", root.display())));
    }
    let mut files = Vec::new();
    let walker = WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(ToolError("cancelled".into()));
        }
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_some_and(|t| t.is_file()) {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

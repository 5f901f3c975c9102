//! `grep`: lines matching a regular expression, with ripgrep's engine, `.gitignore` respected.
//!
//! It runs on a blocking thread that stops when the call is cancelled or times out, inside a big
//! file too, and bounds what one file can cost: huge files are left out of directory searches, a
//! line longer than the searcher may hold skips its file, and the result lists what was not
//! searched. Files whose names start with `.env` are left out of directory searches (they may
//! hold secrets), and so are those `[sandbox] hidden` hides (`Workspace::hides`, as written
//! and at their final target) unless the search is of a hidden directory the user let it
//! read; named as the path, they are searched once the permission allows it. A file a
//! rule rejects reading (judged at its final target, as `read` would be) is never searched: the
//! result only says how many were skipped for that.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::page::human_size;
use super::search::{compile_glob, text, walk};
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, blocking, location, shown, target};
use crate::history::{Location, ToolKind};
use crate::permissions::{Decision, Mode, Permission, PermissionRequest, Rule};

pub struct Grep;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// A regular expression
    pub pattern: String,
    /// File or directory to search (default: the working directory)
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob, e.g. *.rs
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub case_insensitive: bool,
}

#[async_trait::async_trait]
impl Tool for Grep {
    type Args = GrepArgs;

    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents with a regular expression, skipping files ignored by .gitignore. Returns path:line:text matches."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Search
    }

    fn parameters(&self) -> Value {
        super::schema_of::<GrepArgs>()
    }

    fn access(&self, _args: &GrepArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &GrepArgs, workspace: &Workspace) -> String {
        format!("Search `{}` in {}", args.pattern, shown(workspace, args.path.as_deref().unwrap_or(".")))
    }

    fn locations(&self, args: &GrepArgs, workspace: &Workspace) -> Vec<Location> {
        args.path.as_deref().map(|path| location(workspace, path, None)).unwrap_or_default()
    }

    fn permission(&self, args: &GrepArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        let path = workspace.resolve(args.path.as_deref().unwrap_or("."));
        Some(PermissionRequest::for_path(Permission::Read, workspace, &path))
    }

    async fn run(&self, args: &GrepArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        grep(args, ctx).await
    }
}

/// The most matching lines `grep` returns.
const MAX_MATCHES: usize = 200;
/// Matching lines longer than this are cut.
const MAX_MATCH_CHARS: usize = 500;
/// Files larger than this are left out of a directory search, and listed. A search runs at
/// 0.3–5 GB/s depending on the pattern, so a few such files would take seconds of the call's
/// time, and a file that big is data (a log, a dump, a dataset) whose matches would crowd out the
/// sources'. Named as `path`, a file of any size is searched.
const MAX_WALKED_FILE: u64 = 64 << 20;
/// The longest line a search holds in memory. The searcher's buffer grows to hold a whole line,
/// so without a limit one giant line could take gigabytes; minified bundles and source maps run
/// to a few MiB a line, and stay searchable. A file with a longer line is skipped, and listed.
const MAX_LINE_BYTES: usize = 8 << 20;
/// Skipped files named in the result; the rest are counted.
const MAX_SKIPPED_LISTED: usize = 10;

async fn grep(args: &GrepArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let root = target(ctx, args.path.as_deref().unwrap_or("."));
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(args.case_insensitive)
        .build(&args.pattern)
        .map_err(|err| ToolError::Tell(format!("`{}` is not a valid regular expression: {err}", args.pattern)))?;
    let only = args.glob.as_deref().map(compile_glob).transpose()?;
    let workspace = ctx.workspace.clone();
    let shown_root = ctx.workspace.display(&root);
    // A hidden directory the user let the search read is searched whole, as `.env.d` is.
    let hidden_root = ctx.workspace.hides(&root);
    let rejections = ctx.read_rejections.clone();
    let (lines, more, skipped, rejected) = blocking(ctx, move |cancel| {
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .heap_limit(Some(MAX_LINE_BYTES))
            .build();
        let mut lines: Vec<String> = Vec::new();
        let mut more = false;
        let mut skipped: Vec<(String, String)> = Vec::new();
        let mut rejected = 0usize;
        for path in walk(&root, &cancel)? {
            if cancel.is_cancelled() {
                return Err(ToolError::Tell("cancelled".into()));
            }
            if let Some(only) = &only {
                let relative = path.strip_prefix(&root).unwrap_or(&path);
                let name = path.file_name().map(Path::new).unwrap_or(relative);
                if !only.is_match(relative) && !only.is_match(name) {
                    continue;
                }
            }
            if rejects(&rejections, &workspace, &path) {
                rejected += 1;
                continue;
            }
            let shown = workspace.display(&path);
            let inner = path.strip_prefix(&root).unwrap_or(&path);
            let secret =
                inner.components().any(|c| c.as_os_str().to_string_lossy().to_ascii_lowercase().starts_with(".env"))
                    || (!hidden_root && workspace.hides(&path));
            if secret && path != root {
                skipped.push((shown, "may hold secrets; name it as path to search it (cairn asks first)".into()));
                continue;
            }
            let file = match open_file(&path) {
                Ok(Some((file, size))) if size > MAX_WALKED_FILE && path != root => {
                    let reason = format!(
                        "{}, over {}; name it as path to search it",
                        human_size(size),
                        human_size(MAX_WALKED_FILE)
                    );
                    skipped.push((shown, reason));
                    drop(file);
                    continue;
                }
                Ok(Some((file, _))) => file,
                Ok(None) => continue,
                Err(err) => {
                    skipped.push((shown, err.to_string()));
                    continue;
                }
            };
            let result = searcher.search_reader(
                &matcher,
                Interruptible { inner: file, cancel: &cancel },
                Lossy(|number, line| {
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
            if cancel.is_cancelled() {
                return Err(ToolError::Tell("cancelled".into()));
            }
            if let Err(err) = result {
                tracing::debug!(path = %path.display(), %err, "grep skipped a file");
                let reason = if err.to_string().contains("allocation limit") {
                    format!("a line is longer than {}", human_size(MAX_LINE_BYTES as u64))
                } else {
                    err.to_string()
                };
                skipped.push((workspace.display(&path), reason));
            }
            if more {
                break;
            }
        }
        Ok((lines, more, skipped, rejected))
    })
    .await?;
    let mut notes = String::new();
    if rejected > 0 {
        let files = if rejected == 1 { "1 file was".to_owned() } else { format!("{rejected} files were") };
        notes.push_str(&format!("({files} not searched: a rule denies reading them)\n"));
    }
    if more {
        notes.push_str(&format!("(only the first {MAX_MATCHES} matches are listed; narrow the pattern or the path)\n"));
    }
    if !skipped.is_empty() {
        let count = skipped.len();
        notes.push_str(&format!("({count} file{} not searched:\n", if count == 1 { "" } else { "s" }));
        for (path, reason) in skipped.iter().take(MAX_SKIPPED_LISTED) {
            notes.push_str(&format!("  {path}: {reason}\n"));
        }
        if count > MAX_SKIPPED_LISTED {
            notes.push_str(&format!("  and {} more\n", count - MAX_SKIPPED_LISTED));
        }
        notes.push_str(")\n");
    }
    if lines.is_empty() {
        let none = format!("No matches for `{}` in {shown_root}.", args.pattern);
        return Ok(text(if notes.is_empty() { none } else { format!("{none}\n{notes}") }));
    }
    let mut output = lines.join("\n");
    output.push('\n');
    output.push_str(&notes);
    Ok(text(output))
}

/// Whether a remembered rule rejects reading `path`, judged at its final target as a `read` of
/// it would be.
fn rejects(rejections: &[Rule], workspace: &Workspace, path: &Path) -> bool {
    if rejections.is_empty() {
        return false;
    }
    let request = PermissionRequest::for_path(Permission::Read, workspace, path);
    matches!(crate::permissions::decide(&request, Mode::Bypass, rejections), Decision::Deny(_))
}

/// Opens a file to search if it is (still) a regular file; `O_NONBLOCK` keeps a FIFO swapped in
/// since the walk from blocking the open.
fn open_file(path: &Path) -> std::io::Result<Option<(File, u64)>> {
    let file = super::fs::open_for_reading(path)?;
    let metadata = file.metadata()?;
    Ok(metadata.is_file().then_some((file, metadata.len())))
}

/// A reader that fails once the call is cancelled, so a search stops inside a big file too.
struct Interruptible<'a> {
    inner: File,
    cancel: &'a CancellationToken,
}

impl Read for Interruptible<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cancel.is_cancelled() {
            // Not `Interrupted`: readers retry that.
            return Err(std::io::Error::other("cancelled"));
        }
        self.inner.read(buf)
    }
}

//! `read`: a text file's lines, numbered, a page at a time; an image whole ([`super::image`]).
//!
//! Through the editor's buffer when it offers `fs/readTextFile` and no process cairn started
//! that may change the file's directories runs (so unsaved changes are seen, and only the lines wanted are asked for), else streamed from the disk at the cost of what it
//! returns ([`super::page`]). Only regular files are opened, and without blocking, so a FIFO or a
//! device given as the path fails at once; a file with a NUL byte near its start is binary.

use std::io::{self, BufReader, Read as _};
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::fs::{BINARY_PROBE, binary, cannot_read, check_kind, not_found, open_regular};
use super::host::{FileReader, LineRange};
use super::page::{self, DEFAULT_LINES, Page, PageError, Start, Total, human_size};
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace, blocking, judged_target, location, shown};
use crate::history::{Location, ToolKind};
use crate::permissions::{Permission, PermissionRequest};

pub struct Read;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Absolute, or relative to the working directory
    pub path: String,
    /// First line to read (1-based)
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub offset: Option<u32>,
    /// How many lines to read
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
}

#[async_trait::async_trait]
impl Tool for Read {
    type Args = ReadArgs;

    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a text file, or look at an image (PNG, JPEG, GIF, WebP). Lines are numbered from 1; by default the first 2000 lines are returned. Use offset and limit for more."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    fn parameters(&self) -> Value {
        super::schema_of::<ReadArgs>()
    }

    fn access(&self, _args: &ReadArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &ReadArgs, workspace: &Workspace) -> String {
        match (args.offset, args.limit) {
            (None, None) => format!("Read {}", shown(workspace, &args.path)),
            (offset, limit) => {
                let from = offset.unwrap_or(1);
                let to =
                    limit.map_or_else(String::new, |limit| from.saturating_add(limit.saturating_sub(1)).to_string());
                format!("Read {} ({from}–{to})", shown(workspace, &args.path))
            }
        }
    }

    fn locations(&self, args: &ReadArgs, workspace: &Workspace) -> Vec<Location> {
        location(workspace, &args.path, args.offset)
    }

    fn permission(&self, args: &ReadArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_path(Permission::Read, workspace, &workspace.resolve(&args.path)))
    }

    async fn run(&self, args: &ReadArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        read(args, ctx).await
    }
}

async fn read(args: &ReadArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = judged_target(ctx, &args.path)?;
    let shown = ctx.workspace.display(&path);
    if let Some(image) = super::image::read(ctx, &path, &shown).await? {
        return Ok(image);
    }
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
    let (page, size) = if let Some((reader, quiet)) = super::fs::editor_reader(ctx.host.as_ref(), &path) {
        (quiet.over(editor_page(reader, &path, &shown, first, limit)).await?, None)
    } else {
        let (page, size) = local_page(ctx, &path, &shown, first, limit).await?;
        (page, Some(size))
    };
    let mut output = page.text;
    match page.total {
        Total::Known(0) => output.push_str("(the file is empty)\n"),
        Total::Known(total) if first > 1 || page.last < total => {
            output.push_str(&format!("(lines {first}–{} of {total}; use offset and limit to read others)\n", page.last))
        }
        Total::Known(_) => {}
        Total::GoesOn => {
            let size = size.map(|size| format!(", {} in all", human_size(size))).unwrap_or_default();
            output.push_str(&format!(
                "(lines {first}–{}; the file goes on{size}; use offset and limit to read others)\n",
                page.last
            ));
        }
    }
    Ok(ToolOutcome { output, ..ToolOutcome::default() })
}

/// Lines `first..first + limit` from the editor's buffer. One line more is asked for, to tell
/// whether the file goes on; the editor's slice says nothing about the total beyond that.
async fn editor_page(
    reader: &dyn FileReader,
    path: &Path,
    shown: &str,
    first: u32,
    limit: u32,
) -> Result<Page, ToolError> {
    // The editor reports a missing file as an error; check the disk to tell it apart.
    match tokio::fs::metadata(path).await {
        Ok(metadata) => check_kind(&metadata, shown)?,
        Err(_) => return Err(not_found(shown)),
    }
    let range = LineRange { line: first, limit: limit.saturating_add(1) };
    let text = reader.read_text_file(path, Some(range)).await.map_err(|err| cannot_read(shown, &err))?;
    let (first, limit) = (u64::from(first), u64::from(limit));
    match page::page(text.as_bytes(), first, limit, Start::AtFirst, &|| false) {
        Ok(Page { total: Total::Known(total), text, last }) if total - (first - 1) > limit => {
            Ok(Page { text, last, total: Total::GoesOn })
        }
        Ok(page) => Ok(page),
        Err(PageError::PastEnd(_)) => {
            Err(ToolError::Tell(format!("{shown} has fewer than {first} lines; offset {first} is past its end")))
        }
        Err(PageError::Io(err)) => Err(cannot_read(shown, &err)),
        Err(PageError::Cancelled) => Err(ToolError::Tell("cancelled".into())),
    }
}

/// Lines `first..first + limit` streamed from the disk, and the file's size.
async fn local_page(
    ctx: &ToolContext,
    path: &Path,
    shown: &str,
    first: u32,
    limit: u32,
) -> Result<(Page, u64), ToolError> {
    let (path, shown, roots) = (path.to_owned(), shown.to_owned(), ctx.workspace.roots().to_vec());
    blocking(ctx, move |cancel| {
        let (file, size) = open_regular(&roots, &path, &shown)?.ok_or_else(|| not_found(&shown))?;
        let mut head = Vec::new();
        (&file).take(BINARY_PROBE).read_to_end(&mut head).map_err(|err| cannot_read(&shown, &err))?;
        if head.contains(&0) {
            return Err(binary(&shown));
        }
        let reader = BufReader::with_capacity(64 * 1024, io::Cursor::new(head).chain(file));
        let stop = || cancel.is_cancelled();
        match page::page(reader, u64::from(first), u64::from(limit), Start::FileStart, &stop) {
            Ok(page) => Ok((page, size)),
            Err(PageError::PastEnd(total)) => {
                Err(ToolError::Tell(format!("{shown} has {total} lines; offset {first} is past its end")))
            }
            Err(PageError::Io(err)) => Err(cannot_read(&shown, &err)),
            Err(PageError::Cancelled) => Err(ToolError::Tell("cancelled".into())),
        }
    })
    .await
}

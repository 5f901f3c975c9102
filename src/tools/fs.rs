//! `read`, `write` and `edit`: through the editor's buffers when it offers `fs/*`, else on disk.
//!
//! Reading through the editor sees unsaved changes and asks it for just the lines wanted; writing
//! through it lets the editor track and review the edit. A local `read` streams the file and costs
//! what it returns ([`super::page`]); `write` and `edit` need the old text whole, so they load at
//! most [`MAX_WHOLE_BYTES`] of it. Only regular files are opened, and without blocking, so a FIFO
//! or a device given as the path fails at once. Local writes go to a temporary file created
//! exclusively under an unpredictable name (a file or symlink planted next to the target cannot
//! redirect them), synced, then renamed over the target with its permissions: a crash never
//! leaves half a file, and a failure leaves no temporary file behind.

use std::fs::File;
use std::io::{self, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::host::LineRange;
use super::page::{self, DEFAULT_LINES, Page, PageError, Start, Total, human_size};
use super::{EditArgs, ReadArgs, ToolContext, ToolError, ToolOutcome, WriteArgs, blocking, target};
use crate::history::ToolContent;

/// The largest old text `write` shows in its diff and `edit` changes. The diff carries the old
/// and the new text to the editor and into the session's history, so this bounds one call at
/// about twice as much; 16 MiB still covers the biggest sources people edit (amalgamated C files,
/// generated bindings), and past it a file is data, better changed with a command.
const MAX_WHOLE_BYTES: u64 = 16 << 20;
/// A NUL byte among the first bytes marks a binary file.
const BINARY_PROBE: u64 = 8192;
/// Tries at a fresh temporary name before giving up.
const TEMPORARY_ATTEMPTS: usize = 8;

pub async fn read(args: &ReadArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let shown = ctx.workspace.display(&path);
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
    let (page, size) = if ctx.host.reads_files() {
        (editor_page(ctx, &path, &shown, first, limit).await?, None)
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
async fn editor_page(ctx: &ToolContext, path: &Path, shown: &str, first: u32, limit: u32) -> Result<Page, ToolError> {
    // The editor reports a missing file as an error; check the disk to tell it apart.
    match tokio::fs::metadata(path).await {
        Ok(metadata) => check_kind(&metadata, shown)?,
        Err(_) => return Err(not_found(shown)),
    }
    let range = LineRange { line: first, limit: limit.saturating_add(1) };
    let text = ctx.host.read_text_file(path, Some(range)).await.map_err(|err| cannot_read(shown, &err))?;
    let (first, limit) = (u64::from(first), u64::from(limit));
    match page::page(text.as_bytes(), first, limit, Start::AtFirst, &|| false) {
        Ok(Page { total: Total::Known(total), text, last }) if total - (first - 1) > limit => {
            Ok(Page { text, last, total: Total::GoesOn })
        }
        Ok(page) => Ok(page),
        Err(PageError::PastEnd(_)) => {
            Err(ToolError(format!("{shown} has fewer than {first} lines; offset {first} is past its end")))
        }
        Err(PageError::Io(err)) => Err(cannot_read(shown, &err)),
        Err(PageError::Cancelled) => Err(ToolError("cancelled".into())),
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
    let (path, shown) = (path.to_owned(), shown.to_owned());
    blocking(ctx, move |cancel| {
        let (file, size) = open_regular(&path, &shown)?.ok_or_else(|| not_found(&shown))?;
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
                Err(ToolError(format!("{shown} has {total} lines; offset {first} is past its end")))
            }
            Err(PageError::Io(err)) => Err(cannot_read(&shown, &err)),
            Err(PageError::Cancelled) => Err(ToolError("cancelled".into())),
        }
    })
    .await
}

pub async fn write(args: &WriteArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let old = load(ctx, &path).await?;
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
    Ok(ToolOutcome { output, content, ..ToolOutcome::default() })
}

pub async fn edit(args: &EditArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let path = target(ctx, &args.path);
    let shown = ctx.workspace.display(&path);
    let old = editable(load(ctx, &path).await?, &shown)?;
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
    let old_text = match load(ctx, &path).await {
        Ok(Old::Text(text) | Old::NotUtf8 { shown: text, .. }) => Some(text),
        Ok(Old::Missing | Old::TooLarge(_)) | Err(_) => None,
    };
    Ok(vec![ToolContent::Diff { path: path.display().to_string(), old_text, new_text: args.content.clone() }])
}

/// The diff `edit` would show, for the permission question; `Err` if the edit cannot apply to
/// the file as it is (then there is nothing to ask about).
pub async fn preview_edit(args: &EditArgs, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
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
        Old::NotUtf8 { valid_up_to, .. } => Err(ToolError(format!(
            "{shown} is not valid UTF-8 (from byte {valid_up_to}); edit would replace every invalid byte in it. Change it with a command (sed, iconv, a script) through bash."
        ))),
        Old::TooLarge(size) => Err(ToolError(format!(
            "{shown} is {}; edit changes files of up to {}. Change a file this large with a command (sed, a script) through bash.",
            human_size(size),
            human_size(MAX_WHOLE_BYTES)
        ))),
    }
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

fn not_found(shown: &str) -> ToolError {
    ToolError(format!("{shown} does not exist; use glob to find the right path"))
}

fn cannot_read(shown: &str, err: &dyn std::fmt::Display) -> ToolError {
    ToolError(format!("cannot read {shown}: {err}"))
}

fn binary(shown: &str) -> ToolError {
    ToolError(format!("{shown} is a binary file; it cannot be read as text"))
}

/// A file's old text, as `write` and `edit` need it.
enum Old {
    Missing,
    Text(String),
    /// Bytes that are not UTF-8: fit to show (invalid bytes replaced), not to edit and save back.
    NotUtf8 {
        shown: String,
        valid_up_to: usize,
    },
    /// Larger than [`MAX_WHOLE_BYTES`]: not loaded. The size in bytes.
    TooLarge(u64),
}

/// The whole text of a file, if it exists and is not too large.
async fn load(ctx: &ToolContext, path: &Path) -> Result<Old, ToolError> {
    let shown = ctx.workspace.display(path);
    if ctx.host.reads_files() {
        // The editor reports a missing file as an error; check the disk to tell it apart.
        let Ok(metadata) = tokio::fs::metadata(path).await else { return Ok(Old::Missing) };
        check_kind(&metadata, &shown)?;
        if metadata.len() > MAX_WHOLE_BYTES {
            return Ok(Old::TooLarge(metadata.len()));
        }
        let text = ctx.host.read_text_file(path, None).await.map_err(|err| cannot_read(&shown, &err))?;
        let size = text.len() as u64;
        return Ok(if size > MAX_WHOLE_BYTES { Old::TooLarge(size) } else { Old::Text(text) });
    }
    let path = path.to_owned();
    blocking(ctx, move |_| {
        let Some((file, size)) = open_regular(&path, &shown)? else { return Ok(Old::Missing) };
        if size > MAX_WHOLE_BYTES {
            return Ok(Old::TooLarge(size));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(MAX_WHOLE_BYTES + 1).read_to_end(&mut bytes).map_err(|err| cannot_read(&shown, &err))?;
        if bytes.len() as u64 > MAX_WHOLE_BYTES {
            // It grew since it was measured.
            return Ok(Old::TooLarge(bytes.len() as u64));
        }
        if bytes.iter().take(BINARY_PROBE as usize).any(|b| *b == 0) {
            return Err(binary(&shown));
        }
        Ok(match String::from_utf8(bytes) {
            Ok(text) => Old::Text(text),
            Err(err) => Old::NotUtf8 {
                valid_up_to: err.utf8_error().valid_up_to(),
                shown: String::from_utf8_lossy(err.as_bytes()).into_owned(),
            },
        })
    })
    .await
}

/// Opens `path` for reading if it is a regular file, with its size; `None` if it does not exist.
/// The kind is checked before opening (opening a device can have effects) and again on the open
/// file, in case it was swapped; `O_NONBLOCK` keeps a FIFO swapped in between from blocking the
/// open, and changes nothing for a regular file.
fn open_regular(path: &Path, shown: &str) -> Result<Option<(File, u64)>, ToolError> {
    let missing_or =
        |err: io::Error| if err.kind() == ErrorKind::NotFound { Ok(None) } else { Err(cannot_read(shown, &err)) };
    match std::fs::metadata(path) {
        Ok(metadata) => check_kind(&metadata, shown)?,
        Err(err) => return missing_or(err),
    }
    let file = match open_for_reading(path) {
        Ok(file) => file,
        Err(err) => return missing_or(err),
    };
    let metadata = file.metadata().map_err(|err| cannot_read(shown, &err))?;
    check_kind(&metadata, shown)?;
    Ok(Some((file, metadata.len())))
}

/// Opens a file to read without blocking on it (a FIFO swapped in since it was checked) and
/// without taking it as a controlling terminal.
pub(super) fn open_for_reading(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path)
}

/// Only regular files hold text to read.
fn check_kind(metadata: &std::fs::Metadata, shown: &str) -> Result<(), ToolError> {
    if metadata.is_dir() {
        return Err(ToolError(format!("{shown} is a directory; use glob to list its files")));
    }
    if !metadata.is_file() {
        return Err(ToolError(format!(
            "{shown} is not a regular file (a FIFO, socket or device); it cannot be read as text"
        )));
    }
    Ok(())
}

async fn save(ctx: &ToolContext, path: &Path, text: &str) -> Result<(), ToolError> {
    let shown = ctx.workspace.display(path);
    let failed = |err: &dyn std::fmt::Display| ToolError(format!("cannot write {shown}: {err}"));
    if ctx.host.writes_files() {
        return ctx.host.write_text_file(path, text).await.map_err(|err| failed(&err));
    }
    let (path, text) = (path.to_owned(), text.to_owned());
    // Not cancellable: once started, the write runs to its end or cleans up after itself.
    let saved = tokio::task::spawn_blocking(move || save_local(&path, text.as_bytes(), &mut random_suffix)).await;
    match saved {
        Ok(result) => result.map_err(|err| failed(&err)),
        Err(err) => Err(failed(&err)),
    }
}

/// Writes `text` to a fresh temporary file next to `path`, then renames it over `path`.
/// `suffix` names the temporary files tried.
pub(super) fn save_local(path: &Path, text: &[u8], suffix: &mut dyn FnMut() -> io::Result<String>) -> io::Result<()> {
    let Some(dir) = path.parent() else { return Err(io::Error::other("it has no parent directory")) };
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let permissions = std::fs::metadata(path).ok().map(|metadata| metadata.permissions());
    let (mut file, temporary) = create_temporary(dir, &name, permissions.is_some(), suffix)?;
    let finish = || {
        if let Some(permissions) = permissions
            && let Err(err) = file.set_permissions(permissions)
        {
            // Some filesystems refuse modes (vfat, some FUSE mounts); the text still matters more.
            tracing::warn!(path = %path.display(), %err, "could not keep the file's permissions");
        }
        file.write_all(text)?;
        file.sync_data()?;
        std::fs::rename(&temporary, path)
    };
    let result = finish();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Creates `.{name}.cairn-{suffix}` in `dir` exclusively, never following a symlink: a name that
/// exists already, whatever it is, is left alone and the next suffix tried. A file that will
/// replace an existing one starts private (`0600`) until it takes that file's permissions.
fn create_temporary(
    dir: &Path,
    name: &str,
    private: bool,
    suffix: &mut dyn FnMut() -> io::Result<String>,
) -> io::Result<(File, PathBuf)> {
    // Room for the prefix and suffix within the usual 255-byte limit of a file name.
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    for _ in 0..TEMPORARY_ATTEMPTS {
        let temporary = dir.join(format!(".{}.cairn-{}", &name[..end], suffix()?));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(if private { 0o600 } else { 0o666 })
            .open(&temporary);
        match created {
            Ok(file) => return Ok((file, temporary)),
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(ErrorKind::AlreadyExists, "every temporary name tried next to it was taken"))
}

/// 64 bits from the system's secure random source, as hex: a name nobody can plant in advance.
fn random_suffix() -> io::Result<String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new().fill(&mut bytes).map_err(|_| io::Error::other("no random numbers available"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

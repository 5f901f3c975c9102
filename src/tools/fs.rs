//! What `read`, `write` and `edit` share: opening files safely, loading a file's whole text,
//! and saving one.
//!
//! Only regular files are opened, and without blocking, so a FIFO or a device fails at once.
//! Local files are opened at their final target without following any symlink on the way
//! ([`super::beneath`]), so a link swapped in after the target was judged cannot send the access
//! elsewhere. `write` and `edit` need the old text whole, so they load at most
//! [`MAX_WHOLE_BYTES`] of it. Local writes go to a temporary file created exclusively under an
//! unpredictable name (a file or symlink planted next to the target cannot redirect them) in
//! the target's directory as opened, synced, then renamed over the target within that
//! directory, with its permissions: a crash never leaves half a file, and a failure leaves no
//! temporary file behind. Through the editor, loading and saving use its buffers, but only
//! while no process cairn started that may write one of the path's directories runs
//! ([`crate::process::running`]): the editor resolves the path again, following links, and such
//! a process could swap one in after the judgment.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::host::{FileReader, FileWriter, Host};
use super::{ToolContext, ToolError, blocking};
use crate::beneath::{self, Parent};
use crate::process::running::{self, Quiet};

/// The largest old text `write` shows in its diff and `edit` changes. The diff carries the old
/// and the new text to the editor and into the session's history, so this bounds one call at
/// about twice as much; 16 MiB still covers the biggest sources people edit (amalgamated C files,
/// generated bindings), and past it a file is data, better changed with a command.
pub(super) const MAX_WHOLE_BYTES: u64 = 16 << 20;
/// A NUL byte among the first bytes marks a binary file.
pub(super) const BINARY_PROBE: u64 = 8192;
/// Tries at a fresh temporary name before giving up.
const TEMPORARY_ATTEMPTS: usize = 8;

pub(super) fn not_found(shown: &str) -> ToolError {
    ToolError::Tell(format!("{shown} does not exist; use glob to find the right path"))
}

pub(super) fn cannot_read(shown: &str, err: &dyn std::fmt::Display) -> ToolError {
    ToolError::Tell(format!("cannot read {shown}: {err}"))
}

pub(super) fn binary(shown: &str) -> ToolError {
    ToolError::Tell(format!("{shown} is a binary file; it cannot be read as text"))
}

/// A file's old text, as `write` and `edit` need it.
pub(super) enum Old {
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

/// The editor's buffers to read the judged `path` from, and the hold that keeps a process that
/// could change it from starting until the read is answered: `None` when the client does not
/// read files for cairn, or while a process cairn started that may write one of the path's
/// directories runs (it could swap a link into the path before the editor resolves it again;
/// the disk is then read beneath the root, following no link).
pub(super) fn editor_reader<'a>(host: &'a dyn Host, path: &Path) -> Option<(&'a dyn FileReader, Quiet)> {
    let reader = host.reader()?;
    Some((reader, running::quiet(path)?))
}

/// The editor's buffers to write the judged `path` to, as [`editor_reader`]: `None` when the
/// file must be written on the disk, beneath its root.
pub(super) fn editor_writer<'a>(host: &'a dyn Host, path: &Path) -> Option<(&'a dyn FileWriter, Quiet)> {
    let writer = host.writer()?;
    Some((writer, running::quiet(path)?))
}

/// The whole text of a file, if it exists and is not too large.
pub(super) async fn load(ctx: &ToolContext, path: &Path) -> Result<Old, ToolError> {
    let shown = ctx.workspace.display(path);
    if let Some((reader, quiet)) = editor_reader(ctx.host.as_ref(), path) {
        // The editor reports a missing file as an error; check the disk to tell it apart.
        let Ok(metadata) = tokio::fs::metadata(path).await else { return Ok(Old::Missing) };
        check_kind(&metadata, &shown)?;
        if metadata.len() > MAX_WHOLE_BYTES {
            return Ok(Old::TooLarge(metadata.len()));
        }
        let text = quiet.over(reader.read_text_file(path, None)).await.map_err(|err| cannot_read(&shown, &err))?;
        let size = text.len() as u64;
        return Ok(if size > MAX_WHOLE_BYTES { Old::TooLarge(size) } else { Old::Text(text) });
    }
    let (path, roots) = (path.to_owned(), ctx.workspace.roots().to_vec());
    blocking(ctx, move |_| {
        let Some((file, size)) = open_regular(&roots, &path, &shown)? else { return Ok(Old::Missing) };
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

/// Opens `path` (a final target, beneath one of `roots` or not) for reading if it is a regular
/// file, with its size; `None` if it does not exist. The kind is checked before opening
/// (opening a device can have effects) and again on the open file, in case it was swapped;
/// `O_NONBLOCK` keeps a FIFO swapped in between from blocking the open, and changes nothing for
/// a regular file. No symlink is followed on the way.
pub(super) fn open_regular(roots: &[PathBuf], path: &Path, shown: &str) -> Result<Option<(File, u64)>, ToolError> {
    let missing_or =
        |err: io::Error| if err.kind() == ErrorKind::NotFound { Ok(None) } else { Err(cannot_read(shown, &err)) };
    match std::fs::metadata(path) {
        Ok(metadata) => check_kind(&metadata, shown)?,
        Err(err) => return missing_or(err),
    }
    let file = match beneath::open_read(roots, path) {
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
pub(super) fn check_kind(metadata: &std::fs::Metadata, shown: &str) -> Result<(), ToolError> {
    if metadata.is_dir() {
        return Err(ToolError::Tell(format!("{shown} is a directory; use glob to list its files")));
    }
    if !metadata.is_file() {
        return Err(ToolError::Tell(format!(
            "{shown} is not a regular file (a FIFO, socket or device); it cannot be read as text"
        )));
    }
    Ok(())
}

pub(super) async fn save(ctx: &ToolContext, path: &Path, text: &str) -> Result<(), ToolError> {
    let shown = ctx.workspace.display(path);
    let failed = |err: &dyn std::fmt::Display| ToolError::Tell(format!("cannot write {shown}: {err}"));
    if let Some((writer, quiet)) = editor_writer(ctx.host.as_ref(), path) {
        return quiet.over(writer.write_text_file(path, text)).await.map_err(|err| failed(&err));
    }
    let (path, text, roots) = (path.to_owned(), text.to_owned(), ctx.workspace.roots().to_vec());
    // Not cancellable: once started, the write runs to its end or cleans up after itself.
    let saved =
        tokio::task::spawn_blocking(move || save_local(&roots, &path, text.as_bytes(), &mut random_suffix)).await;
    match saved {
        Ok(result) => result.map_err(|err| failed(&err)),
        Err(err) => Err(failed(&err)),
    }
}

/// Writes `text` to a fresh temporary file next to `path` (a final target, beneath one of
/// `roots` or not), then renames it over `path`, all within the directory opened without
/// following a symlink. `suffix` names the temporary files tried.
pub(crate) fn save_local(
    roots: &[PathBuf],
    path: &Path,
    text: &[u8],
    suffix: &mut dyn FnMut() -> io::Result<String>,
) -> io::Result<()> {
    save_with(roots, path, text, None, suffix)
}

/// [`save_local`] with the file's mode set to `mode` (a restore puts a file back as it was).
pub(super) fn save_local_mode(roots: &[PathBuf], path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    save_with(roots, path, bytes, Some(std::fs::Permissions::from_mode(mode)), &mut random_suffix)
}

fn save_with(
    roots: &[PathBuf],
    path: &Path,
    text: &[u8],
    mode: Option<std::fs::Permissions>,
    suffix: &mut dyn FnMut() -> io::Result<String>,
) -> io::Result<()> {
    let parent = Parent::open(roots, path)?;
    let permissions = mode.or(parent.metadata()?.map(|metadata| metadata.permissions()));
    let (mut file, temporary) = create_temporary(&parent, permissions.is_some(), suffix)?;
    let finish = || {
        if let Some(permissions) = permissions
            && let Err(err) = file.set_permissions(permissions)
        {
            // Some filesystems refuse modes (vfat, some FUSE mounts); the text still matters more.
            tracing::warn!(path = %path.display(), %err, "could not keep the file's permissions");
        }
        file.write_all(text)?;
        file.sync_data()?;
        parent.replace_with(&temporary)
    };
    let result = finish();
    if result.is_err() {
        let _ = parent.remove(&temporary);
    }
    result
}

/// Creates `.{name}.cairn-{suffix}` in the target's directory exclusively, never following a
/// symlink: a name that exists already, whatever it is, is left alone and the next suffix
/// tried. A file that will replace an existing one starts private (`0600`) until it takes that
/// file's permissions.
fn create_temporary(
    parent: &Parent,
    private: bool,
    suffix: &mut dyn FnMut() -> io::Result<String>,
) -> io::Result<(File, OsString)> {
    let name = parent.name.to_string_lossy();
    // Room for the prefix and suffix within the usual 255-byte limit of a file name.
    let mut end = name.len().min(200);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    for _ in 0..TEMPORARY_ATTEMPTS {
        let temporary = OsString::from(format!(".{}.cairn-{}", &name[..end], suffix()?));
        match parent.create(&temporary, if private { 0o600 } else { 0o666 }) {
            Ok(file) => return Ok((file, temporary)),
            Err(err) if err.kind() == ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(ErrorKind::AlreadyExists, "every temporary name tried next to it was taken"))
}

/// 64 bits from the system's secure random source, as hex: a name nobody can plant in advance.
pub(crate) fn random_suffix() -> io::Result<String> {
    crate::ids::random_hex::<8>().ok_or_else(|| io::Error::other("no random numbers available"))
}

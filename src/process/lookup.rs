//! Finding a program cairn starts outside the sandbox (an MCP or language server the user
//! marked `sandbox = false`, a hook with the sandbox off, anything under the direct launcher).
//! A bare name is looked up only in the `PATH` entries that no sandboxed command can write:
//! not inside a workspace root, not inside a writable place (`/tmp`, `$TMPDIR`, `[sandbox]
//! writable`), not inside any project (below a directory holding `.git`: another session's
//! workspace). A `PATH` that puts a project's `.venv/bin` or `node_modules/.bin` first would
//! otherwise run whatever a command planted there, unconfined, at the next start. A program
//! found only in such a directory is refused, naming it; a path the user wrote is used as
//! written. A program the supervisor starts in the sandbox is found on the command's own `PATH`
//! ([`sandboxed`]).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// `program` to start unconfined: itself when it holds a `/`, else the first executable of
/// that name in `path`'s entries outside `reach` (the places commands may write).
pub(super) fn unconfined(program: &OsStr, path: Option<&OsStr>, reach: &[&Path]) -> io::Result<OsString> {
    if program.as_bytes().contains(&b'/') || program.is_empty() {
        return Ok(program.to_owned());
    }
    let real = |dir: &Path| dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let reach: Vec<PathBuf> = reach.iter().map(|place| real(place)).collect();
    let path = path.map(OsStr::to_owned).or_else(|| std::env::var_os("PATH")).unwrap_or_default();
    let mut within = None;
    for dir in std::env::split_paths(&path).filter(|dir| dir.is_absolute()) {
        let candidate = dir.join(program);
        if !runnable(&candidate) {
            continue;
        }
        let dir = real(&dir);
        if reach.iter().any(|place| dir.starts_with(place)) || in_project(&dir) {
            within.get_or_insert(candidate);
            continue;
        }
        return Ok(candidate.into_os_string());
    }
    Err(match within {
        Some(found) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is found only at {}, where sandboxed commands can write: it is not started outside the \
                 sandbox; give its absolute path if it is yours",
                program.to_string_lossy(),
                found.display()
            ),
        ),
        None => io::Error::new(io::ErrorKind::NotFound, format!("{} is not on PATH", program.to_string_lossy())),
    })
}

/// The file of `program` the supervisor starts in the sandbox, found on the command's `PATH`
/// when it names no directory, so that starting it is one exec (the exec check lets exactly the
/// first one through).
pub(super) fn sandboxed(program: &OsStr) -> Option<PathBuf> {
    let as_path = Path::new(program);
    if as_path.components().count() > 1 || program.as_bytes().contains(&b'/') {
        return Some(as_path.to_path_buf());
    }
    let path = super::passed::program_path().unwrap_or_else(|| super::DEFAULT_PATH.into());
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| runnable(candidate))
}

fn runnable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Whether `dir` lies in a project (below a directory holding `.git`, the home directory
/// aside): another session's workspace, whose commands may write it (`~/b/.venv/bin` on `PATH`
/// from the shell that started the editor).
fn in_project(dir: &Path) -> bool {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    dir.ancestors()
        .filter(|above| above.parent().is_some() && Some(*above) != home.as_deref())
        .any(|above| above.join(".git").exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(at: &Path) {
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_program_is_found_only_where_no_command_can_write() {
        let dir = tempfile::tempdir().unwrap();
        let (workspace, system) = (dir.path().join("work"), dir.path().join("usr/bin"));
        program(&workspace.join(".venv/bin/mcp-fs"));
        program(&system.join("mcp-fs"));
        let path = std::env::join_paths([workspace.join(".venv/bin"), system.clone()]).unwrap();
        let found = unconfined(OsStr::new("mcp-fs"), Some(&path), &[&workspace]).unwrap();
        assert_eq!(found, system.join("mcp-fs").into_os_string(), "the planted one is passed over");
        std::fs::remove_file(system.join("mcp-fs")).unwrap();
        let err = unconfined(OsStr::new("mcp-fs"), Some(&path), &[&workspace]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains(".venv/bin/mcp-fs") && err.to_string().contains("absolute path"), "{err}");
        // Another project's virtualenv, which that project's commands may write.
        let other = dir.path().join("other");
        std::fs::create_dir_all(other.join(".git")).unwrap();
        program(&other.join(".venv/bin/mcp-fs"));
        let path = std::env::join_paths([other.join(".venv/bin"), workspace.join(".venv/bin")]).unwrap();
        let err = unconfined(OsStr::new("mcp-fs"), Some(&path), &[&workspace]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        let err = unconfined(OsStr::new("absent"), Some(&path), &[&workspace]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let given = workspace.join(".venv/bin/mcp-fs");
        assert_eq!(unconfined(given.as_os_str(), Some(&path), &[&workspace]).unwrap(), given.into_os_string());
    }

    #[test]
    fn a_program_without_a_directory_is_found_on_the_path() {
        assert_eq!(sandboxed(OsStr::new("./x")), Some(PathBuf::from("./x")));
        let found = sandboxed(OsStr::new("sh")).unwrap();
        assert!(found.is_absolute() && found.ends_with("sh"), "{found:?}");
        assert_eq!(sandboxed(OsStr::new("no-such-program-anywhere")), None);
    }
}

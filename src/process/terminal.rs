//! Commands in an editor's terminal, confined as local ones ([`ProcessPolicy::in_terminal`]:
//! the command line the terminal runs): the editor starts cairn's own executable as the
//! supervisor (watching this cairn's process, by id, start time and PID namespace, since cairn
//! did not start it and holds no pipe to it: cairn's end, `kill -9` included, ends the command;
//! the program dies with it), with the arguments a local command's supervisor gets.
//!
//! The editor finds that executable by its path, not by the image cairn runs, so the path must
//! be one no command can replace. Where cairn's executable lies inside a root or a writable
//! directory (a build of cairn in the workspace, or under `/tmp`), the terminal runs a copy in
//! cairn's data directory, which the namespace covers; the copy is named by the executable's
//! size and time, so processes of one build share it. Where the copy fails, or the data
//! directory is itself within reach (no namespace, and a writable place holds it), or the
//! sandbox is off while rules reject programs, the command runs locally, under cairn's own image.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use super::{Confinement, Launcher, ProcessPolicy, SandboxMode, Watched};

/// Copies of other builds not used for this long are removed when a copy is made.
const STALE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a command runs in an editor's terminal ([`ProcessPolicy::in_terminal`]).
#[derive(Debug)]
pub enum InTerminal {
    /// As it is: nothing confines local commands either (the direct launcher).
    AsItIs,
    /// `exe args…`: the supervisor, then the program.
    Supervised { exe: PathBuf, args: Vec<OsString> },
    /// Not there: no executable a command cannot replace was found, so it runs locally.
    Locally,
}

impl ProcessPolicy {
    /// How an editor's terminal runs `program args` so that it is confined as a local command.
    pub fn in_terminal(&self, program: &OsStr, args: &[&OsStr], confinement: Confinement<'_>) -> InTerminal {
        match &self.launcher {
            Launcher::Direct => InTerminal::AsItIs,
            // With the sandbox off a command may replace any file, the supervisor's too: the
            // exec check holds only locally, where cairn starts its own image. A job following
            // the session's rules may have some to check later.
            Launcher::Supervisor(_) if self.sandbox == SandboxMode::Off => {
                if confinement.rejected.is_empty() && confinement.rules.is_none() {
                    InTerminal::AsItIs
                } else {
                    InTerminal::Locally
                }
            }
            Launcher::Supervisor(_) => match self.supervisor_path(confinement.roots) {
                Some(exe) => InTerminal::Supervised {
                    args: self.supervised(confinement, (this_cairn(), None), false, program, args),
                    exe,
                },
                None => InTerminal::Locally,
            },
        }
    }

    /// cairn's executable at a path no command can replace (`/proc/self/exe` would be the
    /// editor in the editor's process).
    fn supervisor_path(&self, roots: &[PathBuf]) -> Option<PathBuf> {
        // Compared as the kernel finds them: a writable place may be named through a link.
        let places: Vec<PathBuf> = roots
            .iter()
            .chain(&self.writable)
            .map(|place| place.canonicalize().unwrap_or_else(|_| place.clone()))
            .collect();
        let replaceable = |path: &Path| places.iter().any(|place| path.starts_with(place));
        let exe = std::env::current_exe().ok().filter(|exe| exe.is_file())?;
        if !replaceable(&exe) {
            return Some(exe);
        }
        static COPY: OnceLock<Option<PathBuf>> = OnceLock::new();
        let data = self.own.first()?;
        let copy = COPY.get_or_init(|| match private_copy(&exe, data) {
            Ok(copy) => Some(copy),
            Err(err) => {
                tracing::warn!(%err, "cairn's executable could not be copied for editor terminals; commands run locally");
                None
            }
        });
        // Another process may have removed it as unused (access times do not move on every
        // file system): made again.
        let copy = match copy {
            Some(copy) if !copy.is_file() => private_copy(&exe, data).ok(),
            copy => copy.clone(),
        };
        // The data directory must be out of reach too: covered in the namespace, or else out of
        // every writable place.
        let covered = self.namespace_kind().is_some();
        copy.filter(|copy| covered || !replaceable(&copy.canonicalize().unwrap_or_else(|_| copy.clone())))
    }
}

/// A copy of `exe` in `data/supervisor/`, made once per build (through a temporary file, so a
/// half-written copy is never run); older builds' copies not touched for [`STALE`] go.
fn private_copy(exe: &Path, data: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let meta = std::fs::metadata(exe)?;
    let dir = data.join("supervisor");
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let copy = dir.join(format!("cairn-{}-{}.{}", meta.len(), meta.mtime(), meta.mtime_nsec()));
    if std::fs::metadata(&copy).is_ok_and(|made| made.len() == meta.len()) {
        return Ok(copy);
    }
    let partial = dir.join(format!(".partial-{}", std::process::id()));
    std::fs::copy(exe, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o700))?;
    std::fs::rename(&partial, &copy)?;
    let now = SystemTime::now();
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let used = entry.metadata().and_then(|meta| meta.accessed());
        let old = used.is_ok_and(|used| now.duration_since(used).is_ok_and(|age| age > STALE));
        if entry.path() != copy && old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(copy)
}

/// This process, as an editor's terminal's supervisor watches it; nothing when its start time
/// or PID namespace cannot be read.
fn this_cairn() -> Watched {
    // Read once: a process keeps its id, start time and PID namespace.
    static THIS: OnceLock<Watched> = OnceLock::new();
    *THIS.get_or_init(|| {
        let pid = std::process::id();
        match (super::tree::started(pid), super::tree::pid_namespace()) {
            (Some(started), Some(namespace)) => Watched::Pid { pid, started, namespace },
            _ => Watched::Nothing,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_made_once_per_build_and_runs() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("prog");
        std::fs::copy("/bin/true", &exe).unwrap();
        let first = private_copy(&exe, &dir.path().join("data")).unwrap();
        let again = private_copy(&exe, &dir.path().join("data")).unwrap();
        assert_eq!(first, again);
        assert!(std::process::Command::new(&first).status().unwrap().success());
        let names: Vec<_> = std::fs::read_dir(first.parent().unwrap()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no partial copy is left");
    }
}

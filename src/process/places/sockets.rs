//! Sockets of programs outside the sandbox that the policy's list of the user's services does
//! not name: a database's (`/tmp/.s.PGSQL.5432`, `/run/postgresql`), an editor's, an agent's
//! in a directory of its own (`/tmp/ssh-XXXX/agent.N`). Whoever connects to one acts through a
//! program that runs outside, so each is covered like a secret. Found in the temp directories
//! and `/run`, two levels deep, before each command: every socket older than cairn's start,
//! which no command of cairn's made. A socket a command made (its own database in a background
//! job) is newer and stays reachable for the commands after it.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Entries read in one directory at most: a temp directory flooded with entries costs a
/// bounded time, and what a flood holds is newer than cairn anyway.
const MOST: usize = 100_000;

/// The sockets older than `before` in `dirs` and in their directories older than `before`,
/// except those `shown` names (`[sandbox] visible`).
pub fn outside(dirs: &[PathBuf], before: SystemTime, shown: &[PathBuf]) -> Vec<PathBuf> {
    let mut seen: Vec<PathBuf> = dirs.iter().filter_map(|dir| std::fs::canonicalize(dir).ok()).collect();
    seen.sort();
    seen.dedup();
    let mut found = Vec::new();
    for dir in &seen {
        for (path, kind) in entries(dir) {
            if kind.is_socket() && older(&path, before) {
                found.push(path);
            } else if kind.is_dir() && older(&path, before) {
                let inside = entries(&path).filter(|(path, kind)| kind.is_socket() && older(path, before));
                found.extend(inside.map(|(path, _)| path));
            }
        }
    }
    found.retain(|path| !shown.iter().any(|shown| shown == path));
    found
}

/// `dir`'s entries and their kinds (not following links), at most [`MOST`].
fn entries(dir: &Path) -> impl Iterator<Item = (PathBuf, std::fs::FileType)> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .take(MOST)
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.path(), entry.file_type().ok()?)))
}

/// Whether `path`'s status last changed before `before`.
fn older(path: &Path, before: SystemTime) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| {
        let changed = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(meta.ctime()).unwrap_or(0))
            + Duration::from_nanos(u64::try_from(meta.ctime_nsec()).unwrap_or(0));
        changed < before
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn sockets_older_than_cairn_two_levels_deep_are_found_and_newer_or_shown_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join("agent-dir/deeper")).unwrap();
        let _old = [
            UnixListener::bind(top.join(".s.PGSQL.5432")).unwrap(),
            UnixListener::bind(top.join("agent-dir/agent.1")).unwrap(),
            UnixListener::bind(top.join("agent-dir/deeper/too-deep")).unwrap(),
            UnixListener::bind(top.join("shown.sock")).unwrap(),
        ];
        std::fs::write(top.join("plain-file"), "").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let started = SystemTime::now();
        std::thread::sleep(Duration::from_millis(20));
        let _new = UnixListener::bind(top.join("commands-own.sock")).unwrap();
        let mut found = outside(&[top.clone(), top.join("missing")], started, &[top.join("shown.sock")]);
        found.sort();
        assert_eq!(found, [top.join(".s.PGSQL.5432"), top.join("agent-dir/agent.1")]);
    }
}

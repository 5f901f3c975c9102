//! The parts of a repository that run code or say what runs, wherever they lie, for the file
//! tools: a name check sees `.git/`, but not the git directory a `.git` link or `gitdir:` file
//! leads to (nor, for a linked worktree, the main repository's it names in `commondir`), the
//! directory `core.hooksPath` names, or a file the configuration includes. [`guarded`] finds
//! them for every repository a path passes through and each a workspace root is in (each
//! ancestor holding a `.git`), reading the configuration as git does (`gitconfig.rs`, shared
//! with the sandbox).
//!
//! A git directory is guarded whole, as `.git/` is. A hooks directory is guarded whole, unless
//! it is the repository's top level, a workspace root or above either (`core.hooksPath = .`):
//! then only the files directly in it, where git looks for hooks, else every file would ask. A
//! configuration that exists but cannot be read guards the whole repository: where its hooks
//! run from is unknown.

use std::path::{Path, PathBuf};

use super::{final_target, gitconfig};

/// A `.git` file larger than this is no pointer to a git directory.
pub const MAX_POINTER: u64 = 4096;

const GIT_DIR: &str = "the repository's git directory (where `.git` leads): its hooks and configuration run code";
const HOOKS: &str = "the hooks directory the repository's core.hooksPath names: git runs them at the next commit";
const INCLUDED: &str = "a file the repository's git configuration includes: it can make git run code";
const UNREADABLE: &str = "the repository's git configuration cannot be read, so where git runs hooks from is unknown";

/// Where git finds the user's own configuration (`$HOME`, `$XDG_CONFIG_HOME`).
#[derive(Clone, Debug, Default)]
pub struct Home {
    pub home: Option<PathBuf>,
    pub xdg_config: Option<PathBuf>,
}

impl Home {
    /// Cairn's own environment: the one git runs with when the user runs it.
    pub fn from_env() -> Self {
        Self {
            home: std::env::var_os("HOME").map(PathBuf::from),
            xdg_config: std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
        }
    }

    /// The directory a `core.hooksPath` of `hooks` names for the repository whose top level is
    /// `top`, as git reads it: `~/…` in this home, relative to `top`, or absolute.
    pub fn hooks_dir(&self, hooks: &str, top: &Path) -> PathBuf {
        match (hooks.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ => top.join(hooks),
        }
    }
}

/// Why a change to `real` (a final target) or `given` (the path as written) has effects beyond
/// the file because of a repository either passes through or one of the workspace's `roots` is
/// in; `None` if none.
pub fn guarded(given: &Path, real: &Path, roots: &[&Path], home: &Home) -> Option<&'static str> {
    let mut seen: Vec<&Path> = Vec::new();
    let tops = roots.iter().flat_map(|root| root.ancestors());
    for top in given.ancestors().chain(real.ancestors()).chain(tops) {
        if seen.contains(&top) {
            continue;
        }
        seen.push(top);
        if std::fs::symlink_metadata(top.join(".git")).is_err() {
            continue;
        }
        if let Some(why) = in_repository(top, real, roots, home) {
            return Some(why);
        }
    }
    None
}

/// Why `real` is guarded by the repository whose top level is `top`.
fn in_repository(top: &Path, real: &Path, roots: &[&Path], home: &Home) -> Option<&'static str> {
    let git_dirs = git_dirs(top);
    if git_dirs.iter().any(|dir| real.starts_with(dir)) {
        return Some(GIT_DIR);
    }
    // The main repository's configuration holds what a linked worktree's git uses.
    let config_dir = git_dirs.last().cloned().unwrap_or_else(|| top.join(".git"));
    let config = gitconfig::read(&config_dir, home.home.as_deref(), home.xdg_config.as_deref());
    if config.unreadable.is_some() {
        return Some(UNREADABLE);
    }
    if let Some(hooks) = config.hooks_path {
        let hooks = home.hooks_dir(&hooks, top);
        let hooks = final_target(&super::normalize(&hooks)).unwrap_or(hooks);
        // A hooks directory that holds the repository or a workspace root: only where git looks.
        let holds = top.starts_with(&hooks) || roots.iter().any(|root| root.starts_with(&hooks));
        let guarded = if holds { real.parent() == Some(hooks.as_path()) } else { real.starts_with(&hooks) };
        if guarded {
            return Some(HOOKS);
        }
    }
    let included = |file: &PathBuf| final_target(&super::normalize(file)).is_ok_and(|file| file == real);
    config.includes.iter().any(included).then_some(INCLUDED)
}

/// The git directories of the repository at `top`, final targets: where `.git` leads (itself,
/// a link's target, a `gitdir:` file's), then the common one its `commondir` names.
fn git_dirs(top: &Path) -> Vec<PathBuf> {
    let dot_git = top.join(".git");
    let Ok(meta) = std::fs::metadata(&dot_git) else { return Vec::new() };
    let dir = if meta.is_dir() { final_target(&dot_git).ok() } else { pointed_git_dir(&dot_git) };
    let Some(dir) = dir else { return Vec::new() };
    let common = small_file(&dir.join("commondir"))
        .and_then(|text| final_target(&super::normalize(&dir.join(text.trim()))).ok())
        .filter(|common| *common != dir);
    std::iter::once(dir).chain(common).collect()
}

/// A small regular file's text (a pointer, `commondir`); `None` for anything else (a FIFO, a
/// device, a link to one is never opened).
pub fn small_file(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_POINTER {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The git directory a `.git` file names, resolved.
pub fn pointed_git_dir(dot_git: &Path) -> Option<PathBuf> {
    let text = small_file(dot_git)?;
    let target = text.lines().find_map(|line| line.strip_prefix("gitdir:"))?.trim();
    std::fs::canonicalize(dot_git.parent()?.join(target)).ok()
}

#[cfg(test)]
#[path = "repository_tests.rs"]
mod tests;

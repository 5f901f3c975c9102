//! The places a sandboxed command finds read-only or hidden, found on disk just before it starts.
//!
//! Inside each workspace root, a bounded walk finds the guarded places of
//! [`crate::workspace::GUARDED`]: tool and agent configuration becomes read-only, `.env*` files
//! and the other secret names hidden, and a repository keeps its objects, refs and index writable
//! while its hooks, configuration, `info/` and the directory `core.hooksPath` names become
//! read-only (for worktrees and submodules, those of the git directory a `.git` file points to).
//! Each root and each `.git` directory is also an anchor: bound onto itself, so that it cannot
//! be renamed away and replaced by a copy whose hooks are writable. Outside the roots, the
//! places the policy hides (cairn's own directories, `~/.ssh`, …) are hidden.
//!
//! The walk goes [`MAX_DEPTH`] levels below a root and reads at most [`MAX_ENTRIES`] entries,
//! skipping directories that hold dependencies or build output; what lies beyond is not seen.
//! A guarded place that does not exist yet cannot be bound: [`absent`] lists those at the top of
//! each root before the command, and [`sweep`] removes what the command made of them after it.

use std::path::{Path, PathBuf};

use globset::GlobSet;

use crate::workspace::{GUARDED, Guarded, Reach, Shield};

/// Levels below a root the walk looks into.
pub const MAX_DEPTH: usize = 4;
/// Directory entries the walk reads in all, per command.
pub const MAX_ENTRIES: usize = 20_000;
/// Directories never walked into: dependencies and build output, large and not the project's own.
const SKIPPED: &[&str] =
    &["node_modules", "target", "vendor", ".venv", "venv", "__pycache__", "dist", "build", ".next", ".cache", ".tox"];

/// What the namespace does to the paths of one command, each path a final target.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Places {
    /// Bound onto themselves, writable: cannot be renamed or removed while the command runs.
    pub anchors: Vec<PathBuf>,
    /// Bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Covered by an empty, unreadable file or directory.
    pub hidden: Vec<PathBuf>,
}

/// Which names a walk hides besides the secret guarded ones, and which it leaves visible.
#[derive(Debug, Default)]
pub struct Names {
    /// Workspace-relative globs to hide (`[sandbox] hidden` entries that are not absolute).
    pub hidden: GlobSet,
    /// Workspace-relative globs left visible (`[sandbox] visible`), even if secret.
    pub visible: GlobSet,
}

/// The places of a command whose workspace roots are `roots` and whose policy hides `hide`
/// (absolute paths). `writable`: whether the roots are writable at all (anchors and read-only
/// places only matter then).
pub fn find(roots: &[PathBuf], hide: &[PathBuf], names: &Names, writable: bool) -> Places {
    let mut places = Places::default();
    let mut budget = MAX_ENTRIES;
    let roots: Vec<PathBuf> = roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect();
    for root in &roots {
        if writable {
            places.anchors.push(root.clone());
        }
        walk(root, root, 0, names, writable, &mut budget, &mut places);
    }
    places.hidden.extend(hide.iter().filter_map(|path| std::fs::canonicalize(path).ok()));
    // Covering a place that holds a root (a link `.vscode -> .`, a hidden `~/.ssh` that is the
    // workspace) would take the workspace itself away.
    let holds_root = |path: &PathBuf| roots.iter().any(|root| root.starts_with(path));
    places.read_only.retain(|path| !holds_root(path));
    places.hidden.retain(|path| !holds_root(path));
    dedup(&mut places.anchors);
    dedup(&mut places.read_only);
    dedup(&mut places.hidden);
    // Nothing inside a hidden place is bound: it is not there to see.
    let hidden = places.hidden.clone();
    let inside_hidden = |path: &PathBuf| hidden.iter().any(|h| path.starts_with(h));
    places.read_only.retain(|path| !inside_hidden(path));
    places.anchors.retain(|path| !inside_hidden(path));
    places
}

fn dedup(paths: &mut Vec<PathBuf>) {
    paths.sort();
    paths.dedup();
}

fn walk(root: &Path, dir: &Path, depth: usize, names: &Names, writable: bool, budget: &mut usize, out: &mut Places) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let parent = dir.file_name().map(|name| name.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = entry.path();
        let Ok(relative) = path.strip_prefix(root) else { continue };
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        let Ok(kind) = entry.file_type() else { continue };
        let pair = [parent.clone(), name.clone()];
        let place = GUARDED.iter().find(|place| place.matches(&pair, 1));
        let visible = names.visible.is_match(relative);
        match place {
            Some(place) if place.shield == Shield::Secret && !visible => out.hidden.extend(final_target(&path)),
            Some(_) | None if names.hidden.is_match(relative) && !visible => out.hidden.extend(final_target(&path)),
            Some(Guarded { shield: Shield::Git, .. }) => {
                if writable {
                    repository(root, &path, kind.is_dir(), out);
                }
            }
            Some(Guarded { shield: Shield::ReadOnly, .. }) => {
                if writable {
                    out.read_only.extend(final_target(&path));
                }
            }
            Some(Guarded { shield: Shield::Secret, .. }) | None => {
                if kind.is_dir() && depth + 1 < MAX_DEPTH && !SKIPPED.contains(&name.as_str()) {
                    walk(root, &path, depth + 1, names, writable, budget, out);
                }
            }
        }
    }
}

fn final_target(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// A repository's guarded parts. `dot_git` is `.git` in a worktree: the git directory itself, or
/// a file pointing to it (`gitdir: …`, for worktrees and submodules).
fn repository(worktree_root: &Path, dot_git: &Path, is_dir: bool, out: &mut Places) {
    let worktree = dot_git.parent().unwrap_or(worktree_root);
    if is_dir {
        out.anchors.push(dot_git.to_path_buf());
        git_dir(worktree, dot_git, out);
        return;
    }
    // A file: itself read-only (else it could point elsewhere), and the directory it names.
    out.read_only.extend(final_target(dot_git));
    let Some(git_dir_path) = pointed_git_dir(dot_git) else { return };
    git_dir(worktree, &git_dir_path, out);
    // A linked worktree's hooks and configuration are those of the main repository.
    if let Ok(common) = std::fs::read_to_string(git_dir_path.join("commondir")) {
        let common = git_dir_path.join(common.trim());
        if let Ok(common) = std::fs::canonicalize(common) {
            git_dir(worktree, &common, out);
        }
    }
}

/// The git directory a `.git` file names, resolved.
fn pointed_git_dir(dot_git: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git).ok()?;
    let target = text.lines().find_map(|line| line.strip_prefix("gitdir:"))?.trim();
    let base = dot_git.parent()?;
    std::fs::canonicalize(base.join(target)).ok()
}

/// The parts of a git directory that run code or say what runs: `config`, `hooks/`, `info/`,
/// the directory `core.hooksPath` names, and the same of each submodule's git directory under
/// `modules/`. `hooks/` and `info/` are made when missing (git's own layout has them), so that
/// there is something to bind read-only.
fn git_dir(worktree: &Path, dir: &Path, out: &mut Places) {
    let Ok(dir) = std::fs::canonicalize(dir) else { return };
    for made in ["hooks", "info"] {
        let path = dir.join(made);
        if std::fs::symlink_metadata(&path).is_err() {
            let _ = std::fs::create_dir(&path);
        }
    }
    for part in ["config", "hooks", "info"] {
        out.read_only.extend(final_target(&dir.join(part)));
    }
    if let Some(hooks) = hooks_path(&dir.join("config")) {
        let hooks = expand_home(&hooks).unwrap_or_else(|| worktree.join(hooks));
        out.read_only.extend(final_target(&hooks));
    }
    submodules(worktree, &dir.join("modules"), 0, out);
}

fn submodules(worktree: &Path, dir: &Path, depth: usize, out: &mut Places) {
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten().take(256) {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        if path.join("HEAD").is_file() && path.join("config").is_file() {
            git_dir(worktree, &path, out);
        } else {
            submodules(worktree, &path, depth + 1, out);
        }
    }
}

/// `core.hooksPath` of a git configuration file, if set (the last one wins, as in git).
fn hooks_path(config: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config).ok()?;
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section = line.trim_start_matches('[').split([']', ' ', '"']).next().unwrap_or_default();
            in_core = section.eq_ignore_ascii_case("core");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if in_core && key.trim().eq_ignore_ascii_case("hookspath") {
            found = Some(value.trim().trim_matches('"').to_owned());
        }
    }
    found.filter(|value| !value.is_empty())
}

fn expand_home(path: &str) -> Option<PathBuf> {
    let rest = path.strip_prefix("~/")?;
    Some(dirs::home_dir()?.join(rest))
}

/// The guarded places at the top of each root that do not exist yet (secret names aside): a
/// command could make one, which no mount can stop since there is nothing to bind yet.
/// [`sweep`] takes away what a command made of them.
pub fn absent(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()) {
        for place in GUARDED.iter().filter(|place| place.shield != Shield::Secret) {
            let path = match place.reach {
                Reach::Tree | Reach::Last => root.join(place.name),
                Reach::Within(parent) => root.join(parent).join(place.name),
                Reach::Prefix => continue,
            };
            if std::fs::symlink_metadata(&path).is_err() {
                out.push(path);
            }
        }
    }
    out
}

/// Takes away the places of `absent` that the command made, once it and everything it started
/// are gone, and says what it took on stderr (which the model reads). A new repository stays
/// (`git init` is ordinary work) but loses any hook that is not one of git's samples.
pub fn sweep(absent: &[PathBuf]) -> Vec<String> {
    let mut said = Vec::new();
    for path in absent {
        let Ok(meta) = std::fs::symlink_metadata(path) else { continue };
        let shown = path.display();
        // The command may have made a parent (`.github`) a link elsewhere: nothing is removed
        // through a link.
        let parent = path.parent().unwrap_or(path);
        if std::fs::canonicalize(parent).ok().as_deref() != Some(parent) {
            said.push(format!("the command made {shown}, a guarded place, through a link; it was left alone"));
            continue;
        }
        if path.file_name().is_some_and(|name| name == ".git") && meta.is_dir() {
            for hook in std::fs::read_dir(path.join("hooks")).into_iter().flatten().flatten() {
                if !hook.file_name().to_string_lossy().ends_with(".sample") && remove(&hook.path()).is_ok() {
                    said.push(format!(
                        "removed {}: a new repository's hooks run code at its next git command",
                        hook.path().display()
                    ));
                }
            }
            continue;
        }
        match remove(path) {
            Ok(()) => said.push(format!(
                "removed {shown}, which the command made: guarded places are read-only to commands; write them with the edit tools, which ask"
            )),
            Err(err) => said.push(format!("the command made {shown}, a guarded place, and it could not be removed: {err}")),
        }
    }
    said
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests;

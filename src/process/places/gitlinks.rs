//! Repositories the sweep reaches through the submodules a repository stages, however far its
//! walk went: `git status` in a repository enters every gitlink of its index (a submodule's
//! path) that holds a repository and runs `git status` there, with that repository's
//! configuration (`core.fsmonitor` runs a program). A command may write any repository's index
//! (git must, to stage), so it can stage a repository it made where the walk after it did not
//! look (below `node_modules/`, which stood unchanged) and have it run at the user's next `git
//! status` at the top, which editors run unasked.
//!
//! So after the command, for every repository the sweep knows (those the walks found, a root's
//! own, and those reached this way, nested up to [`MAX_NESTING`] deep, [`MAX_REPOSITORIES`] in
//! all; the index of one past those bounds is not read, and goes if the command wrote it), its
//! index's gitlinks (`index.rs`) and the `path` entries of its `.gitmodules` name where to
//! look; a repository there is cleaned as one the command made (`sweep.rs`) when the command
//! made or changed it: its `.git` was not there, is new or was renamed in (its directory's
//! entries and its own change time both changed), leads to another git directory than before,
//! or what says what runs in its git directory (`config`, `hooks` and each hook, `commondir`,
//! `config.worktree`) changed while the command ran. A repository whose git directory is one
//! of the user's that stood bound read-only is left as it is.
//!
//! An index read beneath its root with no link followed (`crate::beneath`), as everything here
//! is: a path with a link on the way is not entered, as git itself does not enter a submodule
//! through a link. An index that cannot be read — larger than [`MAX_INDEX`], not a plain file,
//! or not read through by `index.rs` (which git would refuse, or which stages a path out of the
//! work tree) — and that changed while the command ran is moved aside under a name the sweep
//! says, so that no gitlink the sweep could not see runs anything: the staged changes it held
//! are kept there, and `git reset` makes the index again from the last commit. One that stood
//! unchanged is left: the command staged nothing in it.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use super::index::{self, Unread};
use super::survey;
use super::sweep::{Before, move_aside, new_repository};
use crate::beneath::Parent;
use crate::workspace::gitconfig;
use crate::workspace::repository::MAX_POINTER;

/// The largest index read (about two million entries); a larger one is not read.
const MAX_INDEX: u64 = 256 * 1024 * 1024;
/// The largest `.gitmodules` read.
const MAX_GITMODULES: u64 = 1024 * 1024;
/// How deep submodules of submodules are followed.
const MAX_NESTING: usize = 16;
/// How many repositories' indexes are read after one command.
const MAX_REPOSITORIES: usize = 4096;
/// How many hooks are looked at in one git directory.
const MAX_HOOKS: usize = 1024;

/// What the repositories whose `.git`s are `known` (and the roots) stage, followed to the
/// repositories their gitlinks hold; those the command made or changed are cleaned (see the
/// top). `cleaned`: the `.git`s the sweep already cleaned. The lines to say.
pub(super) fn sweep(before: &Before, known: &[PathBuf], cleaned: &HashSet<PathBuf>) -> Vec<String> {
    let roots = before.roots();
    let mut said = Vec::new();
    let mut queue: VecDeque<(PathBuf, usize)> = VecDeque::new();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut beyond: Vec<PathBuf> = Vec::new();
    // Each repository is judged once, however many indexes stage it.
    let mut judged: HashSet<PathBuf> = cleaned.clone();
    let trees = roots.iter().cloned().chain(known.iter().filter_map(|dot_git| dot_git.parent().map(Path::to_path_buf)));
    for tree in trees {
        if seen.insert(tree.clone()) {
            queue.push_back((tree, 0));
        }
    }
    while let Some((tree, depth)) = queue.pop_front() {
        let Some(git_dir) = git_dir(roots, &tree.join(".git")) else { continue };
        let mut paths = match staged(roots, &git_dir) {
            Ok(paths) => paths,
            Err((file, why)) => {
                said.extend(set_aside(before, &file, &why));
                Vec::new()
            }
        };
        paths.extend(submodule_paths(roots, &tree));
        for path in paths {
            let dir = tree.join(OsStr::from_bytes(&path));
            let dot_git = dir.join(".git");
            // Looked at from its directory opened beneath the root: a link on the way fails.
            if !Parent::existing(roots, &dot_git).and_then(|parent| parent.kind()).is_ok_and(|kind| kind.is_some()) {
                continue;
            }
            if judged.insert(dot_git.clone()) && touched(before, &dot_git) {
                said.extend(new_repository(before, &dot_git));
            }
            if seen.contains(&dir) {
                continue;
            }
            if depth + 1 < MAX_NESTING && seen.len() < MAX_REPOSITORIES {
                seen.insert(dir.clone());
                queue.push_back((dir, depth + 1));
            } else {
                beyond.push(dir);
            }
        }
    }
    // What those the bounds left unread stage is not known: an index the command wrote goes.
    for dir in beyond {
        if seen.insert(dir.clone())
            && let Some(git_dir) = git_dir(roots, &dir.join(".git"))
        {
            said.extend(set_aside(before, &git_dir.join("index"), &NotRead::Beyond));
        }
    }
    said
}

/// Why an index was not read.
#[derive(Debug, thiserror::Error)]
enum NotRead {
    #[error("it is larger than {MAX_INDEX} bytes")]
    Large,
    #[error("it could not be opened as a file of its own: {0}")]
    Open(std::io::Error),
    #[error("{0}")]
    Unread(#[from] Unread),
    #[error(
        "the sweep follows submodules {MAX_NESTING} deep and reads {MAX_REPOSITORIES} repositories' indexes at most"
    )]
    Beyond,
}

/// The gitlink paths `git_dir`'s index stages (with its shared index's, if split); none where
/// there is no index. What could not be read, and why.
fn staged(roots: &[PathBuf], git_dir: &Path) -> Result<Vec<Vec<u8>>, (PathBuf, NotRead)> {
    let index = git_dir.join("index");
    if std::fs::symlink_metadata(&index).is_err() {
        return Ok(Vec::new());
    }
    let read = |path: PathBuf| {
        let bytes = match Parent::existing(roots, &path).and_then(|parent| parent.read(MAX_INDEX)) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err((path, NotRead::Large)),
            Err(err) => return Err((path, NotRead::Open(err))),
        };
        index::gitlinks(&bytes).map_err(|unread| (path, NotRead::from(unread)))
    };
    let mut found = read(index)?;
    if let Some(shared) = found.shared.take() {
        found.paths.extend(read(git_dir.join(format!("sharedindex.{shared}")))?.paths);
    }
    Ok(found.paths)
}

/// Moves aside an index (or the shared index of a split one) that could not be read, if it
/// changed while the command ran.
fn set_aside(before: &Before, index: &Path, why: &NotRead) -> Option<String> {
    let meta = std::fs::symlink_metadata(index).ok()?;
    if !survey::changed(&meta, before.at()) {
        return None;
    }
    let shown = index.display();
    let moved = Parent::existing(before.roots(), index).and_then(|parent| move_aside(&parent));
    Some(match moved {
        Ok(aside) => format!(
            "moved the index {shown} aside to {} ({why}): a submodule it stages could run code at the user's \
             next `git status`; `git reset` makes the index again from the last commit",
            aside.target().display()
        ),
        Err(err) => format!("the index {shown} could not be read ({why}) nor moved aside: {err}"),
    })
}

/// The `path` entries of `tree`'s `.gitmodules` that git would take (see `index::plain`).
fn submodule_paths(roots: &[PathBuf], tree: &Path) -> Vec<Vec<u8>> {
    let file = tree.join(".gitmodules");
    if std::fs::symlink_metadata(&file).is_err() {
        return Vec::new();
    }
    let Ok(Some(bytes)) = Parent::existing(roots, &file).and_then(|parent| parent.read(MAX_GITMODULES)) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    gitconfig::entries(&text)
        .into_iter()
        .filter(|(section, key, _)| {
            key == "path" && section.split_once('.').is_some_and(|(base, _)| base == "submodule")
        })
        .filter_map(|(_, _, value)| value.map(String::into_bytes))
        .filter(|path| index::plain(path))
        .collect()
}

/// The git directory `dot_git` leads to (a directory, a link to one, or a `gitdir:` file read
/// beneath its root), as a final target.
fn git_dir(roots: &[PathBuf], dot_git: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    if meta.is_dir() || meta.file_type().is_symlink() {
        return std::fs::canonicalize(dot_git).ok().filter(|dir| dir.is_dir());
    }
    let bytes = Parent::existing(roots, dot_git).ok()?.read(MAX_POINTER).ok()??;
    let text = String::from_utf8_lossy(&bytes);
    let target = text.lines().find_map(|line| line.strip_prefix("gitdir:"))?.trim();
    std::fs::canonicalize(dot_git.parent()?.join(target)).ok().filter(|dir| dir.is_dir())
}

/// Whether the command made or changed the repository whose `.git` is `dot_git`, reached as a
/// submodule (see the top).
fn touched(before: &Before, dot_git: &Path) -> bool {
    let roots = before.roots();
    let Some(git_dir) = git_dir(roots, dot_git) else {
        // A `.git` that leads nowhere runs nothing; one the command made is judged as the sweep
        // judges any.
        return before.made(dot_git);
    };
    if before.git_dirs().contains(&git_dir) {
        return false;
    }
    if before.made(dot_git) {
        return true;
    }
    let changed = |path: &Path| std::fs::symlink_metadata(path).is_ok_and(|meta| survey::changed(&meta, before.at()));
    // Renamed into its place (which keeps a birth time: its directory's entries and its own
    // change time say so), or a link or `gitdir:` file written since.
    let renamed_in = dot_git.parent().is_some_and(changed) && changed(dot_git);
    if renamed_in || (!git_dir.starts_with(dot_git) && changed(dot_git)) {
        return true;
    }
    if ["config", "hooks", "commondir", "config.worktree"].iter().any(|part| changed(&git_dir.join(part))) {
        return true;
    }
    let hooks = std::fs::read_dir(git_dir.join("hooks")).into_iter().flatten().flatten().take(MAX_HOOKS);
    hooks.map(|hook| hook.path()).any(|hook| changed(&hook))
}

#[cfg(test)]
#[path = "gitlinks_tests.rs"]
pub(super) mod tests;

//! What a command made that no mount could stop, taken away once it and everything it started
//! are gone: a guarded place at the top of a root that did not exist before (`.cargo/`,
//! `.vscode/`, …), a `commondir` or `config.worktree` in a git directory that had none (they
//! would send git elsewhere for its configuration), and in each repository the command made
//! every hook that is not one of git's samples and every setting of its configuration that can
//! run code. What is taken is said on stderr, which the model reads.
//!
//! The repositories are found by the walks of `survey.rs`. A bounded walk cannot see
//! everything, and a command can spend any fixed budget or go below any fixed depth, so the walk
//! after the command spends its effort where the command wrote: it reads every directory whose
//! change time (which a new, removed or renamed entry sets, and no program can set back) says
//! its entries changed while the command ran, at any depth and in `node_modules` or `target`
//! too, at the command's own cost; a directory that stood unchanged is not read again (its
//! listing from before holds), which makes the sweep after a command that changed nothing
//! cheaper than reading again what the walk before read.
//!
//! A repository is the command's when its `.git` (a directory, a link or a `gitdir:` file) was
//! not at that path before, or leads now to another git directory than before (another inode:
//! a directory renamed over it, a link turned elsewhere), whatever its times say: a rename
//! keeps a directory's birth time. So is a directory with a git directory's own shape (`HEAD`,
//! `objects/`, `refs/`: git takes it for a bare repository) that had no such shape before, or is
//! another directory than the one that had. Only where the walk before the command did not read
//! the parent (past its depth or budget) is a `.git` it never saw judged by its birth time, and
//! such a git directory by its own, its `config`'s and its `hooks`' birth times, so that a
//! user's repository the walk missed is not taken for new. A repository that stood where the
//! walk before did not reach is not bound either: a command may write its hooks, and they stay,
//! unless a repository the sweep knows stages it as a submodule, which `git status` enters:
//! those are judged wherever they lie (`gitlinks.rs`).
//!
//! Nothing is followed through a link: a link is removed itself; a place made through a link the
//! command made on the way (below a root) goes with that link, removed itself; one reached
//! through a link that stood before the command is left alone; and directories are removed
//! without following what is in them. Every removal and rewrite goes through the directory
//! that holds it, opened beneath its root with no link followed (`crate::beneath`), so a
//! process of the command still running (a background job) cannot swap a link into the path
//! between a check and the act. The supervisor does this outside Landlock, so this care is
//! the whole guard.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::pending::{self, Pending};
use super::survey::{self, CLOCK_LAG, Survey};
use super::{SKIPPED, gitlinks, safe_config};
use crate::beneath::Parent;
use crate::workspace::{GUARDED, Reach, Shield};

/// Files in a git directory that redirect git, made only by `git worktree add` in a linked
/// worktree's own directory.
const REDIRECTS: &[&str] = &["commondir", "config.worktree"];

/// What stood before the command, to compare with after it.
#[derive(Debug)]
pub struct Before {
    roots: Vec<PathBuf>,
    /// Guarded places at the top of a root that did not exist.
    absent: Vec<PathBuf>,
    /// [`REDIRECTS`] of the known git directories that did not exist.
    redirects: Vec<PathBuf>,
    /// The git directories the walk found.
    git_dirs: Vec<PathBuf>,
    /// Files at the top of a root named as a guarded place ends (`*.code-workspace`).
    suffixed: Vec<PathBuf>,
    /// Their submodules and queued `exec` lines.
    pending: Pending,
    /// Every `.git` the walk reached, and which git directory it led to.
    repositories: Vec<(PathBuf, Option<Identity>)>,
    /// Every directory with a git directory's shape the walk reached, and which it was.
    bare: Vec<(PathBuf, Option<Identity>)>,
    /// What the walk saw, to tell a `.git` that was not there from one it never looked for.
    survey: Survey,
    /// When the command was about to start: a repository the walk before could not see and
    /// born before then is not its.
    at: std::time::SystemTime,
    /// `.git` in each directory above a root that had none: git run in the workspace finds a
    /// repository a command makes there (in a writable `/tmp` above a scratch workspace).
    above: Vec<PathBuf>,
}

/// Which git directory a `.git` leads to, and how.
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    kind: Kind,
    dev: u64,
    ino: u64,
    /// Told apart from a directory that had the same inode number before it (where kept).
    born: Option<std::time::SystemTime>,
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Directory,
    Link,
    Pointer,
}

/// The git directory `dot_git` leads to now; `None` when it leads nowhere.
fn identity(dot_git: &Path) -> Option<Identity> {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    let (kind, dir) = if meta.is_dir() {
        (Kind::Directory, dot_git.to_path_buf())
    } else if meta.file_type().is_symlink() {
        (Kind::Link, std::fs::canonicalize(dot_git).ok()?)
    } else {
        (Kind::Pointer, super::pointed_git_dir(dot_git)?)
    };
    let dir = std::fs::symlink_metadata(dir).ok().filter(std::fs::Metadata::is_dir)?;
    Some(Identity { kind, dev: dir.dev(), ino: dir.ino(), born: dir.created().ok() })
}

/// Notes what stands now in `roots` (whose git directories the walk found, and what their
/// configuration names that is not there yet: `missing`).
pub fn before(roots: &[PathBuf], git_dirs: &[PathBuf], missing: &[PathBuf]) -> Before {
    // Taken first: what changes while the walk reads is read again after.
    let at = std::time::SystemTime::now();
    let roots: Vec<PathBuf> = roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect();
    let mut absent = Vec::new();
    for root in &roots {
        for place in GUARDED.iter().filter(|place| place.shield != Shield::Secret) {
            let path = match place.reach {
                Reach::Tree | Reach::Last => root.join(place.name),
                Reach::Within(parent) => root.join(parent).join(place.name),
                Reach::Prefix | Reach::Suffix => continue,
            };
            if std::fs::symlink_metadata(&path).is_err() {
                absent.push(path);
            }
        }
    }
    for path in missing {
        if !absent.contains(path) && std::fs::symlink_metadata(path).is_err() {
            absent.push(path.clone());
        }
    }
    let redirects = git_dirs
        .iter()
        .flat_map(|dir| REDIRECTS.iter().map(move |name| dir.join(name)))
        .filter(|path| std::fs::symlink_metadata(path).is_err())
        .collect();
    let survey = survey::before(&roots);
    let repositories = survey.found.iter().map(|dot_git| (dot_git.clone(), identity(dot_git))).collect();
    let bare = survey.bare.iter().map(|dir| (dir.clone(), identity(dir))).collect();
    let suffixed = roots.iter().flat_map(|root| suffixed(root)).collect();
    let pending = pending::note(&roots, git_dirs);
    let git_dirs = git_dirs.to_vec();
    let above = roots
        .iter()
        .flat_map(|root| root.ancestors().skip(1))
        .map(|dir| dir.join(".git"))
        .filter(|dot_git| std::fs::symlink_metadata(dot_git).is_err())
        .collect();
    Before { roots, absent, redirects, git_dirs, suffixed, pending, repositories, bare, survey, at, above }
}

impl Before {
    /// Whether the command made the repository whose `.git` is `dot_git` (see the top).
    pub(super) fn made(&self, dot_git: &Path) -> bool {
        if let Some((_, was)) = self.repositories.iter().find(|(path, _)| path == dot_git) {
            return identity(dot_git) != *was;
        }
        if self.roots.iter().any(|root| self.survey.absent(root, dot_git)) {
            return true;
        }
        self.born_since(dot_git, true)
    }

    /// Whether the command gave `dir` a git directory's shape (see the top).
    fn made_bare(&self, dir: &Path) -> bool {
        if let Some((_, was)) = self.bare.iter().find(|(path, _)| path == dir) {
            return identity(dir) != *was;
        }
        if self.survey.listed(dir) || self.survey.new_dir(dir) == Some(true) {
            return true;
        }
        // Where the walk before never read it: born since, or any of what makes it a repository
        // or says what runs changed since (written in an earlier command and rewritten now keeps
        // its birth time, not its change time).
        let changed =
            |part: &str| std::fs::symlink_metadata(dir.join(part)).is_ok_and(|meta| survey::changed(&meta, self.at));
        self.born_since(dir, true) || ["config", "hooks", "HEAD", "commondir"].into_iter().any(changed)
    }

    /// Whether `path` was born after the command was about to start; `false` when nothing is
    /// there. Where the file system keeps no birth time, with `by_parent`, whether its parent's
    /// entries changed since (something was made or renamed there), else no.
    fn born_since(&self, path: &Path, by_parent: bool) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
        match meta.created() {
            // File times come from a coarse clock that may lag the one `at` was read from.
            Ok(born) => born + CLOCK_LAG >= self.at,
            Err(_) => {
                by_parent
                    && path
                        .parent()
                        .and_then(|parent| std::fs::symlink_metadata(parent).ok())
                        .is_some_and(|parent| survey::changed(&parent, self.at))
            }
        }
    }

    /// What is taken away whenever it appears: the absent guarded places (a repository aside,
    /// which is dealt with at the end) and the redirects.
    pub fn takeable(&self) -> impl Iterator<Item = &PathBuf> {
        let repository = |path: &&PathBuf| path.file_name().is_some_and(|name| name == ".git");
        self.absent.iter().filter(move |path| !repository(path)).chain(&self.redirects)
    }
}

impl Before {
    /// The workspace roots, as the walk found them.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// When the command was about to start.
    pub(super) fn at(&self) -> std::time::SystemTime {
        self.at
    }

    /// The user's git directories, bound read-only while the command ran.
    pub(super) fn git_dirs(&self) -> &[PathBuf] {
        &self.git_dirs
    }
}

/// The entries at the top of `root` named as a guarded place ends (`*.code-workspace`).
fn suffixed(root: &Path) -> Vec<PathBuf> {
    let suffixes: Vec<&str> = GUARDED
        .iter()
        .filter(|place| place.reach == Reach::Suffix && place.shield != Shield::Secret)
        .map(|place| place.name)
        .collect();
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| suffixes.iter().any(|suffix| entry.file_name().as_encoded_bytes().ends_with(suffix.as_bytes())))
        .map(|entry| entry.path())
        .collect()
}

/// Takes `path` away while the command may still be writing into it (tried a few times); the
/// line to say, if it was there (the sweep may have taken it first).
pub fn take_now(roots: &[PathBuf], path: &Path) -> Option<String> {
    std::fs::symlink_metadata(path).ok()?;
    let why = "guarded places are read-only to commands; write them with the edit tools, which ask";
    let mut said = take(roots, path, why);
    for _ in 0..20 {
        if std::fs::symlink_metadata(path).is_err() {
            break;
        }
        said = take(roots, path, why);
    }
    Some(said)
}

/// Takes away what the command made of what [`before`] noted; the lines to say.
pub fn sweep(before: &Before) -> Vec<String> {
    let mut said = Vec::new();
    let made = |path: &&PathBuf| std::fs::symlink_metadata(path).is_ok();
    for path in before.absent.iter().filter(made) {
        if path.file_name().is_some_and(|name| name == ".git") {
            continue; // A new repository is dealt with below.
        }
        let why = "guarded places are read-only to commands; write them with the edit tools, which ask";
        said.push(before.take_through_link(path, why).unwrap_or_else(|| take(&before.roots, path, why)));
    }
    for path in before.redirects.iter().filter(made) {
        let why = "it would send git to another directory for its configuration and hooks";
        said.push(before.take_through_link(path, why).unwrap_or_else(|| take(&before.roots, path, why)));
    }
    for path in before.roots.iter().flat_map(|root| suffixed(root)) {
        if !before.suffixed.contains(&path) {
            let why = "guarded places are read-only to commands; write them with the edit tools, which ask";
            said.push(take(&before.roots, &path, why));
        }
    }
    // In the repositories that stood: a submodule's git directory the command made is a
    // repository it made, and `exec` lines it queued in a stopped rebase go.
    for git_dir in &before.git_dirs {
        for module in before.pending.new_modules(git_dir) {
            said.extend(clean_module(&before.roots, &module));
        }
        said.extend(before.pending.drop_new_execs(&before.roots, git_dir));
    }
    let found = survey::after(&before.survey, &before.roots, before.at);
    let mut cleaned = HashSet::new();
    for dot_git in &found.gits {
        if before.made(dot_git) {
            said.extend(new_repository(before, dot_git));
            cleaned.insert(dot_git.clone());
        }
    }
    // The repositories their indexes stage as submodules, wherever the walk did not look.
    let known: Vec<PathBuf> = before.repositories.iter().map(|(path, _)| path.clone()).chain(found.gits).collect();
    said.extend(gitlinks::sweep(before, &known, &cleaned));
    for dir in found.bare {
        if before.made_bare(&dir) {
            said.extend(new_git_dir(&before.roots, &dir));
        }
    }
    // A repository the command made above the workspace: git in the workspace would find it
    // (its hooks and settings run at the user's next git command there).
    for dot_git in before.above.iter().filter(made) {
        said.extend(new_repository(before, dot_git));
    }
    // A link the command made to a repository outside the workspace (one it made in `/tmp`)
    // would run that repository's hooks and settings at the user's git command through it.
    for link in found.links {
        if before.links_to_outside_repository(&link) {
            let why = "it leads to a repository outside the workspace, which the sweep cannot clean";
            said.push(take(&before.roots, &link, why));
        }
    }
    // Guarded places below the top of a root: one the walk before saw was not there, or (where
    // it never read the directory) changed while the command ran, is the command's.
    for path in found.guarded {
        if before.made_place(&path) {
            let why = "guarded places are read-only to commands; write them with the edit tools, which ask";
            said.push(take(&before.roots, &path, why));
        }
    }
    said
}

impl Before {
    /// The components of `path` below the root that holds it (those that are text).
    fn below<'a>(&self, path: &'a Path) -> Option<Vec<&'a str>> {
        let root = self.roots.iter().find(|root| path.starts_with(root))?;
        let rest = path.strip_prefix(root).ok()?;
        Some(rest.components().filter_map(|part| part.as_os_str().to_str()).collect())
    }

    /// Whether `link` is one the command made (changed since it started) that leads to a
    /// directory outside the roots which git takes for a repository, or which holds one.
    fn links_to_outside_repository(&self, link: &Path) -> bool {
        // `npm link` and the like point dependencies at the user's checkouts elsewhere.
        if self.below(link).is_none_or(|parts| parts.iter().any(|part| SKIPPED.contains(part))) {
            return false;
        }
        let Ok(meta) = std::fs::symlink_metadata(link) else { return false };
        if !survey::changed(&meta, self.at) {
            return false;
        }
        let Ok(target) = std::fs::canonicalize(link) else { return false };
        if !target.is_dir() || self.roots.iter().any(|root| target.starts_with(root)) {
            return false;
        }
        let has = |name: &str| std::fs::symlink_metadata(target.join(name)).is_ok();
        has(".git") || (has("HEAD") && (has("commondir") || (has("objects") && has("refs"))))
    }

    /// Whether the command made the guarded place at `path` (below the top of a root).
    fn made_place(&self, path: &Path) -> bool {
        // Dependencies and build output ship such files of their own (a vendored crate's
        // `rust-toolchain.toml`, checked against its checksums), and no tool reads them there.
        let Some(parts) = self.below(path) else { return false };
        if parts.iter().any(|part| SKIPPED.contains(part)) {
            return false;
        }
        // The top of a root is the absent list's (noted before, taken above).
        let within_top = parts.len() == 2
            && GUARDED.iter().any(|place| matches!(place.reach, Reach::Within(parent) if parent == parts[0]));
        if parts.len() < 2 || within_top {
            return false;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
        if meta.is_dir() {
            // A directory the walk before saw there, the same one, is the user's.
            match self.survey.stood(path) {
                Some(Some(ino)) => return ino != meta.ino(),
                Some(None) => return true,
                None => {}
            }
        }
        // A file (the walk notes directories only), or a directory the walk before never saw:
        // its change time tells whether the command made, renamed or changed it. One within the
        // walk's reach was bound read-only, so the command could not change it.
        survey::changed(&meta, self.at)
    }
}

impl Before {
    /// A guarded place the command made through a link it made on the way (`.hg` renamed away
    /// and linked back, `tools` linked where `core.hooksPath` names `tools/hooks`): the link is
    /// removed, itself, not what it leads to, and so the place with it. A link that stood
    /// before the command (changed no later than it started: a link's change time cannot be
    /// set back) is the user's, and is left, as the place beyond it is. `None` where `path` is
    /// not reached through a link below a root.
    fn take_through_link(&self, path: &Path, why: &str) -> Option<String> {
        let root = self.roots.iter().find(|root| path.starts_with(root))?;
        let mut at = root.clone();
        for part in path.strip_prefix(root).ok()?.parent()?.components() {
            at.push(part);
            let meta = std::fs::symlink_metadata(&at).ok()?;
            if !meta.file_type().is_symlink() {
                continue;
            }
            if !survey::changed(&meta, self.at) {
                return None;
            }
            let shown = path.display();
            // Removed from its directory opened beneath the root, and only if still a link.
            let removed = Parent::existing(&self.roots, &at).and_then(|parent| match parent.kind()? {
                Some(libc::S_IFLNK) => parent.remove(&parent.name),
                _ => Err(std::io::Error::other("it is no longer a link")),
            });
            return Some(match removed {
                Ok(()) => format!("removed {}, a link the command made to reach {shown}: {why}", at.display()),
                Err(err) => format!(
                    "the command made {shown} through the link {}, which could not be removed: {err}",
                    at.display()
                ),
            });
        }
        None
    }
}

/// Removes `path` (a link itself, a directory with everything in it), from its directory
/// opened beneath the root that holds it with no link followed on the way or inside it: a
/// process of the command still running cannot swap a link in to send the removal elsewhere.
/// A link met on the way leaves it alone. The line to say.
/// What cannot be removed (nested too deep, written into meanwhile) is moved aside under a name
/// nobody reads, so that it is gone from the guarded place all the same.
pub(super) fn take(roots: &[PathBuf], path: &Path, why: &str) -> String {
    let shown = path.display();
    let parent = match Parent::existing(roots, path) {
        Ok(parent) => parent,
        Err(err) => return format!("the command made {shown}, and it was left as it is: {err}"),
    };
    let Err(err) = parent.remove_tree() else {
        return format!("removed {shown}, which the command made: {why}");
    };
    match move_aside(&parent) {
        Ok(aside) => {
            let _ = aside.remove_tree();
            format!(
                "moved {shown}, which the command made, aside to {} (it could not be removed: {err}): {why}",
                aside.target().display()
            )
        }
        Err(_) => format!("the command made {shown}, and it was left as it is: {err}"),
    }
}

/// Renames what `parent` names to a name beside it that a command cannot guess (a command that
/// made the next names first kept a place from being moved aside), tried a few times.
pub fn move_aside(parent: &Parent) -> std::io::Result<Parent> {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut failed = std::io::Error::other("no name was free");
    for _ in 0..8 {
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        match parent.rename_aside(format!(".cairn-taken.{random:016x}").into()) {
            Ok(aside) => return Ok(aside),
            Err(err) => failed = err,
        }
    }
    Err(failed)
}

/// A repository the command made: kept, but without hooks, redirects or settings that run
/// code. A `.git` link is removed; a `.git` file pointing outside the roots, or to one of the
/// user's git directories (whose configuration the sweep must not rewrite), is removed.
pub(super) fn new_repository(before: &Before, dot_git: &Path) -> Vec<String> {
    let roots = &before.roots;
    let Ok(meta) = std::fs::symlink_metadata(dot_git) else { return Vec::new() };
    if meta.file_type().is_symlink() {
        return vec![take(roots, dot_git, "a repository the command made may not lead elsewhere")];
    }
    let git_dir = if meta.is_dir() {
        dot_git.to_path_buf()
    } else {
        let inside = super::pointed_git_dir(dot_git).filter(|dir| roots.iter().any(|root| dir.starts_with(root)));
        match inside {
            Some(dir) => dir,
            None => return vec![take(roots, dot_git, "it points git to a directory outside the workspace")],
        }
    };
    if before.git_dirs.contains(&git_dir) && git_dir != dot_git {
        return vec![take(roots, dot_git, "it points git to the git directory of a repository that stood before")];
    }
    new_git_dir(roots, &git_dir)
}

/// The git directory of a repository the command made, and its submodules' (they are the
/// command's too), without hooks, redirects, settings or queued `exec` lines that run code.
fn new_git_dir(roots: &[PathBuf], git_dir: &Path) -> Vec<String> {
    let mut said = clean(roots, git_dir, &Pending::default());
    for module in Pending::default().new_modules(git_dir) {
        said.extend(clean_module(roots, &module));
    }
    said
}

/// A submodule's git directory the command made: a link is taken itself, a directory cleaned.
fn clean_module(roots: &[PathBuf], module: &Path) -> Vec<String> {
    if std::fs::symlink_metadata(module).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return vec![take(roots, module, "a submodule's git directory the command made may not lead elsewhere")];
    }
    clean(roots, module, &Pending::default())
}

/// Takes from a git directory the command made, or changed, what runs code: its hooks (but
/// git's samples), redirects, settings that run programs, and queued `exec` lines it added to
/// a stopped rebase (`pending` says which stood before).
fn clean(roots: &[PathBuf], git_dir: &Path, pending: &Pending) -> Vec<String> {
    let mut said = Vec::new();
    let hooks = git_dir.join("hooks");
    match std::fs::symlink_metadata(&hooks) {
        Ok(meta) if meta.is_dir() => {
            for hook in std::fs::read_dir(&hooks).into_iter().flatten().flatten() {
                if !hook.file_name().to_string_lossy().ends_with(".sample") {
                    said.push(take(roots, &hook.path(), "a new repository's hooks run code at its next git command"));
                }
            }
        }
        Ok(_) => said.push(take(roots, &hooks, "a new repository's hooks run code at its next git command")),
        Err(_) => {}
    }
    for name in REDIRECTS {
        let path = git_dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            said.push(take(roots, &path, "it would send git to another directory for its configuration"));
        }
    }
    said.extend(safe_config::safe_config(roots, &git_dir.join("config")));
    said.extend(pending.drop_new_execs(roots, git_dir));
    said
}

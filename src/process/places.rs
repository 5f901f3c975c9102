//! The places a sandboxed command finds read-only or hidden, found on disk just before it starts.
//!
//! Inside each workspace root, a walk finds the guarded places of [`crate::workspace::GUARDED`]:
//! tool and agent configuration becomes read-only, `.env*` files and the other secret names
//! hidden, and a repository keeps its objects, refs and index writable while what says what
//! runs becomes read-only: `config`, `hooks/`, `info/`, `commondir`, `config.worktree`,
//! `worktrees/`, each submodule's git directory under `modules/` likewise, the directory
//! `core.hooksPath` names (from every configuration file git reads) and every
//! file that configuration includes (`workspace::gitconfig`, which the file tools share). For
//! a worktree or submodule whose `.git` is a file, the file itself and the git directory it
//! names; for a `.git` that is a link to a directory, the directory it leads to.
//! A directory git itself takes for a (bare) repository — `HEAD`, `objects/` and `refs/` in it,
//! no `.git` — is guarded as a git directory.
//!
//! Every directory above a read-only place, a hidden one and each root is an anchor: bound
//! onto itself, so that it cannot be renamed away and replaced by a copy whose parts are
//! writable. Outside the roots, the places the policy hides (cairn's own directories, `~/.ssh`,
//! …) are hidden.
//!
//! The walk is breadth first: a root's own entries are all read first, whatever their number;
//! a link to a directory outside the roots is followed once, and only secrets are covered there;
//! below them it reads at most [`MAX_ENTRIES`] entries, [`MAX_DEPTH`] levels deep, skipping
//! directories that hold dependencies or build output. What earlier walks of the same roots
//! found is added (`remembered.rs`), so a command that floods the workspace with entries
//! cannot make the next walk miss it. A guarded place that does not exist yet cannot be bound;
//! `sweep.rs` deals with what a command makes.

mod gitlinks;
mod index;
mod pending;
pub mod remembered;
mod safe_config;
pub mod sockets;
mod survey;
pub mod sweep;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use globset::GlobSet;

pub use crate::workspace::Home;
use crate::workspace::repository::{MAX_POINTER, pointed_git_dir, small_file};
use crate::workspace::{GUARDED, Guarded, Shield, gitconfig};

/// Levels below a root the walk looks into.
pub const MAX_DEPTH: usize = 4;
/// Directory entries the walk reads below the roots' own, per command.
pub const MAX_ENTRIES: usize = 20_000;
/// Directories never walked into: dependencies and build output, large and not the project's own.
const SKIPPED: &[&str] =
    &["node_modules", "target", "vendor", ".venv", "venv", "__pycache__", "dist", "build", ".next", ".cache", ".tox"];
/// The system's own directories: a file there that anyone may read is no secret to cover.
const SYSTEM: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/boot", "/opt", "/proc", "/sys", "/dev"];
/// Read-only binds and covers a command's namespace holds at most. Each one costs the kernel
/// more the more there are (20,000 took two seconds of every command's start), and a command
/// can make as many `.env` files or repositories as it likes, which later walks find and
/// remember: beyond this, places give way to their directories ([`fit`]); the mounts in all are
/// bounded by [`MAX_MOUNTS`].
pub const MAX_GUARDED: usize = 2_000;
/// Mounts a command's namespace takes at most: the guarded places and every directory above
/// them, which is bound too. Beyond it the command is refused ([`Places::check_count`]).
pub const MAX_MOUNTS: usize = 2 * MAX_GUARDED;
/// What a git directory holds that says what runs, or where git finds what does.
const GIT_PARTS: &[&str] = &["config", "hooks", "info", "commondir", "config.worktree", "worktrees"];

/// What the namespace does to the paths of one command, each path a final target.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Places {
    /// Bound onto themselves, writable: cannot be renamed or removed while the command runs.
    pub anchors: Vec<PathBuf>,
    /// Bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Covered by an empty, unreadable file or directory.
    pub hidden: Vec<PathBuf>,
    /// The git directories found (to look at again after the command).
    pub git_dirs: Vec<PathBuf>,
    /// What a repository's configuration names inside the roots that does not exist yet (its
    /// hooks directory, a file it includes): no mount can cover it, so the sweep takes it away
    /// if the command makes it (`sweep.rs`).
    pub missing: Vec<PathBuf>,
    /// Secrets the walk covered where a link led it (`.env -> ~/secrets/app.env`, `secrets ->
    /// ~/private/app`): the path it met and the target covered. Remembered with the path, and
    /// only while that still leads there: a link a command planted and took away again leaves
    /// no cover behind.
    pub linked: Vec<(PathBuf, PathBuf)>,
    /// Of those, the ones whose link is the user's (older than cairn's start when it was first
    /// met): their targets stay covered while they stand, wherever the link went since, so a
    /// command cannot uncover a secret by renaming the link (`remembered.rs`).
    pub lasting: Vec<(PathBuf, PathBuf)>,
    /// Whether places gave way to their directories ([`fit`]): what this walk found is then
    /// not remembered, so a flood a command made leaves no cover behind once it is gone; only
    /// the user's links it met are.
    pub fitted: bool,
}

impl Places {
    /// Refuses a namespace that would take more mounts than [`MAX_MOUNTS`] (a root
    /// holding thousands of `.env` files, made by a command most likely): each one slows
    /// every command's start.
    pub fn check_count(&self) -> Result<(), String> {
        // Every directory above a bound place is bound too: a secret a link leads to deep in a
        // temp directory costs a mount for each level.
        let count = self.hidden.len() + self.read_only.len() + self.anchors.len();
        if count <= MAX_MOUNTS {
            return Ok(());
        }
        let some: Vec<String> =
            self.hidden.iter().chain(&self.read_only).take(3).map(|path| path.display().to_string()).collect();
        Err(format!(
            "the workspace holds {count} places a command must not see or change, with the directories \
             above them (such as {}: files, or where links in the workspace lead), more than the \
             {MAX_MOUNTS} cairn guards for one command; nothing ran. Remove the ones a command made \
             (or the links to them), or list them in [sandbox] visible in config.toml",
            some.join(", ")
        ))
    }
}

/// Which names a walk hides besides the secret guarded ones, and which it leaves visible.
#[derive(Debug, Default)]
pub struct Names {
    /// Workspace-relative globs to hide (`[sandbox] hidden` entries that are not absolute).
    pub hidden: GlobSet,
    /// Workspace-relative globs left visible (`[sandbox] visible`), even if secret.
    pub visible: GlobSet,
}

/// [`find_knowing`] with nothing found before, every link older than cairn.
#[cfg(test)]
pub fn find(roots: &[PathBuf], hide: &[PathBuf], names: &Names, writable: bool, home: &Home) -> Places {
    find_knowing(roots, hide, names, writable, home, remembered::Known::default(), None)
}

/// The places of a command whose workspace roots are `roots` and whose policy hides `hide`
/// (absolute paths). `writable`: whether the roots are writable at all (anchors and read-only
/// places only matter then). `known`: what walks of the same roots found before, added to what
/// this one finds, so a walk cut short by its budget loses nothing found before. `started`:
/// cairn's start, before which a link is the user's (`None`: every link is).
pub fn find_knowing(
    roots: &[PathBuf],
    hide: &[PathBuf],
    names: &Names,
    writable: bool,
    home: &Home,
    known: remembered::Known,
    started: Option<std::time::SystemTime>,
) -> Places {
    let roots: Vec<PathBuf> = roots.iter().filter_map(|root| std::fs::canonicalize(root).ok()).collect();
    let mut walk = Walk { roots: &roots, names, writable, home, places: Places::default(), budget: MAX_ENTRIES };
    for root in &roots {
        walk.root(root);
    }
    let mut places = walk.places;
    // What the user has made visible since stays visible.
    let shown = |path: &PathBuf| {
        roots.iter().any(|root| path.strip_prefix(root).is_ok_and(|relative| names.visible.is_match(relative)))
    };
    places.hidden.extend(known.hidden.into_iter().filter(|path| !shown(path)));
    // Where links led before is remembered again, whether or not this walk got there.
    places.hidden.extend(known.linked.iter().chain(&known.lasting).map(|(_, target)| target.clone()));
    places.linked.extend(known.linked);
    places.linked.sort();
    places.linked.dedup();
    places.lasting = known.lasting;
    if writable {
        places.read_only.extend(known.read_only);
    }
    let policy: Vec<PathBuf> =
        hide.iter().filter(|path| !planted(path)).filter_map(|path| std::fs::canonicalize(path).ok()).collect();
    places.hidden.extend(policy.iter().cloned());
    // Covering a place that holds a root (a link `.vscode -> .`, a hidden `~/.ssh` that is the
    // workspace) would take the workspace itself away.
    let holds_root = |path: &PathBuf| roots.iter().any(|root| root.starts_with(path));
    places.read_only.retain(|path| !holds_root(path));
    places.hidden.retain(|path| !holds_root(path));
    dedup(&mut places.read_only);
    dedup(&mut places.hidden);
    fit(&mut places, &roots, writable);
    if let Some(started) = started.filter(|_| over(&places, &roots, writable)) {
        shed_new_links(&mut places, &roots, &policy, started);
    }
    // Nothing inside a hidden place is bound: it is not there to see.
    // By the path's ancestors, not by every hidden place: a command may have made thousands.
    let hidden: std::collections::HashSet<PathBuf> = places.hidden.iter().cloned().collect();
    let inside_hidden = |path: &PathBuf| path.ancestors().any(|dir| hidden.contains(dir));
    places.read_only.retain(|path| !inside_hidden(path));
    if writable {
        // Every directory above what is bound cannot be renamed: not the roots, not the
        // directories between a root and its read-only places, not those above a hidden one.
        let anchors: Vec<PathBuf> = bound_above(&places, &roots).into_iter().map(Path::to_path_buf).collect();
        places.anchors = anchors;
    }
    places.anchors.retain(|path| !inside_hidden(path));
    dedup(&mut places.anchors);
    dedup(&mut places.git_dirs);
    places
}

/// Brings the read-only and hidden places within [`MAX_GUARDED`], and the mounts they take with
/// the directories above them within [`MAX_MOUNTS`], where it can: the directories inside a
/// root that hold the most places are bound read-only or covered whole instead (the deeper of
/// two holding as many), as many as the excess needs; where each place lies alone in its
/// directories (a flood of `dN/b/c/.env`), the deepest give way to their directory, a level at
/// a time; again until they fit. This guards and hides more, never less, and leaves alone what lies elsewhere; it
/// stops at a root's own entries (a root, or a directory holding one, is never covered), so a
/// root holding more than the cap itself stays above it. `writable`: whether the directories
/// above are bound at all.
fn fit(places: &mut Places, roots: &[PathBuf], writable: bool) {
    use std::collections::{HashMap, HashSet};
    // Strictly inside a root, and holding none (roots may nest).
    let inside = |dir: &Path| {
        roots.iter().any(|root| dir.starts_with(root) && dir != root) && !roots.iter().any(|root| root.starts_with(dir))
    };
    // Each round takes as many directories as the excess needs; a few rounds suffice.
    for _ in 0..32 {
        let mounts = mounts(places, roots, writable);
        if places.hidden.len() + places.read_only.len() <= MAX_GUARDED && mounts <= MAX_MOUNTS {
            return;
        }
        let mut held: HashMap<PathBuf, usize> = HashMap::new();
        for path in places.hidden.iter().chain(&places.read_only) {
            for dir in path.ancestors().skip(1).take_while(|dir| inside(dir)) {
                *held.entry(dir.to_path_buf()).or_default() += 1;
            }
        }
        // The directories holding the most first (the deeper of two holding as many), each
        // saving the places it holds but one, none inside or above another taken, until what
        // is taken saves the excess.
        let excess = (places.hidden.len() + places.read_only.len())
            .saturating_sub(MAX_GUARDED)
            .max(mounts.saturating_sub(MAX_MOUNTS));
        let mut candidates: Vec<(&PathBuf, usize)> =
            held.iter().filter(|(_, count)| **count >= 2).map(|(dir, count)| (dir, *count)).collect();
        candidates.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.components().count().cmp(&a.0.components().count())));
        let (mut chosen, mut above, mut saved) = (HashSet::<PathBuf>::new(), HashSet::<&Path>::new(), 0);
        for (dir, count) in candidates {
            if saved >= excess {
                break;
            }
            if above.contains(dir.as_path()) || dir.ancestors().any(|up| chosen.contains(up)) {
                continue;
            }
            above.extend(dir.ancestors().skip(1));
            chosen.insert(dir.clone());
            saved += count - 1;
        }
        if chosen.is_empty() {
            // Each place alone in its directories: the deepest give way to their directory.
            let movable = |path: &&PathBuf| path.parent().is_some_and(inside);
            let all = || places.hidden.iter().chain(&places.read_only).filter(movable);
            let Some(deepest) = all().map(|path| path.components().count()).max() else { return };
            chosen = all()
                .filter(|path| path.components().count() == deepest)
                .filter_map(|path| path.parent())
                .map(Path::to_path_buf)
                .collect();
        }
        for list in [&mut places.hidden, &mut places.read_only] {
            for path in list.iter_mut() {
                if let Some(dir) = path.ancestors().skip(1).find(|dir| chosen.contains(*dir)) {
                    *path = dir.to_path_buf();
                }
            }
            dedup(list);
        }
        places.fitted = true;
    }
}

/// Whether the places are beyond what one namespace takes.
fn over(places: &Places, roots: &[PathBuf], writable: bool) -> bool {
    places.hidden.len() + places.read_only.len() > MAX_GUARDED || mounts(places, roots, writable) > MAX_MOUNTS
}

/// Past the limits, the covers of secrets outside the roots that links made since cairn's
/// start led to give way (unless the policy hides them too): a command that made such a link
/// could read the file by its own path already, and [`fit`] cannot gather places outside the
/// roots, so thousands of them, each in a directory of its own, would refuse every command
/// until removed. The user's links (older) keep theirs. What is left is not remembered.
fn shed_new_links(places: &mut Places, roots: &[PathBuf], policy: &[PathBuf], started: std::time::SystemTime) {
    let outside = |path: &Path| !roots.iter().any(|root| path.starts_with(root));
    let lasting: std::collections::HashSet<&PathBuf> = places.lasting.iter().map(|(_, target)| target).collect();
    let mut shed: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    for (met, target) in &places.linked {
        if outside(target)
            && !lasting.contains(target)
            && !policy.contains(target)
            && !remembered::users_link(met, roots, started)
        {
            shed.insert(target.clone());
        }
    }
    // A target another link of the user's leads to stays covered.
    for (met, target) in &places.linked {
        if remembered::users_link(met, roots, started) {
            shed.remove(target);
        }
    }
    if shed.is_empty() {
        return;
    }
    places.hidden.retain(|path| !shed.contains(path));
    places.linked.retain(|(_, target)| !shed.contains(target));
    places.fitted = true;
}

/// The mounts `places` take: each bound place, and (when the roots are writable) each directory
/// above one or above a root, which is bound too.
fn mounts(places: &Places, roots: &[PathBuf], writable: bool) -> usize {
    let bound = places.hidden.len() + places.read_only.len();
    if !writable {
        return bound;
    }
    bound + bound_above(places, roots).len()
}

/// The roots and every directory above them or above a read-only or hidden place (`/` aside):
/// what is bound onto itself so that it cannot be renamed away.
fn bound_above<'a>(places: &'a Places, roots: &'a [PathBuf]) -> std::collections::HashSet<&'a Path> {
    let mut above: std::collections::HashSet<&Path> = roots.iter().map(PathBuf::as_path).collect();
    for path in roots.iter().chain(&places.read_only).chain(&places.hidden) {
        above.extend(path.ancestors().skip(1).filter(|dir| dir.parent().is_some()));
    }
    above
}

/// Whether `path` is a link another user made: one planted in `/tmp` at a name cairn hides
/// (`/tmp/emacs1000 -> /usr`) would have the cover put on whatever it leads to. The user's
/// own links (and root's) are followed.
fn planted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path).is_ok_and(|meta| {
        meta.file_type().is_symlink() && meta.uid() != super::namespace::current_uid() && meta.uid() != 0
    })
}

fn dedup(paths: &mut Vec<PathBuf>) {
    paths.sort();
    paths.dedup();
}

fn final_target(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// `path` resolved as far as it exists: its final target, or, for what is not there yet, its
/// parent's (where it would be made), else as written with `.` and `..` resolved.
fn resolved(path: &Path) -> PathBuf {
    final_target(path)
        .or_else(|| Some(final_target(path.parent()?)?.join(path.file_name()?)))
        .unwrap_or_else(|| crate::workspace::normalize(path))
}

struct Walk<'a> {
    roots: &'a [PathBuf],
    names: &'a Names,
    writable: bool,
    home: &'a Home,
    places: Places,
    budget: usize,
}

impl Walk<'_> {
    /// Breadth first from `root`: its own entries whatever their number, then the budget.
    fn root(&mut self, root: &Path) {
        // Each directory with its depth and whether a link led the walk there.
        let mut queue = VecDeque::from([(root.to_path_buf(), 0usize, false)]);
        // The directories outside the roots that links led the walk into, each entered once.
        let mut entered: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
        while let Some((dir, depth, linked)) = queue.pop_front() {
            // Beyond a link only secrets are covered: what is bound read-only or swept is the
            // project's own.
            let guard = self.writable && !linked;
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let parent = dir.file_name().map(|name| name.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
            let mut shape = survey::Shape::default();
            for entry in entries.flatten() {
                if depth > 0 {
                    if self.budget == 0 {
                        return;
                    }
                    self.budget -= 1;
                }
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
                let Ok(kind) = entry.file_type() else { continue };
                shape.note(&entry.file_name(), kind);
                if self.entry(root, &path, [parent.clone(), name.clone()], kind.is_dir(), guard)
                    && depth + 1 < MAX_DEPTH
                    && !SKIPPED.contains(&name.as_str())
                {
                    if kind.is_dir() {
                        queue.push_back((path, depth + 1, linked));
                    } else if kind.is_symlink() && self.linked_dir(&path, &mut entered) {
                        queue.push_back((path, depth + 1, true));
                    }
                }
            }
            // A directory git takes for a (bare) repository is guarded as a `.git` is.
            if shape.git_dir() && guard {
                self.git_dir(&dir, &dir);
            }
        }
    }

    /// Whether the walk goes through the link `path` into the directory it leads to: one
    /// outside every root (inside, the walk gets there anyway), not the system's, holding no
    /// root, and not entered before. A project's `secrets -> ~/private/app` has its `.env`
    /// files covered where they lie, as if they were in the project.
    fn linked_dir(&self, path: &Path, entered: &mut std::collections::HashSet<PathBuf>) -> bool {
        let Some(target) = final_target(path).filter(|target| target.is_dir()) else { return false };
        let elsewhere = !self.roots.iter().any(|root| target.starts_with(root) || root.starts_with(&target));
        let system = target.parent().is_none() || SYSTEM.iter().any(|dir| target.starts_with(dir));
        elsewhere && !system && entered.insert(target)
    }

    /// What covers a secret name: the entry itself, or, when it is a link, its target where that
    /// is a data file (`.env -> ~/secrets/app.env`, `-> /srv/app/shared.env`, `->
    /// /run/secrets/app`): regular, not a program, and not a file of the system's that anyone
    /// may read anyway (`/etc/passwd`). A link a repository committed or a command made would
    /// otherwise have the cover blank whatever it leads to: `.env -> /usr/bin/bash` failed every
    /// command, `.env -> ../src` emptied the sources.
    fn secret(&self, path: &Path) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt as _;
        let target = final_target(path)?;
        if !std::fs::symlink_metadata(path).ok()?.file_type().is_symlink() {
            return Some(target);
        }
        let meta = std::fs::metadata(&target).ok()?;
        let mode = meta.permissions().mode();
        let program = mode & 0o111 != 0;
        let system = SYSTEM.iter().any(|dir| target.starts_with(dir));
        let public = system && mode & 0o004 != 0;
        (meta.is_file() && !program && !public).then_some(target)
    }

    /// Covers what [`Walk::secret`] says of `path`, noting the link that led there if any.
    fn cover(&mut self, path: &Path) {
        let Some(target) = self.secret(path) else { return };
        if target != path {
            self.places.linked.push((path.to_path_buf(), target.clone()));
        }
        self.places.hidden.push(target);
    }

    /// Judges one entry; whether the walk may go into it. `guard`: whether places are bound
    /// read-only here, not only secrets covered.
    fn entry(&mut self, root: &Path, path: &Path, pair: [String; 2], is_dir: bool, guard: bool) -> bool {
        let Ok(relative) = path.strip_prefix(root) else { return false };
        let place = GUARDED.iter().find(|place| place.matches(&pair, 1));
        let visible = self.names.visible.is_match(relative);
        match place {
            Some(place) if place.shield == Shield::Secret && !visible => self.cover(path),
            Some(_) | None if self.names.hidden.is_match(relative) && !visible => self.cover(path),
            Some(Guarded { shield: Shield::Git, .. }) => {
                if guard {
                    self.repository(path, is_dir);
                }
            }
            Some(Guarded { shield: Shield::ReadOnly, .. }) => {
                if guard {
                    self.places.read_only.extend(final_target(path));
                }
            }
            Some(Guarded { shield: Shield::Secret, .. }) | None => return true,
        }
        false
    }

    /// A repository's guarded parts. `dot_git` is `.git` in a worktree: the git directory
    /// itself, a link to it (Android's `repo` links each project's `.git` into
    /// `.repo/projects`), or a file pointing to it (`gitdir: …`, for worktrees and submodules).
    fn repository(&mut self, dot_git: &Path, is_dir: bool) {
        let worktree = dot_git.parent().unwrap_or(dot_git).to_path_buf();
        if is_dir {
            self.git_dir(&worktree, dot_git);
            return;
        }
        let Ok(meta) = std::fs::metadata(dot_git) else { return };
        // A link to a directory: its parts are bound where it leads, as a `gitdir:` file's
        // are. The link itself is no mount; turned elsewhere, it leads to a repository the
        // command made, which the sweep treats as one (`sweep.rs`).
        if meta.is_dir() {
            self.git_dir(&worktree, dot_git);
            return;
        }
        // Anything else than a small regular file (a FIFO, a device, a link to one) is no
        // pointer: it is never opened.
        if !meta.is_file() || meta.len() > MAX_POINTER {
            return;
        }
        // The pointer itself, read-only: else it could point elsewhere.
        self.places.read_only.extend(final_target(dot_git));
        let Some(git_dir) = pointed_git_dir(dot_git) else { return };
        self.git_dir(&worktree, &git_dir);
        // A linked worktree's hooks and configuration are those of the main repository.
        if let Some(common) = small_file(&git_dir.join("commondir"))
            .and_then(|text| std::fs::canonicalize(git_dir.join(text.trim())).ok())
        {
            self.git_dir(&worktree, &common);
        }
    }

    /// The parts of a git directory that run code or say what runs (see [`GIT_PARTS`]), the
    /// hooks directory and included files its configuration names, and the same of each
    /// submodule's git directory under `modules/`. `hooks/` and `info/` are made when missing
    /// (git's own layout has them) so that there is something to bind, but only inside a root.
    fn git_dir(&mut self, worktree: &Path, dir: &Path) {
        let Ok(dir) = std::fs::canonicalize(dir) else { return };
        if self.places.git_dirs.contains(&dir) {
            return;
        }
        self.places.git_dirs.push(dir.clone());
        if self.roots.iter().any(|root| dir.starts_with(root)) {
            for made in ["hooks", "info"] {
                let path = dir.join(made);
                if std::fs::symlink_metadata(&path).is_err() {
                    let _ = std::fs::create_dir(&path);
                }
            }
        }
        for part in GIT_PARTS {
            self.places.read_only.extend(final_target(&dir.join(part)));
        }
        let config = gitconfig::read(&dir, self.home.home.as_deref(), self.home.xdg_config.as_deref());
        let mut named = Vec::new();
        if let Some(hooks) = config.hooks_path {
            named.push(resolved(&self.home.hooks_dir(&hooks, worktree)));
        }
        // Files the configuration includes from the workspace (a tracked `.gitconfig`); the
        // user's own files outside are beyond the sandbox's writable places anyway.
        let inside = |file: &PathBuf| self.roots.iter().any(|root| file.starts_with(root));
        named.extend(config.files.iter().chain(&config.includes).map(|file| resolved(file)).filter(inside));
        // What is named but not there yet cannot be bound: noted, to be taken away after.
        for path in named {
            let list = match std::fs::symlink_metadata(&path) {
                Ok(_) => &mut self.places.read_only,
                Err(_) if inside(&path) => &mut self.places.missing,
                Err(_) => continue,
            };
            if !list.contains(&path) {
                list.push(path);
            }
        }
        self.submodules(worktree, &dir.join("modules"), 0);
    }

    fn submodules(&mut self, worktree: &Path, dir: &Path, depth: usize) {
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
                self.git_dir(worktree, &path);
            } else {
                self.submodules(worktree, &path, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod fit_tests;
#[cfg(test)]
mod sweep_tests;
#[cfg(test)]
mod tests;

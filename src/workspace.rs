//! Paths as the tools and the permissions see them: resolved against the session's working
//! directory, then followed through every symlink to their final target (existing or not) and
//! judged there: inside a workspace root, outside, protected, or impossible to tell.
//!
//! A dangling link is followed to where a write would land, so `ln -s /elsewhere/new.txt x`
//! makes `x` outside until proven inside; a link loop, an unreadable directory or a target that
//! is not UTF-8 cannot be judged and says why. Protected paths (`.git/`, agent configuration,
//! `.env*` files, configuration that tools run as code such as `.cargo/` or `.husky/`, cairn's
//! own configuration and data) are named with the reason they matter; names are compared
//! without case. So are the parts of a repository no name gives away: the git directory a
//! `.git` link or file leads to, the `core.hooksPath` directory and included configuration
//! (`repository`, reading it with `gitconfig`, which the sandbox shares). What `[sandbox]
//! hidden` hides from commands (and `visible` takes back) is secret here too (`hidden`). Which
//! directories may be a root at all is `roots`' [`Guard`].
//!
//! Globs are expanded as bash expands them ([`Workspace::expand`]), within bounds on matches and
//! on entries read. [`GUARDED`] lists the guarded names the permissions and the sandbox share;
//! [`project_dirs`] is a project's chain of directories, from its repository's root to `cwd`.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

pub mod gitconfig;
mod hidden;
mod recent;
pub use hidden::name_globs;
pub mod repository;
mod roots;

pub use repository::Home;
pub use roots::{Guard, RootRefused};

/// Symlinks followed before a path is declared a loop (Linux's own limit).
const MAX_LINKS: usize = 40;
/// Matches a glob may have before it is too many to check one by one.
const MAX_GLOB_MATCHES: usize = 256;
/// Directory entries a glob may read on its way (a hostile `*/*/*/*` stays cheap).
const MAX_GLOB_ENTRIES: usize = 4096;

/// The project's directories, outermost first: from the repository root (the nearest ancestor
/// with `.git`, below the home directory) down to `cwd`; with no repository, `cwd` alone. What
/// lies above a project (a shared temporary directory, someone else's checkout) is never part of
/// it, and neither is a repository another user owns (its directory or its `.git`), as git
/// itself refuses one, or one in a directory every user may write (`/tmp` itself): another user
/// of the machine, or a command, may have made `.git` in the shared temporary directory above
/// a scratch workspace, with instructions and agents of its own.
pub fn project_dirs(cwd: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let ours = |path: &Path| std::fs::metadata(path).is_ok_and(|meta| Some(meta.uid()) == own_uid());
    let mut chain = Vec::new();
    for dir in cwd.ancestors() {
        if Some(dir) == home || dir.parent().is_none() {
            break;
        }
        chain.push(dir.to_owned());
        let git = dir.join(".git");
        if git.exists() {
            // A directory every user may write (`/tmp`) holds scratch work, not a project: a
            // `.git` there is anyone's, a command's included.
            let shared = std::fs::metadata(dir).is_ok_and(|meta| meta.mode() & 0o002 != 0);
            if !(ours(dir) && ours(&git)) || shared {
                tracing::debug!(dir = %dir.display(), "a repository another user owns, or in a shared directory, is not the project's");
                break;
            }
            chain.reverse();
            return chain;
        }
    }
    vec![cwd.to_owned()]
}

/// The user cairn runs as, from `/proc/self/status` (its first `Uid:` field), read once.
fn own_uid() -> Option<u32> {
    static UID: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UID.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
        line.split_whitespace().next()?.parse().ok()
    })
}

/// The session's roots: its `cwd` and any additional directories.
#[derive(Clone, Debug)]
pub struct Workspace {
    cwd: PathBuf,
    /// The roots with symlinks resolved, for containment checks.
    real_roots: Vec<PathBuf>,
    /// Directories of cairn's own (configuration, data) that a tool must not change unasked.
    private: Vec<PathBuf>,
    /// Where git finds the user's configuration, for a repository's hooks path and includes.
    home: Home,
    /// What `[sandbox] hidden` hides from commands: secret here.
    hidden: Arc<hidden::Hidden>,
}

/// Where a path ends up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// Inside a root, relative to `cwd` (or to its root when it lies outside `cwd`).
    Inside { relative: String },
    /// Inside a root, but somewhere a change has effects beyond the file: asks in every mode
    /// but bypass. `secret` places (`.env*`, cairn's data, what `[sandbox] hidden` hides) ask
    /// before reads too.
    Protected { relative: String, why: &'static str, secret: bool },
    /// Outside every root.
    Outside,
    /// Cannot be judged (a symlink loop, an unreadable directory, not UTF-8).
    Unknown(String),
}

/// A path followed to its final target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The final target, every symlink followed; `None` when it cannot be resolved.
    pub real: Option<PathBuf>,
    pub place: Place,
}

impl Workspace {
    pub fn new(cwd: &Path, additional: &[PathBuf]) -> Self {
        let cwd = normalize(cwd);
        let real_roots =
            std::iter::once(&cwd).chain(additional).map(|root| real_or_lexical(&normalize(root))).collect();
        Self { cwd, real_roots, private: Vec::new(), home: Home::from_env(), hidden: Arc::default() }
    }

    /// Reads the user's git configuration from `home` rather than cairn's environment.
    pub fn with_home(mut self, home: Home) -> Self {
        self.home = home;
        self
    }

    /// Marks cairn's own directories (configuration, data) as protected.
    pub fn protecting(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        let dirs = dirs.into_iter().filter(|dir| dir.is_absolute());
        self.private.extend(dirs.map(|dir| real_or_lexical(&normalize(&dir))));
        self
    }

    /// Makes secret what `[sandbox] hidden` hides from commands: the absolute `paths` and
    /// what lies under them (but one holding a root), and the places inside a root whose path
    /// relative to it, or a directory on its way, matches one of the patterns `names`, unless
    /// one of `visible` matches it (which takes a secret name such as `.env.example` back too).
    pub fn hiding(mut self, paths: &[PathBuf], names: &[String], visible: &[String]) -> Self {
        let roots: Vec<PathBuf> = self.real_roots.iter().chain(std::iter::once(&self.cwd)).cloned().collect();
        self.hidden = Arc::new(hidden::Hidden::new(paths, names, visible, &roots));
        self
    }

    /// Whether `[sandbox] hidden` hides `path` (absolute), as written or at its final target:
    /// what a directory search leaves out. Cheap when nothing is hidden.
    pub fn hides(&self, path: &Path) -> bool {
        if self.hidden.is_empty() {
            return false;
        }
        let real = final_target(path).ok();
        [Some(path), real.as_deref()].into_iter().flatten().any(|path| {
            self.hidden.covers(path)
                || self.bases(path).any(|root| path.strip_prefix(root).is_ok_and(|inner| self.hidden.hides(inner)))
        })
    }

    /// The roots `path` lies in, as resolved and (`cwd`) as written.
    fn bases<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = &'a PathBuf> {
        self.real_roots.iter().chain(std::iter::once(&self.cwd)).filter(move |root| path.starts_with(root))
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The roots, symlinks resolved.
    pub fn roots(&self) -> &[PathBuf] {
        &self.real_roots
    }

    /// `path` made absolute (relative paths start at `cwd`) with `.` and `..` resolved. This is
    /// the path the OS is given.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() { normalize(path) } else { normalize(&self.cwd.join(path)) }
    }

    /// Follows `path` (absolute) to its final target and judges it.
    pub fn locate(&self, path: &Path) -> Located {
        match final_target(path) {
            Ok(real) => {
                let place = self.place(path, &real);
                Located { real: Some(real), place }
            }
            Err(why) => Located { real: None, place: Place::Unknown(why) },
        }
    }

    fn place(&self, given: &Path, real: &Path) -> Place {
        if let Some(why) = self.private.iter().find(|dir| real.starts_with(dir)).map(|_| PRIVATE) {
            return match self.relative(real) {
                Some(Ok(relative)) => Place::Protected { relative, why, secret: true },
                Some(Err(why)) => Place::Unknown(why),
                None => Place::Outside,
            };
        }
        let relative = match self.relative(real) {
            Some(Ok(relative)) => relative,
            Some(Err(why)) => return Place::Unknown(why),
            None => return Place::Outside,
        };
        // The path as written and as resolved, relative to every root it lies in: a link into
        // `.git` is as protected as `.git`, and a secret found either way wins.
        let judged = [given, real].into_iter().flat_map(|path| {
            let covered = self.hidden.covers(path).then_some((hidden::HIDDEN, true));
            let named = self.bases(path).filter_map(move |root| self.hidden.by_name(path.strip_prefix(root).ok()?));
            covered.into_iter().chain(named)
        });
        let mut protection = None;
        for (why, secret) in judged {
            if secret {
                protection = Some((why, secret));
                break;
            }
            protection.get_or_insert((why, secret));
        }
        let protection = protection.or_else(|| {
            let roots: Vec<&Path> = self.real_roots.iter().map(PathBuf::as_path).collect();
            repository::guarded(given, real, &roots, &self.home).map(|why| (why, false))
        });
        match protection {
            Some((why, secret)) => Place::Protected { relative, why, secret },
            None => Place::Inside { relative },
        }
    }

    /// `real` relative to `cwd` (or to its root); `None` outside every root.
    fn relative(&self, real: &Path) -> Option<Result<String, String>> {
        let root = self.real_roots.iter().find(|root| real.starts_with(root))?;
        let real_cwd = self.real_roots.first().unwrap_or(root);
        let relative = real.strip_prefix(real_cwd).or_else(|_| real.strip_prefix(root)).ok()?;
        Some(match relative.to_str() {
            Some("") => Ok(".".to_owned()),
            Some(text) => Ok(text.to_owned()),
            None => Err(format!("{} is not valid UTF-8", real.display())),
        })
    }

    /// `path` relative to `cwd` when it is inside, else as it is.
    pub fn display(&self, path: &Path) -> String {
        let relative = path.strip_prefix(&self.cwd).or_else(|_| match self.real_roots.first() {
            Some(real_cwd) => path.strip_prefix(real_cwd),
            None => path.strip_prefix(&self.cwd),
        });
        match relative {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.display().to_string(),
            Err(_) => path.display().to_string(),
        }
    }

    /// The paths a glob pattern (relative to `cwd`, or absolute) matches now, as bash would
    /// expand it (no hidden files unless the pattern asks for them). `Err` when there are too
    /// many to check.
    pub fn expand(&self, pattern: &str) -> Result<Vec<PathBuf>, String> {
        let (mut found, parts) = if let Some(rest) = pattern.strip_prefix('/') {
            (vec![PathBuf::from("/")], rest)
        } else {
            (vec![self.cwd.clone()], pattern)
        };
        let too_much = || format!("`{pattern}` needs more than {MAX_GLOB_ENTRIES} directory entries read to check");
        let mut entries_read = 0usize;
        for part in parts.split('/').filter(|p| !p.is_empty()) {
            if !part.contains(['*', '?', '[']) {
                found = found.iter().map(|dir| dir.join(unescape(part))).collect();
                continue;
            }
            let matcher = globset::GlobBuilder::new(part)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|err| format!("`{pattern}` is not a pattern cairn can check: {err}"))?
                .compile_matcher();
            let mut next = Vec::new();
            for dir in &found {
                let Ok(entries) = std::fs::read_dir(dir) else { continue };
                for entry in entries.flatten() {
                    entries_read += 1;
                    if entries_read > MAX_GLOB_ENTRIES {
                        return Err(too_much());
                    }
                    let name = entry.file_name();
                    let hidden = name.to_string_lossy().starts_with('.');
                    if (!hidden || part.starts_with('.')) && matcher.is_match(Path::new(&name)) {
                        next.push(dir.join(&name));
                    }
                }
            }
            if next.len() > MAX_GLOB_MATCHES {
                return Err(format!("`{pattern}` matches more than {MAX_GLOB_MATCHES} paths"));
            }
            found = next;
        }
        found.retain(|path| std::fs::symlink_metadata(path).is_ok());
        Ok(found)
    }
}

const PRIVATE: &str = "cairn's own configuration and data";
const GIT: &str = "git's hooks and configuration run code at the next git command";
const AGENTS: &str = "agent configuration and instructions change what agents do";
const SECRET: &str = "environment files hold secrets and run code";
const TOOL_CONFIG: &str = "tool configuration that builds, tests and commits run as code";

/// Where a guarded name counts, compared without case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A directory of this name at any depth, and everything in it.
    Tree,
    /// Names that start with this text at any depth (`.env`, `.env.local`, `.envrc`).
    Prefix,
    /// Only as a path's last component: a file.
    Last,
    /// This name directly inside a directory of the given name (`.github/workflows`).
    Within(&'static str),
    /// Names that end with this text, as a path's last component (`*.code-workspace`).
    Suffix,
}

/// What a command in the sandbox may do with a guarded place (the file tools ask either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shield {
    /// Read, never written.
    ReadOnly,
    /// Neither read nor written: hidden.
    Secret,
    /// A repository: its hooks, configuration and `info/` read-only, the rest writable.
    Git,
}

/// A place a change to has effects beyond the file: code that runs later, outside any sandbox.
#[derive(Clone, Copy, Debug)]
pub struct Guarded {
    pub name: &'static str,
    pub reach: Reach,
    pub shield: Shield,
    pub why: &'static str,
}

const fn guarded(name: &'static str, reach: Reach, shield: Shield, why: &'static str) -> Guarded {
    Guarded { name, reach, shield, why }
}

/// Every guarded place inside a workspace. The file tools ask before changing them (and before
/// reading the secret ones); local commands find them read-only or hidden (`process`).
pub const GUARDED: &[Guarded] = &[
    guarded(".git", Reach::Tree, Shield::Git, GIT),
    guarded(".cairn", Reach::Tree, Shield::ReadOnly, AGENTS),
    guarded(".agents", Reach::Tree, Shield::ReadOnly, AGENTS),
    guarded(".claude", Reach::Tree, Shield::ReadOnly, AGENTS),
    guarded(".env", Reach::Prefix, Shield::Secret, SECRET),
    guarded(".cargo", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".husky", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".vscode", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".zed", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".idea", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".devcontainer", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".mise", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".run", Reach::Tree, Shield::ReadOnly, TOOL_CONFIG),
    guarded("workflows", Reach::Within(".github"), Shield::ReadOnly, TOOL_CONFIG),
    guarded("mise", Reach::Within(".config"), Shield::ReadOnly, TOOL_CONFIG),
    guarded("mise.toml", Reach::Within(".config"), Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.yml", Reach::Within(".config"), Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.yaml", Reach::Within(".config"), Shield::ReadOnly, TOOL_CONFIG),
    guarded(".code-workspace", Reach::Suffix, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".devcontainer.json", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("hgrc", Reach::Within(".hg"), Shield::ReadOnly, TOOL_CONFIG),
    // Mercurial 6.1 and later also read `hgrc-not-shared` in every repository, and the
    // `hgrc` of the repository `sharedpath` names.
    guarded("hgrc-not-shared", Reach::Within(".hg"), Shield::ReadOnly, TOOL_CONFIG),
    guarded("sharedpath", Reach::Within(".hg"), Shield::ReadOnly, TOOL_CONFIG),
    guarded(".npmrc", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".yarnrc", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".yarnrc.yml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".pnpmfile.cjs", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("bunfig.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".pre-commit-config.yaml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.yml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.yaml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook.json", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook.yml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook.yaml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook.json", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook-local.yml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook-local.yaml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook-local.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("lefthook-local.json", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook-local.yml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook-local.yaml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook-local.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".lefthook-local.json", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("mise.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded(".mise.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("mise.local.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("rust-toolchain", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
    guarded("rust-toolchain.toml", Reach::Last, Shield::ReadOnly, TOOL_CONFIG),
];

impl Guarded {
    /// Whether the component `name` (lower case) at index `at` of `names` (lower case) is this place.
    pub fn matches(&self, names: &[String], at: usize) -> bool {
        let name = names[at].as_str();
        match self.reach {
            Reach::Tree => name == self.name,
            Reach::Prefix => name.starts_with(self.name),
            Reach::Last => at + 1 == names.len() && name == self.name,
            Reach::Within(parent) => name == self.name && at > 0 && names[at - 1] == parent,
            Reach::Suffix => at + 1 == names.len() && name.ends_with(self.name),
        }
    }
}

/// The guarded place a path inside a root (given relative to it) is in, if any: the first of
/// its components that is one.
pub fn guarded_in(relative: &Path) -> Option<&'static Guarded> {
    let names: Vec<String> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().to_ascii_lowercase()),
            Component::Prefix(_) | Component::RootDir | Component::CurDir | Component::ParentDir => None,
        })
        .collect();
    (0..names.len()).find_map(|at| GUARDED.iter().find(|place| place.matches(&names, at)))
}

/// Resolves `.` and `..` without touching the disk.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => out.push(component),
        }
    }
    out
}

/// `\*` → `*`: a literal path component of a glob pattern.
fn unescape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    let mut chars = part.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

/// The path where an access to `path` (absolute) lands: every symlink on it followed, the
/// last one too, whether or not its target exists. Errors say why it cannot be told.
pub fn final_target(path: &Path) -> Result<PathBuf, String> {
    let mut resolved = PathBuf::from("/");
    let mut pending: Vec<PathBuf> = path.components().rev().map(|c| PathBuf::from(c.as_os_str())).collect();
    let mut links = 0usize;
    let mut missing = false;
    while let Some(part) = pending.pop() {
        match part.components().next() {
            Some(Component::RootDir) => resolved = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                resolved.pop();
            }
            Some(Component::CurDir) | None => {}
            Some(Component::Prefix(_)) => return Err(format!("{} has a path prefix", path.display())),
            Some(Component::Normal(name)) => {
                let candidate = resolved.join(name);
                if missing {
                    resolved = candidate;
                    continue;
                }
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        links += 1;
                        if links > MAX_LINKS {
                            return Err(format!("{} is a symlink loop", path.display()));
                        }
                        let target = std::fs::read_link(&candidate)
                            .map_err(|err| format!("cannot read the link {}: {err}", candidate.display()))?;
                        pending.extend(target.components().rev().map(|c| PathBuf::from(c.as_os_str())));
                    }
                    Ok(_) => resolved = candidate,
                    Err(err) if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                        missing = true;
                        resolved = candidate;
                    }
                    Err(err) => return Err(format!("cannot tell where {} leads: {err}", candidate.display())),
                }
            }
        }
    }
    Ok(resolved)
}

fn real_or_lexical(path: &Path) -> PathBuf {
    final_target(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests;

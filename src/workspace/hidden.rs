//! `[sandbox] hidden` and `visible` as the file tools and the prompt judge them: what a command
//! finds covered, the model reads only once the user agrees, and never in its prompt. A path
//! is hidden when it lies at or under an absolute hidden place (the user's keys and
//! credentials, `[sandbox] hidden` paths), or when, relative to a root it lies in, it or one of
//! the directories on its way matches a hidden pattern (`secrets/**`, `*.pem`), compared
//! without case with `*` crossing `/`, as the sandbox compares them, and no visible pattern
//! matches that same part (a hidden directory hides everything below it, whatever is made
//! visible there, as its cover does). A visible pattern takes back a secret guarded name too
//! (`.env.example`), which stays protected from edits. An absolute place that holds a root is
//! left out, as the sandbox leaves it uncovered: covering it would take the workspace away.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::recent::Recent;
use super::{GUARDED, Shield, normalize, real_or_lexical};

/// Why a hidden place is protected.
pub(super) const HIDDEN: &str = "`[sandbox] hidden` hides it: from commands, and from the model unless you agree";

impl Compiled {
    fn new(paths: &[PathBuf], names: &[String], visible: &[String]) -> Self {
        let mut places: Vec<PathBuf> = Vec::new();
        for lexical in paths.iter().filter(|path| path.is_absolute()).map(|path| normalize(path)) {
            let real = real_or_lexical(&lexical);
            for place in [lexical, real] {
                if !places.contains(&place) {
                    places.push(place);
                }
            }
        }
        let names = name_globs(names)
            .map_err(|err| tracing::error!(%err, "[sandbox] hidden: every file asks before it is read"))
            .ok()
            .map(Arc::new);
        let visible = name_globs(visible)
            .map_err(|err| tracing::error!(%err, "[sandbox] visible: nothing hidden is taken back"))
            .unwrap_or_else(|()| GlobSet::empty());
        Self { places, names, visible: Arc::new(visible) }
    }
}

/// What `[sandbox] hidden` hides, less what `visible` takes back.
#[derive(Debug)]
pub(super) struct Hidden {
    /// Absolute places, as written (`.` and `..` resolved) and at their final target.
    paths: Vec<PathBuf>,
    /// Patterns relative to a root; `None` when one could not be compiled: then everything
    /// inside the workspace counts as hidden, rather than nothing.
    names: Option<Arc<GlobSet>>,
    /// Patterns relative to a root left readable; one that cannot be compiled shows nothing.
    visible: Arc<GlobSet>,
}

impl Default for Hidden {
    fn default() -> Self {
        Self { paths: Vec::new(), names: Some(Arc::new(GlobSet::empty())), visible: Arc::new(GlobSet::empty()) }
    }
}

/// What `[sandbox]` gives whatever the workspace: each place as written and where it leads,
/// once, and the patterns compiled.
struct Compiled {
    places: Vec<PathBuf>,
    names: Option<Arc<GlobSet>>,
    visible: Arc<GlobSet>,
}

/// [`Hidden::new`]'s inputs but the roots.
type Given = (Vec<PathBuf>, Vec<String>, Vec<String>);

impl Hidden {
    /// The places, patterns and visible patterns of `[sandbox]`; `roots` (the workspace's, as
    /// written and resolved) are never hidden whole.
    pub(super) fn new(paths: &[PathBuf], names: &[String], visible: &[String], roots: &[PathBuf]) -> Self {
        // Resolved and compiled at most once a second for the same `[sandbox]`: every turn's
        // workspace hides them.
        static COMPILED: Recent<Given, Compiled> = Recent::new();
        let given = (paths.to_vec(), names.to_vec(), visible.to_vec());
        let compiled = COMPILED.get(given, || Compiled::new(paths, names, visible));
        let holds_a_root = |place: &&PathBuf| roots.iter().any(|root| root.starts_with(place));
        let kept = compiled.places.iter().filter(|place| !holds_a_root(place)).cloned().collect();
        Self { paths: kept, names: compiled.names.clone(), visible: Arc::clone(&compiled.visible) }
    }

    /// Whether nothing is hidden at all.
    pub(super) fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.names.as_ref().is_some_and(|names| names.is_empty())
    }

    /// Whether `path` (absolute) lies at or under an absolute hidden place.
    pub(super) fn covers(&self, path: &Path) -> bool {
        self.paths.iter().any(|place| path.starts_with(place))
    }

    /// Whether a path inside a root (given relative to it) is hidden by a pattern.
    pub(super) fn hides(&self, relative: &Path) -> bool {
        let mut prefix = PathBuf::new();
        parts(relative).any(|part| {
            prefix.push(part);
            self.hidden_here(&prefix)
        })
    }

    /// Why a path inside a root (given relative to it) is protected by its names, and whether
    /// it is secret: a hidden part or a secret guarded name not made visible wins over the
    /// first protected name on its way (`.vscode/.env` is secret).
    pub(super) fn by_name(&self, relative: &Path) -> Option<(&'static str, bool)> {
        let names: Vec<String> = parts(relative).map(|part| part.to_string_lossy().to_ascii_lowercase()).collect();
        let mut prefix = PathBuf::new();
        let mut protected = None;
        for (at, part) in parts(relative).enumerate() {
            prefix.push(part);
            if self.hidden_here(&prefix) {
                return Some((HIDDEN, true));
            }
            if let Some(place) = GUARDED.iter().find(|place| place.matches(&names, at)) {
                if place.shield == Shield::Secret && !self.visible.is_match(&prefix) {
                    return Some((place.why, true));
                }
                protected.get_or_insert((place.why, false));
            }
        }
        protected
    }

    /// Whether this part of a path (relative to a root) matches a hidden pattern and no visible one.
    fn hidden_here(&self, prefix: &Path) -> bool {
        let hidden = self.names.as_ref().is_none_or(|names| names.is_match(prefix));
        hidden && !self.visible.is_match(prefix)
    }
}

/// The names a path is made of (`.`, `..` and the root left out, as a name check leaves them).
fn parts(relative: &Path) -> impl Iterator<Item = &OsStr> {
    relative.components().filter_map(|component| match component {
        Component::Normal(name) => Some(name),
        Component::Prefix(_) | Component::RootDir | Component::CurDir | Component::ParentDir => None,
    })
}

/// `[sandbox] hidden` and `visible` patterns compiled as both the sandbox and the file tools
/// match them: without case, `*` crossing `/`.
pub fn name_globs(patterns: &[String]) -> Result<GlobSet, String> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let glob = GlobBuilder::new(pattern)
            .case_insensitive(true)
            .literal_separator(false)
            .build()
            .map_err(|err| format!("`{pattern}` is not a valid pattern: {err}"))?;
        set.add(glob);
    }
    set.build().map_err(|err| err.to_string())
}

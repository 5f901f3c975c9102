//! The walks that find where a command may have made a repository, for the sweep (`sweep.rs`).
//!
//! Before the command a bounded walk (breadth first, [`MAX_DEPTH`] levels, [`MAX_ENTRIES`]
//! entries below the roots' own, [`SKIPPED`] directories not entered) notes what each directory
//! it reads to the end holds: its subdirectories and their inodes, its `.git`, and whether it has
//! a git directory's own shape ([`Shape`]). It costs what the walk cost before it noted anything.
//!
//! After the command, the walk follows change times instead of a fixed depth, since a command
//! can place what it makes anywhere and can spend any fixed budget on files of its own. Every
//! change to a directory's entries (an entry made, removed or renamed in or out) sets the
//! directory's change time (`ctime`) to the clock's, which no program can set back (`touch -d`
//! sets the modification time, and the change time to now). So each directory met is looked
//! at (one `lstat`, never following a link):
//! - changed since the command was about to start: read whole, whatever its size or depth, in
//!   `node_modules` or `target` alike — what the command made costs the command's own time;
//! - unchanged, and read whole by the walk before (the same inode at the same path): it holds
//!   what it held then, so it is not read again; its subdirectories are looked at in turn;
//! - unchanged and never read (deeper than the walk before went, skipped, past its budget):
//!   its entries are the user's, but something below may have changed, so it is read while an
//!   allowance lasts, after everything else, skipped names last. The allowance is what not
//!   reading the unchanged directories again saved, within [`MAX_ENTRIES`] in all, counted in
//!   entries with opening a directory and looking at one at a measured price
//!   ([`READ_COST`], [`LOOK_COST`]): a command that changes nothing gets a sweep that costs no
//!   more than reading again all the walk before read, which is what the sweep did before it
//!   followed change times.
//!
//! A command cannot spend that allowance with files it makes (what it makes is read apart from
//! it); it can only move a large old tree of the user's somewhere the walk meets first. So a
//! repository made below directories that stood unchanged and that the walk before never read
//! is found only while the allowance lasts (none is left where the walk before spent its whole
//! budget); a repository made anywhere else is always found.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::{FileType, Metadata};
use std::os::unix::fs::{DirEntryExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{MAX_DEPTH, MAX_ENTRIES, SKIPPED};

/// What opening and reading a directory costs beside its entries, counted in entries: about as
/// much as reading 16 of them (measured on ext4, cached), counted four times that to be safe.
const READ_COST: usize = 64;
/// What looking at a directory (`lstat` by its path) costs, counted likewise (about 5).
const LOOK_COST: usize = 16;

/// How far file times may lag the clock (they are taken from a coarse one, and some file
/// systems keep them to a second or two).
pub const CLOCK_LAG: Duration = Duration::from_secs(2);

/// Whether a directory's entries give it a git directory's shape, which git takes for a
/// repository when it runs there (`is_git_directory`): a `HEAD` that is no directory, and
/// either a `commondir` (git then looks for the rest where it leads) or `objects` and `refs` of
/// any kind (git only asks that it may search them: an executable file passes). Told from names
/// and types alone: nothing in it is opened, so a FIFO named `HEAD` blocks nothing.
#[derive(Debug, Default)]
pub struct Shape {
    head: bool,
    objects: bool,
    refs: bool,
    commondir: bool,
}

impl Shape {
    pub fn note(&mut self, name: &OsStr, kind: FileType) {
        if name.eq_ignore_ascii_case("HEAD") && !kind.is_dir() {
            self.head = true;
        } else if name.eq_ignore_ascii_case("objects") {
            self.objects = true;
        } else if name.eq_ignore_ascii_case("refs") {
            self.refs = true;
        } else if name.eq_ignore_ascii_case("commondir") {
            self.commondir = true;
        }
    }

    pub fn git_dir(&self) -> bool {
        self.head && (self.commondir || (self.objects && self.refs))
    }
}

/// What one directory held when the walk before read it to the end.
#[derive(Debug)]
struct Listing {
    /// Its inode as its parent's listing gave it (`None`: a root).
    ino: Option<u64>,
    /// How many entries it held: what reading it again would cost.
    entries: usize,
    /// Its subdirectories (links are not), with their inodes.
    subdirs: Vec<(OsString, u64)>,
    /// Its entries named `.git`, in any case.
    gits: Vec<OsString>,
    /// Whether it had a git directory's shape.
    bare: bool,
}

/// What the walk before saw.
#[derive(Debug, Default)]
pub struct Survey {
    /// Every `.git`.
    pub found: Vec<PathBuf>,
    /// Every directory read to the end with a git directory's shape.
    pub bare: Vec<PathBuf>,
    /// The directories read to the end, and what each held.
    listed: HashMap<PathBuf, Listing>,
}

impl Survey {
    /// Whether `dir` was read to the end.
    pub fn listed(&self, dir: &Path) -> bool {
        self.listed.contains_key(dir)
    }

    /// Whether the walk saw that nothing stood at `path` below `root`: going down from the root,
    /// a directory read to the end did not hold the next step, or held it as no directory (the
    /// last step aside, which is taken to be absent when its parent was read: a `.git` is
    /// noted in [`Survey::found`]).
    pub fn absent(&self, root: &Path, path: &Path) -> bool {
        let Ok(rest) = path.strip_prefix(root) else { return false };
        let mut dir = root.to_path_buf();
        for part in rest.components() {
            let Some(listing) = self.listed.get(&dir) else { return false };
            let next = dir.join(part);
            if next == path || !holds(listing, part) {
                return true;
            }
            dir = next;
        }
        false
    }

    /// Whether the directory at `path` is new there: its parent was read to the end and held
    /// no directory of its name. `None` when the walk did not read its parent.
    pub fn new_dir(&self, path: &Path) -> Option<bool> {
        let listing = self.listed.get(path.parent()?)?;
        Some(!holds(listing, Component::Normal(path.file_name()?)))
    }
}

impl Survey {
    /// The inode of the directory that stood at `path` when the walk read its parent: `Some(None)`
    /// where none stood, `None` where the walk did not read its parent.
    pub fn stood(&self, path: &Path) -> Option<Option<u64>> {
        let listing = self.listed.get(path.parent()?)?;
        let name = path.file_name()?;
        Some(listing.subdirs.iter().find(|(known, _)| known.as_os_str() == name).map(|(_, ino)| *ino))
    }
}

fn holds(listing: &Listing, part: Component<'_>) -> bool {
    listing.subdirs.iter().any(|(name, _)| name.as_os_str() == part.as_os_str())
}

fn skipped(name: &OsStr) -> bool {
    SKIPPED.iter().any(|skipped| name == *skipped)
}

/// The walk before the command (see the top).
pub fn before(roots: &[PathBuf]) -> Survey {
    let mut survey = Survey::default();
    let mut budget = MAX_ENTRIES;
    for root in roots {
        let mut queue = VecDeque::from([(root.clone(), None, 0usize)]);
        while let Some((dir, ino, depth)) = queue.pop_front() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            let mut listing = Listing { ino, entries: 0, subdirs: Vec::new(), gits: Vec::new(), bare: false };
            let mut shape = Shape::default();
            let mut whole = true;
            for entry in entries {
                let Ok(entry) = entry else {
                    whole = false;
                    continue;
                };
                if depth > 0 {
                    if budget == 0 {
                        return survey;
                    }
                    budget -= 1;
                }
                listing.entries += 1;
                let name = entry.file_name();
                let Ok(kind) = entry.file_type() else {
                    whole = false;
                    continue;
                };
                shape.note(&name, kind);
                if name.eq_ignore_ascii_case(".git") {
                    survey.found.push(entry.path());
                    listing.gits.push(name);
                } else if kind.is_dir() {
                    if depth + 1 < MAX_DEPTH && !skipped(&name) {
                        queue.push_back((entry.path(), Some(entry.ino()), depth + 1));
                    }
                    listing.subdirs.push((name, entry.ino()));
                }
            }
            if whole {
                listing.bare = shape.git_dir();
                if listing.bare {
                    survey.bare.push(dir.clone());
                }
                survey.listed.insert(dir, listing);
            }
        }
    }
    survey
}

/// What the walk after the command found.
#[derive(Debug, Default)]
pub struct Found {
    /// Every `.git`.
    pub gits: Vec<PathBuf>,
    /// Every directory with a git directory's shape.
    pub bare: Vec<PathBuf>,
    /// The guarded places (tool configuration that runs code, not `.git` nor secrets) in the
    /// directories that changed while the command ran, below the top of the roots.
    pub guarded: Vec<PathBuf>,
    /// The links in the directories that changed while the command ran.
    pub links: Vec<PathBuf>,
}

/// A directory to look at: its path, its inode as its parent's listing gives it now (`None`
/// when the parent is unchanged, or it is a root), its depth below the root.
type Look = (PathBuf, Option<u64>, usize);

/// The walk after the command, which was about to start at `since` (see the top).
pub fn after(survey: &Survey, roots: &[PathBuf], since: SystemTime) -> Found {
    let mut found = Found::default();
    let mut look: VecDeque<Look> = roots.iter().map(|root| (root.clone(), None, 0)).collect();
    // Unchanged, never read: read while the allowance lasts, skipped names last.
    let mut later: VecDeque<(PathBuf, usize)> = VecDeque::new();
    let mut last: VecDeque<(PathBuf, usize)> = VecDeque::new();
    // What not reading unchanged directories again saved, and what reading never-read ones cost.
    let (mut saved, mut spent) = (0usize, 0usize);
    let allowance = |saved: usize| saved.min(MAX_ENTRIES.saturating_sub(saved));
    loop {
        let (dir, depth, charged) = if let Some((dir, ino, depth)) = look.pop_front() {
            let Ok(meta) = std::fs::symlink_metadata(&dir) else { continue };
            if !meta.is_dir() {
                continue;
            }
            if changed(&meta, since) {
                (dir, depth, false)
            } else if let Some(listing) =
                survey.listed.get(&dir).filter(|listing| ino.is_none_or(|ino| listing.ino == Some(ino)))
            {
                if depth > 0 {
                    saved += listing.entries + READ_COST;
                }
                found.gits.extend(listing.gits.iter().map(|name| dir.join(name)));
                if listing.bare {
                    found.bare.push(dir.clone());
                }
                look.extend(listing.subdirs.iter().map(|(name, _)| (dir.join(name), None, depth + 1)));
                continue;
            } else {
                let queue = if dir.file_name().is_some_and(skipped) { &mut last } else { &mut later };
                queue.push_back((dir, depth));
                continue;
            }
        } else if spent < allowance(saved)
            && let Some((dir, depth)) = later.pop_front().or_else(|| last.pop_front())
        {
            (dir, depth, true)
        } else {
            break;
        };
        if charged {
            spent += READ_COST;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut shape = Shape::default();
        for entry in entries.flatten() {
            if charged {
                if spent >= allowance(saved) {
                    break;
                }
                spent += 1;
            }
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else { continue };
            shape.note(&name, kind);
            if !charged && depth > 0 && guarded_name(&dir, &name) {
                found.guarded.push(entry.path());
            }
            if !charged && kind.is_symlink() {
                found.links.push(entry.path());
            }
            if name.eq_ignore_ascii_case(".git") {
                found.gits.push(entry.path());
            } else if kind.is_dir() {
                if charged {
                    spent += LOOK_COST;
                }
                look.push_back((entry.path(), Some(entry.ino()), depth + 1));
            }
        }
        if shape.git_dir() {
            found.bare.push(dir);
        }
    }
    found
}

/// Whether `name` in `dir` is a guarded place that runs code (`.cargo`, `.hg/hgrc`,
/// `*.code-workspace`, …; not `.git`, which the sweep judges as a repository, nor secrets).
fn guarded_name(dir: &Path, name: &OsStr) -> bool {
    use crate::workspace::{GUARDED, Reach, Shield};
    let Some(name) = name.to_str() else { return false };
    GUARDED.iter().filter(|place| matches!(place.shield, Shield::ReadOnly)).any(|place| match place.reach {
        Reach::Tree | Reach::Last => name == place.name,
        Reach::Within(parent) => name == place.name && dir.file_name().is_some_and(|dir| dir == parent),
        Reach::Suffix => name.ends_with(place.name),
        Reach::Prefix => false,
    })
}

/// Whether the entries of the directory `meta` describes may have changed since `since`.
pub fn changed(meta: &Metadata, since: SystemTime) -> bool {
    let Ok(secs) = u64::try_from(meta.ctime()) else { return false };
    let nanos = u32::try_from(meta.ctime_nsec()).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999)) + CLOCK_LAG >= since
}

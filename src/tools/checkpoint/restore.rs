//! Restoring files from checkpoints: the plan (which files go back to what), what each file is
//! now (a file someone else changed since the session last did is a conflict, never overwritten
//! unasked), the summary the user is asked about, and applying it.
//!
//! Going back to before checkpoint `from` touches only the files the session changed at or after
//! it (a `made` entry): each returns to the state seen just before the session's first change
//! after `from`, or to its last state before `from`, or is removed if it had none (the session
//! created it). Files are written beneath the session's directory with no symlink followed on
//! the way (`beneath`): a link planted in a parent directory fails that file, and a restore
//! never reaches outside. A symlink is restored as a link, never written through. A path that
//! is now a directory is left alone. Text files go through the editor when it writes files and no
//! process cairn started that may change their directories runs (one could swap a link in before
//! the editor resolves the path), so its buffers follow; deletions, links, binary files, and
//! everything while such a process runs go to the disk.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::scan::{self, plain};
use super::{By, Digest, Entry, State};
use crate::beneath::Parent;
use crate::tools::host::Host;

/// A stored capture, as read back, in the order they were taken.
#[derive(Clone, Debug)]
pub struct Stored {
    pub id: i64,
    pub by: By,
    pub entries: Vec<Entry>,
}

/// One file a restore would put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub path: PathBuf,
    /// What it goes back to.
    pub target: State,
    /// What the session last left there (a later capture that only saw a change, before a
    /// command, saw someone else's: the file then differs from this, so it is a conflict).
    pub last: State,
}

/// Which files go back to what to undo everything from checkpoint `from` on.
pub fn plan(stored: &[Stored], from: i64) -> Vec<Planned> {
    #[derive(Default)]
    struct Path_ {
        before: Option<State>,
        first_after: Option<(By, State)>,
        made_after: bool,
        last_made: Option<State>,
    }
    let mut paths: BTreeMap<&Path, Path_> = BTreeMap::new();
    for capture in stored {
        for entry in &capture.entries {
            let seen = paths.entry(&entry.path).or_default();
            if capture.id < from {
                seen.before = Some(entry.state);
            } else {
                seen.first_after.get_or_insert((capture.by, entry.state));
                seen.made_after |= capture.by == By::Made;
            }
            if capture.by == By::Made {
                seen.last_made = Some(entry.state);
            }
        }
    }
    paths
        .into_iter()
        .filter(|(_, seen)| seen.made_after)
        .map(|(path, seen)| {
            let target = match seen.first_after {
                Some((By::Seen, state)) => state,
                Some((By::Made, _)) | None => seen.before.unwrap_or(State::Missing),
            };
            Planned { path: path.to_owned(), target, last: seen.last_made.unwrap_or(State::Missing) }
        })
        .collect()
}

/// What a restore does to one file, judged against the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Put back: nobody changed it since the session did.
    Restore,
    /// Changed since by someone else (or by a crash between a change and its record): put back
    /// only if the user says so.
    Conflict,
    /// Cannot be put back; why.
    Unrestorable(String),
}

/// A restore judged against the disk: the files that differ from their target, each with its
/// change and what it holds now.
#[derive(Clone, Debug, Default)]
pub struct Restore {
    pub items: Vec<(Planned, State, Change)>,
}

impl Restore {
    /// Judges `planned` against what the files hold now (read on a blocking thread).
    pub async fn judge(root: &Path, planned: Vec<Planned>, max_file: u64) -> io::Result<Self> {
        let root = root.to_owned();
        tokio::task::spawn_blocking(move || {
            let mut items = Vec::new();
            for planned in planned {
                if !restorable(&planned.path) {
                    continue;
                }
                let path = root.join(&planned.path);
                let now = match std::fs::symlink_metadata(&path) {
                    Ok(metadata) if metadata.is_dir() => {
                        let why = "it is a directory now; it was left as it is".to_owned();
                        items.push((planned, State::Missing, Change::Unrestorable(why)));
                        continue;
                    }
                    _ => match scan::one(&root, &planned.path, max_file) {
                        Ok((entry, _)) => entry.state,
                        Err(err) => {
                            items.push((planned, State::Missing, Change::Unrestorable(err.to_string())));
                            continue;
                        }
                    },
                };
                if now == planned.target {
                    continue;
                }
                let change = match planned.target {
                    State::Uncovered { size } => Change::Unrestorable(format!(
                        "its content was not kept: it was larger than the checkpoint limit ({size} bytes), or could not be read when it was captured"
                    )),
                    _ if now != planned.last => Change::Conflict,
                    _ => Change::Restore,
                };
                items.push((planned, now, change));
            }
            Self { items }
        })
        .await
        .map_err(io::Error::other)
    }

    /// The contents the restore needs.
    pub fn hashes(&self) -> Vec<Digest> {
        self.items.iter().filter_map(|(planned, _, _)| planned.target.hash()).collect()
    }

    pub fn conflicts(&self) -> impl Iterator<Item = &Path> {
        self.items.iter().filter(|(_, _, change)| *change == Change::Conflict).map(|(planned, _, _)| &*planned.path)
    }
}

/// The question's text: each file and what happens to it, with a line count of the change
/// for text.
pub fn summary(restore: &Restore, blobs: &HashMap<Digest, Vec<u8>>, root: &Path) -> String {
    let mut text = String::new();
    for (planned, now, change) in &restore.items {
        let shown = planned.path.display();
        let what = match (&planned.target, now) {
            (State::Missing, _) => "removed (the session created it)".to_owned(),
            (State::Link { hash }, _) => match blobs.get(hash) {
                Some(target) => format!("made a link to {} again", String::from_utf8_lossy(target)),
                None => "made a link again".to_owned(),
            },
            (State::File { .. }, State::Missing) => "brought back (it was deleted)".to_owned(),
            // Only a regular file is read for the count: a FIFO or a link there is never opened.
            (State::File { hash, .. }, State::File { .. }) => {
                match (current(root, &planned.path, SUMMARY_BYTES), blobs.get(hash)) {
                    (Some(old), Some(new)) => lines_changed(&old, new),
                    _ => "put back".to_owned(),
                }
            }
            (State::File { .. }, _) => "put back".to_owned(),
            (State::Uncovered { .. }, _) => "not covered".to_owned(),
        };
        let _ = match change {
            Change::Restore => writeln!(text, "- {shown}: {what}"),
            Change::Conflict => writeln!(text, "- {shown}: {what}; CHANGED SINCE by someone else"),
            Change::Unrestorable(why) => writeln!(text, "- {shown}: not restored: {why}"),
        };
    }
    text.push_str("Files git ignores (.gitignore) and .git are not covered by checkpoints and stay as they are.\n");
    text
}

/// The most of a file read now to count the lines a restore changes.
const SUMMARY_BYTES: u64 = 16 << 20;

/// Whether a stored path may be restored: plain components, not in a `.git` directory (a forged
/// or imported row can say anything).
fn restorable(relative: &Path) -> bool {
    plain(relative) && !scan::in_git_dir(relative)
}

/// What the regular file at `relative` holds now, read beneath `root` with no symlink followed
/// and without blocking on a FIFO; `None` for anything else, or past `limit` bytes.
pub fn current(root: &Path, relative: &Path, limit: u64) -> Option<Vec<u8>> {
    if !plain(relative) {
        return None;
    }
    let file = crate::beneath::open_read(&[root.to_owned()], &root.join(relative)).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() > limit {
        return None;
    }
    let mut data = Vec::new();
    file.take(limit + 1).read_to_end(&mut data).ok()?;
    (data.len() as u64 <= limit).then_some(data)
}

/// `+a −b lines` between two texts (lines counted as a multiset), or `binary`.
fn lines_changed(old: &[u8], new: &[u8]) -> String {
    if old.contains(&0) || new.contains(&0) {
        return "put back (binary)".to_owned();
    }
    let mut counts: HashMap<&[u8], i64> = HashMap::new();
    for line in new.split(|b| *b == b'\n') {
        *counts.entry(line).or_default() += 1;
    }
    for line in old.split(|b| *b == b'\n') {
        *counts.entry(line).or_default() -= 1;
    }
    let added: i64 = counts.values().filter(|n| **n > 0).sum();
    let removed: i64 = -counts.values().filter(|n| **n < 0).sum::<i64>();
    format!("put back (+{added} −{removed} lines)")
}

/// How one file's restore went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub path: PathBuf,
    /// `Err` says why it was not put back.
    pub result: Result<State, String>,
}

/// Puts each file back to its target, beneath `root`; text files through the editor when it
/// writes files and no process cairn started that may change them runs. Each file stands alone: one that fails does not stop the others.
pub async fn apply(
    root: &Path,
    targets: &[(PathBuf, State)],
    blobs: &HashMap<Digest, Vec<u8>>,
    host: &Arc<dyn Host>,
) -> Vec<Applied> {
    let mut done = Vec::with_capacity(targets.len());
    for (relative, target) in targets {
        let result = if restorable(relative) {
            one(root, relative, *target, blobs, host).await.map(|()| *target)
        } else {
            Err("it is not a path inside the session's directory (outside `.git`)".to_owned())
        };
        done.push(Applied { path: relative.clone(), result });
    }
    done
}

async fn one(
    root: &Path,
    relative: &Path,
    target: State,
    blobs: &HashMap<Digest, Vec<u8>>,
    host: &Arc<dyn Host>,
) -> Result<(), String> {
    let content = |hash: &Digest| blobs.get(hash).cloned().ok_or("its content is missing from the store".to_owned());
    let path = root.join(relative);
    if let (State::File { hash, executable: false, .. }, Some((writer, quiet))) =
        (&target, crate::tools::fs::editor_writer(host.as_ref(), &path))
    {
        let data = content(hash)?;
        if let Ok(text) = std::str::from_utf8(&data)
            && !data.contains(&0)
            && regular_beneath(root, &path)
        {
            return quiet.over(writer.write_text_file(&path, text)).await.map_err(|err| err.to_string());
        }
    }
    let data = match target {
        State::File { hash, .. } | State::Link { hash } => Some(content(&hash)?),
        State::Missing | State::Uncovered { .. } => None,
    };
    let root = root.to_owned();
    tokio::task::spawn_blocking(move || local(&root, &path, target, data.as_deref()))
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| err.to_string())
}

/// Whether `path` is a regular, not executable file reached from `root` with no symlink on
/// the way: the editor follows links when it writes, so a link planted in a parent directory
/// since the capture would send it out of the workspace, and it keeps a file's mode, so one made
/// executable since would stay so. Any other file goes to [`local`], which refuses links and
/// sets the mode.
fn regular_beneath(root: &Path, path: &Path) -> bool {
    let metadata = Parent::open(&[root.to_owned()], path).and_then(|parent| parent.metadata());
    metadata.is_ok_and(|metadata| {
        metadata.is_some_and(|metadata| {
            metadata.is_file() && std::os::unix::fs::PermissionsExt::mode(&metadata.permissions()) & 0o111 == 0
        })
    })
}

/// Puts `target` at `path` on the disk, within its directory opened beneath `root`.
fn local(root: &Path, path: &Path, target: State, data: Option<&[u8]>) -> io::Result<()> {
    let roots = [root.to_owned()];
    let parent = Parent::open(&roots, path)?;
    let name: OsString = parent.name.clone();
    let there = parent.kind()?;
    if there == Some(libc::S_IFDIR) {
        return Err(io::Error::other("it is a directory now; it was left as it is"));
    }
    match (target, data) {
        (State::Missing, _) => match there {
            Some(_) => parent.remove(&name),
            None => Ok(()),
        },
        (State::Link { .. }, Some(link)) => {
            if there.is_some() {
                parent.remove(&name)?;
            }
            parent.symlink(std::ffi::OsStr::from_bytes(link), &name)
        }
        (State::File { executable, .. }, Some(bytes)) => {
            // A link there is replaced by the file, never written through.
            if there == Some(libc::S_IFLNK) {
                parent.remove(&name)?;
            }
            let mode = if executable { 0o755 } else { 0o644 };
            crate::tools::fs::save_local_mode(&roots, path, bytes, mode)
        }
        (State::Uncovered { .. }, _) | (State::Link { .. } | State::File { .. }, None) => {
            Err(io::Error::other("its content was not kept"))
        }
    }
}

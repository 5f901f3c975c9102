//! Reading the workspace for a capture: the walk (the files git would not ignore, `.git` and
//! cairn's own directories left out, no symlink followed; directories on several threads, each
//! file's metadata read there and folded into a stamp), and a file read only when its stamp
//! differs from the last capture's. A stamp taken
//! within [`RACY`] of the file's last change is 0, so that file is read again next time: a
//! change in the same clock tick as the read cannot hide behind an equal stamp (git's "racily
//! clean" files). Files that vanish during the walk are skipped, files that cannot be read are
//! listed as not covered, and files the last capture knew that the walk no longer meets (deleted,
//! or ignored since) are looked at by name.

use std::collections::{HashMap, HashSet};
use std::fs::Metadata;
use std::io::{ErrorKind, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{Blob, CaptureError, Digest, Entry, Known, State};

/// How recent a change must be for its file to be read again at the next capture.
const RACY: Duration = Duration::from_secs(2);
/// The most threads a walk uses: past a few, the disk and the directory locks are the limit.
const WALKERS: usize = 4;

/// What a scan walks and how.
pub(super) struct Walk<'a> {
    pub root: &'a Path,
    pub skip: &'a [PathBuf],
    pub max_file: u64,
    pub cancel: &'a CancellationToken,
}

/// What a scan found: the entries that differ from the last capture, the new stamps of files
/// whose content did not change, and the last states it took along; or why it failed.
#[derive(Debug)]
pub struct Scanned {
    pub entries: Vec<Entry>,
    stamps: Vec<(PathBuf, u64)>,
    index: Option<HashMap<PathBuf, Known>>,
    /// Why the scan failed; then `entries` means nothing.
    pub failure: Option<CaptureError>,
}

impl Scanned {
    pub(super) fn failed(err: CaptureError) -> Self {
        Self { entries: Vec::new(), stamps: Vec::new(), index: None, failure: Some(err) }
    }

    pub(super) fn with_index(mut self, index: HashMap<PathBuf, Known>) -> Self {
        self.index = Some(index);
        self
    }

    /// The last states, with the new stamps of unchanged files applied (true whether or not the
    /// entries are then stored).
    pub(super) fn take_index(&mut self) -> Option<HashMap<PathBuf, Known>> {
        let mut index = self.index.take()?;
        for (path, stamp) in self.stamps.drain(..) {
            if let Some(known) = index.get_mut(&path) {
                known.stamp = stamp;
            }
        }
        Some(index)
    }
}

/// Whether a relative path lies in a `.git` directory (never captured: git's own state).
pub(super) fn in_git_dir(relative: &Path) -> bool {
    relative.components().any(|part| part.as_os_str() == ".git")
}

/// What the walk's threads report of one file.
enum Met {
    /// Its stamp is the last capture's: unchanged, not read.
    Same(PathBuf),
    /// To look at: new, or its metadata moved.
    Moved(PathBuf, Metadata),
}

/// Walks the workspace (on as many threads as there are CPUs, up to [`WALKERS`]); each content
/// read is handed to `send` (false: stop).
pub(super) fn scan(
    walk: &Walk<'_>,
    index: &HashMap<PathBuf, Known>,
    send: &mut dyn FnMut(Blob) -> bool,
) -> Result<Scanned, CaptureError> {
    let started = SystemTime::now();
    let mut scanned = Scanned { entries: Vec::new(), stamps: Vec::new(), index: None, failure: None };
    let skip = walk.skip.to_vec();
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(WALKERS);
    let walker = ignore::WalkBuilder::new(walk.root)
        .hidden(false)
        .ignore(false)
        .parents(true)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .threads(threads)
        .filter_entry(move |entry| entry.file_name() != ".git" && !skip.iter().any(|dir| entry.path().starts_with(dir)))
        .build_parallel();
    let (tx, rx) = std::sync::mpsc::channel::<Met>();
    walker.run(|| {
        let tx = tx.clone();
        Box::new(move |item| {
            if walk.cancel.is_cancelled() {
                return ignore::WalkState::Quit;
            }
            let entry = match item {
                Ok(entry) => entry,
                // A directory that cannot be read: its files are not captured, as git would skip them.
                Err(err) => {
                    tracing::debug!(%err, "a part of the workspace could not be walked for the checkpoint");
                    return ignore::WalkState::Continue;
                }
            };
            if !entry.file_type().is_some_and(|kind| kind.is_file() || kind.is_symlink()) {
                return ignore::WalkState::Continue;
            }
            let (Ok(relative), Ok(metadata)) = (entry.path().strip_prefix(walk.root), entry.metadata()) else {
                return ignore::WalkState::Continue;
            };
            let stamp = stamp_of(&metadata, started);
            let same = index.get(relative).is_some_and(|known| known.stamp != 0 && known.stamp == stamp);
            let met = if same { Met::Same(relative.to_owned()) } else { Met::Moved(relative.to_owned(), metadata) };
            match tx.send(met) {
                Ok(()) => ignore::WalkState::Continue,
                Err(_) => ignore::WalkState::Quit,
            }
        })
    });
    drop(tx);
    if walk.cancel.is_cancelled() {
        return Err(CaptureError::Cancelled);
    }
    let mut met = HashSet::new();
    for found in rx {
        match found {
            Met::Same(relative) => {
                met.insert(relative);
            }
            Met::Moved(relative, metadata) => {
                look(walk, index, &relative, &metadata, started, &mut scanned, send)?;
                met.insert(relative);
            }
        }
    }
    // Files the last capture knew that the walk did not meet: gone, or ignored since.
    for (relative, known) in index {
        if met.contains(relative) {
            continue;
        }
        if walk.cancel.is_cancelled() {
            return Err(CaptureError::Cancelled);
        }
        match std::fs::symlink_metadata(walk.root.join(relative)) {
            Ok(metadata) if metadata.is_file() || metadata.is_symlink() => {
                look(walk, index, relative, &metadata, started, &mut scanned, send)?;
            }
            Ok(_) | Err(_) if known.state == State::Missing => {}
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => {
                scanned.entries.push(Entry { path: relative.clone(), state: State::Missing, stamp: 0 });
            }
            Err(_) => {}
        }
    }
    Ok(scanned)
}

/// One file met: unchanged by its stamp, unchanged in content, or an entry (its content sent).
fn look(
    walk: &Walk<'_>,
    index: &HashMap<PathBuf, Known>,
    relative: &Path,
    metadata: &Metadata,
    started: SystemTime,
    scanned: &mut Scanned,
    send: &mut dyn FnMut(Blob) -> bool,
) -> Result<(), CaptureError> {
    let stamp = stamp_of(metadata, started);
    let known = index.get(relative);
    if known.is_some_and(|known| known.stamp != 0 && known.stamp == stamp) {
        return Ok(());
    }
    let Some((state, blob)) = read_state(walk.root, &walk.root.join(relative), metadata, walk.max_file)? else {
        return Ok(());
    };
    if known.is_some_and(|known| known.state == state) {
        scanned.stamps.push((relative.to_owned(), stamp));
        return Ok(());
    }
    if let Some(blob) = blob
        && !send(blob)
    {
        return Err(CaptureError::Cancelled);
    }
    scanned.entries.push(Entry { path: relative.to_owned(), state, stamp });
    Ok(())
}

/// One file's entry, listed whatever it holds (`write` and `edit`).
pub(super) fn one(root: &Path, relative: &Path, max_file: u64) -> Result<(Entry, Option<Blob>), CaptureError> {
    let path = root.join(relative);
    let missing = || (Entry { path: relative.to_owned(), state: State::Missing, stamp: 0 }, None);
    let metadata = match std::fs::symlink_metadata(&path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(missing()),
        Err(err) => return Err(CaptureError::Read { path: path.display().to_string(), err }),
    };
    let stamp = stamp_of(&metadata, SystemTime::now());
    match read_state(root, &path, &metadata, max_file)? {
        Some((state, blob)) => Ok((Entry { path: relative.to_owned(), state, stamp }, blob)),
        None => Ok(missing()),
    }
}

/// A file's state and content, read without following a symlink; `None` if it vanished.
fn read_state(
    root: &Path,
    path: &Path,
    metadata: &Metadata,
    max_file: u64,
) -> Result<Option<(State, Option<Blob>)>, CaptureError> {
    if metadata.is_symlink() {
        return match std::fs::read_link(path) {
            Ok(target) => {
                let data = target.as_os_str().as_bytes().to_vec();
                let hash = Digest::of(&data);
                Ok(Some((State::Link { hash }, Some(Blob { hash, data }))))
            }
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(CaptureError::Read { path: path.display().to_string(), err }),
        };
    }
    if !metadata.is_file() {
        return Ok(Some((State::Uncovered { size: 0 }, None)));
    }
    let size = metadata.len();
    if size > max_file {
        return Ok(Some((State::Uncovered { size }, None)));
    }
    // Opened from the root with no symlink followed on the way, without blocking on a FIFO
    // swapped in since the walk, as the tools open files.
    let file = match crate::beneath::open_read(&[root.to_owned()], path) {
        Ok(file) => file,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        // Unreadable (no permission, swapped for a link): listed, not kept.
        Err(_) => return Ok(Some((State::Uncovered { size }, None))),
    };
    let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    if file.take(max_file + 1).read_to_end(&mut data).is_err() {
        return Ok(Some((State::Uncovered { size }, None)));
    }
    if data.len() as u64 > max_file {
        return Ok(Some((State::Uncovered { size: data.len() as u64 }, None)));
    }
    let hash = Digest::of(&data);
    let executable = metadata.mode() & 0o111 != 0;
    Ok(Some((State::File { hash, size: data.len() as u64, executable }, Some(Blob { hash, data }))))
}

/// The metadata a change shows in, folded into one number (never 0), or 0 for a file changed
/// within [`RACY`] of `now`.
fn stamp_of(metadata: &Metadata, now: SystemTime) -> u64 {
    let changed = metadata.modified().ok().max(ctime(metadata));
    if changed.is_none_or(|changed| changed + RACY > now) {
        return 0;
    }
    let fields = [
        metadata.dev(),
        metadata.ino(),
        metadata.size(),
        metadata.mtime() as u64,
        metadata.mtime_nsec() as u64,
        metadata.ctime() as u64,
        metadata.ctime_nsec() as u64,
        u64::from(metadata.mode()),
    ];
    // FNV-1a over the fields: a fingerprint to compare, not a defence against anyone.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in fields.iter().flat_map(|field| field.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.max(1)
}

fn ctime(metadata: &Metadata) -> Option<SystemTime> {
    let seconds = u64::try_from(metadata.ctime()).ok()?;
    let nanos = u32::try_from(metadata.ctime_nsec()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(seconds, nanos))
}

/// Whether `relative` has only plain components (no `..`, no root).
pub(super) fn plain(relative: &Path) -> bool {
    !relative.as_os_str().is_empty() && relative.components().all(|part| matches!(part, Component::Normal(_)))
}

//! File checkpoints: what a session's tools changed in its workspace, captured before and after
//! each change, so `/rewind` can put the files back.
//!
//! A capture lists files by their path relative to the session's directory, each with its
//! [`State`]: a file's content (by SHA-256; the bytes go to the store once, as a [`Blob`]), a
//! symlink's target, absent, or not covered (larger than `[checkpoints] max_file_bytes`). A
//! [`Tracker`] keeps, per session, the state every file had at the last capture (with the
//! metadata it had, like git's index), so a capture lists only what differs from it and reads
//! only files whose metadata changed (`scan`). Before `write` or `edit`, the one file they change
//! is captured (`file`); around a command, an MCP tool or a sub-agent, the whole workspace: its
//! files that git would not ignore, `.git` left out. Captures are `seen` (the state found before
//! a change) or `made` (the state a change left). What a restore does is planned from the
//! stored captures and applied beneath the session's directory without following a symlink
//! (`restore`). Nothing here knows the database: the session layer stores what is captured.

mod restore;
mod scan;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::CheckpointSettings;

pub use restore::{Applied, Change, Planned, Restore, Stored, apply, current, plan, summary};
pub use scan::Scanned;

/// A file content's SHA-256.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
        let mut out = [0; 32];
        out.copy_from_slice(digest.as_ref());
        Self(out)
    }

    /// From the stored bytes; `None` if they are not a digest.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(bytes).ok().map(Self)
    }

    /// In lowercase hex, as an export writes it.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// From 64 hex digits; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let bytes: Option<Vec<u8>> =
            (0..32).map(|at| u8::from_str_radix(text.get(at * 2..at * 2 + 2)?, 16).ok()).collect();
        Self::from_slice(&bytes?)
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..6] {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    File {
        hash: Digest,
        size: u64,
        executable: bool,
    },
    /// A symlink; its target's bytes are the blob.
    Link {
        hash: Digest,
    },
    Missing,
    /// A file larger than the cap: not kept, so not restorable.
    Uncovered {
        size: u64,
    },
}

impl State {
    /// The content this state keeps, if any.
    pub fn hash(&self) -> Option<Digest> {
        match self {
            State::File { hash, .. } | State::Link { hash } => Some(*hash),
            State::Missing | State::Uncovered { .. } => None,
        }
    }

    /// The state as the store and an export keep it: its kind by name (`file`, `link`,
    /// `missing`, `uncovered`), its content's hash, its size and whether it is executable.
    pub fn columns(&self) -> (&'static str, Option<Digest>, u64, bool) {
        match *self {
            State::File { hash, size, executable } => ("file", Some(hash), size, executable),
            State::Link { hash } => ("link", Some(hash), 0, false),
            State::Missing => ("missing", None, 0, false),
            State::Uncovered { size } => ("uncovered", None, size, false),
        }
    }

    /// The state [`State::columns`] gave; `None` for a kind it never gives, or a file or link
    /// without its hash.
    pub fn from_columns(kind: &str, hash: Option<Digest>, size: u64, executable: bool) -> Option<Self> {
        match kind {
            "file" => Some(State::File { hash: hash?, size, executable }),
            "link" => Some(State::Link { hash: hash? }),
            "missing" => Some(State::Missing),
            "uncovered" => Some(State::Uncovered { size }),
            _ => None,
        }
    }

    /// Bytes of content it keeps.
    pub fn size(&self) -> u64 {
        match self {
            State::File { size, .. } => *size,
            State::Link { .. } | State::Missing | State::Uncovered { .. } => 0,
        }
    }
}

/// One file in a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the session's directory, plain components only.
    pub path: PathBuf,
    pub state: State,
    /// The file's metadata when it was read, folded to a number; 0 reads it again next time.
    pub stamp: u64,
}

/// Content to store, once.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    pub hash: Digest,
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blob({:?}, {} bytes)", self.hash, self.data.len())
    }
}

/// Whether a capture shows files before a change or after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Seen,
    Made,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Seen => "seen",
            By::Made => "made",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "seen" => Some(By::Seen),
            "made" => Some(By::Made),
            _ => None,
        }
    }
}

/// Each file's last state in `stored` (captures oldest first).
pub fn latest(stored: &[restore::Stored]) -> Vec<Entry> {
    let mut last: HashMap<&Path, &Entry> = HashMap::new();
    for entry in stored.iter().flat_map(|capture| &capture.entries) {
        last.insert(&entry.path, entry);
    }
    last.into_values().cloned().collect()
}

/// One capture to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capture {
    pub by: By,
    /// The tool call it is around.
    pub call_id: Option<String>,
    pub entries: Vec<Entry>,
}

/// Why a capture failed: the change it guards is then not made.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("could not read {path} for the checkpoint: {err}")]
    Read { path: String, err: std::io::Error },
    #[error("could not walk the workspace for the checkpoint: {0}")]
    Walk(String),
    #[error("the checkpoint was cancelled")]
    Cancelled,
}

/// The state each file had at a session's last capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    state: State,
    stamp: u64,
}

/// A session's checkpoint state in memory: its directory, its settings, and what its files held
/// at the last capture (read from the store before its first capture in this process).
pub struct Tracker {
    root: PathBuf,
    settings: CheckpointSettings,
    /// Directories inside the root never captured (cairn's own).
    skip: Vec<PathBuf>,
    index: Option<HashMap<PathBuf, Known>>,
    /// Captures were stored since [`Tracker::take_stored`] last looked.
    stored: bool,
}

/// Bytes of blobs in flight from a scan to the store, about: as many blobs as this holds of
/// the largest a capture keeps, at least one and at most [`MOST_IN_FLIGHT`].
const BYTES_IN_FLIGHT: u64 = 64 << 20;
const MOST_IN_FLIGHT: usize = 16;

impl Tracker {
    pub fn new(root: &Path, settings: CheckpointSettings, skip: Vec<PathBuf>) -> Self {
        Self { root: root.to_owned(), settings, skip, index: None, stored: false }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn settings(&self) -> CheckpointSettings {
        self.settings
    }

    /// Whether the last states are in memory (else the store's are to be read first).
    pub fn loaded(&self) -> bool {
        self.index.is_some()
    }

    /// Takes the files' last states as the store has them (the latest entry of each path).
    pub fn load(&mut self, latest: impl IntoIterator<Item = Entry>) {
        let index =
            latest.into_iter().map(|entry| (entry.path, Known { state: entry.state, stamp: entry.stamp })).collect();
        self.index = Some(index);
    }

    /// Whether captures were stored since the last call (then the store's size limits are
    /// to be kept).
    pub fn take_stored(&mut self) -> bool {
        std::mem::take(&mut self.stored)
    }

    /// The last state captured of `path`.
    pub fn known(&self, path: &Path) -> Option<State> {
        self.index.as_ref().and_then(|index| index.get(path)).map(|known| known.state)
    }

    /// Notes a capture that was stored: its entries are the files' last states now. Before
    /// [`load`](Tracker::load), nothing: the store's states are read then, this capture's with them.
    pub fn settle(&mut self, entries: &[Entry]) {
        let Some(index) = self.index.as_mut() else { return };
        self.stored |= !entries.is_empty();
        for entry in entries {
            index.insert(entry.path.clone(), Known { state: entry.state, stamp: entry.stamp });
        }
    }

    /// The path of `target` (a final target) relative to the session's directory, if it is
    /// inside it and not in a directory never captured.
    pub fn relative(&self, target: &Path) -> Option<PathBuf> {
        if self.skip.iter().any(|dir| target.starts_with(dir)) {
            return None;
        }
        let relative = target.strip_prefix(&self.root).ok()?;
        (scan::plain(relative) && !scan::in_git_dir(relative)).then(|| relative.to_owned())
    }

    /// Captures the whole workspace: the files whose state differs from the last capture.
    /// Their contents are sent on `blobs` as they are read (about [`BYTES_IN_FLIGHT`] wait);
    /// the entries come back at the end. The last states are not changed until [`settle`].
    ///
    /// [`settle`]: Tracker::settle
    pub fn scan(&mut self, cancel: &CancellationToken) -> (mpsc::Receiver<Blob>, tokio::task::JoinHandle<Scanned>) {
        let in_flight = usize::try_from(BYTES_IN_FLIGHT / self.settings.max_file_bytes.max(1)).unwrap_or(1);
        let (tx, rx) = mpsc::channel(in_flight.clamp(1, MOST_IN_FLIGHT));
        let index = self.index.take().unwrap_or_default();
        let (root, skip, settings, cancel) = (self.root.clone(), self.skip.clone(), self.settings, cancel.clone());
        // The last states come back with the result, a failure's too ([`Tracker::give_back`]):
        // a cancelled or failed scan loses nothing (one that panicked loses them).
        let handle = tokio::task::spawn_blocking(move || {
            let walk = scan::Walk { root: &root, skip: &skip, max_file: settings.max_file_bytes, cancel: &cancel };
            let mut send = |blob: Blob| tx.blocking_send(blob).is_ok();
            match scan::scan(&walk, &index, &mut send) {
                Ok(scanned) => scanned.with_index(index),
                Err(err) => Scanned::failed(err).with_index(index),
            }
        });
        (rx, handle)
    }

    /// Puts back the last states a [`scan`](Tracker::scan) took with it (a scan that panicked
    /// lost them: the store's are read again before the next capture).
    pub fn give_back(&mut self, scanned: &mut Scanned) {
        if let Some(index) = scanned.take_index() {
            self.index = Some(index);
        }
    }

    /// Captures one file (`relative` to the session's directory) as it is on disk now, always
    /// listed, with its content if it has any. For `write` and `edit`.
    pub async fn file(&self, relative: &Path) -> Result<(Entry, Option<Blob>), CaptureError> {
        let (root, relative, max_file) = (self.root.clone(), relative.to_owned(), self.settings.max_file_bytes);
        tokio::task::spawn_blocking(move || scan::one(&root, &relative, max_file))
            .await
            .map_err(|err| CaptureError::Walk(format!("the capture stopped unexpectedly: {err}")))?
    }
}

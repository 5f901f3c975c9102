//! What the gate learns of a program's file by reading it — whether it can be read, its `#!`
//! line, its ELF interpreter and build id, and which rejected program it is by what it holds —
//! and the files already read. A build or a test loop runs the same few programs thousands of
//! times; each is read once, then known by its device, inode, size and modification and change
//! times. Writing a file or changing its mode moves its change time, which no process can set
//! back, with two exceptions this guards against. The kernel stamps it from a clock that ticks
//! every few milliseconds, so a file rewritten twice within one tick could keep its key: a file
//! is kept only once its change time is [`SETTLED`] in the past. And bytes written through a
//! shared mapping move the times at the mapping's first write only, never after: a file is kept
//! only when no process of the command tree can open it for writing ([`unwritable`]), which
//! leaves the system's programs, the ones run over and over.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::ffi::OsStringExt as _;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::program::Known;

/// How long a file's change time must lie in the past before what was read of it is kept.
const SETTLED: Duration = Duration::from_secs(2);
/// Files kept at most; past it the oldest knowledge is dropped all at once.
const MAX_KEPT: usize = 1024;

/// What was read of one file.
#[derive(Debug)]
pub struct Facts {
    /// Whether the supervisor could open it to read it.
    pub readable: bool,
    pub build_id: Option<Vec<u8>>,
    /// The interpreter and argument of its `#!` line.
    pub shebang: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// Its `PT_INTERP`, read only when a rejected program can be started as one.
    pub elf_interpreter: Option<Vec<u8>>,
    /// For each rejected program, in the gate's order, how the file is known for it by what it
    /// is (see `Program::knows_file`).
    pub known: Vec<Option<Known>>,
}

/// A file's identity and the times that change with its content and mode.
type Key = (u64, u64, u64, i64, i64, i64, i64);

/// The files read so far, for one command tree: what was read of each lasting one, and which
/// settled ones are not lasting (read at every exec, but not asked about again).
#[derive(Default)]
pub struct Seen {
    kept: RefCell<HashMap<Key, Option<Arc<Facts>>>>,
}

impl Seen {
    /// What is known of the file `meta` describes, or what `read` finds, kept if the file has
    /// settled and is `lasting` (no process of the tree can write it).
    pub fn get_or_read(
        &self,
        meta: &Metadata,
        read: impl FnOnce() -> Facts,
        lasting: impl FnOnce() -> bool,
    ) -> Arc<Facts> {
        let key =
            (meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec(), meta.ctime(), meta.ctime_nsec());
        let known = self.kept.borrow().get(&key).cloned();
        match known {
            Some(Some(facts)) => facts,
            Some(None) => Arc::new(read()),
            None => {
                let facts = Arc::new(read());
                if settled(meta.ctime(), SystemTime::now()) {
                    let mut kept = self.kept.borrow_mut();
                    if kept.len() >= MAX_KEPT {
                        kept.clear();
                    }
                    kept.insert(key, lasting().then(|| Arc::clone(&facts)));
                }
                facts
            }
        }
    }

    /// How many files are kept with what was read of them.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.borrow().values().filter(|facts| facts.is_some()).count()
    }
}

/// Whether no process of the tree can open the regular file `meta` describes for writing:
/// what was read of it can then change only with its change time. Either its permissions keep
/// `me` (the supervisor's user) out — the tree runs as that user, or as a root whose
/// capabilities do not reach other users' files — or Landlock lets the tree write only beneath
/// `writable` (places by device and inode), the file is none of them, and it has one name, in
/// no directory beneath them: `real`, the name the kernel gives it (a file it cannot name is
/// not kept; the path an exec gave names other places for the supervisor, such as
/// `/proc/<pid>/cwd`). The directories above it are compared by device and inode, as Landlock compares them, so a
/// second mount of a writable place is still that place, and a mount of a directory beneath one
/// is among them ([`writable_ids`]); Landlock refuses to link a file into another directory, so
/// no second name can be made.
pub fn unwritable(
    meta: &Metadata,
    real: impl FnOnce() -> Option<PathBuf>,
    me: u32,
    writable: Option<&[(u64, u64)]>,
) -> bool {
    if me != 0 && meta.uid() != me && meta.mode() & 0o022 == 0 {
        return true;
    }
    let Some(writable) = writable else { return false };
    // A place may be a file itself, which Landlock lets the tree write.
    if meta.nlink() != 1 || writable.contains(&(meta.dev(), meta.ino())) {
        return false;
    }
    let Some(real) = real() else { return false };
    let mut dir = real.parent();
    while let Some(at) = dir {
        match std::fs::metadata(at) {
            Ok(meta) if !writable.contains(&(meta.dev(), meta.ino())) => dir = at.parent(),
            Ok(_) | Err(_) => return false,
        }
    }
    true
}

/// The device and inode of each of `places` that exists, and of the root of every mount of a
/// directory inside a filesystem one of them is on (a bind mount of a directory beneath a
/// writable place, reached by a walk up from it, would never meet the place itself).
pub fn writable_ids(places: impl Iterator<Item = PathBuf>) -> Vec<(u64, u64)> {
    with_mounts(places, &std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

/// [`writable_ids`], with the mounts listed as in `/proc/self/mountinfo`.
fn with_mounts(places: impl Iterator<Item = PathBuf>, mounts: &str) -> Vec<(u64, u64)> {
    let id = |meta: Metadata| (meta.dev(), meta.ino());
    let mut ids: Vec<(u64, u64)> = places.filter_map(|place| std::fs::metadata(place).ok()).map(id).collect();
    let devices: Vec<u64> = ids.iter().map(|(dev, _)| *dev).collect();
    for line in mounts.lines() {
        // `ID PARENT MAJOR:MINOR ROOT MOUNT-POINT …`, paths with spaces and the like escaped.
        let mut fields = line.split(' ').skip(3);
        let (Some(root), Some(point)) = (fields.next(), fields.next()) else { continue };
        if root == "/" {
            continue;
        }
        if let Ok(meta) = std::fs::metadata(unescape(point))
            && devices.contains(&meta.dev())
        {
            ids.push(id(meta));
        }
    }
    ids
}

/// A path of `/proc/self/mountinfo`, its `\ooo` escapes (space, tab, newline, backslash) undone.
fn unescape(path: &str) -> PathBuf {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).filter(|digits| digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match (bytes[at], octal) {
            (b'\\', Some(digits)) => {
                out.push(digits.iter().fold(0u8, |n, d| n.wrapping_mul(8).wrapping_add(d - b'0')));
                at += 4;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Whether a change time of `ctime` seconds lies [`SETTLED`] before `now` (a time in the
/// future, from a clock set back, never has).
fn settled(ctime: i64, now: SystemTime) -> bool {
    let Ok(now) = now.duration_since(UNIX_EPOCH) else { return false };
    // The change time counts whole seconds here: one more second keeps the margin whole.
    i64::try_from(now.as_secs()).is_ok_and(|now| now.saturating_sub(ctime) > SETTLED.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_of_a_directory_on_a_writable_places_filesystem_is_writable_too() {
        let (place, mounted, elsewhere) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let id = |path: &std::path::Path| {
            let meta = std::fs::metadata(path).unwrap();
            (meta.dev(), meta.ino())
        };
        // As if `place/sub` were bound at `mounted` (its root within the filesystem is not `/`):
        // a walk up from a file there meets `mounted`, never `place`. A mount of its
        // filesystem's root, and a mount on a device no place is on, add nothing.
        let point = mounted.path().display().to_string().replace(' ', "\\040");
        let mounts = format!(
            "36 35 98:0 /sub {point} rw,noatime master:1 - ext4 /dev/root rw\n\
             37 35 98:0 / {} rw - ext4 /dev/root rw\n",
            elsewhere.path().display()
        );
        let ids = with_mounts([place.path().to_path_buf()].into_iter(), &mounts);
        assert_eq!(ids, [id(place.path()), id(mounted.path())]);
        let on_no_place = with_mounts(std::iter::empty(), &mounts);
        assert!(on_no_place.is_empty());
    }

    #[test]
    fn mount_points_are_read_with_their_escapes_undone() {
        assert_eq!(unescape("/mnt/a\\040b\\011c\\134d"), PathBuf::from("/mnt/a b\tc\\d"));
        assert_eq!(unescape("/plain\\9"), PathBuf::from("/plain\\9"));
    }

    #[test]
    fn only_a_file_unchanged_for_a_while_is_kept() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(settled(1_000_000 - 3, now));
        assert!(!settled(1_000_000 - 2, now), "within the margin, a second's fraction unknown");
        assert!(!settled(1_000_000, now));
        assert!(!settled(1_000_000 + 60, now), "a change time in the future");
        assert!(!settled(0, UNIX_EPOCH - Duration::from_secs(1)));
    }
}

//! What the gate learns of a program's file by reading it — whether it can be read, its `#!`
//! line, its ELF interpreter and build id, and which rejected program it is by what it holds —
//! and the files already read. A build or a test loop runs the same few programs thousands of
//! times; each is read once, then known by its device, inode, size and modification and change
//! times. Writing a file or changing its mode moves its change time, which no process can set
//! back, with two exceptions this guards against. The kernel stamps it from a clock that ticks
//! every few milliseconds, so a file rewritten twice within one tick could keep its key: a file
//! is kept only once its change time is [`SETTLED`] in the past. And bytes written through a
//! shared mapping made earlier move no time at all (on tmpfs, never): a file is kept only when
//! no process of the command tree can open it for writing ([`unwritable`]), which leaves the
//! system's programs, the ones run over and over.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::Metadata;
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
/// `writable` (directories by device and inode) and the file has one name, at `real`, in no
/// directory beneath them. The directories above it are compared by device and inode, as
/// Landlock compares them, so a second mount of a writable place is still that place; and
/// Landlock refuses to link a file into another directory, so no second name can be made.
pub fn unwritable(meta: &Metadata, real: impl FnOnce() -> PathBuf, me: u32, writable: Option<&[(u64, u64)]>) -> bool {
    if me != 0 && meta.uid() != me && meta.mode() & 0o022 == 0 {
        return true;
    }
    let Some(writable) = writable else { return false };
    if meta.nlink() != 1 {
        return false;
    }
    let real = real();
    let mut dir = real.parent();
    while let Some(at) = dir {
        match std::fs::metadata(at) {
            Ok(meta) if !writable.contains(&(meta.dev(), meta.ino())) => dir = at.parent(),
            Ok(_) | Err(_) => return false,
        }
    }
    true
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
    fn only_a_file_unchanged_for_a_while_is_kept() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(settled(1_000_000 - 3, now));
        assert!(!settled(1_000_000 - 2, now), "within the margin, a second's fraction unknown");
        assert!(!settled(1_000_000, now));
        assert!(!settled(1_000_000 + 60, now), "a change time in the future");
        assert!(!settled(0, UNIX_EPOCH - Duration::from_secs(1)));
    }
}

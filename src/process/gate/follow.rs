//! The rules file the gate of a lasting process follows (`--rules`): a background job or an
//! MCP or language server lives across turns, and a program the user rejects meanwhile ("Always
//! reject" on a question, `exec --deny` of a later opener) must be refused to it too, not only
//! to the commands started after. cairn keeps the session's rejected programs in a file of its
//! data directory (`process::rulebook`), replaced whole by a rename whenever they change; the
//! gate reads the new version at the next exec.
//!
//! The directory is opened before the namespace hides cairn's data directory, and lookups from
//! that descriptor still reach it. The version read is kept open, so its inode cannot be reused
//! for a later version while it is held, and one `fstatat` of the name per exec tells whether
//! the name still leads to it (a stamp of inode and times could not: the kernel's clock for
//! them ticks every few milliseconds). The name is what is asked, not the version held: a
//! version a process renamed away (with the sandbox off, the data directory is in its reach)
//! still has a name, and the versions cairn writes after it would never be read.
//! A file that is gone (the session closed) or cannot be read leaves the rules as they were:
//! rules are only ever added here, never dropped.

use std::ffi::CString;
use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

/// The most of a rules file read: far beyond any session's rules.
const MAX_BYTES: u64 = 1 << 20;

/// A rules file being followed.
pub struct Follow {
    dir: OwnedFd,
    name: CString,
    /// The version read last, and its device and inode.
    held: Option<(File, (u64, u64))>,
}

impl Follow {
    /// Follows the rules file at `path` (its directory must exist; the file need not yet).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file's path");
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Err(invalid()) };
        let name = CString::new(name.as_bytes()).map_err(|_| invalid())?;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(parent)?;
        Ok(Self { dir: dir.into(), name, held: None })
    }

    /// The rules of the file's current version, each as its words, when it is another than
    /// the one read last; `None` while it is the same, gone or unreadable.
    pub fn changed(&mut self) -> Option<Vec<Vec<String>>> {
        if let Some((_, identity)) = &self.held {
            match self.named() {
                Some(named) if named == *identity => return None,
                Some(_) => {}
                None => return None,
            }
        }
        // SAFETY: openat on a directory descriptor we own with a NUL-terminated name we own.
        #[allow(unsafe_code)]
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: openat just returned this descriptor, which nothing else owns.
        #[allow(unsafe_code)]
        let file = unsafe { File::from_raw_fd(fd) };
        let meta = file.metadata().ok().filter(std::fs::Metadata::is_file)?;
        let mut text = String::new();
        (&file).take(MAX_BYTES).read_to_string(&mut text).ok()?;
        self.held = Some((file, (meta.dev(), meta.ino())));
        Some(parse(&text))
    }

    /// The device and inode the name leads to now, without following a link; `None` when
    /// nothing has the name.
    fn named(&self) -> Option<(u64, u64)> {
        use std::os::fd::AsFd as _;
        let stat = crate::beneath::lstat_in(self.dir.as_fd(), &self.name).ok()?;
        #[allow(clippy::useless_conversion)]
        Some((u64::from(stat.st_dev), u64::from(stat.st_ino)))
    }
}

/// One rule a line, its words separated by spaces; blank lines are nothing.
fn parse(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|words| !words.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace(path: &Path, text: &str) {
        let new = path.with_extension("new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, path).unwrap();
    }

    #[test]
    fn each_version_is_read_once_and_a_file_gone_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules");
        let mut follow = Follow::open(&path).unwrap();
        assert_eq!(follow.changed(), None, "no file yet");
        replace(&path, "rm\ngit push\n\n");
        assert_eq!(follow.changed(), Some(vec![vec!["rm".to_owned()], vec!["git".to_owned(), "push".to_owned()]]));
        assert_eq!(follow.changed(), None, "the same version again");
        // The same bytes again, within the same clock tick: still a new version.
        replace(&path, "rm\ngit push\n\n");
        assert!(follow.changed().is_some(), "a version renamed over the last is read");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(follow.changed(), None, "gone: the rules stay as they were");
        replace(&path, "curl\n");
        assert_eq!(follow.changed(), Some(vec![vec!["curl".to_owned()]]));
    }

    #[test]
    fn a_version_renamed_away_does_not_hide_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rules");
        let mut follow = Follow::open(&path).unwrap();
        replace(&path, "rm\n");
        assert!(follow.changed().is_some());
        // A process with the data directory in reach moves the version it was given aside.
        std::fs::rename(&path, dir.path().join("aside")).unwrap();
        assert_eq!(follow.changed(), None, "nothing has the name: the rules stay");
        replace(&path, "rm\ncurl\n");
        assert_eq!(follow.changed(), Some(vec![vec!["rm".to_owned()], vec!["curl".to_owned()]]));
        // Or a link in the name's place, to the version it holds: not the version.
        std::os::unix::fs::symlink(dir.path().join("aside"), dir.path().join("link")).unwrap();
        std::fs::rename(dir.path().join("link"), &path).unwrap();
        assert_eq!(follow.changed(), None, "a link is not read");
    }

    #[test]
    fn a_link_in_the_files_place_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "rm\n").unwrap();
        let path = dir.path().join("rules");
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(Follow::open(&path).unwrap().changed(), None);
    }
}

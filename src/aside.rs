//! A file replaced whole: the new version is written aside, under a name beside it that nobody
//! can tell beforehand, made new (so nothing planted at that name, a link or a file, is written
//! through or stops the write), flushed to the disk, then renamed over the file. A reader, or
//! the next start after a crash, sees one version or the next, never a mix or an empty file.
//! Every file cairn rewrites is kept this way: the session's rules (`process/rulebook.rs`), the
//! places found before (`process/places/remembered.rs`), saved keys (`config/credentials.rs`),
//! the hooks' trust answers (`hooks/trust.rs`), `cairn serve`'s secret and its holders
//! (`serve/secret.rs`) and `cairn inspect`'s output file (`inspect/mod.rs`).

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces the file at `at` with `text`, readable by its owner alone; the identity (device,
/// inode) of the version it put there. Nothing is left aside when it fails.
pub fn replace(at: &Path, text: &[u8]) -> std::io::Result<(u64, u64)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let random = crate::ids::random_hex::<8>()
        .unwrap_or_else(|| format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let Some(name) = at.file_name() else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file"));
    };
    let mut name = name.to_owned();
    name.push(format!(".new-{random}"));
    let aside = at.with_file_name(name);
    let mut file = std::fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&aside)?;
    file.write_all(text)
        .and_then(|()| file.sync_all())
        .and_then(|()| file.metadata())
        .and_then(|meta| std::fs::rename(&aside, at).map(|()| (meta.dev(), meta.ino())))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&aside);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_replaces_the_file_whole_and_nothing_is_left_aside() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("rules");
        std::fs::write(&at, "old\n").unwrap();
        let version = replace(&at, b"new\n").unwrap();
        let meta = std::fs::metadata(&at).unwrap();
        assert_eq!(version, (meta.dev(), meta.ino()));
        assert_eq!(std::fs::read_to_string(&at).unwrap(), "new\n");
        // A directory where the file is: the rename fails, and the version aside goes.
        std::fs::remove_file(&at).unwrap();
        std::fs::create_dir(&at).unwrap();
        assert!(replace(&at, b"newer\n").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "only the directory");
    }

    #[test]
    fn a_link_planted_at_any_name_beside_the_file_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        let at = dir.path().join("answers");
        // The names a writer with a fixed or guessable name would have used.
        for guess in [".answers.tmp", "answers.new-0", &format!(".answers.{}.tmp", std::process::id())] {
            std::os::unix::fs::symlink(&victim, dir.path().join(guess)).unwrap();
        }
        replace(&at, b"kept\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        assert_eq!(std::fs::read_to_string(&at).unwrap(), "kept\n");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&at).unwrap().permissions().mode() & 0o777, 0o600);
    }
}

//! A session's rejected programs as a file its lasting processes follow. A background job or
//! an MCP or language server lives across turns; a program the user rejects while it runs ("Always
//! reject" on a question, `exec --deny` of a later opener) must be refused to it as well, not only
//! to what starts after. The supervisor of each such process gets the file's path (`--rules`) and
//! its exec gate reads every new version at the next exec (`gate/follow.rs`).
//!
//! The file is `rules/PID-NANOS-N` in the data directory (hidden from sandboxed commands, and
//! beyond their writable places), one rule a line, its words separated by spaces, the
//! same words `--reject` passes. It is only ever replaced whole, by renaming a new file over it,
//! so a reader sees one version or the next, never a mix; the session's [`Rulebook`] removes it
//! when it drops, and a process's files left by a `kill -9` are removed by the next cairn that
//! makes one. Without a data directory (unit tests, benches) there is no rulebook, and lasting
//! processes keep the rules they started with.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Adds each of `rejected` to `to` that is not there yet.
fn join_in(to: &mut Vec<Vec<String>>, rejected: &[Vec<String>]) {
    for words in rejected {
        if !to.contains(words) {
            to.push(words.clone());
        }
    }
}

/// The rulebooks' directory in the data directory.
const DIR: &str = "rules";

/// The open sessions' rulebooks, by project ([`Rulebook::join`]).
static OPEN: Mutex<Vec<(String, std::sync::Weak<Rulebook>)>> = Mutex::new(Vec::new());

/// The open sessions' rulebooks, those dropped since let go.
fn open_books() -> std::sync::MutexGuard<'static, Vec<(String, std::sync::Weak<Rulebook>)>> {
    let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
    open.retain(|(_, book)| book.strong_count() > 0);
    open
}

/// One session's rules file.
#[derive(Debug)]
pub struct Rulebook {
    path: PathBuf,
    /// What the file is to hold and holds, locked while a version is written and renamed into
    /// place: two writers at once never leave the older version last.
    held: Mutex<Held>,
}

/// The rules a file is made of: the session's as last published, and those answered in turns
/// since (its sub-agents' among them, which the session's own rules never hold).
#[derive(Debug, Default)]
struct Held {
    published: Vec<Vec<String>>,
    added: Vec<Vec<String>>,
    /// Kept for every session in the project, by this session or another, and not yet
    /// revoked here: apart from `added`, which the session's own revokes take from.
    project: Vec<Vec<String>>,
    /// What the file holds, and the version's identity (device, inode): `None` until a version
    /// is written, or after one failed.
    written: Option<(Vec<Vec<String>>, Version)>,
}

/// A version of the file, by its (device, inode).
type Version = (u64, u64);

impl Held {
    /// The rules the file is to hold, each once, empty ones left out.
    fn wanted(&self) -> Vec<Vec<String>> {
        let mut wanted: Vec<Vec<String>> = Vec::new();
        for words in self.published.iter().chain(&self.added).chain(&self.project) {
            if !words.is_empty() && !wanted.contains(words) {
                wanted.push(words.clone());
            }
        }
        wanted
    }
}

impl Rulebook {
    /// A rulebook holding `rejected` (as `permissions::rejected_programs` gives them); `None`
    /// without a data directory or when the file cannot be made (said on stderr: lasting
    /// processes then keep the rules they started with).
    pub fn open(rejected: &[Vec<String>]) -> Option<Arc<Self>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static SWEPT: Once = Once::new();
        let dir = super::peers::data_dir()?.join(DIR);
        if let Err(err) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir) {
            tracing::warn!(dir = %dir.display(), %err, "cannot make the rules directory: rules added later will not reach running jobs and servers");
            return None;
        }
        SWEPT.call_once(|| sweep(&dir));
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos());
        let name = format!("{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let book = Arc::new(Self { path: dir.join(name), held: Mutex::new(Held::default()) });
        book.change(|held| held.published = rejected.to_vec())
            .map_err(|err| tracing::warn!(file = %book.path.display(), %err, "cannot write the session's rules: rules added later will not reach running jobs and servers"))
            .ok()?;
        Some(book)
    }

    /// The file's path, for a supervisor to follow.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session's rules are `rejected` now. The rules added since stay (a sub-agent's
    /// answer is not among its parent's rules), unless [`Rulebook::revoke`]d.
    pub fn publish(&self, rejected: &[Vec<String>]) {
        self.said(self.change(|held| held.published = rejected.to_vec()));
    }

    /// Adds `rejected`, answered in a turn: a sub-agent's rules are a copy of its parent's
    /// taken at its start, so the file is added to, never rewritten from them.
    pub fn add(&self, rejected: &[Vec<String>]) {
        self.said(self.change(|held| join_in(&mut held.added, rejected)));
    }

    /// Adds `rejected`, kept for every session in the project (by this session or another):
    /// only a revoke of the project's rule here ([`Rulebook::revoke_project`]) takes it back.
    pub fn add_project(&self, rejected: &[Vec<String>]) {
        self.said(self.change(|held| join_in(&mut held.project, rejected)));
    }

    /// The user revoked `rejected`, rules of the project, in this session.
    pub fn revoke_project(&self, rejected: &[Vec<String>]) {
        self.said(self.change(|held| held.project.retain(|words| !rejected.contains(words))));
    }

    /// The user revoked `rejected`: the file no longer holds them for having been added in a
    /// turn. The session's rules without them are published after (till then the file holds
    /// more, never less, than both).
    pub fn revoke(&self, rejected: &[Vec<String>]) {
        self.said(self.change(|held| held.added.retain(|words| !rejected.contains(words))));
    }

    /// Counts this rulebook among the project's (the session's directory as the client named
    /// it), for [`Rulebook::add_to_project`].
    pub fn join(self: &Arc<Self>, project: &str) {
        open_books().push((project.to_owned(), Arc::downgrade(self)));
    }

    /// Adds `rejected`, kept for every session in `project`, to the rulebook of each session
    /// of it open in this process: their running jobs and servers refuse it from their next
    /// exec on, not only after their session's next turn.
    pub fn add_to_project(project: &str, rejected: &[Vec<String>]) {
        let books: Vec<Arc<Self>> =
            open_books().iter().filter(|(of, _)| of == project).filter_map(|(_, book)| book.upgrade()).collect();
        for book in books {
            book.add_project(rejected);
        }
    }

    /// The user revoked every rule: the file holds none for having been added in a turn (a
    /// sub-agent's answer among them, which `/permissions` does not list). The project's
    /// rules go with [`Rulebook::revoke_project`], for those the session held.
    pub fn revoke_all(&self) {
        self.said(self.change(|held| held.added.clear()));
    }

    fn said(&self, written: std::io::Result<()>) {
        if let Err(err) = written {
            tracing::warn!(file = %self.path.display(), %err, "cannot write the session's rules: running jobs and servers keep the rules they had");
        }
    }

    /// Changes what the file is to hold with `change`, then writes it unless the file holds
    /// it already (every turn's end publishes, and each new version makes every following gate
    /// read the file again). A failed write (a full disk) is tried again at the next change, and
    /// so is one whose name leads elsewhere now: with the sandbox off a job can link a version
    /// aside and rename it back over a newer one.
    fn change(&self, change: impl FnOnce(&mut Held)) -> std::io::Result<()> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut held);
        let wanted = held.wanted();
        if let Some((rules, version)) = &held.written {
            let standing = std::fs::symlink_metadata(&self.path).is_ok_and(|meta| (meta.dev(), meta.ino()) == *version);
            if *rules == wanted && standing {
                return Ok(());
            }
        }
        held.written = None;
        let mut text = String::new();
        for words in &wanted {
            text.push_str(&words.join(" "));
            text.push('\n');
        }
        // Written aside under a name nobody can tell beforehand: with the sandbox off a job
        // reaches the directory, and something it planted at a name the version might take
        // would stop every later one.
        let version = crate::aside::replace(&self.path, text.as_bytes())?;
        held.written = Some((wanted, version));
        Ok(())
    }
}

impl Drop for Rulebook {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes the files of processes that are gone (killed before their rulebooks dropped).
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if super::peers::gone(&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn a_rulebook_holds_the_rules_it_was_last_given_and_those_added_and_goes_when_it_drops() {
        super::super::peers::share_in(&tempfile::tempdir().unwrap().keep());
        let book = Rulebook::open(&[words("rm")]).expect("a data directory is shared");
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\n");
        book.publish(&[words("rm"), words("git push"), Vec::new()]);
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\ngit push\n");
        book.add(&[words("curl"), words("rm")]);
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\ngit push\ncurl\n", "added to, not replaced");
        book.publish(&[words("rm")]);
        assert_eq!(
            std::fs::read_to_string(book.path()).unwrap(),
            "rm\ncurl\n",
            "a rule published no more goes; one added in a turn (a sub-agent's, which its parent's rules lack) stays"
        );
        book.revoke(&[words("curl"), words("rm")]);
        book.publish(&[words("rm")]);
        assert_eq!(
            std::fs::read_to_string(book.path()).unwrap(),
            "rm\n",
            "a revoked rule goes; one the session still has stays"
        );
        let other = Rulebook::open(&[]).unwrap();
        assert_ne!(other.path(), book.path(), "each session has its own");
        let path = book.path().to_owned();
        drop(book);
        assert!(!path.exists(), "a session's file goes with it");
        assert!(other.path().exists());
    }

    #[test]
    fn a_version_that_could_not_be_written_is_written_at_the_next_change() {
        super::super::peers::share_in(&tempfile::tempdir().unwrap().keep());
        let book = Rulebook::open(&[]).expect("a data directory is shared");
        // Where the new version goes, something it cannot replace (as a full disk refuses it).
        std::fs::remove_file(book.path()).unwrap();
        std::fs::create_dir(book.path()).unwrap();
        book.add(&[words("rm")]);
        assert!(book.path().is_dir(), "not written");
        std::fs::remove_dir(book.path()).unwrap();
        book.publish(&[]);
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\n", "the same rules, written now");
    }

    /// A rule kept for the project reaches every open rulebook of it, and no other.
    #[test]
    fn a_rule_kept_for_the_project_reaches_its_open_rulebooks() {
        super::super::peers::share_in(&tempfile::tempdir().unwrap().keep());
        let (ours, theirs, elsewhere) =
            (Rulebook::open(&[]).unwrap(), Rulebook::open(&[words("curl")]).unwrap(), Rulebook::open(&[]).unwrap());
        ours.join("/w/kept");
        theirs.join("/w/kept");
        elsewhere.join("/w/other");
        Rulebook::add_to_project("/w/kept", &[words("rm")]);
        assert_eq!(std::fs::read_to_string(ours.path()).unwrap(), "rm\n");
        assert_eq!(std::fs::read_to_string(theirs.path()).unwrap(), "curl\nrm\n");
        assert_eq!(std::fs::read_to_string(elsewhere.path()).unwrap(), "");
        drop(theirs);
        Rulebook::add_to_project("/w/kept", &[words("git push")]);
        assert_eq!(std::fs::read_to_string(ours.path()).unwrap(), "rm\ngit push\n");
    }

    /// A rule another session kept for the project stays when this session revokes a rule of
    /// its own with the same words, or all of them, and goes when it revokes the project's.
    #[test]
    fn a_rule_of_the_project_is_taken_back_only_by_revoking_the_projects() {
        super::super::peers::share_in(&tempfile::tempdir().unwrap().keep());
        let book = Rulebook::open(&[words("rm")]).unwrap();
        book.add(&[words("rm"), words("curl")]);
        book.add_project(&[words("rm")]);
        book.revoke(&[words("rm")]);
        book.publish(&[]);
        book.revoke_all();
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\n", "the project's rule stays");
        book.revoke_project(&[words("rm")]);
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "");
    }

    /// With the sandbox off a job can reach the file: it links a version aside and renames it
    /// back over a newer one, so its gate, which has read the old one, never reads again.
    #[test]
    fn a_version_put_back_over_a_newer_one_is_replaced_at_the_next_change() {
        super::super::peers::share_in(&tempfile::tempdir().unwrap().keep());
        let book = Rulebook::open(&[words("rm")]).expect("a data directory is shared");
        let aside = book.path().with_extension("aside");
        std::fs::hard_link(book.path(), &aside).unwrap();
        book.add(&[words("curl")]);
        std::fs::rename(&aside, book.path()).unwrap();
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\n");
        book.publish(&[words("rm")]);
        assert_eq!(std::fs::read_to_string(book.path()).unwrap(), "rm\ncurl\n", "the same rules, written again");
    }

    #[test]
    fn files_of_processes_that_are_gone_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let (dead, alive) = (dir.path().join("999999999-1-0"), dir.path().join(format!("{}-1-0", std::process::id())));
        std::fs::write(&dead, "rm\n").unwrap();
        std::fs::write(&alive, "rm\n").unwrap();
        sweep(dir.path());
        assert!(!dead.exists() && alive.exists());
    }
}

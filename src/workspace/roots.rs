//! Which directories may be a workspace root. A root is where accept-edits writes without
//! asking and where the sandbox lets commands write, so the whole disk, the home directory and
//! every ancestor of it, the configuration of the user's programs (`~/.config`,
//! `$XDG_CONFIG_HOME`) and cairn's own configuration and data can never be one: a root that is
//! or contains them makes them writable, and one inside cairn's own directories lets a tool
//! change what cairn reads (its database, its keys, the MCP servers it starts).
//!
//! [`Guard::check`] is the one check for every way a session gets a root: a client's `cwd` and
//! `additionalDirectories` (in the ACP handlers), a new or forked session's directory
//! (`Registry::create`, `fork`), a stored or imported one's (its actor going live), `cairn
//! exec`. The guard is built by `Config::workspace_guard`. It compares
//! every spelling of both sides: as written with `.` and `..` resolved, with symlinks followed
//! after that, and as the kernel resolves it (a symlink to the home directory is the home
//! directory; `/a/link/..` is wherever the kernel says).

use std::path::{Path, PathBuf};

use super::{final_target, normalize};

/// The directories no workspace root may be, contain or (for cairn's own) lie inside.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    guarded: Vec<Guarded>,
}

#[derive(Clone, Debug)]
struct Guarded {
    spellings: Vec<PathBuf>,
    what: &'static str,
    /// cairn's own: a root inside it is refused too.
    own: bool,
}

/// Why a directory cannot be a workspace root; says which directory and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} cannot be a workspace: {why}; open a project directory instead", .dir.display())]
pub struct RootRefused {
    /// The directory as it was given.
    pub dir: PathBuf,
    why: String,
}

const WRITABLE: &str = "where accept-edits writes without asking and commands may write";

impl Guard {
    /// A directory a root must neither be nor contain (the home directory, `~/.config`).
    pub fn around(mut self, dir: &Path, what: &'static str) -> Self {
        if dir.is_absolute() {
            self.guarded.push(Guarded { spellings: spellings(dir), what, own: false });
        }
        self
    }

    /// One of cairn's own directories: a root may neither be, contain nor lie inside it.
    pub fn own(mut self, dir: &Path, what: &'static str) -> Self {
        if dir.is_absolute() {
            self.guarded.push(Guarded { spellings: spellings(dir), what, own: true });
        }
        self
    }

    /// Whether `root` (absolute) may be a workspace root.
    pub fn check(&self, root: &Path) -> Result<(), RootRefused> {
        let refuse = |why: String| Err(RootRefused { dir: root.to_path_buf(), why });
        let given = normalize(root);
        for real in spellings(root) {
            let leads = if real == given { String::new() } else { format!("it leads to {}: ", real.display()) };
            if real.parent().is_none() {
                return refuse(format!("{leads}it is the whole disk, {WRITABLE}"));
            }
            // What the root is says most, then what it contains, then what it lies inside.
            let each = || self.guarded.iter().flat_map(|g| g.spellings.iter().map(move |dir| (g, dir)));
            if let Some((guarded, _)) = each().find(|(_, dir)| **dir == real) {
                return refuse(format!("{leads}it is {}, {WRITABLE}", guarded.what));
            }
            if let Some((guarded, dir)) = each().find(|(_, dir)| dir.starts_with(&real)) {
                return refuse(format!("{leads}it contains {} ({}), {WRITABLE}", guarded.what, dir.display()));
            }
            if let Some((guarded, dir)) = each().find(|(g, dir)| g.own && real.starts_with(dir)) {
                let what = guarded.what;
                return refuse(format!("{leads}it is inside {what} ({}), which only cairn may change", dir.display()));
            }
        }
        Ok(())
    }
}

/// `path` as written (`.` and `..` resolved), with its symlinks followed after that, and as the
/// kernel resolves it; each once.
fn spellings(path: &Path) -> Vec<PathBuf> {
    let lexical = normalize(path);
    let mut all = vec![lexical.clone()];
    for other in [final_target(&lexical).ok(), std::fs::canonicalize(path).ok()].into_iter().flatten() {
        if !all.contains(&other) {
            all.push(other);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn the_disk_the_home_and_cairns_own_directories_are_refused_however_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let data = home.join(".local/share/cairn");
        let project = home.join("code/app");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        symlink(&home, project.join("up")).unwrap();
        let guard = Guard::default().around(&home, "your home directory").own(&data, "cairn's data directory");
        let refused = |root: PathBuf| guard.check(&root).unwrap_err().to_string();
        assert!(refused(PathBuf::from("/")).contains("the whole disk"));
        assert!(refused(project.join("../../..")).contains("it contains your home directory"));
        assert!(refused(home.clone()).contains("it is your home directory"));
        assert!(refused(project.join("up")).contains("leads to"), "a symlink is judged where it leads");
        assert!(refused(project.join("up/code/..")).contains("your home directory"), "`..` after a link");
        assert!(refused(home.join(".local")).contains("contains cairn's data directory"));
        assert!(refused(data.join("x")).contains("inside cairn's data directory"));
        let message = refused(home.clone());
        assert!(message.starts_with(&format!("{} cannot be a workspace", home.display())), "{message}");
        assert!(message.ends_with("open a project directory instead"), "{message}");
        assert_eq!(guard.check(&project), Ok(()));
        assert_eq!(guard.check(&home.join("code")), Ok(()));
        assert_eq!(Guard::default().check(&project), Ok(()), "nothing guarded but the disk");
    }
}

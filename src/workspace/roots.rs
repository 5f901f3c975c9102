//! Which directories may be a workspace root. A root is where accept-edits writes without
//! asking and where the sandbox lets commands write, so the whole disk, the home directory and
//! every ancestor of it, the configuration of the user's programs (`~/.config`,
//! `$XDG_CONFIG_HOME`) and cairn's own configuration and data can never be one: a root that is
//! or contains them makes them writable, and one inside cairn's own directories lets a tool
//! change what cairn reads (its database, its keys, the MCP servers it starts). The places of
//! keys and credentials, of the user's programs and of the system's are refused the same way,
//! and so is a root inside them (`Config::workspace_guard` lists them).
//!
//! [`Guard::check`] is the one check for every way a session gets a root: a client's `cwd` and
//! `additionalDirectories` (in the ACP handlers), a new or forked session's directory
//! (`Registry::create`, `fork`), a stored or imported one's (its actor going live), `cairn
//! exec`. The guard is built by `Config::workspace_guard`. It compares
//! every spelling of both sides: as written with `.` and `..` resolved, with symlinks followed
//! after that, and as the kernel resolves it (a symlink to the home directory is the home
//! directory; `/a/link/..` is wherever the kernel says); then by identity (device and inode),
//! so a bind mount of a guarded directory or of one above it is known under any path. A bind
//! mount of a directory inside one of them is not: its path leads elsewhere, and its identity is
//! that of a directory nothing guards by name.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::recent::Recent;
use super::{final_target, normalize};

/// What a guard is built from ([`Guard::of`]'s arguments).
type GuardKey = (Option<PathBuf>, Option<PathBuf>, Vec<PathBuf>, PathBuf, Option<PathBuf>);

/// The directories no workspace root may be or contain, and some it may not lie inside either.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    guarded: Vec<Guarded>,
    /// Every guarded directory and each of its ancestors by identity (device and inode), with the
    /// guarded one's index: a second path to the same directory (a bind mount of the home
    /// directory, of its parent) is the same directory, whatever it is called.
    known: HashMap<Identity, Known>,
}

#[derive(Clone, Debug)]
struct Guarded {
    spellings: Vec<PathBuf>,
    what: &'static str,
    /// Why a root inside it is refused too (cairn's own, secrets, programs); `None`: it may be.
    inside: Option<&'static str>,
}

/// A directory as the kernel knows it, whatever path leads there.
type Identity = (u64, u64);

/// What a directory found by identity is to a guarded one: the guarded one itself, or one of
/// its ancestors.
#[derive(Clone, Copy, Debug)]
enum Known {
    Is(usize),
    Contains(usize),
}

/// Why a directory cannot be a workspace root; says which directory and what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} cannot be a workspace: {why}; open a project directory instead", .dir.display())]
pub struct RootRefused {
    /// The directory as it was given.
    pub dir: PathBuf,
    why: String,
}

/// The home directory's places whose files run as the user: programs on `PATH`, cargo's
/// configuration and binaries, git's and systemd's configuration (both of systemd's user unit
/// directories), Python's user site (a `.pth` file there runs at every `python3`), the
/// shell's drop-in directory and the toolchain managers' installs (rustup, pyenv, rbenv, nvm).
const PROGRAMS_IN_HOME: [&str; 12] = [
    ".local/bin",
    "bin",
    ".cargo",
    ".config/git",
    ".config/systemd",
    ".local/share/systemd",
    ".local/lib",
    ".bashrc.d",
    ".rustup",
    ".pyenv",
    ".rbenv",
    ".nvm",
];

/// The system's programs, configuration and state, the spool of `cron` and `at`, and the
/// kernel's views of processes, devices and its own settings (`/usr` and `/var` themselves may
/// hold projects, `/usr/src/app`, `/var/www`, but contain these). A root in `/dev` makes the
/// machine's disks writable to a command run as root, one in `/sys` the kernel's settings
/// (`/sys/kernel/uevent_helper` names a program the kernel runs as root), one in `/var/lib` the
/// package manager's scripts, one in `/run` the transient units systemd starts.
const SYSTEM_DIRS: [&str; 23] = [
    "/etc",
    "/var/spool",
    "/var/lib",
    "/usr/local/lib",
    "/usr/local/libexec",
    "/usr/local/etc",
    "/boot",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/usr/bin",
    "/usr/sbin",
    "/usr/lib",
    "/usr/libexec",
    "/usr/share",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/dev",
    "/proc",
    "/sys",
    "/run",
];

/// The kernel's own filesystems, by `statfs`'s type, wherever they are mounted (a container's
/// `/host/proc`, a second sysfs): a root on one makes processes, devices or the kernel's settings
/// writable. `devtmpfs` reports itself as `tmpfs` and is known by its place, `/dev`.
const KERNEL_FILESYSTEMS: [(i64, &str); 14] = [
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0xcafe_4a11, "bpf"),
    (0x1cd1, "devpts"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6265_6570, "configfs"),
    (0x6573_5543, "fusectl"),
];

/// The kernel filesystem `dir` lies on, if it is one of [`KERNEL_FILESYSTEMS`].
#[allow(unsafe_code)]
fn kernel_filesystem(dir: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt as _;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero `statfs` is a valid value of the plain-data struct.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads the NUL-terminated path we own and fills `stat`, which we own.
    if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    #[allow(clippy::useless_conversion)]
    let kind = i64::from(stat.f_type);
    KERNEL_FILESYSTEMS.iter().find(|(magic, _)| *magic == kind).map(|(_, name)| *name)
}

const WRITABLE: &str = "where accept-edits writes without asking and commands may write";

impl Guard {
    /// The guard of a user: the home directory and `~/.config` (or `$XDG_CONFIG_HOME`, `xdg`),
    /// which a root may neither be nor contain; the places `hidden` from commands (keys and
    /// credentials), the home directory's places whose files run as the user, the system's
    /// programs and configuration, and cairn's `data` and `config` directories, which a root may
    /// neither be, contain nor lie inside.
    pub fn of(home: Option<&Path>, xdg: Option<&Path>, hidden: &[PathBuf], data: &Path, config: Option<&Path>) -> Self {
        let mut guard = Self::default();
        if let Some(home) = home {
            guard = guard.around(home, "your home directory");
            guard = guard.around(&home.join(".config"), "your programs' configuration");
            for programs in PROGRAMS_IN_HOME {
                guard = guard.within(
                    &home.join(programs),
                    "a place whose files run as you",
                    "which no tool may change unasked",
                );
            }
        }
        if let Some(dir) = xdg {
            guard = guard.around(dir, "your programs' configuration (XDG_CONFIG_HOME)");
        }
        for secret in hidden {
            guard = guard.within(secret, "a place of your keys and credentials", "which commands never see");
        }
        for system in SYSTEM_DIRS {
            guard = guard.within(Path::new(system), "a system directory", "which holds what the system runs");
        }
        guard = guard.own(data, "cairn's data directory");
        match config {
            Some(dir) => guard.own(dir, "cairn's configuration"),
            None => guard,
        }
    }

    /// [`Self::of`], built at most once a second for the same directories
    /// ([`super::recent`]): every request and session that opens a root checks it, and a burst
    /// of a thousand would each resolve the same forty directories and their ancestors.
    pub fn recent(
        home: Option<&Path>,
        xdg: Option<&Path>,
        hidden: &[PathBuf],
        data: &Path,
        config: Option<&Path>,
    ) -> Arc<Self> {
        static LAST: Recent<GuardKey, Guard> = Recent::new();
        let key = (
            home.map(Path::to_path_buf),
            xdg.map(Path::to_path_buf),
            hidden.to_vec(),
            data.to_path_buf(),
            config.map(Path::to_path_buf),
        );
        LAST.get(key, || Self::of(home, xdg, hidden, data, config))
    }

    /// A directory a root must neither be nor contain (the home directory, `~/.config`).
    pub fn around(self, dir: &Path, what: &'static str) -> Self {
        self.with(dir, what, None)
    }

    /// One of cairn's own directories: a root may neither be, contain nor lie inside it.
    pub fn own(self, dir: &Path, what: &'static str) -> Self {
        self.with(dir, what, Some("which only cairn may change"))
    }

    /// A place a root may neither be, contain nor lie inside, for the reason `why` gives
    /// ("which holds your keys").
    pub fn within(self, dir: &Path, what: &'static str, why: &'static str) -> Self {
        self.with(dir, what, Some(why))
    }

    fn with(mut self, dir: &Path, what: &'static str, inside: Option<&'static str>) -> Self {
        if !dir.is_absolute() {
            return self;
        }
        let index = self.guarded.len();
        self.guarded.push(Guarded { spellings: spellings(dir), what, inside });
        if let Some(real) = std::fs::canonicalize(dir).ok().filter(|real| real.is_dir()) {
            for (depth, ancestor) in real.ancestors().enumerate() {
                let Some(identity) = identity(ancestor) else { continue };
                let known = if depth == 0 { Known::Is(index) } else { Known::Contains(index) };
                // What a directory is outweighs what it contains.
                match self.known.get(&identity) {
                    Some(Known::Is(_)) => {}
                    Some(Known::Contains(_)) if depth > 0 => {}
                    _ => {
                        self.known.insert(identity, known);
                    }
                }
            }
        }
        self
    }

    /// `root` resolved once, links followed, and checked both as given and as resolved: what a
    /// session works in from then on, so a link in its spelling re-pointed later (by a command:
    /// `ln -sfn ~ /tmp/proj`) never moves it.
    pub fn settle(&self, root: &Path) -> Result<PathBuf, RootRefused> {
        let (spelled, resolved) = spellings_resolved(root);
        // The path answered is one of those judged, and the one whose filesystem and identity are.
        let resolved = resolved.unwrap_or_else(|| normalize(root));
        self.judge(root, &spelled, &resolved)?;
        Ok(resolved)
    }

    /// Whether `root` (absolute) may be a workspace root.
    pub fn check(&self, root: &Path) -> Result<(), RootRefused> {
        self.judge(root, &spellings(root), root)
    }

    /// Whether `root`, spelled each of `spelled` ways and found at `at`, may be a workspace root.
    fn judge(&self, root: &Path, spelled: &[PathBuf], at: &Path) -> Result<(), RootRefused> {
        let refuse = |why: String| Err(RootRefused { dir: root.to_path_buf(), why });
        let given = normalize(root);
        for real in spelled {
            let leads = if *real == given { String::new() } else { format!("it leads to {}: ", real.display()) };
            if real.parent().is_none() {
                return refuse(format!("{leads}it is the whole disk, {WRITABLE}"));
            }
            // What the root is says most, then what it contains, then what it lies inside.
            let each = || self.guarded.iter().flat_map(|g| g.spellings.iter().map(move |dir| (g, dir)));
            if let Some((guarded, _)) = each().find(|(_, dir)| *dir == real) {
                return refuse(format!("{leads}it is {}, {WRITABLE}", guarded.what));
            }
            if let Some((guarded, dir)) = each().find(|(_, dir)| dir.starts_with(real)) {
                return refuse(format!("{leads}it contains {} ({}), {WRITABLE}", guarded.what, dir.display()));
            }
            if let Some((guarded, dir, why)) =
                each().find_map(|(g, dir)| g.inside.filter(|_| real.starts_with(dir)).map(|why| (g, dir, why)))
            {
                return refuse(format!("{leads}it is inside {} ({}), {why}", guarded.what, dir.display()));
            }
        }
        if let Some(kind) = kernel_filesystem(at) {
            return refuse(format!("it is on {kind}, a filesystem of the kernel's own, {WRITABLE}"));
        }
        // The same directories under another name: a bind mount of the home directory, or of
        // the whole disk, has paths of its own.
        let Some(found) = identity(at) else { return Ok(()) };
        if identity(Path::new("/")) == Some(found) {
            return refuse(format!("it is the whole disk under another name, {WRITABLE}"));
        }
        let under = |index: usize| {
            let guarded = &self.guarded[index];
            let dir = guarded.spellings.last().map_or_else(String::new, |dir| dir.display().to_string());
            (guarded.what, dir)
        };
        match self.known.get(&found) {
            Some(Known::Is(index)) => {
                let (what, dir) = under(*index);
                refuse(format!("it is {what} ({dir}) under another name, {WRITABLE}"))
            }
            Some(Known::Contains(index)) => {
                let (what, dir) = under(*index);
                refuse(format!("it contains {what} ({dir}) under another name, {WRITABLE}"))
            }
            None => Ok(()),
        }
    }
}

/// A directory's device and inode, if it can be read.
fn identity(dir: &Path) -> Option<Identity> {
    std::fs::metadata(dir).ok().filter(std::fs::Metadata::is_dir).map(|meta| (meta.dev(), meta.ino()))
}

/// `path` as written (`.` and `..` resolved), with its symlinks followed after that, and as the
/// kernel resolves it; each once.
fn spellings(path: &Path) -> Vec<PathBuf> {
    spellings_resolved(path).0
}

/// [`spellings`], and the kernel's resolution among them (`None` when it fails).
fn spellings_resolved(path: &Path) -> (Vec<PathBuf>, Option<PathBuf>) {
    let lexical = normalize(path);
    let resolved = std::fs::canonicalize(path).ok();
    let mut all = vec![lexical.clone()];
    for other in [final_target(&lexical).ok(), resolved.clone()].into_iter().flatten() {
        if !all.contains(&other) {
            all.push(other);
        }
    }
    (all, resolved)
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
        // The kernel's own filesystems, wherever they are mounted.
        let kernel = |root: &str| Guard::default().check(Path::new(root)).unwrap_err().to_string();
        assert!(kernel("/proc/1").contains("it is on proc"), "{}", kernel("/proc/1"));
        assert!(kernel("/sys/kernel").contains("it is on sysfs"), "{}", kernel("/sys/kernel"));
    }
}

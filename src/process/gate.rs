//! The exec gate: the supervisor's judge of every program a sandboxed command tree starts,
//! against the programs a rule rejects (`bash:rm`, `bash:git push`).
//!
//! Before the command starts, [`Gate::new`] finds each rejected program on the `PATH` and in the
//! usual system directories and keeps its identity: device and inode, size, and an open file to
//! compare contents with. Each exec the filter sends ([`super::seccomp`]) is then resolved as
//! the kernel will resolve it — from the caller's root, working directory or directory
//! descriptor, through its symlinks — and refused (`EPERM`, with a line on the command's stderr
//! the model reads) when the file is a rejected program by identity (a hard link or a symlink
//! to it), by content (a copy), or by name (a script called `rm`, busybox's `rm` applet), when
//! a script's `#!` interpreter is one, or when the dynamic loader is asked to run one. A rule
//! with subcommand words (`git push`) is checked against the exec's arguments the way the
//! parser reads them. The first exec (the command cairn itself starts) always passes.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::seccomp::{Call, Notice, Verdict};

/// Where a rejected program is looked for besides the command's `PATH`.
const SYSTEM_DIRS: &[&str] = &["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];
/// Programs that run the applet their first argument names.
const MULTI_CALL: &[&str] = &["busybox", "toybox"];
/// Longest path and argument read from a caller's memory.
const MAX_STRING: usize = 4096;
/// Arguments read from a caller's memory, at most.
const MAX_ARGS: usize = 256;
/// `#!` interpreters followed, as the kernel's own limit.
const MAX_INTERPRETERS: usize = 4;
/// Options of the dynamic loader that take a value.
const LOADER_VALUES: &[&str] = &[
    "--library-path",
    "--preload",
    "--argv0",
    "--audit",
    "--inhibit-rpath",
    "--glibc-hwcaps-prepend",
    "--glibc-hwcaps-mask",
];

/// One rejected program and its files.
struct Program {
    name: String,
    /// The subcommands rejected; an empty one rejects the program whatever its arguments.
    subcommands: Vec<Vec<String>>,
    files: Vec<Original>,
}

/// A file of a rejected program, as found before the command started.
struct Original {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    file: File,
}

/// The judge of one command tree's execs.
pub struct Gate {
    programs: Vec<Program>,
    passed_first: bool,
    told: HashSet<String>,
}

/// What the gate decided about one exec, before it is answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// Refused: the program's name, the file and the rule.
    Reject {
        program: String,
        file: PathBuf,
        rule: String,
    },
}

impl Gate {
    /// The gate for `rejected` rules' words (`["rm"]`, `["git", "push"]`); `path` is the
    /// command's `PATH`.
    pub fn new(rejected: &[Vec<String>], path: Option<&OsStr>) -> Self {
        let mut programs: Vec<Program> = Vec::new();
        for words in rejected {
            let Some(first) = words.first() else { continue };
            let name = first.rsplit('/').next().unwrap_or(first).to_owned();
            let subcommand = words[1..].to_vec();
            if let Some(known) = programs.iter_mut().find(|p| p.name == name) {
                known.subcommands.push(subcommand);
                continue;
            }
            let mut dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
            dirs.extend(SYSTEM_DIRS.iter().map(PathBuf::from));
            let mut candidates: Vec<PathBuf> = dirs.iter().map(|dir| dir.join(&name)).collect();
            if first.starts_with('/') {
                candidates.push(PathBuf::from(first));
            }
            let mut files: Vec<Original> = Vec::new();
            for candidate in candidates {
                let Ok(real) = std::fs::canonicalize(&candidate) else { continue };
                let Ok(meta) = std::fs::metadata(&real) else { continue };
                if !meta.is_file() || files.iter().any(|f| (f.dev, f.ino) == (meta.dev(), meta.ino())) {
                    continue;
                }
                let Ok(file) = File::open(&real) else { continue };
                files.push(Original { path: real, dev: meta.dev(), ino: meta.ino(), size: meta.len(), file });
            }
            programs.push(Program { name, subcommands: vec![subcommand], files });
        }
        Self { programs, passed_first: false, told: HashSet::new() }
    }

    /// Whether there is anything to judge.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }

    /// The files of programs rejected whatever their arguments, except `running` (the program
    /// the supervisor starts itself): covered in the namespace, they cannot be run or copied.
    pub fn stubs(&self, running: Option<&Path>) -> Vec<PathBuf> {
        let running = running.and_then(|path| std::fs::metadata(path).ok()).map(|meta| (meta.dev(), meta.ino()));
        self.programs
            .iter()
            .filter(|program| program.subcommands.iter().any(Vec::is_empty))
            .flat_map(|program| &program.files)
            .filter(|file| Some((file.dev, file.ino)) != running)
            .map(|file| file.path.clone())
            .collect()
    }

    /// The verdict on one exec, and a line on stderr the first time a program is refused.
    pub fn answer(&mut self, notice: &Notice) -> Verdict {
        match self.judge(notice) {
            Judgement::Pass => Verdict::Continue,
            Judgement::Reject { program, file, rule } => {
                if self.told.insert(program.clone()) {
                    use std::io::Write as _;
                    let _ = writeln!(
                        std::io::stderr().lock(),
                        "cairn: refused to run `{program}` ({}): a rule rejects `{rule}`. Do not look for another way \
                         to run it; if the task needs it, tell the user.",
                        file.display()
                    );
                }
                Verdict::Refuse(libc::EPERM)
            }
        }
    }

    pub fn judge(&mut self, notice: &Notice) -> Judgement {
        if !self.passed_first {
            self.passed_first = true;
            return Judgement::Pass;
        }
        let remote = Remote { pid: notice.pid };
        let (target, given, argv) = match notice.call {
            Call::Execve => (remote.target(None, notice.args[0], 0), remote.string(notice.args[0]), notice.args[1]),
            Call::Execveat => {
                let dirfd = notice.args[0] as i32;
                (
                    remote.target(Some(dirfd), notice.args[1], notice.args[4]),
                    remote.string(notice.args[1]),
                    notice.args[2],
                )
            }
            Call::Other => return Judgement::Pass,
        };
        let Some(target) = target else {
            // The path could not be read: the caller's memory is not there to read (a bad
            // pointer the kernel will refuse too) or it hides itself. Refuse only if rules exist.
            return Judgement::Reject {
                program: "?".into(),
                file: PathBuf::from("?"),
                rule: "its path could not be read, and rules reject programs".into(),
            };
        };
        let given_name = given.as_deref().map(base_name).unwrap_or_default();
        let args = || remote.arguments(argv);
        self.check(&remote, &target, &given_name, &args, 0)
    }

    fn check(
        &self,
        remote: &Remote,
        target: &Path,
        given_name: &str,
        args: &dyn Fn() -> Vec<String>,
        depth: usize,
    ) -> Judgement {
        // Only regular files are opened: a FIFO or a device is no program, and opening one could
        // block or act. The file is then read through this one descriptor.
        let Ok(meta) = std::fs::metadata(target) else { return Judgement::Pass };
        if !meta.is_file() {
            return Judgement::Pass;
        }
        let file = File::open(target).ok();
        let meta = file.as_ref().and_then(|file| file.metadata().ok()).unwrap_or(meta);
        let real = file
            .as_ref()
            .and_then(|file| std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok())
            .or_else(|| std::fs::canonicalize(target).ok())
            .unwrap_or_else(|| target.to_path_buf());
        let real_name = base_name(real.as_os_str().as_bytes());
        for program in &self.programs {
            let by_file = program.files.iter().find(|f| {
                (f.dev, f.ino) == (meta.dev(), meta.ino())
                    || (f.size == meta.len() && file.as_ref().is_some_and(|file| same_content(&f.file, file)))
            });
            let by_name = program.name == given_name || program.name == real_name;
            if by_file.is_some() || by_name {
                let argv = if program.subcommands.iter().any(|s| !s.is_empty()) { args() } else { Vec::new() };
                if let Some(rule) = program.rejects(argv.iter().skip(1).map(String::as_str)) {
                    return Judgement::Reject { program: program.name.clone(), file: real, rule };
                }
            }
        }
        if MULTI_CALL.contains(&real_name.as_str()) {
            let argv = args();
            if let Some(applet) = argv.get(1) {
                let applet = base_name(applet.as_bytes());
                for program in self.programs.iter().filter(|p| p.name == applet) {
                    if let Some(rule) = program.rejects(argv.iter().skip(2).map(String::as_str)) {
                        return Judgement::Reject { program: program.name.clone(), file: real, rule };
                    }
                }
            }
        }
        if depth >= MAX_INTERPRETERS {
            return Judgement::Pass;
        }
        if let Some(interpreter) = file.as_ref().and_then(interpreter) {
            let path = remote.under_root(&interpreter);
            let name = base_name(interpreter.as_os_str().as_bytes());
            let judged = self.check(remote, &path, &name, &|| Vec::new(), depth + 1);
            if judged != Judgement::Pass {
                return judged;
            }
        }
        if is_loader(&real_name) {
            let argv = args();
            if let Some((at, program)) = loaded_program(&argv) {
                let path = remote.relative(program);
                let name = base_name(program.as_bytes());
                let rest: Vec<String> = argv[at..].to_vec();
                return self.check(remote, &path, &name, &|| rest.clone(), depth + 1);
            }
        }
        Judgement::Pass
    }
}

impl Program {
    /// The rule that rejects this program with these arguments (after its name), if any.
    fn rejects<'a>(&self, args: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
        self.subcommands
            .iter()
            .find(|words| words.is_empty() || crate::permissions::names_subcommand(args.clone(), words))
            .map(|words| {
                let mut rule = vec![self.name.clone()];
                rule.extend(words.iter().cloned());
                rule.join(" ")
            })
    }
}

/// The last component of a path given as bytes.
fn base_name(path: &[u8]) -> String {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    String::from_utf8_lossy(name).into_owned()
}

/// Whether two files hold the same bytes (their sizes already equal).
fn same_content(original: &File, candidate: &File) -> bool {
    let (mut a, mut b) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut offset = 0u64;
    loop {
        let (Ok(n), Ok(m)) = (original.read_at(&mut a, offset), candidate.read_at(&mut b, offset)) else {
            return false;
        };
        if n != m || a[..n] != b[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
        offset += n as u64;
    }
}

/// The interpreter a `#!` line names, if the file starts with one.
fn interpreter(file: &File) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = file.read_at(&mut head, 0).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = String::from_utf8_lossy(line);
    let program = text.split_whitespace().next()?;
    Some(PathBuf::from(program))
}

fn is_loader(name: &str) -> bool {
    name.starts_with("ld-linux") || name.starts_with("ld64.so") || name.starts_with("ld-musl") || name == "ld.so"
}

/// The program the dynamic loader is asked to run (`ld.so [OPTIONS] PROGRAM ARGS`): its index
/// in `argv` and its path.
fn loaded_program(argv: &[String]) -> Option<(usize, &str)> {
    let mut at = 1;
    while let Some(word) = argv.get(at) {
        if LOADER_VALUES.contains(&word.as_str()) {
            at += 2;
        } else if word.starts_with("--") {
            at += 1;
        } else {
            return Some((at, word));
        }
    }
    None
}

/// Another process's memory and view of the filesystem, read through `/proc`.
struct Remote {
    pid: u32,
}

impl Remote {
    /// The file an exec of the path at `path_ptr` reaches: from the caller's root for an
    /// absolute path, else from `dirfd` (or its working directory); with `AT_EMPTY_PATH` and an
    /// empty path, the descriptor's file itself.
    fn target(&self, dirfd: Option<i32>, path_ptr: u64, flags: u64) -> Option<PathBuf> {
        let path = self.string(path_ptr)?;
        let empty_path = flags & libc::AT_EMPTY_PATH as u64 != 0;
        if path.is_empty() {
            return match dirfd {
                Some(fd) if empty_path && fd >= 0 => Some(PathBuf::from(format!("/proc/{}/fd/{fd}", self.pid))),
                _ => None,
            };
        }
        let path = PathBuf::from(OsStr::from_bytes(&path));
        Some(match dirfd {
            _ if path.is_absolute() => self.under_root(&path),
            Some(fd) if fd != libc::AT_FDCWD => PathBuf::from(format!("/proc/{}/fd/{fd}", self.pid)).join(path),
            Some(_) | None => self.relative(path.as_os_str().to_str().unwrap_or_default()),
        })
    }

    fn under_root(&self, path: &Path) -> PathBuf {
        let inside = path.strip_prefix("/").unwrap_or(path);
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(inside)
    }

    fn relative(&self, path: &str) -> PathBuf {
        if path.starts_with('/') {
            return self.under_root(Path::new(path));
        }
        PathBuf::from(format!("/proc/{}/cwd", self.pid)).join(path)
    }

    /// A NUL-terminated string at `address` in the caller's memory, at most [`MAX_STRING`].
    fn string(&self, address: u64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = address;
        while out.len() < MAX_STRING {
            // Read up to the end of the page, so a string that ends before an unmapped page
            // is still read whole.
            let page_left = 4096 - (at % 4096) as usize;
            let mut chunk = vec![0u8; page_left.min(MAX_STRING - out.len())];
            let n = self.read(at, &mut chunk)?;
            if let Some(end) = chunk[..n].iter().position(|b| *b == 0) {
                out.extend_from_slice(&chunk[..end]);
                return Some(out);
            }
            out.extend_from_slice(&chunk[..n]);
            at += n as u64;
        }
        None
    }

    /// The argument vector at `address` (`argv`), at most [`MAX_ARGS`] arguments.
    fn arguments(&self, address: u64) -> Vec<String> {
        let mut out = Vec::new();
        for index in 0..MAX_ARGS as u64 {
            let mut raw = [0u8; 8];
            let Some(n) = self.read(address + index * 8, &mut raw) else { break };
            if n < 8 {
                break;
            }
            let pointer = u64::from_ne_bytes(raw);
            if pointer == 0 {
                break;
            }
            let Some(text) = self.string(pointer) else { break };
            out.push(String::from_utf8_lossy(&text).into_owned());
        }
        out
    }

    /// Reads the caller's memory at `address` into `buf`; the count read, `None` if nothing.
    #[allow(unsafe_code)]
    fn read(&self, address: u64, buf: &mut [u8]) -> Option<usize> {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: address as usize as *mut libc::c_void, iov_len: buf.len() };
        let pid = libc::pid_t::try_from(self.pid).ok()?;
        // SAFETY: process_vm_readv writes at most `buf.len()` bytes into `buf`, which we own; the
        // remote address is only read by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        usize::try_from(n).ok().filter(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests;

//! The exec gate: the supervisor's judge of every program a sandboxed command tree starts,
//! against the programs a rule rejects (`bash:rm`, `bash:git push`).
//!
//! Before the command starts, [`Gate::new`] finds each rejected program's files and keeps what
//! identifies them (`program.rs`). Each exec the filter sends ([`super::seccomp`]) is then
//! resolved as the kernel will resolve it for the caller — from its root, working directory or
//! directory descriptor, through its symlinks, its path taken as bytes (`remote.rs`) — and
//! refused (`EPERM`, with a line on the command's stderr the model reads) when the file is a
//! rejected program: by identity (a hard link or a symlink to it), by content (a copy), by GNU
//! build id (a copy with bytes appended or its data changed), by name (a script called `rm`,
//! busybox's `rm` applet), as a `#!` interpreter (nested as deep as the kernel goes), as the
//! ELF interpreter of another file, or when the dynamic loader is asked to run one. A rule with
//! subcommand words (`git push`) is checked against the argument vector the kernel will build
//! (a `#!` line's interpreter, its argument and the script's path first), read whole up to the
//! kernel's own limits: a program with such rules whose arguments cannot be read whole is
//! refused. The vector is also read as git reads it: `argv[0]` `git-push` runs `push`, a
//! dashed helper (`git-lfs`) runs its subcommand, and a word git does not know that it would
//! correct to a rejected subcommand is that subcommand (`git.rs`). The first exec (the command
//! cairn itself starts) always passes.
//!
//! Every exec of a build or a test loop pays for this, so the common case is kept short: once
//! the filter is in place no process of the tree can have another root than the supervisor's,
//! and an absolute path is resolved from it in one `openat2` without looking the caller up in
//! `/proc`; and what is read of a file no process of the tree can write is kept by its identity
//! and change time (`facts.rs`), so a program run a thousand times is read once.
//!
//! What is not caught: a program rebuilt, or its build id changed, with its name changed too
//! is another program to the gate — a subcommand rule names what a known program does, not
//! every program that could do it. Aliases git reads from configuration files are not
//! expanded here; git runs the builtin an alias names as a new process, which is judged.

mod facts;
mod file;
mod follow;
mod git;
mod program;
mod rejected;
mod remote;

use std::cell::OnceCell;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use self::facts::{Facts, Seen};
use self::follow::Follow;
use self::program::{Candidate, Known, Program};
use self::rejected::Rejected;
use self::remote::{Caller, Reached, Start, Unread};
use super::seccomp::{Call, Notice, Verdict};

/// Programs that run the applet their first argument or their `argv[0]` names.
const MULTI_CALL: &[&str] = &["busybox", "toybox"];
/// Interpreters followed: more than the kernel's own limit (it fails the exec past five).
const MAX_DEPTH: usize = 8;
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

/// The judge of one command tree's execs.
pub struct Gate {
    /// The programs the rules reject, and what they take to be found.
    rejected: Rejected,
    /// The directories of the command's `PATH`, where git finds external commands.
    dirs: Vec<PathBuf>,
    /// The supervisor's user, who owns what the command makes.
    me: u32,
    /// The supervisor's root, once every process of the tree is known to have it too
    /// ([`Gate::fix_root`]): absolute paths are resolved from it without looking the caller up.
    root: Option<File>,
    /// What was read of the files run so far.
    seen: Seen,
    /// The directories beneath which Landlock lets the tree write, by device and inode, when
    /// it confines the tree's writes ([`Gate::writes_only_beneath`]).
    writable: Option<Vec<(u64, u64)>>,
    passed_first: bool,
    told: HashSet<String>,
    /// The session's rules file, for a process that lives across turns.
    follow: Option<Follow>,
}

/// What the gate decided about one exec, before it is answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Judgement {
    Pass,
    /// Refused: the program's name, the file, the rule, and why the rule applies when it is not
    /// plain (empty when it is).
    Reject {
        program: String,
        file: PathBuf,
        rule: String,
        why: String,
    },
    /// Refused as the kernel refuses a caller that may not search a directory on the way: the
    /// supervisor may not either, so the file cannot be judged.
    Unsearchable {
        file: PathBuf,
    },
}

/// An argument vector as the kernel builds it for one program: `head`, then the exec's own
/// arguments from `from` on.
#[derive(Clone)]
struct Argv {
    head: Vec<Vec<u8>>,
    from: usize,
}

/// One exec being judged: the caller and the argument vector it passed, read once if needed.
struct Exec {
    caller: Caller,
    argv: u64,
    read: OnceCell<Result<Vec<Vec<u8>>, Unread>>,
}

impl Exec {
    fn words(&self, argv: &Argv) -> Result<Vec<Vec<u8>>, Unread> {
        let own = self.read.get_or_init(|| self.caller.vector(self.argv)).as_ref().map_err(|unread| *unread)?;
        let mut words = argv.head.clone();
        words.extend(own.get(argv.from..).unwrap_or_default().iter().cloned());
        Ok(words)
    }
}

impl Gate {
    /// The gate for `rejected` rules' words (`["rm"]`, `["git", "push"]`); `path` is the
    /// command's `PATH`.
    pub fn new(rejected: &[Vec<String>], path: Option<&OsStr>) -> Self {
        let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
        let mut gate = Self {
            rejected: Rejected::default(),
            dirs,
            me: effective_user(),
            root: None,
            seen: Seen::default(),
            writable: None,
            passed_first: false,
            told: HashSet::new(),
            follow: None,
        };
        gate.add_rules(rejected);
        gate
    }

    /// Adds the programs of the rules in `rejected` not judged yet, and forgets what was read
    /// of files (it was read for the programs known then).
    fn add_rules(&mut self, rejected: &[Vec<String>]) {
        if self.rejected.add(rejected, &self.dirs) {
            self.seen = Seen::default();
        }
    }

    /// Follows the session's rules file (see `follow.rs`): a program it rejects later is
    /// refused from the next exec on. A file that cannot be followed leaves the rules the gate
    /// started with.
    pub fn follow(&mut self, path: &Path) -> std::io::Result<()> {
        let mut follow = Follow::open(path)?;
        if let Some(rules) = follow.changed() {
            self.add_rules(&rules);
        }
        self.follow = Some(follow);
        Ok(())
    }

    /// Resolves absolute paths from this process's root from now on. Called once the command's
    /// filter is in place: it refuses `chroot`, `pivot_root`, `setns` and every mount call, so
    /// no process of the tree has another root or changes what lies under it. (The command's
    /// own mount namespace differs only by its `/proc`, whose magic links make the one-call
    /// resolution fail over to the caller's own view.)
    pub fn fix_root(&mut self) {
        self.root = File::open("/").ok();
    }

    /// Tells the gate that Landlock lets every process of the tree write only beneath `places`
    /// (those that do not exist are no place to write).
    pub fn writes_only_beneath(&mut self, places: impl Iterator<Item = PathBuf>) {
        self.writable = Some(facts::writable_ids(places));
    }

    /// Whether there is nothing to judge, now or later (no rules file followed).
    pub fn is_empty(&self) -> bool {
        self.rejected.programs.is_empty() && self.follow.is_none()
    }

    /// The files of programs rejected whatever their arguments, and their other names by hard
    /// link, except `running` (the program the supervisor starts itself): covered in the
    /// namespace, they cannot be run or copied.
    pub fn stubs(&self, running: Option<&Path>) -> Vec<PathBuf> {
        let running = running.and_then(|path| std::fs::metadata(path).ok()).map(|meta| (meta.dev(), meta.ino()));
        let mut stubs = Vec::new();
        for program in self.rejected.programs.iter().filter(|program| program.whole()) {
            for original in &program.files {
                if Some((original.dev, original.ino)) == running {
                    continue;
                }
                stubs.push(original.path.clone());
                stubs.extend(program.links.iter().filter(|link| !stubs.contains(link)).cloned().collect::<Vec<_>>());
            }
        }
        stubs
    }

    /// The verdict on one exec, and a line on stderr the first time a rule refuses one.
    pub fn answer(&mut self, notice: &Notice) -> Verdict {
        match self.judge(notice) {
            Judgement::Pass => Verdict::Continue,
            Judgement::Reject { program, file, rule, why } => {
                if self.told.insert(format!("{program}\0{rule}\0{why}")) {
                    let why = if why.is_empty() { String::new() } else { format!("; {why}") };
                    super::tell(&format!(
                        "refused to run `{program}` ({}{why}): the user's rule rejects `{rule}`. The rule is \
                         the user's decision: do not look for another way to run it; if the task needs it, tell the \
                         user.",
                        file.display()
                    ));
                }
                Verdict::Refuse(libc::EPERM)
            }
            Judgement::Unsearchable { file } => {
                if self.told.insert(file.display().to_string()) {
                    super::tell(&format!(
                        "refused to run {}: it lies in a directory the exec check may not search, and the \
                         user's rules reject programs; run it from a place that can be read.",
                        file.display()
                    ));
                }
                Verdict::Refuse(libc::EACCES)
            }
        }
    }

    pub fn judge(&mut self, notice: &Notice) -> Judgement {
        if !self.passed_first {
            self.passed_first = true;
            return Judgement::Pass;
        }
        if let Some(rules) = self.follow.as_mut().and_then(Follow::changed) {
            self.add_rules(&rules);
        }
        if self.rejected.programs.is_empty() {
            return Judgement::Pass;
        }
        let [a0, a1, a2, _, a4, _] = notice.args;
        let (dirfd, path_at, argv, flags) = match notice.call {
            Call::Execve => (libc::AT_FDCWD, a0, a1, 0),
            Call::Execveat => (a0 as i32, a1, a2, a4),
            Call::Other => return Judgement::Pass,
        };
        let caller = Caller { pid: notice.pid };
        let Some(path) = caller.path(path_at) else {
            // The path could not be read: the caller's memory is not there to read (a bad
            // pointer the kernel will refuse too) or it is too long for the kernel.
            return self.refuse_all("?", PathBuf::from("?"), "its path could not be read");
        };
        if path.is_empty() && flags & libc::AT_EMPTY_PATH as u64 == 0 {
            return Judgement::Pass;
        }
        let start = if dirfd == libc::AT_FDCWD { Start::Cwd } else { Start::Dir(dirfd) };
        let target = match self.reach(&caller, start, &path) {
            Ok(target) => target,
            Err(judged) => return judged,
        };
        // The script path the kernel passes a `#!` interpreter.
        let filename = match start {
            Start::Dir(fd) if path.is_empty() => format!("/dev/fd/{fd}").into_bytes(),
            Start::Dir(fd) if !path.starts_with(b"/") => [format!("/dev/fd/{fd}/").as_bytes(), &path].concat(),
            Start::Dir(_) | Start::Cwd => path.clone(),
        };
        let exec = Exec { caller, argv, read: OnceCell::new() };
        let argv = Argv { head: Vec::new(), from: 0 };
        self.check(&exec, &target, &path, &argv, &filename, false, 0)
    }

    /// The judgement on `target` started as `given` with `argv`; `filename` is what the kernel
    /// passes a `#!` interpreter, `as_interpreter` whether the kernel starts it as another ELF
    /// file's interpreter.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        exec: &Exec,
        target: &Reached,
        given: &[u8],
        argv: &Argv,
        filename: &[u8],
        as_interpreter: bool,
        depth: usize,
    ) -> Judgement {
        // Only regular files are opened: a FIFO or a device is no program, and opening one could
        // block or act.
        let meta = &target.meta;
        if !meta.is_file() {
            return Judgement::Pass;
        }
        // Only the kernel's own name for the file tells where it lies: the path the caller gave
        // names other places for the supervisor (`/proc/<pid>/cwd` is another process here).
        let lasting =
            || facts::unwritable(meta, || target.named().map(Path::to_path_buf), self.me, self.writable.as_deref());
        let facts = self.seen.get_or_read(meta, || self.read(target), lasting);
        let real = || target.real(given).to_path_buf();
        if !facts.readable && meta.uid() == self.me {
            // A file of the caller's own it made unreadable (mode 0111): it runs, but neither
            // its content nor its `#!` line can be judged.
            return self.refuse_all(&base_name(given), real(), "it cannot be read to be judged");
        }
        let given_name = base_name(given);
        let real_name =
            if target.direct { given_name.clone() } else { base_name(target.real(given).as_os_str().as_bytes()) };
        for (program, by_file) in self.rejected.programs.iter().zip(&facts.known) {
            let known = by_file.clone().or_else(|| program.knows_name([&given_name, &real_name]));
            let Some(known) = known else { continue };
            if let Some(judged) = self.judge_program(exec, program, known, argv, target.real(given)) {
                return judged;
            }
        }
        if MULTI_CALL.contains(&real_name.as_str()) || MULTI_CALL.contains(&given_name.as_str()) {
            let words = match exec.words(argv) {
                Ok(words) => text(&words),
                Err(unread) => return self.refuse_all(&real_name, real(), unread_why(unread)),
            };
            // The applet its `argv[0]` names, or with its own name there, its first argument.
            let applets = [(words.first(), 1), (words.get(1), 2)];
            for (applet, rest) in applets {
                let applet = applet.map(|word| base_name(word.as_bytes())).unwrap_or_default();
                for program in self.rejected.programs.iter().filter(|p| p.name == applet) {
                    if let Some((rule, why)) = program.rejects(&words[rest.min(words.len())..], &|_| true) {
                        return Judgement::Reject { program: program.name.clone(), file: real(), rule, why };
                    }
                }
            }
        }
        if depth >= MAX_DEPTH {
            return Judgement::Pass;
        }
        if !as_interpreter && let Some((interpreter, argument)) = facts.shebang.clone() {
            let path = match self.reach(&exec.caller, Start::Cwd, &interpreter) {
                Ok(path) => path,
                Err(judged) => return judged,
            };
            let mut head = vec![interpreter.clone()];
            head.extend(argument);
            head.push(filename.to_vec());
            head.extend(argv.head.iter().skip(1).cloned());
            let from = if argv.head.is_empty() { argv.from.saturating_add(1) } else { argv.from };
            let argv = Argv { head, from };
            return self.check(exec, &path, &interpreter, &argv, &interpreter, false, depth + 1);
        }
        if self.rejected.standalone
            && !as_interpreter
            && let Some(interpreter) = &facts.elf_interpreter
            && let Ok(path) = self.reach(&exec.caller, Start::Cwd, interpreter)
        {
            let judged = self.check(exec, &path, interpreter, argv, filename, true, depth + 1);
            if judged != Judgement::Pass {
                return judged;
            }
        }
        let loader = self.rejected.loaders.iter().any(|loader| {
            loader.id == (meta.dev(), meta.ino())
                || (loader.build_id.is_some() && loader.build_id.as_deref() == facts.build_id.as_deref())
        });
        if !as_interpreter && (loader || is_loader(&real_name) || is_loader(&given_name)) {
            let words = match exec.words(argv) {
                Ok(words) => words,
                Err(unread) => return self.refuse_all(&real_name, real(), unread_why(unread)),
            };
            if let Some((at, argv0)) = loaded_program(&words) {
                let program = words[at].clone();
                let path = match self.reach(&exec.caller, Start::Cwd, &program) {
                    Ok(path) => path,
                    Err(judged) => return judged,
                };
                let mut head = vec![argv0.unwrap_or_else(|| program.clone())];
                head.extend(words[at + 1..].iter().cloned());
                let argv = Argv { head, from: usize::MAX };
                return self.check(exec, &path, &program, &argv, &program, false, depth + 1);
            }
        }
        Judgement::Pass
    }

    /// The judgement on a file known for `program` and started with `argv`, if it is refused.
    fn judge_program(
        &self,
        exec: &Exec,
        program: &Program,
        known: Known,
        argv: &Argv,
        real: &Path,
    ) -> Option<Judgement> {
        let reject = |rule: String, why: String| Judgement::Reject {
            program: program.name.clone(),
            file: real.to_path_buf(),
            rule,
            why,
        };
        let how = match &known {
            Known::File(how) if !how.is_empty() => format!("{how} as `{}`", program.name),
            Known::File(_) | Known::Name => String::new(),
            Known::Dashed(sub) => format!("it runs `{} {sub}`", program.name),
        };
        if program.whole() {
            return Some(reject(program.name.clone(), how));
        }
        let words = match exec.words(argv) {
            Ok(words) => text(&words),
            Err(unread) => {
                let rules = program.subcommands.iter().map(|sub| format!("{} {}", program.name, sub.join(" ")));
                return Some(reject(rules.collect::<Vec<_>>().join("`, `"), unread_why(unread).to_owned()));
            }
        };
        let rest = words.get(1..).unwrap_or_default();
        // What the program may take its words to be: its arguments; with `argv[0]` `git-push`
        // (git runs the builtin it names) or a file that runs a subcommand, that subcommand first.
        let mut readings: Vec<(Vec<String>, String)> = vec![(rest.to_vec(), how.clone())];
        let zeroth = words.first().map(|word| base_name(word.as_bytes())).unwrap_or_default();
        if let Some(sub) = zeroth.strip_prefix(&program.name).and_then(|s| s.strip_prefix('-')) {
            let started = format!("started as `{zeroth}`, it runs `{} {sub}`", program.name);
            readings.push(([vec![sub.to_owned()], rest.to_vec()].concat(), started));
        }
        if let Known::Dashed(sub) = &known {
            readings.push(([vec![sub.clone()], rest.to_vec()].concat(), how));
        }
        let exists = |word: &str| self.has_external(exec.caller.pid, program, word);
        for (words, how) in readings {
            if let Some((rule, why)) = program.rejects(&words, &exists) {
                let why = [how, why].into_iter().filter(|part| !part.is_empty()).collect::<Vec<_>>().join("; ");
                return Some(reject(rule, why));
            }
        }
        None
    }

    /// The file `path` names for the caller, or the judgement when it names none: a path that
    /// names nothing fails the exec, but one the supervisor may not search (a directory the
    /// caller made unsearchable, which its namespace's capabilities may still let it search)
    /// hides what it names, and is refused as a caller without the right is.
    ///
    /// An absolute path is resolved from the fixed root when one `openat2` can (the last name
    /// first without following it, so that a file reached directly keeps the name it was given
    /// without asking the kernel where it lies); anything else as the caller sees it.
    fn reach(&self, caller: &Caller, start: Start, path: &[u8]) -> Result<Reached, Judgement> {
        let reached = |file: File, direct: bool| {
            let meta = file.metadata().map_err(|_| Judgement::Pass)?;
            Ok(Reached::new(file, meta, direct))
        };
        if let Some(root) = self.root.as_ref().filter(|_| path.starts_with(b"/")) {
            if let Ok(file) = remote::open_from(root, path, false)
                && let Ok(found) = reached(file, true)
                && !found.meta.file_type().is_symlink()
            {
                return Ok(found);
            }
            if let Ok(file) = remote::open_from(root, path, true) {
                return reached(file, false);
            }
        }
        match caller.resolve(start, path) {
            Ok(file) => reached(file, false),
            Err(libc::EACCES | libc::EPERM) => {
                Err(Judgement::Unsearchable { file: PathBuf::from(OsStr::from_bytes(path)) })
            }
            Err(_) => Err(Judgement::Pass),
        }
    }

    /// Reads what the gate needs of the regular file `target` through a descriptor of its own,
    /// opened for reading from the one that reached it (so it is the same file).
    fn read(&self, target: &Reached) -> Facts {
        let file = File::open(format!("/proc/self/fd/{}", target.file.as_raw_fd())).ok();
        let head = file.as_ref().map(file::head).unwrap_or_default();
        let build_id = file.as_ref().and_then(|file| file::build_id(file, &head));
        let candidate = Candidate {
            dev: target.meta.dev(),
            ino: target.meta.ino(),
            size: target.meta.len(),
            file: file.as_ref(),
            build_id: build_id.as_deref(),
        };
        let known = self.rejected.programs.iter().map(|program| program.knows_file(&candidate)).collect();
        let elf_interpreter =
            file.as_ref().filter(|_| self.rejected.standalone).and_then(|file| file::elf_interpreter(file, &head));
        Facts { readable: file.is_some(), shebang: file::shebang(&head), elf_interpreter, build_id, known }
    }

    /// Whether the caller's `PATH` has `<program>-<word>`, an external command of it.
    fn has_external(&self, pid: u32, program: &Program, word: &str) -> bool {
        if word.is_empty() || word.contains('/') {
            return false;
        }
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let name = format!("{}-{word}", program.name);
        self.dirs.iter().any(|dir| root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name).is_file())
    }

    /// A refusal under every rule, for an exec that cannot be judged.
    fn refuse_all(&self, program: &str, file: PathBuf, why: &str) -> Judgement {
        let rules: Vec<String> = self
            .rejected
            .programs
            .iter()
            .flat_map(|p| {
                p.subcommands.iter().map(|sub| {
                    [p.name.as_str()].into_iter().chain(sub.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
                })
            })
            .collect();
        Judgement::Reject { program: program.to_owned(), file, rule: rules.join("`, `"), why: why.to_owned() }
    }
}

#[allow(unsafe_code)]
fn effective_user() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn unread_why(unread: Unread) -> &'static str {
    match unread {
        Unread::TooLong => "its arguments are longer than the kernel takes, so they cannot be judged",
        Unread::Unreadable => "its arguments could not be read whole, so they cannot be judged",
    }
}

/// The words as text (bytes that are not UTF-8 replaced, so they match no rule's words).
fn text(words: &[Vec<u8>]) -> Vec<String> {
    words.iter().map(|word| String::from_utf8_lossy(word).into_owned()).collect()
}

/// The last component of a path given as bytes.
fn base_name(path: &[u8]) -> String {
    let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
    String::from_utf8_lossy(name).into_owned()
}

fn is_loader(name: &str) -> bool {
    name.starts_with("ld-linux") || name.starts_with("ld64.so") || name.starts_with("ld-musl") || name == "ld.so"
}

/// The program the dynamic loader is asked to run (`ld.so [OPTIONS] PROGRAM ARGS`): its index
/// in `argv`, and the `argv[0]` `--argv0` gives it.
fn loaded_program(argv: &[Vec<u8>]) -> Option<(usize, Option<Vec<u8>>)> {
    let mut at = 1;
    let mut argv0 = None;
    while let Some(word) = argv.get(at) {
        let text = String::from_utf8_lossy(word);
        if text == "--argv0" {
            argv0 = argv.get(at + 1).cloned();
        }
        if LOADER_VALUES.contains(&text.as_ref()) {
            at += 2;
        } else if text.starts_with("--") {
            at += 1;
        } else {
            return Some((at, argv0));
        }
    }
    None
}

#[cfg(test)]
mod tests;

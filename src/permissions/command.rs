//! What a parsed command line runs: every program however it is spelled or wrapped (`/bin/rm`,
//! `\rm`, `'rm'`, `command rm`, `env rm`, `xargs rm`, `bash -c 'rm …'`, `find -exec rm`), and
//! where it cannot be seen (an interpreter's code, a shell reading stdin, an option that runs
//! a program, a variable that changes what a name runs). A program cairn does not know may
//! run any word it is given: those words are read as programs it may run.
//!
//! Which commands are too powerful to be remembered beyond their exact text lives in
//! `kinds`, what each known program's options do in [`options`] over `tables`, the
//! variables that change what runs in `variables`.

mod kinds;
pub mod options;
mod tables;
mod variables;

use super::shell::{self, Command, Script, Word, WordKind};
pub use kinds::{changes_state, exact_only, rule_words};
pub use variables::changes_what_runs;

/// How deep `bash -c '…'` strings are followed before the rest counts as unknown.
const MAX_DEPTH: usize = 8;
/// How many programs a line may be read to run before the rest counts as unknown.
const MAX_RUNS: usize = 512;

/// A program a command line runs, as far as it can be known before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// The program's name (the last part of its path), or `None` when the shell computes it.
    pub program: Option<String>,
    /// Its arguments.
    pub args: Vec<Word>,
    /// The program cairn does not know that was given this one as words, when this run is a
    /// guess (`mytool rm -rf x` may run `rm`); `None` when the line does run it.
    pub through: Option<String>,
}

impl Run {
    fn unknown() -> Self {
        Run { program: None, args: Vec::new(), through: None }
    }
}

/// Every program `script` runs, wrappers and `-c` strings looked through.
pub fn runs(script: &Script) -> Vec<Run> {
    let mut out = Vec::new();
    for command in &script.commands {
        if command.assignments.iter().any(|a| a.kind != WordKind::Literal || changes_what_runs(&a.text)) {
            // `PATH=/tmp zz` or a bare `PATH=…` for the rest of the line: names mean other programs.
            out.push(Run::unknown());
        }
        runs_of(&command.words, 0, None, &mut out);
    }
    out
}

fn runs_of(words: &[Word], depth: usize, through: Option<&str>, out: &mut Vec<Run>) {
    let Some(first) = words.first() else { return };
    if depth > MAX_DEPTH || out.len() > MAX_RUNS {
        if out.last().is_none_or(|run| run.program.is_some()) {
            out.push(Run::unknown());
        }
        return;
    }
    let program = program_name(first);
    let args = &words[1..];
    out.push(Run { program: program.clone(), args: args.to_vec(), through: through.map(str::to_owned) });
    let Some(name) = program else { return };
    if unseen(first, &name, args) {
        // What it runs is in a file, on stdin or in code: this reading cannot see it.
        out.push(Run::unknown());
    }
    if !kinds::known(&name) {
        return guesses(&name, args, depth, out);
    }
    let shell_without_program = shell_without_program(&name);
    match inner(&name, args) {
        Inner::None if shell_without_program.is_some() => out.push(Run::unknown()),
        Inner::None => {}
        Inner::Program(at) if name == "xargs" && feeds_unknown(&args[at..]) => {
            // xargs appends what it reads: to a shell or a wrapper, that is the program.
            runs_of(&args[at..], depth + 1, through, out);
            out.push(Run::unknown());
        }
        Inner::Program(at) => runs_of(&args[at..], depth + 1, through, out),
        Inner::Programs(starts) => {
            for (from, to) in starts {
                runs_of(&args[from..to], depth + 1, through, out);
            }
        }
        Inner::Shell(text) => shell_runs(&text, depth, through, out),
        Inner::Unknown => out.push(Run::unknown()),
        Inner::Candidates(from) => {
            let operands = args.iter().filter(|w| !w.text.starts_with('-')).count();
            if shell_without_program.is_some_and(|leading| operands <= leading) {
                out.push(Run::unknown());
            }
            // Options this reading does not know: any later word may be the program.
            for at in from..args.len() {
                runs_of(&args[at..], depth + 1, through, out);
            }
        }
    }
}

fn shell_runs(text: &str, depth: usize, through: Option<&str>, out: &mut Vec<Run>) {
    match shell::parse(text) {
        Ok(script) => {
            for command in &script.commands {
                runs_of(&command.words, depth + 1, through, out);
            }
        }
        Err(_) => out.push(Run::unknown()),
    }
}

/// What a program cairn does not know may run: any word it is given (or an option's value,
/// `--run=rm`) may be a program, and a word that reads as a command line may be run as one.
/// These runs are guesses: a rejection they match asks rather than refuses. Words naming
/// programs cairn knows are followed; others are taken as they are, so a long line costs one
/// run per word.
fn guesses(name: &str, args: &[Word], depth: usize, out: &mut Vec<Run>) {
    for (at, word) in args.iter().enumerate() {
        if out.len() > MAX_RUNS {
            return out.push(Run::unknown());
        }
        if word.kind != WordKind::Literal {
            out.push(Run::unknown());
            continue;
        }
        let text = word.text.as_str();
        let value = if text.starts_with('-') { text.split_once('=').map(|(_, value)| value) } else { Some(text) };
        let Some(value) = value.filter(|v| !v.is_empty()) else { continue };
        if value.contains([' ', '\t', '\n', ';', '|', '&']) {
            shell_runs(value, depth, Some(name), out);
        } else if value.len() == text.len() && kinds::known(program_name(word).as_deref().unwrap_or_default()) {
            runs_of(&args[at..], depth + 1, Some(name), out);
        } else {
            let program = value.rsplit('/').next().unwrap_or(value).to_owned();
            let rest = if value.len() == text.len() { args[at + 1..].to_vec() } else { Vec::new() };
            out.push(Run { program: Some(program), args: rest, through: Some(name.to_owned()) });
        }
    }
}

/// Whether a run hides what it finally runs: a program run by its path (a copy of `rm` under
/// another name), a shell reading a script, stdin or an rc file, an interpreter given code, a
/// program or option that runs other programs (`git rebase -x`, `tar --to-command`, `fd -x`),
/// a builtin that evaluates its computed arguments or changes what a name runs (`hash -p`,
/// `printf -v PATH`), a variable that changes what runs (`PATH=…`, `BASH_ENV=…`).
fn unseen(first: &Word, name: &str, args: &[Word]) -> bool {
    let literal = |w: &Word| w.kind == WordKind::Literal;
    if first.text.contains('/') || kinds::runs_unseen(name) {
        return true;
    }
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    if is_shell(name) {
        // bash(1) `--rcfile file`, `--init-file file`: an interactive shell runs file first.
        // No `-c STRING`: the shell reads a script file or stdin.
        return texts.iter().any(|t| t.starts_with("--rc") || t.starts_with("--init"))
            || matches!(shell_string(args), Inner::None);
    }
    // `find -exec` shows what it runs, and is followed there.
    if name != "find" && kinds::runs_others(name, &texts).is_some() {
        return true;
    }
    if variables::sets_what_runs(name, args) {
        return true;
    }
    match name {
        "source" | "." | "alias" | "enable" | "bind" | "fc" | "complete" | "compgen" | "hash" | "parallel" | "sem"
        | "hyperfine" => true,
        "env" => texts.iter().any(|t| changes_what_runs(t)),
        "test" | "[" | "shopt" => args.iter().any(|w| !literal(w) || w.text.contains('[')),
        "let" | "declare" | "typeset" | "local" | "readonly" | "export" | "printf" | "read" | "mapfile"
        | "readarray" | "unset" => texts.iter().any(|t| t.contains('[')),
        "xargs" => texts.iter().any(|t| ["-I", "-i", "--replace"].iter().any(|o| t.starts_with(o))),
        // strace(1) `-o filename`: a filename starting with `|` or `!` is a command to pipe to.
        "strace" => {
            texts.windows(2).any(|w| w[0].starts_with("-o") && w[1].starts_with(['|', '!']))
                || texts.iter().any(|t| t.starts_with("-o") && t[2..].starts_with(['|', '!']))
        }
        _ => false,
    }
}

/// Wrappers that start a shell (reading stdin: a here-string, a pipe) when given no program,
/// and how many operands come before the program: util-linux setarch(8) (its architecture)
/// and its personality names, chroot(8) (the directory), unshare(1), nsenter(1), script(1)
/// without `-c` (its log file), su(1) and runuser(1) without `-c` (the user), sg(1),
/// newgrp(1) (the group), sudo(8) and doas(1) with `-s`.
fn shell_without_program(name: &str) -> Option<usize> {
    match name {
        "setarch" | "chroot" | "su" | "runuser" | "sg" | "newgrp" | "script" => Some(1),
        "linux32" | "linux64" | "i386" | "x86_64" | "uname26" | "unshare" | "nsenter" | "sudo" | "doas" => Some(0),
        _ => None,
    }
}

/// Whether a remembered program rule (`cargo test`) can ever cover a command; why not.
pub fn program_rule_applies(words: &[String]) -> Result<(), String> {
    let words = words.iter().map(|text| Word { text: text.clone(), kind: WordKind::Literal, quoted: false });
    exact_only(&Command { words: words.collect(), ..Command::default() }).map_or(Ok(()), Err)
}

/// Whether a command's point is to run other programs: a shell, a wrapper, an interpreter, or
/// an ordinary program with an option that runs others (`find -exec`).
pub fn is_runner(command: &Command) -> bool {
    let Some(first) = command.words.first() else { return false };
    let Some(name) = program_name(first) else { return false };
    let texts: Vec<&str> = command.words[1..].iter().map(|w| w.text.as_str()).collect();
    is_shell(&name)
        || wrapper_spec(&name).is_some()
        || kinds::runs_unseen(&name)
        || kinds::runs_others(&name, &texts).is_some()
}

/// Whether the program xargs starts is one that runs its (appended) arguments.
fn feeds_unknown(words: &[Word]) -> bool {
    words.first().and_then(program_name).is_some_and(|name| is_shell(&name) || wrapper_spec(&name).is_some())
}

/// The name a command word runs: the last part of its path, once quotes are removed; `None`
/// when the shell computes it (`$CMD`, `{rm,x}`, `/bin/r?`).
pub fn program_name(word: &Word) -> Option<String> {
    match word.kind {
        WordKind::Literal => Some(word.text.rsplit('/').next().unwrap_or(&word.text).to_owned()),
        WordKind::Glob(_) | WordKind::Dynamic => None,
    }
}

/// What a wrapper runs.
enum Inner {
    /// Not a wrapper.
    None,
    /// The program starts at this argument.
    Program(usize),
    /// `find -exec …` and the like: programs in these argument ranges.
    Programs(Vec<(usize, usize)>),
    /// A string the wrapper hands to a shell.
    Shell(String),
    /// The wrapper runs something this reading cannot see (a computed word).
    Unknown,
    /// Unknown options: every argument from here may be the program.
    Candidates(usize),
}

/// Options of a wrapper: those that take a separate value, and how many plain arguments come
/// before the program (`timeout 5 …`, `chroot DIR …`).
struct Wrapper {
    values: &'static [&'static str],
    flags: &'static [&'static str],
    positionals: usize,
    /// Takes `NAME=value` words before the program (`env`).
    assignments: bool,
}

const fn wrapper(values: &'static [&'static str], flags: &'static [&'static str], positionals: usize) -> Wrapper {
    Wrapper { values, flags, positionals, assignments: false }
}

fn wrapper_spec(name: &str) -> Option<Wrapper> {
    Some(match name {
        "command" => wrapper(&[], &["-p", "-v", "-V"], 0),
        "builtin" | "nohup" | "exec" | "busybox" | "eatmydata" | "fakeroot" | "catchsegv" | "caffeinate" => {
            wrapper(&["-a"], &["-c", "-l"], 0)
        }
        "setsid" => wrapper(&[], &["-c", "-f", "-w", "--ctty", "--fork", "--wait"], 0),
        "time" => wrapper(&["-f", "-o", "--format", "--output"], &["-p", "-a", "-v", "--append", "--verbose"], 0),
        "nice" => wrapper(&["-n", "--adjustment"], &[], 0),
        "ionice" => wrapper(&["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"], &["-t", "--ignore"], 0),
        "timeout" => wrapper(
            &["-k", "-s", "--kill-after", "--signal"],
            &["-v", "--verbose", "--preserve-status", "--foreground"],
            1,
        ),
        "stdbuf" => wrapper(&["-i", "-o", "-e", "--input", "--output", "--error"], &[], 0),
        "env" => Wrapper {
            values: &["-u", "-C", "--unset", "--chdir"],
            flags: &["-i", "-0", "--ignore-environment", "--null", "-"],
            positionals: 0,
            assignments: true,
        },
        "sudo" => wrapper(
            &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "--user", "--group", "--chdir", "--prompt"],
            &["-A", "-b", "-E", "-H", "-k", "-n", "-P", "-S", "-i", "-s", "--preserve-env", "--login", "--shell"],
            0,
        ),
        "doas" => wrapper(&["-u", "-C"], &["-n", "-s", "-L"], 0),
        "chroot" => wrapper(&["--userspec", "--groups"], &["--skip-chdir"], 1),
        "taskset" | "chrt" => wrapper(&[], &["-a", "-c", "-p", "-f", "-r", "-o", "-b", "-i", "-d", "-m"], 1),
        "strace" | "ltrace" => wrapper(
            &["-o", "-e", "-p", "-s", "-u", "-E", "-P", "-X", "-n"],
            &["-f", "-ff", "-c", "-t", "-tt", "-T", "-q", "-v", "-y"],
            0,
        ),
        "xargs" => wrapper(
            &[
                "-a",
                "-d",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--max-lines",
                "--process-slot-var",
                "--replace",
            ],
            &[
                "-0",
                "-e",
                "-i",
                "-l",
                "-o",
                "-p",
                "-r",
                "-t",
                "-x",
                "--null",
                "--no-run-if-empty",
                "--verbose",
                "--interactive",
                "--open-tty",
                "--exit",
            ],
            0,
        ),
        // util-linux logsave(8) `logsave [-asv] logfile cmd_prog [args]`.
        "logsave" => wrapper(&[], &["-a", "-s", "-v"], 1),
        "entr" => wrapper(&[], &["-a", "-c", "-cc", "-d", "-n", "-p", "-r", "-s", "-z"], 0),
        "xvfb-run" | "dbus-run-session" | "proxychains" | "proxychains4" | "torsocks" | "firejail" | "unshare"
        | "nsenter" | "numactl" | "valgrind" | "runuser" | "sg" | "systemd-run" | "bwrap" | "gdb" | "perf"
        | "parallel" | "hyperfine" | "flatpak-spawn" | "distrobox-enter" | "prlimit" | "setpriv" | "unbuffer"
        | "rlwrap" | "ssh-agent" | "dbus-launch" | "pkexec" | "runcon" | "chpst" | "newgrp" | "script" | "direnv"
        | "chronic" | "ifne" | "tini" | "dumb-init" | "sem" => wrapper(&[], &[], usize::MAX),
        // util-linux setarch(8) `setarch [arch] [options] [program [argument...]]` and its
        // personality names (`linux32`, `linux64`, `i386`, `x86_64`, `uname26`): the arch is
        // optional, so any word may be the program.
        "setarch" | "linux32" | "linux64" | "i386" | "x86_64" | "uname26" => wrapper(&[], &[], usize::MAX),
        _ => return None,
    })
}

/// Shells: `-c STRING` runs the string; otherwise the first argument is a script file.
fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash" | "rbash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "fish" | "yash" | "posh" | "csh" | "tcsh"
    )
}

fn inner(name: &str, args: &[Word]) -> Inner {
    if is_shell(name) {
        return shell_string(args);
    }
    match name {
        "eval" => return joined(args),
        "trap" => {
            // `trap 'COMMANDS' SIGNAL…`: the first argument is code.
            return match args.iter().find(|w| !w.text.starts_with('-')) {
                Some(word) if word.kind == WordKind::Literal => Inner::Shell(word.text.clone()),
                Some(_) => Inner::Unknown,
                None => Inner::None,
            };
        }
        "mapfile" | "readarray" => {
            return match args.iter().position(|w| w.text == "-C") {
                Some(at) => match args.get(at + 1) {
                    Some(word) if word.kind == WordKind::Literal => Inner::Shell(word.text.clone()),
                    _ => Inner::Unknown,
                },
                None if args.iter().any(|w| w.text.starts_with("-C")) => Inner::Unknown,
                None => Inner::None,
            };
        }
        "watch" => {
            return after_options(args, &["-n", "-d", "--interval", "--differences"])
                .map_or(Inner::None, |at| joined(&args[at..]));
        }
        "su" | "script" | "flock" => {
            return match args.iter().position(|w| w.text == "-c" || w.text == "--command") {
                Some(at) => match args.get(at + 1) {
                    Some(word) if word.kind == WordKind::Literal => Inner::Shell(word.text.clone()),
                    Some(_) => Inner::Unknown,
                    None => Inner::None,
                },
                None if name == "flock" => Inner::Candidates(0),
                None => Inner::None,
            };
        }
        "find" => return find_exec(args),
        _ => {}
    }
    let Some(spec) = wrapper_spec(name) else { return Inner::None };
    if spec.positionals == usize::MAX {
        return Inner::Candidates(0);
    }
    let mut at = 0;
    let mut positionals = spec.positionals;
    while let Some(word) = args.get(at) {
        let text = word.text.as_str();
        if word.kind != WordKind::Literal {
            return Inner::Unknown;
        }
        if text == "--" {
            at += 1;
            continue;
        }
        if name == "env" {
            // `-S STRING`, `-iS'…'`, `--split-string=…`: a command line env splits and runs.
            if let Some(string) = text.strip_prefix("--split-string=") {
                return Inner::Shell(string.to_owned());
            }
            let cluster = text.starts_with('-') && !text.starts_with("--");
            if text == "--split-string" || (cluster && text.contains('S')) {
                let attached = text.split_once('S').map(|(_, rest)| rest).filter(|rest| !rest.is_empty());
                let string = attached.map(str::to_owned).or_else(|| args.get(at + 1).map(|w| w.text.clone()));
                return string.map_or(Inner::Unknown, Inner::Shell);
            }
        }
        if text.starts_with('-') && text.len() > 1 {
            let option = text.split('=').next().unwrap_or(text);
            let known = spec.values.contains(&option) || spec.flags.contains(&option);
            if spec.values.contains(&option) && !text.contains('=') {
                at += 2;
            } else if known || is_numeric_flag(name, text) || attached_value(spec.values, text) {
                at += 1;
            } else {
                return Inner::Candidates(at + 1);
            }
            continue;
        }
        // env(1) takes every word with `=` before the program as an assignment, whatever the
        // name (`X%=1`, `=1`); bash's own rule is narrower.
        if spec.assignments && text.contains('=') {
            at += 1;
            continue;
        }
        if positionals > 0 {
            positionals -= 1;
            at += 1;
            continue;
        }
        return Inner::Program(at);
    }
    Inner::None
}

/// `nice -10 cmd`, `xargs -n1`-style flags with their number attached.
fn is_numeric_flag(name: &str, text: &str) -> bool {
    name == "nice" && text[1..].chars().all(|c| c.is_ascii_digit())
}

/// `-uroot`, `-n5`: a short value option with its value attached.
fn attached_value(values: &[&str], text: &str) -> bool {
    !text.starts_with("--") && text.len() > 2 && values.iter().any(|v| v.len() == 2 && text.starts_with(v))
}

/// The index of the first argument after `options` (each taking a value) and flags.
fn after_options(args: &[Word], values: &[&str]) -> Option<usize> {
    let mut at = 0;
    while let Some(word) = args.get(at) {
        if !word.text.starts_with('-') {
            return Some(at);
        }
        at += if values.contains(&word.text.as_str()) { 2 } else { 1 };
    }
    None
}

/// `bash -c 'STRING'`, `bash -lc 'STRING'`: the string; `bash script.sh`: unseen.
fn shell_string(args: &[Word]) -> Inner {
    let mut at = 0;
    let mut command = false;
    while let Some(word) = args.get(at) {
        let text = word.text.as_str();
        if word.kind != WordKind::Literal {
            return Inner::Unknown;
        }
        if matches!(text, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") {
            at += 2;
            continue;
        }
        if text.starts_with('-') && !text.starts_with("--") && text.len() > 1 {
            command |= text.contains('c');
            at += 1;
            continue;
        }
        if text.starts_with("--") || text.starts_with('+') {
            at += 1;
            continue;
        }
        return if command { Inner::Shell(text.to_owned()) } else { Inner::None };
    }
    Inner::None
}

/// `eval a b c`: the arguments joined by spaces, read as a command line.
fn joined(args: &[Word]) -> Inner {
    if args.iter().any(|w| w.kind != WordKind::Literal) {
        return Inner::Unknown;
    }
    Inner::Shell(args.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" "))
}

/// `find … -exec PROGRAM … ;` (and `-execdir`, `-ok`, `-okdir`).
fn find_exec(args: &[Word]) -> Inner {
    let mut ranges = Vec::new();
    let mut at = 0;
    while at < args.len() {
        if matches!(args[at].text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let from = at + 1;
            let to = args[from..].iter().position(|w| w.text == ";" || w.text == "+").map_or(args.len(), |n| from + n);
            ranges.push((from, to));
            at = to;
        }
        at += 1;
    }
    if ranges.is_empty() { Inner::None } else { Inner::Programs(ranges) }
}

#[cfg(test)]
mod tests;

//! Lines that only read: every program they run is a reader (`cat`, `grep`, `ls`, `git log`, …)
//! given no option that writes or runs something, and nothing is redirected into a file,
//! computed when the line runs, or reached outside the workspace. Where the kernel cannot keep
//! a command's guarded places read-only, accept-edits lets only such lines through unasked; plan
//! mode refuses every line whose programs are not all such readers.

use super::command;
use super::facts::CommandFacts;

/// Programs that read files and print, and options of theirs that write or run (`None`: none).
const READERS: &[(&str, &[&str])] = &[
    ("cat", &[]),
    ("head", &[]),
    ("tail", &[]),
    ("ls", &[]),
    ("grep", &[]),
    ("egrep", &[]),
    ("fgrep", &[]),
    ("rg", &["--pre", "--hostname-bin"]),
    ("wc", &[]),
    ("cut", &[]),
    ("diff", &[]),
    ("cmp", &[]),
    ("file", &["-C", "--compile"]),
    ("stat", &[]),
    ("du", &[]),
    ("df", &[]),
    ("pwd", &[]),
    ("echo", &[]),
    ("which", &[]),
    ("whoami", &[]),
    ("id", &[]),
    ("date", &["-s", "--set"]),
    ("uname", &[]),
    ("true", &[]),
    ("false", &[]),
    ("test", &[]),
    ("[", &[]),
    ("basename", &[]),
    ("dirname", &[]),
    ("realpath", &[]),
    ("readlink", &[]),
    ("nl", &[]),
    ("od", &[]),
    ("md5sum", &[]),
    ("sha1sum", &[]),
    ("sha256sum", &[]),
    ("sha512sum", &[]),
    ("cksum", &[]),
    ("comm", &[]),
    ("jq", &[]),
    ("sort", &["-o", "--output", "--compress-program"]),
    ("find", &["-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"]),
];

/// Options git takes before its subcommand that change nothing it runs.
const GIT_QUIET: &[&str] = &["--no-pager", "-P", "--no-optional-locks"];

/// Git subcommands that only read.
const GIT_READERS: &[&str] =
    &["status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "blame", "describe", "shortlog", "cat-file"];

impl CommandFacts {
    /// Whether the line only reads (see the module's doc).
    pub fn reads_only(&self) -> bool {
        self.escapes.is_empty() && self.only_reads()
    }

    /// Whether every program the line runs only reads, wherever its arguments lead: what plan
    /// mode lets a line be judged at all (then as in ask mode, which asks about a read outside
    /// the workspace); any other line may change something and is refused there.
    pub fn only_reads(&self) -> bool {
        let Ok(script) = &self.script else { return false };
        if script.latent || !self.computed.is_empty() || !self.writes.is_empty() {
            return false;
        }
        if script.commands.iter().any(|command| command::exact_only(command).is_some()) {
            return false;
        }
        command::runs(script).iter().all(|run| {
            let Some(program) = &run.program else { return false };
            let args: Vec<&str> = run.args.iter().map(|word| word.text.as_str()).collect();
            // Any option naming an output file (`--output=x`, git's and others') writes.
            if args.iter().any(|arg| arg.starts_with("--output") || arg.starts_with("--exec")) {
                return false;
            }
            if program == "git" {
                // Any other option before the subcommand may move the repository or its
                // configuration (`-C`, `--git-dir`, `-c`), and takes a value the subcommand
                // could be mistaken for.
                let first = args.iter().find(|arg| !GIT_QUIET.contains(arg));
                let runs_drivers = |arg: &&str| ["--ext-diff", "--textconv"].contains(arg);
                return first.is_some_and(|sub| GIT_READERS.contains(sub)) && !args.iter().any(runs_drivers);
            }
            READERS
                .iter()
                .find(|(name, _)| name == program)
                .is_some_and(|(_, writing)| !args.iter().any(|arg| writing.iter().any(|w| spells(arg, w))))
        })
    }
}

/// Whether `arg` gives the option `option`: exactly; a long option (`--output`) also by any
/// prefix of three letters or more that GNU programs take for it (`--out=x`); a short one
/// (`-o`) also stuck to its value or in a bundle (`-ox`, `-uo`). A single-dash long option
/// (find's `-delete`) only exactly.
fn spells(arg: &str, option: &str) -> bool {
    if arg == option {
        return true;
    }
    if let Some(long) = option.strip_prefix("--") {
        let given = arg.strip_prefix("--").map(|rest| rest.split('=').next().unwrap_or(rest));
        return given.is_some_and(|given| given.len() >= 3 && long.starts_with(given));
    }
    match option.strip_prefix('-').map(str::chars).map(|mut c| (c.next(), c.next())) {
        Some((Some(letter), None)) => arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(letter),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::permissions::Subject;
    use crate::permissions::fake::bash;

    fn reads_only(line: &str) -> bool {
        match bash(line).subject {
            Subject::Command(facts) => facts.reads_only(),
            Subject::Path { .. } | Subject::Tool { .. } | Subject::Host { .. } | Subject::Plan => false,
        }
    }

    #[test]
    fn readers_read_and_anything_else_may_write() {
        for line in [
            "cat src/lib.rs | grep fn | wc -l",
            "git log --oneline -5",
            "ls -la && git status",
            "find . -name '*.rs'",
            "git --no-pager diff",
            "sort -n -u a",
            "diff -u a b",
        ] {
            assert!(reads_only(line), "{line}");
        }
        for line in [
            "echo hi > out.txt",
            "tar -xf x.tar",
            "sort -o out in",
            "find . -delete",
            "git diff --output=x",
            "git commit -m x",
            "git -c core.pager=sh log",
            "git -C status config --file .git/config core.fsmonitor x",
            "git --git-dir status log",
            "git --git-dir=fake --work-tree=. status",
            "git diff --ext-diff",
            "sort -o.git/config cfg",
            "sort -uo x y",
            "sort --out=x y",
            "sort --compress-prog=sh -S 1K payload",
            "xxd in .git/config",
            "rg --hostname-bin=./x foo",
            "cat $(ls)",
            "xargs cat",
            "bash -c 'cat x'",
            "make",
        ] {
            assert!(!reads_only(line), "{line}");
        }
    }
}

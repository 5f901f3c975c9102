//! What git makes of its arguments beyond the words a rule names: the command word past its own
//! options, its builtins, and whether it would take an unknown word for a command. With
//! `help.autocorrect` set (by `-c`, the environment or any configuration file), git runs the
//! command a misspelt word is close to (`psuh` is `push`) in the same process, where no exec
//! shows it: a word git does not know that is close to a rejected subcommand is judged as that
//! subcommand. Closeness is git's own: the word starts the command, or a Damerau-Levenshtein
//! distance with git's weights (a swap free, a substitution 2, an insertion 1, a deletion 3)
//! under git's floor. An alias is not read here: git runs a builtin an alias names as a new
//! `git <command>` process, and a `!` alias through the shell, so the gate judges that exec.

/// git's builtins (2.47), which it runs without looking for a `git-*` file and never corrects.
const BUILTINS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bugreport",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "checkout--worker",
    "checkout-index",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-graph",
    "commit-tree",
    "config",
    "count-objects",
    "credential",
    "credential-cache",
    "credential-cache--daemon",
    "credential-store",
    "describe",
    "diagnose",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "difftool",
    "fast-export",
    "fast-import",
    "fetch",
    "fetch-pack",
    "fmt-merge-msg",
    "for-each-ref",
    "for-each-repo",
    "format-patch",
    "fsck",
    "fsck-objects",
    "fsmonitor--daemon",
    "gc",
    "get-tar-commit-id",
    "grep",
    "hash-object",
    "help",
    "hook",
    "index-pack",
    "init",
    "init-db",
    "interpret-trailers",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "mailinfo",
    "mailsplit",
    "maintenance",
    "merge",
    "merge-base",
    "merge-file",
    "merge-index",
    "merge-ours",
    "merge-recursive",
    "merge-recursive-ours",
    "merge-recursive-theirs",
    "merge-subtree",
    "merge-tree",
    "mktag",
    "mktree",
    "multi-pack-index",
    "mv",
    "name-rev",
    "notes",
    "pack-objects",
    "pack-redundant",
    "pack-refs",
    "patch-id",
    "pickaxe",
    "prune",
    "prune-packed",
    "pull",
    "push",
    "range-diff",
    "read-tree",
    "rebase",
    "receive-pack",
    "reflog",
    "refs",
    "remote",
    "remote-ext",
    "remote-fd",
    "repack",
    "replace",
    "replay",
    "rerere",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "send-pack",
    "shortlog",
    "show",
    "show-branch",
    "show-index",
    "show-ref",
    "sparse-checkout",
    "stage",
    "stash",
    "status",
    "stripspace",
    "submodule--helper",
    "switch",
    "symbolic-ref",
    "tag",
    "unpack-file",
    "unpack-objects",
    "update-index",
    "update-ref",
    "update-server-info",
    "upload-archive",
    "upload-archive--writer",
    "upload-pack",
    "var",
    "verify-commit",
    "verify-pack",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// git's options before the command that take the next word as their value.
const WITH_VALUE: &[&str] =
    &["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source", "--config-env"];

/// Below this score (a distance plus one) git takes a word for a command (`SIMILARITY_FLOOR`).
const FLOOR: usize = 7;

/// The command word of git's arguments `args` (after `git`), past its own options, and its
/// index; `None` when an option makes git do something else (`--help`, `--version`).
pub fn command_word(args: &[String]) -> Option<(usize, &str)> {
    let mut at = 0;
    while let Some(word) = args.get(at) {
        if !word.starts_with('-') {
            return Some((at, word));
        }
        if matches!(word.as_str(), "-h" | "--help" | "-v" | "--version") || word.starts_with("--list-cmds") {
            return None;
        }
        at += if WITH_VALUE.contains(&word.as_str()) { 2 } else { 1 };
    }
    None
}

pub fn is_builtin(word: &str) -> bool {
    BUILTINS.contains(&word)
}

/// Whether git would take `word` for `command` when it corrects a misspelling.
pub fn similar(word: &str, command: &str) -> bool {
    command.starts_with(word) || distance(word.as_bytes(), command.as_bytes()) + 1 < FLOOR
}

/// The cost of turning `from` into `to` with git's weights: swapping two neighbours 0, a
/// substitution 2, an insertion 1, a deletion 3 (git's `levenshtein(from, to, 0, 2, 1, 3)`).
pub fn distance(from: &[u8], to: &[u8]) -> usize {
    const SWAP: usize = 0;
    const SUBSTITUTION: usize = 2;
    const INSERTION: usize = 1;
    const DELETION: usize = 3;
    let mut before: Vec<usize> = vec![0; to.len() + 1];
    let mut last: Vec<usize> = (0..=to.len()).map(|j| j * INSERTION).collect();
    let mut row: Vec<usize> = vec![0; to.len() + 1];
    for (i, a) in from.iter().enumerate() {
        row[0] = (i + 1) * DELETION;
        for (j, b) in to.iter().enumerate() {
            let mut cost = last[j] + if a == b { 0 } else { SUBSTITUTION };
            if i > 0 && j > 0 && from[i - 1] == *b && *a == to[j - 1] {
                cost = cost.min(before[j - 1] + SWAP);
            }
            cost = cost.min(last[j + 1] + DELETION).min(row[j] + INSERTION);
            row[j + 1] = cost;
        }
        std::mem::swap(&mut before, &mut last);
        std::mem::swap(&mut last, &mut row);
    }
    last[to.len()]
}

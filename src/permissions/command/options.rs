//! A command's options read against its program's table (`tables`), as the
//! program's own parser would take them: a long option also by any prefix of it (GNU getopt,
//! git and curl take unambiguous abbreviations; an ambiguous one is refused by the program, so
//! counting it costs nothing), a short one anywhere in a cluster (`-avze` holds `-e`), tar's
//! first word as a cluster (`tar cIf …`), single-dash words (`find -exec`, `go -exec`) whole.

use std::collections::HashSet;
use std::sync::OnceLock;

use super::tables::{PLAIN, TABLES};
use crate::permissions::shell;

/// Names written as one string (easy to read and cite), looked up through a set built once.
pub struct Names {
    list: &'static str,
    set: OnceLock<HashSet<&'static str>>,
}

impl Names {
    pub const fn new(list: &'static str) -> Self {
        Names { list, set: OnceLock::new() }
    }

    pub fn has(&self, name: &str) -> bool {
        self.set.get_or_init(|| self.list.split_whitespace().collect()).contains(name)
    }
}

/// What an option or subcommand makes a program do beyond reading and writing the paths the
/// line names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Does {
    /// Runs a program or shell command that the line does not show as one.
    Runs,
    /// Takes path names, options or code from a file or stdin, whose content cairn does not
    /// judge.
    Reads,
    /// Acts beyond the workspace's files: installs, publishes, pushes, writes anywhere.
    Beyond,
    /// Creates links or moves files (extracting, checking out, linking): later paths in the
    /// same line may lead elsewhere once it has run.
    Moves,
    /// Descends into the directories it names, hidden files included.
    Descends,
    /// Descends, and follows the links it meets there.
    Follows,
    /// Keeps links as links where it would follow them (cancels [`Does::Follows`]).
    Stays,
}

/// An option as its manual spells it.
pub struct Opt {
    pub spelling: &'static str,
    pub does: Does,
}

pub const fn opt(spelling: &'static str, does: Does) -> Opt {
    Opt { spelling, does }
}

/// A subcommand (`*`: every one), what it does by itself, and its own options.
pub struct Sub {
    pub name: &'static str,
    pub does: Option<Does>,
    pub options: &'static [Opt],
}

pub const fn sub(name: &'static str, does: Option<Does>, options: &'static [Opt]) -> Sub {
    Sub { name, does, options }
}

/// What cairn knows of one program.
pub struct Table {
    pub names: &'static [&'static str],
    /// What it does whatever its options (tar descends into the directories it archives).
    pub always: &'static [Does],
    /// Options before the subcommand that take the next word as their value.
    pub values: &'static [&'static str],
    /// Options before the subcommand (all of them for a program without subcommands).
    pub options: &'static [Opt],
    pub subcommands: &'static [Sub],
}

/// The table of a program.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|table| table.names.contains(&name))
}

/// Whether cairn knows what a program's options do: it has a table, or none of its options
/// runs, reads names from a file or reaches beyond the paths it names.
pub fn known(name: &str) -> bool {
    PLAIN.has(name) || table(name).is_some()
}

/// What a command's options and subcommand make it do, each with the word that says it
/// (`None`: the program by itself).
pub fn findings<'a>(name: &str, args: &[&'a str]) -> Vec<(Does, Option<&'a str>)> {
    let mut out = Vec::new();
    special(name, args, &mut out);
    let Some(table) = table(name) else { return out };
    out.extend(table.always.iter().map(|does| (*does, None)));
    let sub_at = if table.subcommands.is_empty() { None } else { subcommand(table, args) };
    let globals = sub_at.map_or(args, |at| &args[..at]);
    for (at, arg) in globals.iter().enumerate() {
        // tar(1): the first word may be a cluster of letters without its dash.
        let old_style = name == "tar" && at == 0 && !arg.starts_with('-');
        for option in table.options {
            if matches(option.spelling, arg, old_style) {
                out.push((option.does, Some(*arg)));
            }
        }
    }
    let every = table.subcommands.iter().find(|sub| sub.name == "*");
    for option in every.map_or(&[][..], |sub| sub.options) {
        out.extend(args.iter().filter(|arg| matches(option.spelling, arg, false)).map(|arg| (option.does, Some(*arg))));
    }
    let Some(at) = sub_at else { return out };
    let Some(sub) = table.subcommands.iter().find(|sub| sub.name == args[at]) else { return out };
    out.extend(sub.does.map(|does| (does, Some(args[at]))));
    for option in sub.options {
        let used = args[at + 1..].iter().filter(|arg| matches(option.spelling, arg, false));
        out.extend(used.map(|arg| (option.does, Some(*arg))));
    }
    out
}

/// The first word the table says `does`, if any.
pub fn first<'a>(name: &str, args: &[&'a str], does: Does) -> Option<Option<&'a str>> {
    findings(name, args).into_iter().find(|(found, _)| *found == does).map(|(_, word)| word)
}

/// Whether a program descends into the directories it names, and whether it then follows
/// links: `None` when it does not descend.
pub fn descent(name: &str, args: &[&str]) -> Option<bool> {
    let found = findings(name, args);
    let has = |does: Does| found.iter().any(|(found, _)| *found == does);
    (has(Does::Descends) || has(Does::Follows)).then(|| has(Does::Follows) && !has(Does::Stays))
}

/// The index of the subcommand: the first word that is neither an option nor the value of
/// one of `values`.
fn subcommand(table: &Table, args: &[&str]) -> Option<usize> {
    let mut at = 0;
    while let Some(arg) = args.get(at) {
        if !arg.starts_with('-') {
            return Some(at);
        }
        at += if table.values.contains(arg) { 2 } else { 1 };
    }
    None
}

/// Whether `arg` uses the option spelled `spelling`.
fn matches(spelling: &str, arg: &str, old_style: bool) -> bool {
    if let Some(long) = spelling.strip_prefix("--") {
        let Some(given) = arg.strip_prefix("--") else { return false };
        let given = given.split('=').next().unwrap_or(given);
        return !given.is_empty() && long.starts_with(given);
    }
    let Some(short) = spelling.strip_prefix('-') else { return arg == spelling };
    if short.chars().count() == 1 {
        let cluster = if old_style { Some(arg) } else { arg.strip_prefix('-').filter(|rest| !rest.starts_with('-')) };
        return cluster.is_some_and(|cluster| cluster.contains(short));
    }
    // A single-dash word (`-exec`), which Go also takes with two dashes and with `=value`.
    let word = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'));
    word.is_some_and(|word| word.split('=').next() == Some(short))
}

/// What the tables cannot say as options.
fn special<'a>(name: &str, args: &[&'a str], out: &mut Vec<(Does, Option<&'a str>)>) {
    match name {
        // make(1): `variable=value` arguments override the makefile's (`SHELL`, `CC`, …).
        "make" | "gmake" => {
            out.extend(args.iter().filter(|arg| shell::is_assignment(arg)).map(|arg| (Does::Runs, Some(*arg))));
        }
        // rsync(1) `host:path`, `host::module`, `rsync://`; tar(1) `-f host:file` unless
        // `--force-local`: reached through a remote shell (or the network).
        "rsync" => {
            let remote = args.iter().filter(|arg| !arg.starts_with('-') && (remote(arg) || arg.contains("://")));
            out.extend(remote.map(|arg| (Does::Runs, Some(*arg))));
        }
        "tar" if !args.iter().any(|arg| arg.starts_with("--force-l")) => {
            let value =
                |arg: &&'a str| if arg.starts_with("--") { arg.split_once('=').map(|(_, v)| v) } else { Some(*arg) };
            let remote = args.iter().filter(|arg| value(arg).is_some_and(|v| !v.starts_with('-') && remote(v)));
            out.extend(remote.map(|arg| (Does::Runs, Some(*arg))));
        }
        // rg(1) `-uu`: `--no-ignore --hidden`.
        "rg" => {
            let clusters = args.iter().filter(|arg| arg.starts_with('-') && !arg.starts_with("--"));
            if clusters.map(|arg| arg.matches('u').count()).sum::<usize>() >= 2 {
                out.push((Does::Descends, None));
            }
        }
        _ => {}
    }
}

/// `host:path`: a name before the first `:` with no `/` in it.
fn remote(text: &str) -> bool {
    text.split_once(':').is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'))
}

/// Whether grep or rg, given no directory or file, searches the working directory: each
/// takes its pattern as the first operand unless `-e` or `-f` gives it, and operands are what
/// is left once options and their values are skipped.
pub fn searches_cwd(name: &str, args: &[&str]) -> bool {
    let values: &[&str] = match name {
        // grep(1): options that take a separate value.
        "grep" | "egrep" | "fgrep" => &[
            "-e",
            "-f",
            "-m",
            "-A",
            "-B",
            "-C",
            "-d",
            "-D",
            "--regexp",
            "--file",
            "--max-count",
            "--after-context",
            "--before-context",
            "--context",
            "--directories",
            "--devices",
            "--include",
            "--exclude",
            "--exclude-dir",
            "--exclude-from",
            "--label",
            "--binary-files",
            "--group-separator",
        ],
        // rg(1): options that take a separate value.
        "rg" => &[
            "-e",
            "-f",
            "-g",
            "-t",
            "-T",
            "-m",
            "-A",
            "-B",
            "-C",
            "-j",
            "-M",
            "-E",
            "-d",
            "-r",
            "--regexp",
            "--file",
            "--glob",
            "--iglob",
            "--type",
            "--type-not",
            "--type-add",
            "--type-clear",
            "--max-count",
            "--after-context",
            "--before-context",
            "--context",
            "--threads",
            "--max-columns",
            "--encoding",
            "--max-depth",
            "--max-filesize",
            "--pre",
            "--pre-glob",
            "--sort",
            "--sortr",
            "--color",
            "--colors",
            "--context-separator",
            "--field-context-separator",
            "--field-match-separator",
            "--path-separator",
            "--replace",
            "--ignore-file",
            "--engine",
            "--dfa-size-limit",
            "--regex-size-limit",
        ],
        _ => return false,
    };
    let mut operands = 0usize;
    let mut pattern_given = false;
    let mut at = 0;
    while let Some(arg) = args.get(at) {
        at += 1;
        if *arg == "--" {
            operands += args.len() - at;
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let option = long.split('=').next().unwrap_or(long);
            pattern_given |= ["regexp", "file"].contains(&option);
            if values.iter().any(|v| v.strip_prefix("--") == Some(option)) && !long.contains('=') {
                at += 1;
            }
            continue;
        }
        if let Some(cluster) = arg.strip_prefix('-').filter(|c| !c.is_empty()) {
            // The first letter that takes a value ends the cluster: the rest is its value, or
            // the next word is.
            let takes = |c: char| values.iter().any(|v| v.len() == 2 && v.ends_with(c));
            if let Some((i, c)) = cluster.char_indices().find(|(_, c)| takes(*c)) {
                pattern_given |= c == 'e' || c == 'f';
                if i + c.len_utf8() == cluster.len() {
                    at += 1;
                }
            }
            continue;
        }
        operands += 1;
    }
    operands <= usize::from(!pattern_given)
}

//! Variables that change which program a name runs or what a program runs first (`PATH`,
//! `BASH_ENV`, `LD_PRELOAD`, `MAKEFILES`, `GIT_SSH_COMMAND`, …), and the builtins that set
//! them without `NAME=value`: `printf -v`, `read`, `mapfile`, `getopts`, `wait -p`, `let`,
//! `declare -n` (a name for another variable), `unset`.

use super::options::Names;
use crate::permissions::shell::{Word, WordKind};

/// Variables by name (each a shell's, the dynamic loader's, or a program's own documented
/// variable that names a program, a file of code, options or a search path).
static WHAT_RUNS: Names = Names::new(
    "PATH BASH_ENV ENV IFS LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT SHELLOPTS BASHOPTS GLOBIGNORE \
    CDPATH HOME ZDOTDIR XDG_CONFIG_HOME PROMPT_COMMAND PS0 PS1 PS2 PS4 BASH_LOADABLES_PATH EXECIGNORE FPATH \
    PAGER EDITOR VISUAL BROWSER MANPAGER LESSOPEN LESSCLOSE SHELL MAKEFILES MAKEFLAGS MFLAGS GNUMAKEFLAGS CC CXX \
    CPP LD AR AS FC TAR_OPTIONS ZIPOPT NODE_OPTIONS PYTHONSTARTUP PYTHONPATH PYTHONHOME PERL5OPT PERL5LIB RUBYOPT \
    RUBYLIB RUSTC RUSTDOC RUSTC_WRAPPER RUSTC_WORKSPACE_WRAPPER RUSTFLAGS SSH_ASKPASS SUDO_ASKPASS RSYNC_RSH \
    RSYNC_CONNECT_PROG RIPGREP_CONFIG_PATH WGETRC CURL_HOME",
);

/// Families by prefix: git's (`GIT_SSH_COMMAND`, `GIT_EXTERNAL_DIFF`, `GIT_CONFIG_*`), cargo's
/// (`CARGO_TARGET_*_RUNNER`), npm's configuration, the dynamic loader's.
const PREFIXES: [&str; 5] = ["GIT_", "CARGO_", "NPM_CONFIG_", "npm_config_", "LD_"];

/// Families by suffix: pagers, editors, askpass programs and option variables of many
/// programs (`GH_PAGER`, `SYSTEMD_EDITOR`, `JAVA_TOOL_OPTIONS`, `MAVEN_OPTS`).
const SUFFIXES: [&str; 5] = ["_PAGER", "_EDITOR", "_ASKPASS", "_OPTIONS", "_OPTS"];

/// Whether setting the variable `name` may change which program a name runs or what a
/// program runs.
pub fn runs_through(name: &str) -> bool {
    WHAT_RUNS.has(name)
        || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
        || SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
}

/// Whether an assignment (`NAME=…`, `NAME+=…`, `NAME[i]=…`) sets such a variable.
pub fn changes_what_runs(assignment: &str) -> bool {
    let Some((name, _)) = assignment.split_once('=') else { return false };
    let name = name.trim_end_matches('+');
    runs_through(name.split('[').next().unwrap_or(name))
}

/// Whether a builtin that sets variables may set one that changes what runs: any word of its
/// arguments names one (`printf -v PATH`, `read -r IFS`, `let PATH=1`, `unset PATH`), a word is
/// computed, or `declare -n` makes a name stand for another variable.
pub fn sets_what_runs(name: &str, args: &[Word]) -> bool {
    if !matches!(
        name,
        "printf"
            | "read"
            | "mapfile"
            | "readarray"
            | "getopts"
            | "wait"
            | "let"
            | "unset"
            | "export"
            | "declare"
            | "typeset"
            | "local"
            | "readonly"
    ) {
        return false;
    }
    // bash(1): `printf -v var` and `wait -p varname` only assign with their option.
    let assigns = match name {
        "printf" => args.iter().any(|w| w.text.starts_with("-v")),
        "wait" => args.iter().any(|w| w.text.starts_with('-') && w.text.contains('p')),
        _ => true,
    };
    let nameref = matches!(name, "declare" | "typeset" | "local")
        && args.iter().any(|w| w.text.starts_with('-') && !w.text.starts_with("--") && w.text.contains('n'));
    let names = |text: &str| {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|token| !token.is_empty() && runs_through(token))
    };
    // An option's value may be attached to any letter of a cluster (`-vPATH`, `-raIFS`).
    let attached = |text: &str| text.starts_with('-') && text.char_indices().skip(2).any(|(at, _)| names(&text[at..]));
    nameref
        || args
            .iter()
            .any(|word| word.kind != WordKind::Literal || (assigns && (names(&word.text) || attached(&word.text))))
}

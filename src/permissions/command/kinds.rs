//! Which commands may be remembered as "this program on files in this workspace" and which
//! only as their exact text: shells, wrappers and interpreters (`bash`, `env`, `xargs`, `sudo`,
//! `python`, `awk`, `sqlite3`, …) run whatever their arguments say; builtins that set
//! variables or options change what the rest of the line means; options in a program's table
//! ([`options`](super::options)) run others or take names from a file (`find -exec`, `git -c`,
//! `tar -T -`); network clients reach beyond; and a program cairn has no table for is only ever
//! remembered exactly. Also the words a program rule remembers (`cargo test`, `npm run build`).

use super::options::{self, Does, Names};
use super::{is_shell, program_name, wrapper_spec};
use crate::permissions::shell::Command;

/// Why a command can only be remembered as its exact text, if it can't be remembered as
/// "this program on files in this workspace".
pub fn exact_only(command: &Command) -> Option<String> {
    let Some(first) = command.words.first() else { return Some("it runs no program".into()) };
    if !command.assignments.is_empty() {
        return Some("it sets environment variables for the program".into());
    }
    let Some(name) = program_name(first) else { return Some("the program's name is computed when it runs".into()) };
    if first.text.contains('/') {
        return Some(format!("`{}` is run by its path, and what is there can change", first.text));
    }
    if is_shell(&name) || wrapper_spec(&name).is_some() || runs_code(&name) || OTHER_RUNNERS.has(&name) {
        return Some(format!("`{name}` runs whatever its arguments say"));
    }
    if let Some(why) = changes_state(command) {
        return Some(why);
    }
    let args: Vec<&str> = command.words[1..].iter().map(|w| w.text.as_str()).collect();
    let found = options::findings(&name, &args);
    let said = |does: Does| {
        found.iter().find(|(found, _)| *found == does).map(|(_, word)| match word {
            Some(word) => format!("`{name} {word}`"),
            None => format!("`{name}`"),
        })
    };
    if let Some(what) = said(Does::Runs) {
        return Some(format!("{what} runs other programs"));
    }
    if let Some(what) = said(Does::Reads) {
        return Some(format!("{what} takes names, options or code from a file or stdin, which cairn does not judge"));
    }
    if let Some(what) = said(Does::Beyond) {
        return Some(format!("{what} acts beyond the workspace's files"));
    }
    if NETWORK.has(&name) {
        return Some(format!("`{name}` reaches the network whatever its arguments look like"));
    }
    if !options::known(&name) {
        return Some(format!(
            "cairn has no table of what `{name}`'s options do, so only this exact line is remembered"
        ));
    }
    None
}

/// Builtins that change the shell's state for the commands after them (directory, variables,
/// options): they make the other commands of the line mean something else.
const STATEFUL_BUILTINS: [&str; 26] = [
    "cd",
    "pushd",
    "popd",
    "export",
    "unset",
    "set",
    "shopt",
    "alias",
    "unalias",
    "declare",
    "typeset",
    "local",
    "readonly",
    "trap",
    "enable",
    "hash",
    "source",
    ".",
    "umask",
    "ulimit",
    "exec",
    "read",
    "mapfile",
    "readarray",
    "getopts",
    "let",
];

/// Why a command changes the shell's state for the rest of the line: a builtin that sets
/// variables or options (`printf -v` and `wait -p` set a variable too), moves the working
/// directory or changes what a name runs.
pub fn changes_state(command: &Command) -> Option<String> {
    let name = command.words.first().and_then(program_name)?;
    let args = || command.words[1..].iter().map(|w| w.text.as_str());
    let sets = match name.as_str() {
        _ if STATEFUL_BUILTINS.contains(&name.as_str()) => true,
        // bash(1): `printf -v var`, `wait -p varname` assign to a variable.
        "printf" => args().take_while(|a| a.starts_with('-') && *a != "--").any(|a| a.starts_with("-v")),
        "wait" => args().any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains('p')),
        _ => false,
    };
    sets.then(|| format!("`{name}` changes how the rest of the command line runs"))
}

/// Programs that run code given in their arguments or files: language interpreters, stream
/// editors with commands that execute or write, database shells with shell escapes, remote
/// shells, debuggers, editors (each of vim's names: `view -c '!cmd'`) and multiplexers.
static INTERPRETERS: Names = Names::new(
    "python python2 python3 pypy pypy3 awk gawk mawk nawk sed gsed perl node nodejs deno \
    bun bunx npx pnpx uvx pipx ruby irb php lua luajit tclsh wish Rscript R julia osascript pwsh powershell java \
    jshell expect sqlite3 psql mysql mariadb redis-cli mongo mongosh cqlsh influx clickhouse-client dc m4 guile \
    racket ocaml ghci erl iex elixir scala groovy kotlin clojure swipl gnuplot octave nix-shell toybox ssh scp sftp \
    nc ncat socat telnet tmux screen vi vim nvim view rview rvim vimdiff gvim gview gvimdiff evim eview vimx emacs \
    emacsclient nano pico micro hx kak ed red ex dotnet-script gdb lldb",
);

/// Programs that act beyond the workspace's files or the session (other processes, the desktop,
/// containers, services, timers): only ever remembered exactly.
static OTHER_RUNNERS: Names =
    Names::new("less more man open xdg-open docker podman kubectl systemctl crontab at batch kill pkill killall watch");

/// Of those, the ones that may run other programs (a pager's `!`, a container, a timer).
static OTHER_RUNNERS_THAT_RUN: Names =
    Names::new("less more man open xdg-open docker podman kubectl systemctl crontab at batch");

/// Clients whose arguments name hosts even without a scheme (`curl evil.example`).
static NETWORK: Names = Names::new("curl wget");

/// Builtins and programs the reading of what runs handles by name (see `command::inner` and
/// `command::unseen`).
static HANDLED: Names = Names::new(
    "eval trap mapfile readarray watch su script flock source . alias enable bind fc complete \
    compgen hash parallel sem hyperfine printf read let getopts wait unset",
);

/// Whether a program, by name alone, may run programs that do not appear in the line.
pub fn runs_unseen(name: &str) -> bool {
    runs_code(name) || OTHER_RUNNERS_THAT_RUN.has(name)
}

/// Whether cairn knows what a program runs: a shell, a wrapper, an interpreter, a program with
/// a table, a builtin. Any other program may run what it is given.
pub fn known(name: &str) -> bool {
    options::known(name)
        || is_shell(name)
        || wrapper_spec(name).is_some()
        || runs_code(name)
        || OTHER_RUNNERS.has(name)
        || HANDLED.has(name)
        || STATEFUL_BUILTINS.contains(&name)
}

/// Whether a program runs code given in its arguments or files (`python3.12` too).
pub fn runs_code(name: &str) -> bool {
    INTERPRETERS.has(name)
        || ["python", "pypy", "ruby", "perl", "php", "lua", "node"].iter().any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
}

/// An option or subcommand with which an ordinary program runs other programs (the word that
/// says it; the program's name when it always does): a rejection cannot see those, and a rule
/// covers only the exact line.
pub fn runs_others<'a>(name: &'a str, args: &[&'a str]) -> Option<&'a str> {
    options::first(name, args, Does::Runs).map(|word| word.unwrap_or(name))
}

/// The words a program rule for `command` remembers: the program, and its subcommand for
/// programs that have them (`git status`, `cargo test`, `npm run build`). `None` when such a
/// program's subcommand is not where it can be told (`git --no-pager log`, `cargo +nightly
/// test`): remembering the whole program would cover every subcommand, so only the exact line
/// is remembered.
pub fn rule_words(command: &Command) -> Option<Vec<String>> {
    let words: Vec<&str> = command.words.iter().map(|w| w.text.as_str()).collect();
    let name = command.words.first().and_then(program_name)?;
    let plain = |w: &&str| {
        !w.is_empty() && !w.starts_with('-') && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_:.".contains(c))
    };
    let mut out = vec![name.clone()];
    if HAS_SUBCOMMANDS.has(&name) {
        let sub = words.get(1).copied().filter(plain)?;
        out.push(sub.to_owned());
        // `gh repo view` is not `gh repo delete`: remember the second level too.
        if NESTED_SUBCOMMANDS.has(&name) {
            out.push(words.get(2).copied().filter(plain)?.to_owned());
        }
        if ["npm", "pnpm", "yarn"].contains(&name.as_str())
            && ["run", "run-script"].contains(&sub)
            && let Some(script) = words.get(2).copied().filter(plain)
        {
            out.push(script.to_owned());
        }
    }
    Some(out)
}

static HAS_SUBCOMMANDS: Names = Names::new(
    "git cargo go npm pnpm yarn pip pip3 uv poetry pdm hatch rye make gmake gh glab rustup \
    composer brew apt apt-get conda mamba nix gem bundle pipenv ruff",
);

/// Command-line clients whose subcommands have subcommands of their own.
static NESTED_SUBCOMMANDS: Names = Names::new("gh glab");

//! Which commands may be remembered as "this program on files in this workspace" and which
//! only as their exact text: shells, wrappers and interpreters (`bash`, `env`, `xargs`, `sudo`,
//! `python`, `awk`, `sqlite3`, …) run whatever their arguments say, and a few options turn
//! ordinary tools into such runners (`find -exec`, `git -c`, `git grep -O`, `tar
//! --to-command`). Also the words a program rule remembers (`cargo test`, `npm run build`).

use super::{is_shell, program_name, wrapper_spec};
use crate::permissions::shell::{self, Command};

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
    if is_shell(&name) || wrapper_spec(&name).is_some() || runs_code(&name) || listed(OTHER_RUNNERS, &name) {
        return Some(format!("`{name}` runs whatever its arguments say"));
    }
    if STATEFUL_BUILTINS.contains(&name.as_str()) {
        return Some(format!("`{name}` changes how the rest of the command line runs"));
    }
    let args: Vec<&str> = command.words[1..].iter().map(|w| w.text.as_str()).collect();
    if let Some(flag) = runs_others(&name, &args) {
        return Some(format!("`{name} {flag}` runs other programs"));
    }
    if let Some(what) = beyond_the_workspace(&name, &args) {
        return Some(format!("`{name} {what}` acts beyond the workspace's files"));
    }
    None
}

/// Builtins that change the shell's state for the commands after them (directory, variables,
/// options): they make the other commands of the line mean something else.
pub const STATEFUL_BUILTINS: [&str; 21] = [
    "cd", "pushd", "popd", "export", "unset", "set", "shopt", "alias", "unalias", "declare", "typeset", "local",
    "readonly", "trap", "enable", "hash", "source", ".", "umask", "ulimit", "exec",
];

/// Programs that run code given in their arguments or files: language interpreters, stream
/// editors with commands that execute or write, database shells with shell escapes, remote
/// shells, editors and multiplexers.
const INTERPRETERS: &str = "python python2 python3 pypy pypy3 awk gawk mawk nawk sed gsed perl node nodejs deno \
    bun bunx npx pnpx uvx pipx ruby irb php lua luajit tclsh wish Rscript R julia osascript pwsh powershell java \
    jshell expect sqlite3 psql mysql mariadb redis-cli mongo mongosh cqlsh influx clickhouse-client dc m4 guile \
    racket ocaml ghci erl iex elixir scala groovy kotlin clojure swipl gnuplot octave nix-shell toybox ssh scp sftp \
    nc ncat socat telnet tmux screen vi vim nvim emacs ed ex dotnet-script";

/// Programs that act beyond the workspace's files or the session (other processes, the desktop,
/// containers, services, timers): only ever remembered exactly.
const OTHER_RUNNERS: &str =
    "less more man open xdg-open docker podman kubectl systemctl crontab at batch kill pkill killall watch";

/// Of those, the ones that may run other programs (a pager's `!`, a container, a timer).
const OTHER_RUNNERS_THAT_RUN: &str = "less more man open xdg-open docker podman kubectl systemctl crontab at batch";

/// Whether a program, by name alone, may run programs that do not appear in the line.
pub fn runs_unseen(name: &str) -> bool {
    runs_code(name) || listed(OTHER_RUNNERS_THAT_RUN, name)
}

fn listed(list: &str, name: &str) -> bool {
    list.split_whitespace().any(|n| n == name)
}

/// Whether a program runs code given in its arguments or files (`python3.12` too).
pub fn runs_code(name: &str) -> bool {
    listed(INTERPRETERS, name)
        || ["python", "pypy", "ruby", "perl", "php", "lua", "node"].iter().any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        })
}

/// Whether an argument is one of `flags`, alone or with `=value`; a short one (`-x`) also with
/// its value attached (`-xcmd`).
fn flag<'a>(args: &[&'a str], flags: &str) -> Option<&'a str> {
    args.iter().copied().find(|arg| {
        flags.split_whitespace().any(|f| {
            let short = f.len() == 2 && !f.starts_with("--");
            arg.strip_prefix(f).is_some_and(|rest| rest.is_empty() || rest.starts_with('=') || short)
        })
    })
}

/// An option or subcommand with which an ordinary program runs other programs: a rejection
/// cannot see those, and a rule covers only the exact line.
pub fn runs_others<'a>(name: &str, args: &[&'a str]) -> Option<&'a str> {
    let first = args.first().copied();
    let sub = args.iter().copied().find(|a| !a.starts_with('-'));
    match name {
        "find" => flag(args, "-exec -execdir -ok -okdir"),
        "fd" | "fdfind" => flag(args, "-x -X --exec --exec-batch"),
        "rg" => flag(args, "--pre"),
        "gcc" | "g++" | "cc" | "c++" | "clang" | "clang++" => flag(args, "-wrapper"),
        "git" => flag(
            args,
            "-c --config-env --exec-path --upload-pack --receive-pack --template --exec -x --extcmd --tool \
             --open-files-in-pager -O",
        )
        .or_else(|| {
            sub.filter(|s| {
                listed("config submodule bisect filter-branch filter-repo difftool mergetool daemon instaweb hook", s)
            })
        })
        .or_else(|| sub.filter(|s| listed("clone fetch pull ls-remote archive", s)).and_then(|_| flag(args, "-u"))),
        "tar" => flag(
            args,
            "--to-command -I --use-compress-program --checkpoint-action -F --info-script --new-volume-script \
             --rsh-command",
        ),
        "rsync" => flag(args, "-e --rsh --rsync-path"),
        "make" | "gmake" => flag(args, "-f --file --makefile -E --eval -C --directory")
            .or_else(|| args.iter().copied().find(|a| shell::is_assignment(a))),
        "sort" => flag(args, "--compress-program"),
        "zip" => flag(args, "-T -TT --unzip-command"),
        "cargo" => flag(args, "--config -Z"),
        "npm" | "pnpm" | "yarn" => first.filter(|s| listed("exec x dlx", s)),
        "uv" | "poetry" | "pdm" | "hatch" | "rye" | "pipenv" | "conda" | "mamba" | "bundle" | "nix" | "direnv"
        | "gem" => first.filter(|s| listed("run exec tool shell develop", s)),
        _ => None,
    }
}

/// An option or subcommand with which an ordinary program reaches beyond the workspace's files:
/// installs from the network (whose scripts run), global installs, pushes, git's own state.
fn beyond_the_workspace<'a>(name: &str, args: &[&'a str]) -> Option<&'a str> {
    let first = args.first().copied();
    match name {
        "find" => flag(args, "-delete -fprint -fprint0 -fprintf -fls"),
        "git" => args
            .iter()
            .copied()
            .find(|a| !a.starts_with('-'))
            .filter(|s| listed("push send-email credential alias stash branch remote tag worktree notes reflog", s)),
        "cargo" => first.filter(|s| listed("install uninstall publish", s)),
        "npm" | "pnpm" | "yarn" => flag(args, "-g --global --prefix")
            .or_else(|| first.filter(|s| listed("install i add ci create init link publish", s))),
        "composer" => first.filter(|s| listed("install require update create-project", s)),
        "pip" | "pip3" | "uv" | "poetry" | "pdm" | "hatch" | "rye" | "conda" | "mamba" | "gem" | "go" | "brew"
        | "apt" | "apt-get" | "dnf" | "yum" | "pacman" | "nix" | "bundle" | "pipenv" | "rustup" => {
            first.filter(|s| listed("install add upgrade update pip publish", s))
        }
        _ => None,
    }
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
    if listed(HAS_SUBCOMMANDS, &name) {
        let sub = words.get(1).copied().filter(plain)?;
        out.push(sub.to_owned());
        // `gh repo view` is not `gh repo delete`: remember the second level too.
        if listed(NESTED_SUBCOMMANDS, &name) {
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

const HAS_SUBCOMMANDS: &str = "git cargo go npm pnpm yarn pip pip3 uv poetry pdm hatch rye just make gmake gh rustup \
    dotnet mvn gradle gradlew terraform helm rake mix cabal stack zig flutter dart composer brew apt apt-get conda nix \
    bazel swift tox nox task glab hub aws gcloud az doctl heroku fly flyctl vercel netlify";

/// Command-line clients whose subcommands have subcommands of their own.
const NESTED_SUBCOMMANDS: &str = "gh glab hub aws gcloud az doctl heroku fly flyctl vercel netlify";

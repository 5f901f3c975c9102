//! One table per program cairn takes program rules for, from the program's own manual page:
//! the options and subcommands with which it runs another program, takes names, options or
//! code from a file or stdin, acts beyond the workspace's files, changes the tree a later
//! command walks (extracting, linking, moving, checking out), or descends into directories.
//! Each entry cites the option as its manual documents it. Long options match any prefix
//! GNU getopt (and git, curl) would take as an abbreviation; short ones anywhere in a cluster.
//!
//! Programs without such options are listed in [`PLAIN`]; every other program is one cairn
//! does not know, and takes exact rules only.

use super::options::Does::{Beyond, Descends, Follows, Moves, Reads, Runs, Stays};
use super::options::{Names, Opt, Sub, Table, opt, sub};

/// Programs whose documented options only name the paths they read or write: a program rule
/// covers them while those paths stay in the workspace.
pub static PLAIN: Names = Names::new(
    "cat tac nl head tail cut paste join uniq comm tr fold fmt pr expand unexpand od column \
    rev look base32 base64 basenc xxd hexdump strings ls dir vdir stat touch mkdir rmdir rm truncate shred dd tee \
    echo printf yes seq sleep true false : pwd basename dirname realpath readlink mktemp date uname nproc whoami id \
    groups logname printenv numfmt shuf csplit tsort factor expr test [ link unlink which whereis type cmp jq df \
    free uptime ps bzip2 bunzip2 bzcat pytest black ruff tsc eslint prettier rustfmt gofmt wait jobs help times dirs",
);

/// Every table, looked up by program name.
pub const TABLES: &[Table] = &[
    Table { names: &["git"], always: &[], values: GIT_VALUES, options: GIT, subcommands: GIT_SUBCOMMANDS },
    Table { names: &["cargo"], always: &[], values: &[], options: &[], subcommands: CARGO },
    Table { names: &["go"], always: &[], values: &[], options: &[], subcommands: GO },
    Table { names: &["npm", "pnpm", "yarn"], always: &[], values: &[], options: &[], subcommands: NPM },
    Table { names: &["make", "gmake"], always: &[], values: &[], options: MAKE, subcommands: &[] },
    Table { names: &["tar"], always: &[Descends], values: &[], options: TAR, subcommands: &[] },
    Table { names: &["zip"], always: &[], values: &[], options: ZIP, subcommands: &[] },
    Table { names: &["unzip"], always: &[Moves], values: &[], options: UNZIP, subcommands: &[] },
    Table { names: &["gzip", "gunzip", "zcat"], always: &[], values: &[], options: GZIP, subcommands: &[] },
    Table { names: &["xz", "unxz", "xzcat"], always: &[], values: &[], options: XZ, subcommands: &[] },
    Table { names: &["zstd", "unzstd", "zstdcat"], always: &[], values: &[], options: ZSTD, subcommands: &[] },
    Table { names: &["rsync"], always: &[Moves], values: &[], options: RSYNC, subcommands: &[] },
    Table { names: &["cp"], always: &[], values: &[], options: CP, subcommands: &[] },
    Table { names: &["mv", "ln"], always: &[Moves], values: &[], options: &[], subcommands: &[] },
    Table { names: &["install"], always: &[Moves], values: &[], options: INSTALL, subcommands: &[] },
    Table { names: &["chmod", "chown", "chgrp"], always: &[], values: &[], options: CHMOD, subcommands: &[] },
    Table { names: &["grep", "egrep", "fgrep"], always: &[], values: &[], options: GREP, subcommands: &[] },
    Table { names: &["rg"], always: &[], values: &[], options: RG, subcommands: &[] },
    Table { names: &["fd", "fdfind"], always: &[], values: &[], options: FD, subcommands: &[] },
    Table { names: &["find"], always: &[], values: &[], options: FIND, subcommands: &[] },
    Table { names: &["diff"], always: &[], values: &[], options: DIFF, subcommands: &[] },
    Table { names: &["diff3", "sdiff"], always: &[], values: &[], options: DIFF3, subcommands: &[] },
    Table { names: &["sort"], always: &[], values: &[], options: SORT, subcommands: &[] },
    Table { names: &["split"], always: &[], values: &[], options: SPLIT, subcommands: &[] },
    Table { names: &["wc", "du"], always: &[], values: &[], options: FILES0, subcommands: &[] },
    Table { names: &["file"], always: &[], values: &[], options: FILE, subcommands: &[] },
    Table { names: &["tree"], always: &[], values: &[], options: TREE, subcommands: &[] },
    Table { names: CHECKSUMS, always: &[], values: &[], options: CHECK, subcommands: &[] },
    Table { names: &["mypy"], always: &[], values: &[], options: MYPY, subcommands: &[] },
    Table { names: &["curl"], always: &[], values: &[], options: CURL, subcommands: &[] },
    Table { names: &["wget"], always: &[], values: &[], options: WGET, subcommands: &[] },
    Table { names: &["rustup"], always: &[], values: &[], options: &[], subcommands: RUSTUP },
    Table { names: &["pip", "pip3"], always: &[], values: &[], options: &[], subcommands: PIP },
    Table { names: PYTHON_PROJECTS, always: &[], values: &[], options: &[], subcommands: PYTHON_PROJECT },
    Table { names: &["gem", "bundle"], always: &[], values: &[], options: &[], subcommands: RUBY },
    Table { names: &["composer"], always: &[], values: &[], options: &[], subcommands: COMPOSER },
    Table { names: SYSTEM_PACKAGES, always: &[], values: &[], options: &[], subcommands: SYSTEM },
    Table { names: &["gh", "glab"], always: &[], values: &[], options: &[], subcommands: GH },
];

// --- git(1) and its subcommands' pages (git-clone(1), git-rebase(1), …) -----------------------

/// Global options that take their value as the next word.
const GIT_VALUES: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"];

const GIT: &[Opt] = &[
    // git(1) `-c <name>=<value>`: any configuration; core.pager, core.sshCommand,
    // core.fsmonitor and `alias.x=!cmd` run commands.
    opt("-c", Runs),
    // git(1) `--config-env=<name>=<envvar>`: the same, its value from the environment.
    opt("--config-env", Runs),
    // git(1) `--exec-path[=<path>]`: where git finds the programs of its subcommands.
    opt("--exec-path", Runs),
];

/// Options `git clone`, `fetch`, `pull` and `ls-remote` share.
const GIT_REMOTE: &[Opt] = &[
    // git-fetch(1), git-clone(1), git-ls-remote(1) `--upload-pack <upload-pack>`, `-u`: the
    // program run on the other side, which for a local path is run here.
    opt("--upload-pack", Runs),
    opt("-u", Runs),
];

const GIT_CLONE: &[Opt] = &[
    opt("--upload-pack", Runs),
    opt("-u", Runs),
    // git-clone(1) `--config <key>=<value>`, `-c`: configuration of the new repository
    // (core.fsmonitor runs at its first status).
    opt("--config", Runs),
    opt("-c", Runs),
    // git-clone(1) `--template=<dir>`: hooks copied from <dir> run at the checkout.
    opt("--template", Runs),
];

const GIT_DIFFS: &[Opt] = &[
    // git-diff(1), git-log(1) `--ext-diff`: runs the external diff helper configured.
    opt("--ext-diff", Runs),
    // git-diff(1), git-log(1) `--textconv`: runs the text conversion filters configured.
    opt("--textconv", Runs),
];

const GIT_PATHSPEC_FILE: &[Opt] = &[
    // git-add(1) (and rm, reset, restore, checkout, commit, stash) `--pathspec-from-file=<file>`:
    // the paths are in <file>, `-` for stdin.
    opt("--pathspec-from-file", Reads),
];

const GIT_SUBCOMMANDS: &[Sub] = &[
    sub("clone", Some(Moves), GIT_CLONE),
    sub("fetch", None, GIT_REMOTE),
    sub("pull", Some(Moves), GIT_REMOTE),
    sub("ls-remote", None, GIT_REMOTE),
    // git-archive(1) `--exec=<git-upload-archive>`: the program run for `--remote`.
    sub("archive", None, &[opt("--exec", Runs)]),
    // git-push(1) `--receive-pack=<git-receive-pack>`, `--exec`: the program run on the other
    // side; and pushing reaches beyond the workspace.
    sub("push", Some(Beyond), &[opt("--receive-pack", Runs), opt("--exec", Runs)]),
    sub("send-pack", Some(Beyond), &[opt("--receive-pack", Runs), opt("--exec", Runs)]),
    // git-rebase(1) `--exec <cmd>`, `-x <cmd>`: runs <cmd> after each commit.
    sub("rebase", Some(Moves), &[opt("--exec", Runs), opt("-x", Runs)]),
    // git-bisect(1) `run <cmd>`, git-submodule(1) `foreach <command>`, git-filter-branch(1)
    // filters, git-difftool(1)/git-mergetool(1) tools, git-daemon(1), git-instaweb(1)
    // `--httpd`, git-hook(1) `run`: each runs a program or shell command it is given.
    sub("bisect", Some(Runs), &[]),
    sub("submodule", Some(Runs), &[]),
    sub("filter-branch", Some(Runs), &[]),
    sub("filter-repo", Some(Runs), &[]),
    sub("difftool", Some(Runs), &[]),
    sub("mergetool", Some(Runs), &[]),
    sub("daemon", Some(Runs), &[]),
    sub("instaweb", Some(Runs), &[]),
    sub("hook", Some(Runs), &[]),
    // git-config(1): sets configuration that later git commands run (core.pager, alias.*).
    sub("config", Some(Runs), &[]),
    // git-grep(1) `-O[<pager>]`, `--open-files-in-pager[=<pager>]`: runs <pager> on the files.
    sub("grep", None, &[opt("-O", Runs), opt("--open-files-in-pager", Runs)]),
    sub("diff", None, GIT_DIFFS),
    sub("log", None, GIT_DIFFS),
    sub("show", None, GIT_DIFFS),
    sub("format-patch", None, GIT_DIFFS),
    // git-hash-object(1) `--stdin-paths`: hashes (and with -w stores) the files named on stdin.
    sub("hash-object", None, &[opt("--stdin-paths", Reads)]),
    // git-update-index(1) `--stdin`, `--index-info`; git-checkout-index(1) `--stdin`: paths
    // read from stdin.
    sub("update-index", None, &[opt("--stdin", Reads), opt("--index-info", Reads)]),
    sub("checkout-index", Some(Moves), &[opt("--stdin", Reads)]),
    sub("add", None, GIT_PATHSPEC_FILE),
    sub("rm", None, GIT_PATHSPEC_FILE),
    sub("commit", None, GIT_PATHSPEC_FILE),
    // Checking out, merging and applying write what commits and patches hold: links too.
    sub("checkout", Some(Moves), GIT_PATHSPEC_FILE),
    sub("switch", Some(Moves), &[]),
    sub("restore", Some(Moves), GIT_PATHSPEC_FILE),
    sub("reset", Some(Moves), GIT_PATHSPEC_FILE),
    sub("merge", Some(Moves), &[]),
    sub("cherry-pick", Some(Moves), &[]),
    sub("revert", Some(Moves), &[]),
    sub("am", Some(Moves), &[]),
    sub("read-tree", Some(Moves), &[]),
    // git-apply(1) `--unsafe-paths`: lets a patch write outside the working tree.
    sub("apply", Some(Moves), &[opt("--unsafe-paths", Beyond)]),
    // git-send-email(1) `--smtp-server=/path/to/sendmail`, `--sendmail-cmd`, `--to-cmd`,
    // `--cc-cmd`: run programs; and it sends mail.
    sub("send-email", Some(Beyond), &[opt("--smtp-server", Runs), opt("--sendmail-cmd", Runs)]),
    // State beyond the files: credentials, remotes, refs and stashes other commands rely on.
    sub("stash", Some(Beyond), &[]),
    sub("credential", Some(Beyond), &[]),
    sub("alias", Some(Beyond), &[]),
    sub("branch", Some(Beyond), &[]),
    sub("remote", Some(Beyond), &[]),
    sub("tag", Some(Beyond), &[]),
    sub("worktree", Some(Beyond), &[]),
    sub("notes", Some(Beyond), &[]),
    sub("reflog", Some(Beyond), &[]),
];

// --- Build tools and package managers ----------------------------------------------------------

/// cargo(1): `*` is every subcommand.
const CARGO: &[Sub] = &[
    // cargo(1) `--config KEY=VALUE|PATH`: any configuration (build.rustc-wrapper,
    // target.<triple>.runner run programs); `-Z FLAG`: unstable flags, host configuration too.
    sub("*", None, &[opt("--config", Runs), opt("-Z", Runs)]),
    // cargo-install(1), cargo-uninstall(1), cargo-publish(1), cargo-login(1),
    // cargo-owner(1), cargo-yank(1): beyond the workspace.
    sub("install", Some(Beyond), &[]),
    sub("uninstall", Some(Beyond), &[]),
    sub("publish", Some(Beyond), &[]),
    sub("login", Some(Beyond), &[]),
    sub("owner", Some(Beyond), &[]),
    sub("yank", Some(Beyond), &[]),
];

const GO: &[Sub] = &[
    // `go help build`: `-toolexec 'cmd args'` runs the toolchain through cmd; `go help test`,
    // `go help run`: `-exec xprog` runs the binaries with xprog; `go help vet`: `-vettool=prog`.
    sub("*", None, &[opt("-exec", Runs), opt("-toolexec", Runs), opt("-vettool", Runs)]),
    // `go help install`, `go help get`: installs; `go help env`: `-w` and `-u` change the
    // user's go environment file (GOFLAGS included).
    sub("install", Some(Beyond), &[]),
    sub("get", Some(Beyond), &[]),
    sub("env", None, &[opt("-w", Beyond), opt("-u", Beyond)]),
];

/// npm(1) and its config page; pnpm and yarn take the same commands and configuration.
const NPM: &[Sub] = &[
    // npm config `script-shell`, `shell`, `node-options`, `editor`, `browser`, `git`: programs
    // npm runs; `userconfig`, `globalconfig`: configuration read from a file. `-g`, `--global`,
    // `--prefix`: installs outside the project.
    sub(
        "*",
        None,
        &[
            opt("--script-shell", Runs),
            opt("--shell", Runs),
            opt("--node-options", Runs),
            opt("--editor", Runs),
            opt("--browser", Runs),
            opt("--git", Runs),
            opt("--userconfig", Reads),
            opt("--globalconfig", Reads),
            opt("-g", Beyond),
            opt("--global", Beyond),
            opt("--prefix", Beyond),
        ],
    ),
    // npm-exec(1) (`x`), pnpm dlx, yarn dlx, npm-explore(1), npm-edit(1): run a program,
    // a package or a shell.
    sub("exec", Some(Runs), &[]),
    sub("x", Some(Runs), &[]),
    sub("dlx", Some(Runs), &[]),
    sub("explore", Some(Runs), &[]),
    sub("edit", Some(Runs), &[]),
    // npm-install(1) and friends fetch packages whose install scripts run; npm-config(1)
    // writes the user's configuration; npm-publish(1), npm-link(1): beyond the project.
    sub("install", Some(Beyond), &[]),
    sub("i", Some(Beyond), &[]),
    sub("add", Some(Beyond), &[]),
    sub("ci", Some(Beyond), &[]),
    sub("create", Some(Beyond), &[]),
    sub("init", Some(Beyond), &[]),
    sub("link", Some(Beyond), &[]),
    sub("publish", Some(Beyond), &[]),
    sub("config", Some(Beyond), &[]),
];

/// make(1). Assignments given as arguments (`SHELL=…`, `CC=…`) also run programs: see
/// `options::special`.
const MAKE: &[Opt] = &[
    // make(1) `-f file`, `--file`, `--makefile`: the makefile (code; `-` is stdin).
    opt("-f", Runs),
    opt("--file", Runs),
    opt("--makefile", Runs),
    // make(1) `-E string`, `--eval=string`: evaluates string as makefile text.
    opt("-E", Runs),
    opt("--eval", Runs),
    // make(1) `-C dir`, `--directory`: another directory's makefile.
    opt("-C", Runs),
    opt("--directory", Runs),
];

const RUSTUP: &[Sub] = &[
    // rustup(1) `run <toolchain> <command>`: runs a command.
    sub("run", Some(Runs), &[]),
    // Toolchains, components, defaults and overrides change the user's installation.
    sub("install", Some(Beyond), &[]),
    sub("update", Some(Beyond), &[]),
    sub("upgrade", Some(Beyond), &[]),
    sub("self", Some(Beyond), &[]),
    sub("toolchain", Some(Beyond), &[]),
    sub("component", Some(Beyond), &[]),
    sub("target", Some(Beyond), &[]),
    sub("default", Some(Beyond), &[]),
    sub("override", Some(Beyond), &[]),
];

const PIP: &[Sub] = &[
    // pip install/download/wheel build packages whose setup code runs; uninstall changes the
    // environment.
    sub("install", Some(Beyond), &[]),
    sub("download", Some(Beyond), &[]),
    sub("wheel", Some(Beyond), &[]),
    sub("uninstall", Some(Beyond), &[]),
];

const PYTHON_PROJECTS: &[&str] = &["uv", "poetry", "pdm", "hatch", "rye", "pipenv", "conda", "mamba", "nix"];

/// uv, poetry, pdm, hatch, rye, pipenv, conda, mamba, nix: `run`, `exec`, `tool`, `shell`,
/// `develop` run programs; installing, adding, syncing and publishing reach beyond.
const PYTHON_PROJECT: &[Sub] = &[
    sub("run", Some(Runs), &[]),
    sub("exec", Some(Runs), &[]),
    sub("tool", Some(Runs), &[]),
    sub("shell", Some(Runs), &[]),
    sub("develop", Some(Runs), &[]),
    sub("install", Some(Beyond), &[]),
    sub("add", Some(Beyond), &[]),
    sub("sync", Some(Beyond), &[]),
    sub("upgrade", Some(Beyond), &[]),
    sub("update", Some(Beyond), &[]),
    sub("pip", Some(Beyond), &[]),
    sub("publish", Some(Beyond), &[]),
];

/// gem(1), bundle(1): `exec` runs a program; installs reach beyond.
const RUBY: &[Sub] = &[
    sub("exec", Some(Runs), &[]),
    sub("install", Some(Beyond), &[]),
    sub("add", Some(Beyond), &[]),
    sub("update", Some(Beyond), &[]),
];

/// composer: installs run package scripts and plugins.
const COMPOSER: &[Sub] = &[
    sub("install", Some(Beyond), &[]),
    sub("require", Some(Beyond), &[]),
    sub("update", Some(Beyond), &[]),
    sub("create-project", Some(Beyond), &[]),
    sub("exec", Some(Runs), &[]),
    sub("run-script", Some(Runs), &[]),
];

const SYSTEM_PACKAGES: &[&str] = &["brew", "apt", "apt-get", "dnf", "yum", "pacman"];

/// System package managers: anything that changes what is installed reaches beyond.
const SYSTEM: &[Sub] = &[
    sub("install", Some(Beyond), &[]),
    sub("add", Some(Beyond), &[]),
    sub("upgrade", Some(Beyond), &[]),
    sub("update", Some(Beyond), &[]),
    sub("remove", Some(Beyond), &[]),
    sub("uninstall", Some(Beyond), &[]),
    sub("purge", Some(Beyond), &[]),
    sub("autoremove", Some(Beyond), &[]),
    sub("reinstall", Some(Beyond), &[]),
];

/// gh(1), glab: `alias set --shell` defines shell aliases, `extension` installs and runs
/// extensions, `config set` sets the editor, pager and browser they run, `codespace ssh`
/// opens a remote shell.
const GH: &[Sub] = &[
    sub("alias", Some(Runs), &[]),
    sub("extension", Some(Runs), &[]),
    sub("ext", Some(Runs), &[]),
    sub("config", Some(Runs), &[]),
    sub("codespace", Some(Runs), &[]),
    sub("cs", Some(Runs), &[]),
];

// --- Archives and copies -----------------------------------------------------------------------

/// GNU tar(1). A remote archive (`-f host:file`) runs a remote shell: see `options::special`.
const TAR: &[Opt] = &[
    // `--to-command=COMMAND`: pipes each extracted file to COMMAND.
    opt("--to-command", Runs),
    // `-I`, `--use-compress-program=COMMAND`: filters the archive through COMMAND.
    opt("-I", Runs),
    opt("--use-compress-program", Runs),
    // `--checkpoint-action=exec=COMMAND`: runs COMMAND at each checkpoint.
    opt("--checkpoint-action", Runs),
    // `-F`, `--info-script=COMMAND`, `--new-volume-script`: runs COMMAND at each volume's end.
    opt("-F", Runs),
    opt("--info-script", Runs),
    opt("--new-volume-script", Runs),
    // `--rsh-command=COMMAND`, `--rmt-command=COMMAND`: the remote shell and remote tape server.
    opt("--rsh-command", Runs),
    opt("--rmt-command", Runs),
    // `-T`, `--files-from=FILE`: the names to archive are in FILE (`-` is stdin).
    opt("-T", Reads),
    opt("--files-from", Reads),
    // `-P`, `--absolute-names`: keeps leading `/` and `..` when extracting.
    opt("-P", Beyond),
    opt("--absolute-names", Beyond),
    // `-h`, `--dereference`: archives the files links point to.
    opt("-h", Follows),
    opt("--dereference", Follows),
    // `-x`, `--extract`, `--get`: writes what the archive holds, links too.
    opt("-x", Moves),
    opt("--extract", Moves),
    opt("--get", Moves),
];

/// zip(1): it follows links while recursing unless `-y` stores them.
const ZIP: &[Opt] = &[
    // `-TT cmd`, `--unzip-command cmd`: the command `-T` runs to test the archive.
    opt("-T", Runs),
    opt("--unzip-command", Runs),
    // `-@`, `--names-stdin`: the names to add are read from stdin.
    opt("-@", Reads),
    opt("--names-stdin", Reads),
    // `-r`, `--recurse-paths`; `-R`, `--recurse-patterns`.
    opt("-r", Follows),
    opt("--recurse-paths", Follows),
    opt("-R", Follows),
    opt("--recurse-patterns", Follows),
    // `-y`, `--symlinks`: stores links as links.
    opt("-y", Stays),
    opt("--symlinks", Stays),
];

/// unzip(1): `-:` keeps `../` in member names, writing outside the target directory.
const UNZIP: &[Opt] = &[opt("-:", Beyond)];

/// gzip(1) `-r`, `--recursive`: compresses every file below the directories given.
const GZIP: &[Opt] = &[opt("-r", Descends), opt("--recursive", Descends)];

/// xz(1) `--files[=file]`, `--files0[=file]`: the names to compress are read from file.
const XZ: &[Opt] = &[opt("--files", Reads), opt("--files0", Reads)];

/// zstd(1) `--filelist FILE`: the names are read from FILE; `-r`: recurses into directories.
const ZSTD: &[Opt] = &[opt("--filelist", Reads), opt("-r", Descends)];

/// rsync(1). A `host:path` argument runs a remote shell: see `options::special`.
const RSYNC: &[Opt] = &[
    // `-e`, `--rsh=COMMAND`: the remote shell; `--rsync-path=PROGRAM`: the program run there.
    opt("-e", Runs),
    opt("--rsh", Runs),
    opt("--rsync-path", Runs),
    // `--files-from=FILE`: the names to copy are in FILE (`-` is stdin).
    opt("--files-from", Reads),
    // `-r`, `--recursive`, `-a`, `--archive`.
    opt("-r", Descends),
    opt("--recursive", Descends),
    opt("-a", Descends),
    opt("--archive", Descends),
    // `-L`, `--copy-links`; `-k`, `--copy-dirlinks`; `--copy-unsafe-links`: copies what links
    // point to.
    opt("-L", Follows),
    opt("--copy-links", Follows),
    opt("-k", Follows),
    opt("--copy-dirlinks", Follows),
    opt("--copy-unsafe-links", Follows),
    // `--daemon`: serves files to the network.
    opt("--daemon", Beyond),
];

/// cp(1). Copying a file follows a link it is given (judged where it lands); copying
/// recursively, or with `-P`, `-d`, `-s`, copies or makes links.
const CP: &[Opt] = &[
    // `-r`, `-R`, `--recursive`; `-a`, `--archive`: descend, and copy the links met as links.
    opt("-r", Descends),
    opt("-R", Descends),
    opt("--recursive", Descends),
    opt("-a", Descends),
    opt("--archive", Descends),
    opt("-r", Moves),
    opt("-R", Moves),
    opt("--recursive", Moves),
    opt("-a", Moves),
    opt("--archive", Moves),
    // `-P`, `--no-dereference`, `-d`: copy links as links; `-s`, `--symbolic-link`: make links.
    opt("-P", Moves),
    opt("--no-dereference", Moves),
    opt("-d", Moves),
    opt("-s", Moves),
    opt("--symbolic-link", Moves),
    // `-L`, `--dereference`: follows links in the source.
    opt("-L", Follows),
    opt("--dereference", Follows),
];

/// install(1) `--strip-program=PROGRAM`: the program `-s` runs.
const INSTALL: &[Opt] = &[opt("--strip-program", Runs)];

/// chmod(1), chown(1), chgrp(1) `-R`, `--recursive`; `-L`: follows every link met.
const CHMOD: &[Opt] = &[opt("-R", Descends), opt("--recursive", Descends), opt("-L", Follows)];

// --- Searching and comparing -------------------------------------------------------------------

/// grep(1).
const GREP: &[Opt] = &[
    // `-r`, `--recursive`; `-d ACTION`, `--directories=recurse`.
    opt("-r", Descends),
    opt("--recursive", Descends),
    opt("-d", Descends),
    opt("--directories", Descends),
    // `-R`, `--dereference-recursive`: follows every link.
    opt("-R", Follows),
    opt("--dereference-recursive", Follows),
];

/// rg(1): always recursive, but skips hidden files (`.env*`) unless told otherwise.
const RG: &[Opt] = &[
    // `--pre COMMAND`: runs COMMAND on each file.
    opt("--pre", Runs),
    // `-.`, `--hidden`: searches hidden files (`-uu` too: see `options::special`).
    opt("-.", Descends),
    opt("--hidden", Descends),
    // `-L`, `--follow`: follows links.
    opt("-L", Follows),
    opt("--follow", Follows),
];

/// fd(1) `-x`, `--exec`, `-X`, `--exec-batch`: runs a command on the results.
const FD: &[Opt] = &[opt("-x", Runs), opt("--exec", Runs), opt("-X", Runs), opt("--exec-batch", Runs)];

/// find(1): its options are whole words.
const FIND: &[Opt] = &[
    // `-exec`, `-execdir`, `-ok`, `-okdir`: run a command (followed, not hidden).
    opt("-exec", Runs),
    opt("-execdir", Runs),
    opt("-ok", Runs),
    opt("-okdir", Runs),
    // `-delete`; `-fprint`, `-fprint0`, `-fprintf`, `-fls`: delete or write anywhere.
    opt("-delete", Beyond),
    opt("-fprint", Beyond),
    opt("-fprint0", Beyond),
    opt("-fprintf", Beyond),
    opt("-fls", Beyond),
    // `-files0-from file`: the starting points are read from file.
    opt("-files0-from", Reads),
];

/// diff(1) `-r`, `--recursive`: compares directories, following links unless
/// `--no-dereference`.
const DIFF: &[Opt] = &[opt("-r", Follows), opt("--recursive", Follows), opt("--no-dereference", Stays)];

/// diff3(1), sdiff(1) `--diff-program=PROGRAM`: the program that compares the files.
const DIFF3: &[Opt] = &[opt("--diff-program", Runs)];

/// sort(1) `--compress-program=PROG`: compresses temporary files with PROG.
const SORT: &[Opt] = &[opt("--compress-program", Runs), opt("--files0-from", Reads)];

/// split(1) `--filter=COMMAND`: writes each part to COMMAND's stdin.
const SPLIT: &[Opt] = &[opt("--filter", Runs)];

/// wc(1), du(1) `--files0-from=F`: the names are read from F (`-` is stdin).
const FILES0: &[Opt] = &[opt("--files0-from", Reads)];

/// file(1) `-f namefile`, `--files-from`: the names are read from namefile.
const FILE: &[Opt] = &[opt("-f", Reads), opt("--files-from", Reads)];

/// tree(1) `--fromfile`: the listing is read from the files given.
const TREE: &[Opt] = &[opt("--fromfile", Reads)];

const CHECKSUMS: &[&str] =
    &["md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "sum"];

/// md5sum(1) and the other checksum programs `-c`, `--check`: reads the files named in FILE.
const CHECK: &[Opt] = &[opt("-c", Reads), opt("--check", Reads)];

/// mypy `--python-executable`: runs that interpreter to find installed packages.
const MYPY: &[Opt] = &[opt("--python-executable", Runs)];

// --- Network clients (exact only: they reach the network whatever their arguments say) -------

/// curl(1) `-K`, `--config <file>`: options read from file (`-` is stdin).
const CURL: &[Opt] = &[opt("-K", Reads), opt("--config", Reads)];

/// wget(1).
const WGET: &[Opt] = &[
    // `--use-askpass=command`: runs command for credentials.
    opt("--use-askpass", Runs),
    // `-e command`, `--execute`: a wgetrc command; `--config=FILE`: a wgetrc file; `-i file`,
    // `--input-file`: URLs read from file (`-` is stdin).
    opt("-e", Reads),
    opt("--execute", Reads),
    opt("--config", Reads),
    opt("-i", Reads),
    opt("--input-file", Reads),
];

//! The facts a decision is made from, gathered once per request: for a path, where its final
//! target lies; for a command line, its parsed commands and every argument, glob or
//! redirection that reaches outside the workspace, into a protected place, or cannot be known.
//!
//! Gathering asks a [`Paths`] (the workspace, or a fake in tests) where paths lead; deciding is
//! pure over the facts. What covers a line is decided here too: a line that is more than lists
//! and pipelines of commands (control structures, nested or latent code, a builtin that changes
//! the shell's state, a command that creates links or moves files beside others) is covered
//! only by its exact text, and one that writes by redirection asks in ask mode unless its exact
//! text is remembered.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::path::Path;

use super::command::{self, Run};
use super::pattern::{self, Pattern};
use super::shell::{Command, ParseError, Script, Word, WordKind};
use super::{Permission, PermissionRequest, Rejects};
use crate::workspace::{Place, Workspace};

/// What a request is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A file or directory, judged at its final target.
    Path {
        place: Place,
    },
    Command(CommandFacts),
    /// A call to a tool of another program, by its name (the request's target).
    Tool {
        /// The tool says it only reads (an MCP server's `readOnlyHint`).
        read_only: bool,
        /// Whose tool it is, as the question says it (`the MCP server `github``).
        owner: String,
    },
    /// A web page, by its host (canonical: [`super::host::canonical`]; also the request's
    /// target).
    Host {
        host: String,
    },
    /// Leaving plan mode with a plan for the user to review (`exit_plan`): judged by the mode
    /// alone, never by a rule.
    Plan,
}

/// A command line, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandFacts {
    /// The line, trimmed.
    pub line: String,
    pub script: Result<Script, ParseError>,
    /// Arguments and redirections that reach outside the workspace, into a protected place,
    /// or somewhere that cannot be judged: no remembered rule covers the line.
    pub escapes: Vec<String>,
    /// Arguments the shell computes when it runs (`$X`, `$(…)`, `{a,b}`) or that reach the
    /// network (`https://…`): only the exact line can be remembered.
    pub computed: Vec<String>,
    /// Files the line writes by redirection (`> out.txt`): edits, which ask in `ask` mode.
    pub writes: Vec<String>,
}

/// Where the paths a command names lead.
pub trait Paths {
    /// Where `path` (as written, relative to the working directory) ends up.
    fn place(&self, path: &str) -> Place;
    /// The paths a glob matches now; `Err` when they cannot all be checked.
    fn glob(&self, pattern: &str) -> Result<Vec<String>, String>;
    /// What a program descending into `dir` reaches that no argument names: the first secret
    /// below it or, when it follows links, the first link below it that leads out of the
    /// workspace, with where it lands. `Ok(None)` when nothing, or when `dir` is no directory;
    /// `Err` when there is too much below to check. `budget` is what the line may still read.
    fn reaches(&self, dir: &str, follow: bool, budget: &mut usize) -> Result<Option<(String, Place)>, String>;
}

impl Paths for Workspace {
    /// A program resolves `..` after following the links before it (`link/../x`), as the kernel
    /// does, so an argument is not normalized first.
    fn place(&self, path: &str) -> Place {
        let joined = if Path::new(path).is_absolute() { Path::new(path).to_path_buf() } else { self.cwd().join(path) };
        self.locate(&joined).place
    }

    fn glob(&self, pattern: &str) -> Result<Vec<String>, String> {
        self.expand(pattern)?
            .into_iter()
            .map(|path| match path.to_str() {
                Some(text) => Ok(text.to_owned()),
                None => Err(format!("`{pattern}` matches {}, which is not valid UTF-8", path.display())),
            })
            .collect()
    }

    /// Walks `dir` breadth first, reading at most `budget` entries. A secret is judged by the
    /// workspace at every entry named `.env*` or that `[sandbox] hidden` hides, and every
    /// directory (cairn's own data may lie below); a followed link is judged where it lands,
    /// and a directory it leads to inside is walked too, once. `.git` is not entered:
    /// everything below it is protected, none of it secret, and only asked-for edits put links
    /// there.
    fn reaches(&self, dir: &str, follow: bool, budget: &mut usize) -> Result<Option<(String, Place)>, String> {
        let start = if Path::new(dir).is_absolute() { Path::new(dir).to_path_buf() } else { self.cwd().join(dir) };
        // Every one of these programs follows a link it is given by name.
        if !start.is_dir() {
            return Ok(None);
        }
        let shown = |path: &Path| self.display(path);
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut walked = std::collections::HashSet::new();
        walked.extend(std::fs::canonicalize(&start));
        while let Some(current) = queue.pop_front() {
            let place = self.locate(&current).place;
            if let Place::Protected { secret: true, .. } = place {
                return Ok(Some((shown(&current), place)));
            }
            let Ok(entries) = std::fs::read_dir(&current) else { continue };
            for entry in entries.flatten() {
                if *budget == 0 {
                    return Err(format!(
                        "`{dir}` holds more entries than cairn reads to check that nothing below it is secret"
                    ));
                }
                *budget -= 1;
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
                let Ok(kind) = entry.file_type() else { continue };
                if kind.is_symlink() {
                    if !follow {
                        continue;
                    }
                    let place = self.locate(&path).place;
                    match &place {
                        Place::Inside { .. } | Place::Protected { secret: false, .. } => {}
                        Place::Protected { secret: true, .. } | Place::Outside | Place::Unknown(_) => {
                            return Ok(Some((shown(&path), place)));
                        }
                    }
                    if let Ok(real) = std::fs::canonicalize(&path)
                        && real.is_dir()
                        && walked.insert(real)
                    {
                        queue.push_back(path);
                    }
                } else if kind.is_dir() {
                    if name != ".git" {
                        queue.push_back(path);
                    }
                } else if name.starts_with(".env") || self.hides(&path) {
                    let place = self.locate(&path).place;
                    if let Place::Protected { secret: true, .. } = place {
                        return Ok(Some((shown(&path), place)));
                    }
                }
            }
        }
        Ok(None)
    }
}

impl PermissionRequest {
    /// A request about `path` (absolute, as the OS will be given it), judged at its final target.
    pub fn for_path(permission: Permission, workspace: &Workspace, path: &Path) -> Self {
        let located = workspace.locate(path);
        let target = located.real.as_deref().unwrap_or(path).display().to_string();
        Self { permission, target, subject: Subject::Path { place: located.place } }
    }

    /// A request to call the tool `name` of another program.
    pub fn for_tool(name: &str, owner: &str, read_only: bool) -> Self {
        Self {
            permission: Permission::Tool,
            target: name.to_owned(),
            subject: Subject::Tool { read_only, owner: owner.to_owned() },
        }
    }

    /// A request to fetch from `host`, spelled as a URL parser spells it; `None` when it is no
    /// host ([`super::host::canonical`]).
    pub fn for_host(host: &str) -> Option<Self> {
        let host = super::host::canonical(host)?;
        Some(Self { permission: Permission::Fetch, target: host.clone(), subject: Subject::Host { host } })
    }

    /// The request of `tool`, which presents a plan and leaves plan mode once the user approves
    /// it: a tool of cairn's own, so it is no MCP tool's name a `tool:` rule could name.
    pub fn for_plan(tool: &str) -> Self {
        Self { permission: Permission::Tool, target: tool.to_owned(), subject: Subject::Plan }
    }
}

impl PermissionRequest {
    /// Whether this is a command line that only reads ([`CommandFacts::reads_only`]).
    pub fn reads_only(&self) -> bool {
        match &self.subject {
            Subject::Command(facts) => facts.reads_only(),
            Subject::Path { .. } | Subject::Tool { .. } | Subject::Host { .. } | Subject::Plan => false,
        }
    }
}

impl CommandFacts {
    /// Whether the line runs the program `words` (and its subcommand), however spelled.
    pub(super) fn runs_program(&self, words: &[String], runs: &OnceCell<Vec<Run>>) -> Option<Rejects> {
        let script = match &self.script {
            Ok(script) => script,
            Err(err) => return Some(Rejects::Maybe(format!("the command line does not parse as shell ({err})"))),
        };
        let name = words.first().map(|w| w.rsplit('/').next().unwrap_or(w))?;
        let mut unknown =
            script.latent.then(|| Rejects::Maybe("the command line holds code that bash may still evaluate".into()));
        for run in runs.get_or_init(|| command::runs(script)) {
            match &run.program {
                Some(program)
                    if program == name && names_subcommand(run.args.iter().map(|w| w.text.as_str()), &words[1..]) =>
                {
                    match &run.through {
                        None => return Some(Rejects::Yes),
                        Some(by) => {
                            unknown = Some(Rejects::Maybe(format!(
                                "`{by}` is a program cairn does not know, and it is given `{name}` among its words"
                            )));
                        }
                    }
                }
                Some(_) => {}
                None => {
                    unknown = Some(Rejects::Maybe(
                        "a program in the line is computed when it runs, or runs code cairn cannot see".into(),
                    ));
                }
            }
        }
        unknown
    }

    /// `Ok` when remembered `allowed` patterns cover the whole line; else why not.
    pub(super) fn uncovered(&self, allowed: &[Cow<'_, Pattern>], edits_allowed: bool) -> Result<(), String> {
        let script = self.script.as_ref().map_err(|err| format!("the command line does not parse as shell ({err})"))?;
        if let Some(escape) = self.escapes.first() {
            let more = self.escapes.len() - 1;
            return Err(if more > 0 { format!("{escape} (and {more} more)") } else { escape.clone() });
        }
        if allowed.iter().any(|p| matches!(p.as_ref(), Pattern::Exact(line) if *line == self.line)) {
            return Ok(());
        }
        if let Some(why) = self.computed.first() {
            return Err(why.clone());
        }
        if let Some(file) = self.writes.first().filter(|_| !edits_allowed) {
            return Err(format!("the line writes `{file}`, and edits ask in this mode"));
        }
        if let Some(why) = not_plain(script) {
            return Err(why);
        }
        let open = |c: &&Command| command::exact_only(c).is_some() || !allowed.iter().any(|p| covers(p, c));
        match script.commands.iter().find(open) {
            None => Ok(()),
            Some(command) => Err(format!("no remembered rule covers `{}`", shown(command))),
        }
    }

    /// The command rule an "always allow" remembers: the program rule of the one command no
    /// existing rule covers, or else the exact line; `None` if nothing may cover it.
    pub(super) fn allow_pattern(&self, existing: &[Cow<'_, Pattern>]) -> Option<String> {
        let script = self.script.as_ref().ok()?;
        if !self.escapes.is_empty() {
            return None;
        }
        let exact = format!("{}{}", pattern::EXACT, self.line);
        if !self.computed.is_empty() || !self.writes.is_empty() || not_plain(script).is_some() {
            return Some(exact);
        }
        let open: Vec<&Command> = script
            .commands
            .iter()
            .filter(|c| command::exact_only(c).is_some() || !existing.iter().any(|p| covers(p, c)))
            .collect();
        match open.as_slice() {
            [one] if command::exact_only(one).is_none() => {
                Some(command::rule_words(one).map_or(exact, |words| words.join(" ")))
            }
            _ => Some(exact),
        }
    }

    /// The command rule an "always reject" remembers: the program the line is about (through
    /// its wrappers: `sudo rm x` → `rm`), or else the exact line.
    pub(super) fn deny_pattern(&self) -> String {
        let exact = format!("{}{}", pattern::EXACT, self.line);
        let Ok(script) = &self.script else { return exact };
        if script.commands.len() != 1 {
            return exact;
        }
        // The first program that is not a wrapper: `sudo rm x` → `rm`, `find -exec rm` → `rm`.
        let found = command::runs(script).into_iter().find_map(|run| {
            let name = run.program?;
            let program = Word { text: name, kind: WordKind::Literal, quoted: false };
            let words: Vec<Word> = std::iter::once(program).chain(run.args).collect();
            let command = Command { words, ..Command::default() };
            (!command::is_runner(&command)).then(|| command::rule_words(&command)).flatten().map(|w| w.join(" "))
        });
        found.unwrap_or(exact)
    }
}

/// Why a line is more than lists and pipelines of commands at its top level.
fn not_plain(script: &Script) -> Option<String> {
    if script.latent {
        return Some(
            "the command line holds code that bash may still evaluate ($((…)), [[ … ]], a quoted $(…))".into(),
        );
    }
    if script.compound {
        return Some("the command line uses shell control structures, subshells or functions".into());
    }
    if script.commands.iter().any(|c| c.nested) {
        return Some("the command line runs commands inside `$(…)` or backquotes".into());
    }
    if let Some(why) = script.commands.iter().find_map(command::changes_state) {
        return Some(why);
    }
    moves_before(script)
}

/// Why a line of several commands cannot be judged on the tree as it is before the line runs:
/// one of its commands creates links or moves files (`ln`, `tar -x`, `git checkout`), and the
/// paths the others name were judged before that.
fn moves_before(script: &Script) -> Option<String> {
    if script.commands.len() < 2 {
        return None;
    }
    script.commands.iter().find_map(|c| {
        let name = c.words.first().and_then(command::program_name)?;
        let args: Vec<&str> = c.words[1..].iter().map(|w| w.text.as_str()).collect();
        command::options::first(&name, &args, command::options::Does::Moves)?;
        Some(format!(
            "`{name}` may create links or move files that the other commands of the line then use, \
             and their paths were judged before it runs"
        ))
    })
}

/// Whether a remembered program pattern covers one top-level command (which must not be
/// exact-only: the caller checks that once).
fn covers(pattern: &Pattern, command: &Command) -> bool {
    let Pattern::Program(words) = pattern else { return false };
    if command.words.len() < words.len() {
        return false;
    }
    command.words.iter().zip(words).all(|(word, expected)| word.kind == WordKind::Literal && word.text == *expected)
}

/// Whether a program's arguments `args` (after its name) name the subcommand words `wanted`: they
/// appear among its words after the options, in that order, others between them allowed (a
/// rejected `cargo publish` is still `cargo --color always publish`, `git push` still
/// `git -C x push`). The supervisor asks the same of every program a command tree starts.
pub fn names_subcommand<'a>(args: impl IntoIterator<Item = &'a str>, wanted: &[String]) -> bool {
    let words = leading(args);
    let mut words = words.iter();
    wanted.iter().all(|w| words.any(|word| *word == w))
}

/// A program's words after its options: the subcommand (`-C x push` → `push`) and the rest.
fn leading<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for text in args {
        if skip_value {
            skip_value = false;
            continue;
        }
        if text.starts_with('-') || text.starts_with('+') {
            skip_value = matches!(
                text,
                "-C" | "-c"
                    | "--git-dir"
                    | "--work-tree"
                    | "--namespace"
                    | "--config-env"
                    | "--attr-source"
                    | "--super-prefix"
                    | "--exec-path"
                    | "--manifest-path"
            );
            continue;
        }
        out.push(text);
    }
    out
}

fn shown(command: &Command) -> String {
    let text: Vec<&str> = command.words.iter().map(|w| w.text.as_str()).collect();
    pattern::shorten(&text.join(" "), 60)
}

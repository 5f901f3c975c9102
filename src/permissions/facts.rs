//! The facts a decision is made from, gathered once per request: for a path, where its final
//! target lies; for a command line, its parsed commands and every argument, glob or
//! redirection that reaches outside the workspace, into a protected place, or cannot be known.
//!
//! Gathering asks a [`Paths`] (the workspace, or a fake in tests) where paths lead; deciding is
//! pure over the facts.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::path::Path;

use super::command::{self, Run};
use super::pattern::{self, Pattern};
use super::shell::{self, Command, ParseError, Script, Word, WordKind};
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
    /// Arguments the shell computes when it runs (`$X`, `$(…)`, `{a,b}`): only the exact
    /// line can be remembered.
    pub computed: Vec<String>,
}

/// Where the paths a command names lead.
pub trait Paths {
    /// Where `path` (as written, relative to the working directory) ends up.
    fn place(&self, path: &str) -> Place;
    /// The paths a glob matches now; `Err` when they cannot all be checked.
    fn glob(&self, pattern: &str) -> Result<Vec<String>, String>;
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
}

impl PermissionRequest {
    /// A request about `path` (absolute, as the OS will be given it), judged at its final target.
    pub fn for_path(permission: Permission, workspace: &Workspace, path: &Path) -> Self {
        let located = workspace.locate(path);
        let target = located.real.as_deref().unwrap_or(path).display().to_string();
        Self { permission, target, subject: Subject::Path { place: located.place } }
    }

    /// A request to run `line` in the working directory.
    pub fn for_command(line: &str, paths: &dyn Paths) -> Self {
        let line = line.trim().to_owned();
        let script = shell::parse(&line);
        let mut facts = CommandFacts { line: line.clone(), script, escapes: Vec::new(), computed: Vec::new() };
        if let Ok(script) = &facts.script {
            for command in &script.commands {
                let targets = command.redirects.iter().filter_map(|r| r.target.as_ref());
                for word in command.words.iter().skip(1).chain(targets) {
                    word_escapes(word, paths, &mut facts.escapes, &mut facts.computed);
                }
            }
        }
        facts.escapes.dedup();
        Self { permission: Permission::Bash, target: line, subject: Subject::Command(facts) }
    }
}

/// Paths a command may touch without leaving the workspace's concerns.
const HARMLESS: [&str; 6] = ["/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"];

fn word_escapes(word: &Word, paths: &dyn Paths, out: &mut Vec<String>, computed: &mut Vec<String>) {
    match &word.kind {
        WordKind::Dynamic if word.text.starts_with('~') => {
            out.push(format!("`{}` is in a home directory, outside the workspace", word.text));
        }
        WordKind::Dynamic => computed.push(format!(
            "an argument (`{}…`) is computed when the command runs ($…, `…` or {{…}})",
            word.text.chars().take(40).collect::<String>()
        )),
        WordKind::Glob(pattern) => match paths.glob(pattern) {
            Ok(found) if found.is_empty() => literal_escapes(&word.text, paths, out),
            Ok(found) => {
                for path in found {
                    place_escape(&path, paths.place(&path), out);
                }
            }
            Err(why) => out.push(why),
        },
        WordKind::Literal => literal_escapes(&word.text, paths, out),
    }
}

/// The parts of an argument that may be paths: the whole; an option's value, attached to any
/// letter of a cluster of short options (`-I/usr/include`, `-at/etc` is `-a -t /etc`) or after
/// `=` (`--out=x`); what follows `=`, `:` or `,` (`of=/dev/sda`, `host:/etc`); a response file
/// (`@/etc/passwd`); each whitespace-separated piece (a script handed to a program).
fn literal_escapes(text: &str, paths: &dyn Paths, out: &mut Vec<String>) {
    if text.chars().count() > MAX_ARGUMENT {
        out.push(format!("an argument is too long to check ({} characters)", text.chars().count()));
        return;
    }
    let mut candidates: Vec<&str> = Vec::new();
    for piece in text.split_whitespace() {
        let piece = piece.trim_start_matches('@');
        if let Some(option) = piece.strip_prefix("--") {
            candidates.extend(option.split_once('=').map(|(_, value)| value));
        } else if let Some(option) = piece.strip_prefix('-') {
            candidates.extend(option.char_indices().skip(1).map(|(at, _)| &option[at..]));
        } else {
            candidates.push(piece);
        }
        for (at, c) in piece.char_indices() {
            if c == '=' || c == ':' || c == ',' {
                candidates.push(piece[at + c.len_utf8()..].trim_start_matches('@'));
            }
        }
    }
    if candidates.len() <= 4 * MAX_CANDIDATES {
        let mut seen = Vec::with_capacity(candidates.len());
        candidates.retain(|c| {
            !seen.contains(c) && {
                seen.push(*c);
                true
            }
        });
    }
    if candidates.len() > MAX_CANDIDATES {
        out.push(format!("an argument has too many parts that may be paths to check ({})", candidates.len()));
        return;
    }
    for candidate in candidates {
        if candidate.is_empty() || HARMLESS.contains(&candidate) {
            continue;
        }
        if candidate.starts_with('~') {
            out.push(format!("`{candidate}` is in a home directory, outside the workspace"));
            continue;
        }
        place_escape(candidate, paths.place(candidate), out);
    }
}

/// Arguments longer than this are not taken apart (a hostile line could make that slow).
const MAX_ARGUMENT: usize = 4096;
/// Parts of one argument that may be paths, checked one by one at most.
const MAX_CANDIDATES: usize = 64;

fn place_escape(shown: &str, place: Place, out: &mut Vec<String>) {
    match place {
        Place::Inside { .. } => {}
        Place::Protected { why, .. } => out.push(format!("`{shown}` is protected: {why}")),
        Place::Outside => out.push(format!("`{shown}` is outside the workspace")),
        Place::Unknown(why) => out.push(why),
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
                Some(program) if program == name && leading(run).starts_with(&words[1..]) => {
                    return Some(Rejects::Yes);
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
    pub(super) fn uncovered(&self, allowed: &[Cow<'_, Pattern>]) -> Result<(), String> {
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
        if !self.computed.is_empty() || not_plain(script).is_some() {
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
    script
        .commands
        .iter()
        .filter_map(|c| c.words.first().and_then(command::program_name))
        .find(|name| command::STATEFUL_BUILTINS.contains(&name.as_str()))
        .map(|name| format!("`{name}` changes how the rest of the command line runs"))
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

/// A run's leading words after its options: the subcommand (`git -C x push` → `push`).
fn leading(run: &Run) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for word in &run.args {
        if skip_value {
            skip_value = false;
            continue;
        }
        let text = word.text.as_str();
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
        out.push(text.to_owned());
    }
    out
}

fn shown(command: &Command) -> String {
    let text: Vec<&str> = command.words.iter().map(|w| w.text.as_str()).collect();
    let text = text.join(" ");
    let cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() { format!("{cut}…") } else { cut }
}

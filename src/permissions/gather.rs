//! Gathering a command line's facts, for the request to run it
//! ([`PermissionRequest::for_command`]): parse it, then ask a [`Paths`] where every argument,
//! glob match and redirection target leads, what the shell computes when it runs, what reaches
//! the network, and which files the line writes. Bounded: an argument is taken apart into at
//! most 64 parts that may be paths, a line expands at most 16 globs. A program that descends
//! into directories (`grep -r`, `tar`, `cp -r`, `zip -r`, `rsync -a`) is followed below the
//! ones it names, reading at most 10,000 entries per line, for a secret or (when it follows
//! links) a link out of the workspace (`Paths::reaches`, a bounded walk on disk).

use super::command::{self, options};
use super::facts::{CommandFacts, Paths, Subject};
use super::shell::{self, Redirect, Script, Word, WordKind};
use super::{Permission, PermissionRequest};
use crate::workspace::Place;

/// Paths a command may touch without leaving the workspace's concerns.
const HARMLESS: [&str; 6] = ["/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"];
/// Arguments longer than this are not taken apart (a hostile line could make that slow).
const MAX_ARGUMENT: usize = 4096;
/// Parts of one argument that may be paths, checked one by one at most.
const MAX_CANDIDATES: usize = 64;
/// Globs of one line expanded on disk at most.
const MAX_GLOBS: usize = 16;
/// Redirections that write (or create) their file; `>&` with a file is `&>` in bash(1).
const WRITING: [&str; 7] = [">", ">>", ">|", "&>", "&>>", "<>", ">&"];
/// Directory entries read below the directories a line's programs descend into, at most.
const MAX_ENTRIES: usize = 10_000;

impl PermissionRequest {
    /// A request to run `line` in the working directory.
    pub fn for_command(line: &str, paths: &dyn Paths) -> Self {
        let facts = command(line, paths);
        Self { permission: Permission::Bash, target: facts.line.clone(), subject: Subject::Command(facts) }
    }
}

/// The facts of `line`.
fn command(line: &str, paths: &dyn Paths) -> CommandFacts {
    let line = line.trim().to_owned();
    let script = shell::parse(&line);
    let mut gathering = Gathering {
        paths,
        facts: CommandFacts {
            line,
            script: Ok(Default::default()),
            escapes: Vec::new(),
            computed: Vec::new(),
            writes: Vec::new(),
        },
        globs: 0,
    };
    if let Ok(script) = &script {
        for command in &script.commands {
            for word in command.words.iter().skip(1) {
                gathering.word(word);
            }
            for redirect in &command.redirects {
                gathering.redirect(redirect);
            }
        }
        gathering.descents(script);
    }
    let mut facts = gathering.facts;
    facts.script = script;
    facts.escapes.dedup();
    facts
}

struct Gathering<'a> {
    paths: &'a dyn Paths,
    facts: CommandFacts,
    globs: usize,
}

impl Gathering<'_> {
    fn redirect(&mut self, redirect: &Redirect) {
        let Some(target) = &redirect.target else { return };
        if WRITING.contains(&redirect.op) && !HARMLESS.contains(&target.text.as_str()) {
            self.facts.writes.push(target.text.clone());
        }
        self.word(target);
    }

    fn word(&mut self, word: &Word) {
        match &word.kind {
            WordKind::Dynamic if word.text.starts_with('~') => {
                self.facts.escapes.push(format!("`{}` is in a home directory, outside the workspace", word.text));
            }
            WordKind::Dynamic => self.facts.computed.push(format!(
                "an argument (`{}…`) is computed when the command runs ($…, `…` or {{…}})",
                word.text.chars().take(40).collect::<String>()
            )),
            WordKind::Glob(_) if self.globs >= MAX_GLOBS => {
                self.facts.escapes.push(format!("the line has more than {MAX_GLOBS} globs to check"));
            }
            WordKind::Glob(pattern) => {
                self.globs += 1;
                match self.paths.glob(pattern) {
                    Ok(found) if found.is_empty() => self.literal(&word.text),
                    Ok(found) => {
                        for path in found {
                            let place = self.paths.place(&path);
                            self.place(&path, place);
                        }
                    }
                    Err(why) => self.facts.escapes.push(why),
                }
            }
            WordKind::Literal => self.literal(&word.text),
        }
    }

    /// The parts of an argument that may be paths: the whole; an option's value, attached to any
    /// letter of a cluster of short options (`-I/usr/include`, `-at/etc` is `-a -t /etc`) or after
    /// `=` (`--out=x`); what follows `=`, `:` or `,` (`of=/dev/sda`, `host:/etc`); a response file
    /// (`@/etc/passwd`); each whitespace-separated piece (a script handed to a program). A URL
    /// (`https://…`) reaches the network rather than a path.
    fn literal(&mut self, text: &str) {
        if text.chars().count() > MAX_ARGUMENT {
            self.facts.escapes.push(format!("an argument is too long to check ({} characters)", text.chars().count()));
            return;
        }
        let mut candidates: Vec<&str> = Vec::new();
        for piece in text.split_whitespace() {
            let piece = piece.trim_start_matches('@');
            if let Some(url) = network_url(piece) {
                self.facts.computed.push(format!("`{url}` reaches the network"));
                continue;
            }
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
            self.facts
                .escapes
                .push(format!("an argument has too many parts that may be paths to check ({})", candidates.len()));
            return;
        }
        for candidate in candidates {
            if candidate.is_empty() || HARMLESS.contains(&candidate) {
                continue;
            }
            if candidate.starts_with('~') {
                self.facts.escapes.push(format!("`{candidate}` is in a home directory, outside the workspace"));
                continue;
            }
            let place = self.paths.place(candidate);
            self.place(candidate, place);
        }
    }

    /// Follows every program of the line that descends into directories (through wrappers and
    /// `bash -c` too) below the directories it names, and the working directory when `grep
    /// -r` or `rg` is given none.
    fn descents(&mut self, script: &Script) {
        let may = |c: &shell::Command| {
            c.words
                .first()
                .and_then(command::program_name)
                .is_some_and(|name| options::table(&name).is_some() || !options::known(&name) || command::is_runner(c))
        };
        if !script.commands.iter().any(may) {
            return;
        }
        let mut budget = MAX_ENTRIES;
        for run in command::runs(script) {
            let Some(name) = &run.program else { continue };
            let args: Vec<&str> = run.args.iter().map(|w| w.text.as_str()).collect();
            let Some(follow) = options::descent(name, &args) else { continue };
            let mut dirs: Vec<String> = Vec::new();
            for word in &run.args {
                match &word.kind {
                    WordKind::Literal if !word.text.starts_with('-') => dirs.push(word.text.clone()),
                    WordKind::Glob(pattern) => dirs.extend(self.paths.glob(pattern).unwrap_or_default()),
                    WordKind::Literal | WordKind::Dynamic => {}
                }
            }
            if options::searches_cwd(name, &args) {
                dirs.push(".".to_owned());
            }
            for dir in dirs {
                match self.paths.reaches(&dir, follow, &mut budget) {
                    Ok(None) => {}
                    Ok(Some((reached, place))) => {
                        let before = self.facts.escapes.len();
                        self.place(&reached, place);
                        if let Some(escape) = self.facts.escapes.get_mut(before) {
                            *escape = format!("`{name}` reaches below `{dir}`: {escape}");
                        }
                    }
                    Err(why) => self.facts.escapes.push(why),
                }
            }
        }
    }

    fn place(&mut self, shown: &str, place: Place) {
        let escapes = &mut self.facts.escapes;
        match place {
            Place::Inside { .. } => {}
            Place::Protected { why, .. } => escapes.push(format!("`{shown}` is protected: {why}")),
            Place::Outside => escapes.push(format!("`{shown}` is outside the workspace")),
            Place::Unknown(why) => escapes.push(why),
        }
    }
}

/// A URL a piece of an argument names (`https://host/x`, `git@host:repo` is not one); `file:`
/// URLs are paths.
fn network_url(piece: &str) -> Option<&str> {
    let at = piece.find("://")?;
    let scheme = piece[..at].rsplit(['=', ',']).next().unwrap_or_default();
    let plain = !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c));
    (plain && !scheme.eq_ignore_ascii_case("file")).then_some(&piece[at - scheme.len()..])
}

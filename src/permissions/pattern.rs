//! A remembered rule's pattern, read once per rule (globs compiled) and kept with it: what it
//! covers and how it is described.
//!
//! Shell rules are a program with its subcommand (`cat`, `cargo test`: that program, its
//! arguments staying in the workspace) or an exact command line (`=bash build.sh`). Path rules
//! are globs over workspace-relative paths, or over final targets when they start with `/`.
//! Fetch rules are hosts (`docs.rs`, `*.rust-lang.org`, `*`: [`HostPattern`]).
//! A pattern that cannot be read makes every decision of its kind ask: it may have been a
//! rejection.

use super::host::HostPattern;
use super::{Action, Permission, Rule};
use crate::workspace::Place;

/// The prefix of a pattern that names an exact command line.
pub const EXACT: char = '=';
/// The prefix of a placeholder for a stored rule that could not be read at all.
pub const UNREADABLE: &str = "!unreadable: ";

/// A pattern, read.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// A program and its leading words (`cargo test`).
    Program(Vec<String>),
    /// Exactly this command line.
    Exact(String),
    /// Paths matching a glob: relative to the workspace, or absolute final targets.
    Paths { glob: globset::GlobMatcher, absolute: bool },
    /// Tool names matching a glob (`mcp__github__*`).
    Names(globset::GlobMatcher),
    /// Hosts a page is fetched from (`*.rust-lang.org`).
    Hosts(HostPattern),
    /// Not readable; the reason.
    Unreadable(String),
}

impl Pattern {
    pub fn read(rule: &Rule) -> Self {
        let text = rule.pattern.as_str();
        if let Some(raw) = text.strip_prefix(UNREADABLE) {
            return Pattern::Unreadable(format!("a stored rule could not be read ({raw})"));
        }
        match rule.permission {
            Permission::Bash => {
                if let Some(exact) = text.strip_prefix(EXACT) {
                    return if exact.trim().is_empty() {
                        Pattern::Unreadable("an exact-command rule has no command".into())
                    } else {
                        Pattern::Exact(exact.trim().to_owned())
                    };
                }
                let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
                if words.is_empty() {
                    return Pattern::Unreadable("a command rule is empty".into());
                }
                Pattern::Program(words)
            }
            Permission::Read | Permission::Edit => {
                let built = globset::GlobBuilder::new(text).literal_separator(false).backslash_escape(true).build();
                match built {
                    Ok(glob) if !text.is_empty() => {
                        Pattern::Paths { glob: glob.compile_matcher(), absolute: text.starts_with('/') }
                    }
                    Ok(_) => Pattern::Unreadable("a path rule is empty".into()),
                    Err(err) => Pattern::Unreadable(format!("`{text}` is not a valid path pattern: {err}")),
                }
            }
            Permission::Tool => match globset::GlobBuilder::new(text).backslash_escape(true).build() {
                Ok(glob) if !text.is_empty() => Pattern::Names(glob.compile_matcher()),
                Ok(_) => Pattern::Unreadable("a tool rule is empty".into()),
                Err(err) => Pattern::Unreadable(format!("`{text}` is not a valid tool-name pattern: {err}")),
            },
            Permission::Fetch => HostPattern::read(text).map_or_else(Pattern::Unreadable, Pattern::Hosts),
        }
    }

    /// Whether this tool pattern covers the tool `name`.
    pub fn covers_name(&self, name: &str) -> bool {
        matches!(self, Pattern::Names(glob) if glob.is_match(name))
    }

    /// Whether this fetch pattern covers `host` (canonical).
    pub fn covers_host(&self, host: &str) -> bool {
        matches!(self, Pattern::Hosts(hosts) if hosts.covers(host))
    }

    /// Whether this path pattern covers a path at `place` whose final target is `target`.
    pub fn covers_path(&self, place: &Place, target: &str) -> bool {
        let Pattern::Paths { glob, absolute } = self else { return false };
        if *absolute {
            return glob.is_match(target);
        }
        match place {
            Place::Inside { relative } | Place::Protected { relative, .. } => glob.is_match(relative),
            Place::Outside | Place::Unknown(_) => false,
        }
    }
}

/// How a rule is described, in the question that offers it and in `/permissions` alike.
pub fn describe(rule: &Rule) -> String {
    let pattern = Pattern::read(rule);
    match (&pattern, rule.permission) {
        (Pattern::Unreadable(why), _) => format!("an unreadable rule `{}` ({why})", shorten(&rule.pattern, 80)),
        (Pattern::Exact(line), _) => format!("exactly `{}`", shorten(line, 80)),
        (Pattern::Program(words), _) => match rule.action {
            Action::Allow => format!("`{}` on files in this workspace", words.join(" ")),
            Action::Deny => format!("`{}`, however it is run", words.join(" ")),
        },
        (Pattern::Paths { .. }, Permission::Read) if rule.pattern == "**" => "reads in the workspace".to_owned(),
        (Pattern::Paths { .. }, Permission::Edit) if rule.pattern == "**" => "edits in the workspace".to_owned(),
        (Pattern::Paths { .. }, Permission::Read) => format!("reads of `{}`", rule.pattern),
        (Pattern::Paths { .. }, Permission::Edit | Permission::Bash | Permission::Tool | Permission::Fetch) => {
            format!("edits of `{}`", rule.pattern)
        }
        (Pattern::Names(_), _) if rule.pattern.contains(['*', '?', '[', '{']) => {
            format!("tools matching `{}`", rule.pattern)
        }
        (Pattern::Names(_), _) => format!("the tool `{}`", rule.pattern.replace('\\', "")),
        (Pattern::Hosts(hosts), _) => hosts.describe(),
    }
}

/// A command line as shown in a rule's description or a reason: its first line, at most `most`
/// characters, with `…` where it was cut.
pub fn shorten(text: &str, most: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    let cut: String = first.chars().take(most).collect();
    if cut.len() < text.len() { format!("{cut}…") } else { cut }
}

/// `text` as a glob that matches exactly it.
pub fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

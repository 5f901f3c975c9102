//! A command's text: the arguments put into its template, then the files it names inlined.
//!
//! - Markdown commands take `$ARGUMENTS` (everything typed after the name) and `$1`…`$9` (the
//!   arguments split at spaces, quotes keeping one together); Gemini's take `{{args}}`. A
//!   template with no placeholder gets the arguments appended. Gemini's `!{…}` is not run: the
//!   text says so, and the model may run the line with `bash`, where it is judged.
//! - `@path` (and Gemini's `@{path}`) at the start of a word names a file. Arguments are put in
//!   first, so an `@path` the user typed is treated like one the file has: the user typed it,
//!   and either way the file is inlined only when the permission engine allows reading it
//!   unasked under the session's mode and rules, as a `read` call of it would be; then it is
//!   opened as `read` opens it (at its judged target, following no symlink) and inlined up to
//!   [`MAX_INLINE`] each and [`MAX_INLINED`] in all. A file that would need asking, or is
//!   refused, is not inlined and the text says why; a word that names no file stays as it is.
//! - A skill used as a command is its `SKILL.md`, under the same judgment; one that would need
//!   asking is left for the model to load with the `skill` tool, which asks.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use super::{Custom, Flavor};
use crate::permissions::{self, Decision, Mode, Permission, PermissionRequest, Rule};
use crate::tools::Workspace;
use crate::tools::skill;

/// One file is inlined up to this many bytes.
pub const MAX_INLINE: u64 = 64 * 1024;
/// A command's files are inlined up to this many bytes in all.
pub const MAX_INLINED: u64 = 256 * 1024;
/// At most this many files are looked at.
const MAX_FILES: usize = 20;

/// What reads are judged by: the session's workspace, mode and rules.
pub struct Judge<'a> {
    pub workspace: &'a Workspace,
    pub mode: Mode,
    pub rules: &'a [Rule],
    /// A principal's session of `cairn serve --auth`: nothing beyond its workspace, in any mode
    /// (`permissions::beyond_confinement`).
    pub confined: bool,
}

impl Judge<'_> {
    fn decide(&self, path: &Path) -> Decision {
        let request = PermissionRequest::for_path(Permission::Read, self.workspace, path);
        if self.confined
            && let Some(refused) = permissions::beyond_confinement(&request)
        {
            return refused;
        }
        permissions::decide(&request, self.mode, self.rules)
    }
}

/// The prompt `command` typed with `args` stands for; `Err` says why there is none.
pub fn expand(command: &Custom, args: &str, judge: &Judge<'_>) -> Result<String, String> {
    let text = match &command.flavor {
        Flavor::Markdown => markdown(&command.template, args),
        Flavor::Gemini => gemini(&command.template, args),
        Flavor::Skill(found) => return Ok(with_args(skill_text(found, judge)?, args)),
    };
    Ok(with_files(text, judge))
}

/// A skill's instructions, or, when reading them would need asking, a request to load it.
fn skill_text(found: &skill::SkillInfo, judge: &Judge<'_>) -> Result<String, String> {
    match judge.decide(&found.file()) {
        Decision::Allow => {
            let loaded =
                skill::load(found).map_err(|why| format!("The skill `{}` cannot be used: {why}", found.name))?;
            Ok(format!("Use this skill for the task below.\n\n{}", loaded.render(&found.name)))
        }
        Decision::Ask(_) | Decision::Deny(_) => {
            Ok(format!("Load the skill `{}` with the skill tool and follow it for the task below.", found.name))
        }
    }
}

fn with_args(mut text: String, args: &str) -> String {
    if !args.trim().is_empty() {
        text.push_str("\n\n");
        text.push_str(args.trim());
    }
    text
}

/// `$ARGUMENTS` and `$1`…`$9`.
pub fn markdown(template: &str, args: &str) -> String {
    let args = args.trim();
    let positional = split_args(args);
    let (mut out, mut used) = (String::with_capacity(template.len() + args.len()), false);
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(args);
            (used, rest) = (true, tail);
        } else if let Some(digit) = after.chars().next().and_then(|c| c.to_digit(10)).filter(|d| *d >= 1) {
            out.push_str(positional.get(digit as usize - 1).map_or("", String::as_str));
            (used, rest) = (true, &after[1..]);
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if used { out } else { with_args(out, args) }
}

/// `{{args}}`; `!{…}` replaced by a note that it was not run. One pass over the text: each
/// `!{…}` (braces inside it counted) is replaced once, what is inside it shown as it is, so a
/// file of many of them costs no more than its length.
pub fn gemini(template: &str, args: &str) -> String {
    let args = args.trim();
    let used = template.contains("{{args}}");
    let text = template.replace("{{args}}", args);
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("!{") {
        let mut depth = 0usize;
        let end = rest[start + 1..].char_indices().find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(start + 1 + i);
                    }
                }
                _ => {}
            }
            None
        });
        let Some(end) = end else { break };
        out.push_str(&rest[..start]);
        let line = rest[start + 2..end].trim();
        out.push_str(&format!(
            "(the shell command `{line}` was not run: cairn runs nothing while it reads a command; run it with bash if it is needed)"
        ));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    if used { out } else { with_args(out, args) }
}

/// Arguments split at whitespace; `"a b"` and `'a b'` are one.
pub fn split_args(args: &str) -> Vec<String> {
    let (mut items, mut current, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in args.chars() {
        match (quote, c) {
            (None, '"' | '\'') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    items.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            (_, c) => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        items.push(current);
    }
    items
}

/// The `@path` words of `text` that name existing files, in order, once each.
fn references(text: &str, workspace: &Workspace) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let mut previous = ' ';
    for (at, c) in text.char_indices() {
        let starts_word = previous.is_whitespace() || previous == '(';
        previous = c;
        if c != '@' || !starts_word {
            continue;
        }
        let after = &text[at + 1..];
        let word = match after.strip_prefix('{') {
            Some(braced) => braced.split_once('}').map_or("", |(word, _)| word),
            None => after
                .split(char::is_whitespace)
                .next()
                .unwrap_or("")
                .trim_end_matches(['.', ',', ';', ':', ')', '!', '?', '"', '\'', '`']),
        };
        if word.is_empty() || word.chars().any(char::is_control) || found.iter().any(|(w, _)| w == word) {
            continue;
        }
        let path = workspace.resolve(word);
        if std::fs::symlink_metadata(&path).is_ok() {
            found.push((word.to_owned(), path));
        }
        if found.len() >= MAX_FILES {
            break;
        }
    }
    found
}

/// `text` with the files it names inlined after it, or notes on why they were not.
fn with_files(mut text: String, judge: &Judge<'_>) -> String {
    let mut room = MAX_INLINED;
    let mut added = String::new();
    for (word, path) in references(&text, judge.workspace) {
        let shown = judge.workspace.display(&path);
        let note = match judge.decide(&path) {
            Decision::Allow => match inline(judge.workspace, &path, &mut room) {
                Ok(content) => {
                    added.push_str(&format!("\n\n<file path=\"{shown}\">\n{content}\n</file>"));
                    continue;
                }
                Err(why) => why,
            },
            Decision::Ask(reason) => {
                format!("reading it needs the user's permission ({reason}); the read tool asks for it")
            }
            Decision::Deny(reason) => format!("reading it is refused ({reason})"),
        };
        added.push_str(&format!("\n\n(@{word} was not inlined: {note}.)"));
    }
    text.push_str(&added);
    text
}

/// The text of the file at `path`, opened at its judged target as `read` opens it.
fn inline(workspace: &Workspace, path: &Path, room: &mut u64) -> Result<String, String> {
    let target = workspace.locate(path).real.ok_or("it cannot be resolved")?;
    if target.is_dir() {
        return Err("it is a directory".to_owned());
    }
    if *room == 0 {
        return Err(format!("the command's files already fill {} KiB", MAX_INLINED / 1024));
    }
    let (file, size) =
        crate::tools::open_judged(workspace, &target).map_err(|err| err.to_string())?.ok_or("it was not found")?;
    let limit = MAX_INLINE.min(*room);
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes).map_err(|err| err.to_string())?;
    if bytes.iter().take(8192).any(|b| *b == 0) {
        return Err("it is a binary file".to_owned());
    }
    *room -= bytes.len() as u64;
    let mut content = String::from_utf8_lossy(&bytes).into_owned();
    if size > bytes.len() as u64 {
        content.push_str(&format!(
            "\n(cut at {} KiB of {} KiB; read the rest with the read tool)",
            bytes.len() / 1024,
            size / 1024
        ));
    }
    Ok(content)
}

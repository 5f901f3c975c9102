//! Diagnostics after an edit: the checkers of `[checks]` whose glob covers the file `write` or
//! `edit` changed run once before the change ([`before`]) and once after it ([`after`]), and
//! the result says only what the edit introduced: the diagnostics of the edited file after it,
//! less those it had before, compared as a multiset keyed on severity, code and message (never
//! the line, so an old error that an added line moved down is still old). At most
//! [`MOST_SHOWN`] diagnostics and [`MOST_BYTES`] of them are shown, with the count of the rest.
//!
//! When no checker covers the file, its language server is asked instead (`lsp/`, one per
//! session and workspace root, chosen by the file's extension: `[lsp]`): it is given the text
//! before the edit and after it, and its published diagnostics are compared the same way. A
//! checker covering the file wins, so nothing checks a file twice. A server that does not
//! report within `[lsp] wait_ms`, exits or cannot start is said once on the result ("did not
//! report within 3 s") and its diagnostics are left out; neither fails the call.
//!
//! Nothing runs when nothing covers the file, or when its final target lies outside every
//! workspace root (a `..` or a symlink out of the workspace gets no check); a checker gets the
//! workspace root as its directory and the final target in `CAIRN_EDITED_FILE` (`run`). A
//! checker over its time limit is killed and said once ("took longer than 30 s"), one that
//! cannot start is said once, and its diagnostics are left out; neither fails the call. A
//! file that did not exist before had no diagnostics, so nothing runs before a file is created.
//! A cancel while the file is checked before the change stops the call there: the change is
//! not made after the user cancelled.

pub mod lsp;
mod parse;
mod run;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Checker, LspServer};
use crate::history::ToolContent;
use lsp::Answer;
use parse::{Diagnostic, Severity};
use run::Ran;

use super::{Access, ToolContext, ToolError, ToolOutcome};

/// The most introduced diagnostics one checker's section lists.
pub const MOST_SHOWN: usize = 20;
/// The most bytes of diagnostic lines one checker's section holds.
pub const MOST_BYTES: usize = 4 * 1024;

/// What a call that changes files may spend on checks besides its own time: every covering
/// checker before and after, at the longest limit, and a language server's two waits.
pub fn allowance(ctx: &ToolContext, access: Access) -> Duration {
    let checks = &ctx.checks;
    match access {
        Access::Write => {
            checks.longest() * 2 * u32::try_from(checks.after_edit.len()).unwrap_or(u32::MAX).max(1)
                + ctx.lsp.wait() * 2
        }
        Access::ReadOnly | Access::Execute | Access::Other | Access::Delegate => Duration::ZERO,
    }
}

/// The checks of one edit, as they stood before it.
pub struct Before {
    target: PathBuf,
    root: PathBuf,
    checks: Vec<(Source, Baseline)>,
}

/// What checks a file: the checkers of `[checks]` covering it, else its language server.
enum Source {
    Checker(Checker),
    Server(LspServer),
}

impl Source {
    /// How the result names it: the checker's command line, the server's name.
    fn named(&self) -> &str {
        match self {
            Source::Checker(checker) => &checker.command,
            Source::Server(server) => &server.name,
        }
    }
}

/// What one checker said of the file before the edit.
enum Baseline {
    Found(Vec<Diagnostic>),
    /// Why there is nothing to compare with (its run was too slow, or did not start): said once,
    /// and it does not run again after the edit.
    Problem(String),
    Cancelled,
}

/// Runs the checkers covering `target` (the edit's final target) on the file as it is, before
/// the edit, or when none covers it asks its language server; `existed` is false for a file
/// the edit creates. `Ok(None)` when nothing checks it; `Err` when the call was cancelled
/// meanwhile: the edit must then not be made (the turn says the tool was stopped).
pub async fn before(ctx: &ToolContext, target: &Path, existed: bool) -> Result<Option<Before>, ToolError> {
    let Some(root) = ctx.workspace.roots().iter().find(|root| target.starts_with(root)).cloned() else {
        return Ok(None);
    };
    let Ok(relative) = target.strip_prefix(&root) else { return Ok(None) };
    let covering: Vec<Checker> = ctx.checks.covering(relative).cloned().collect();
    if covering.is_empty() {
        return server_before(ctx, root, target, existed).await;
    }
    let mut checks = Vec::with_capacity(covering.len());
    for checker in covering {
        let baseline = if existed {
            match run::run(ctx, &checker, &root, target).await {
                Ran::Found(found) => Baseline::Found(found),
                ran => problem(&checker, ran),
            }
        } else {
            Baseline::Found(Vec::new())
        };
        if matches!(baseline, Baseline::Cancelled) || ctx.cancel.is_cancelled() {
            return Err(cancelled());
        }
        checks.push((Source::Checker(checker), baseline));
    }
    Ok(Some(Before { target: target.to_path_buf(), root, checks }))
}

fn cancelled() -> ToolError {
    ToolError::Tell("Cancelled while the file was checked; nothing was changed.".to_owned())
}

/// [`before`] through the file's language server, when one is found for it.
async fn server_before(
    ctx: &ToolContext,
    root: PathBuf,
    target: &Path,
    existed: bool,
) -> Result<Option<Before>, ToolError> {
    let Some(server) = ctx.lsp.server_for(target) else { return Ok(None) };
    let baseline = if existed {
        // A file that is not text (or too large to load) is not sent.
        let Some(text) = text_of(ctx, target).await else { return Ok(None) };
        match ctx.lsp.sync(ctx, &server, (&root, target), text, true).await {
            Answer::NoServer => return Ok(None),
            Answer::Cancelled => return Err(cancelled()),
            Answer::Found(found) => Baseline::Found(found),
            answer @ (Answer::Silent | Answer::Gone(_)) => said(ctx, &server, answer),
        }
    } else {
        Baseline::Found(Vec::new())
    };
    if ctx.cancel.is_cancelled() {
        return Err(cancelled());
    }
    Ok(Some(Before { target: target.to_path_buf(), root, checks: vec![(Source::Server(server), baseline)] }))
}

/// The file's text as it is now, if it is text.
async fn text_of(ctx: &ToolContext, target: &Path) -> Option<String> {
    match super::fs::load(ctx, target).await {
        Ok(super::fs::Old::Text(text)) => Some(text),
        Ok(super::fs::Old::Missing | super::fs::Old::NotUtf8 { .. } | super::fs::Old::TooLarge(_)) | Err(_) => None,
    }
}

/// Runs the checkers again after the edit (or asks the server again) and adds what the edit
/// introduced to `outcome`: to the model's text, and as a text on the call's card.
pub async fn after(ctx: &ToolContext, before: Option<Before>, outcome: &mut ToolOutcome) {
    let Some(before) = before else { return };
    let shown = ctx.workspace.display(&before.target);
    let mut sections = Vec::new();
    for (source, baseline) in before.checks {
        let section = match (baseline, &source) {
            (Baseline::Cancelled, _) => None,
            (Baseline::Problem(problem), Source::Checker(_)) => Some(problem),
            (Baseline::Problem(problem), Source::Server(server)) => {
                // No answer is awaited, but the server keeps the document as it is now.
                if let Some(text) = text_of(ctx, &before.target).await {
                    ctx.lsp.sync(ctx, server, (&before.root, &before.target), text, false).await;
                }
                Some(problem)
            }
            (Baseline::Found(old), Source::Checker(checker)) => {
                match run::run(ctx, checker, &before.root, &before.target).await {
                    Ran::Found(new) => introduced(&old, new).map(|new| section(source.named(), &shown, &new)),
                    ran => match problem(checker, ran) {
                        Baseline::Problem(problem) => Some(problem),
                        Baseline::Found(_) | Baseline::Cancelled => None,
                    },
                }
            }
            (Baseline::Found(old), Source::Server(server)) => {
                let answer = match text_of(ctx, &before.target).await {
                    Some(text) => ctx.lsp.sync(ctx, server, (&before.root, &before.target), text, true).await,
                    None => Answer::NoServer,
                };
                match answer {
                    Answer::Found(new) => introduced(&old, new).map(|new| section(source.named(), &shown, &new)),
                    Answer::NoServer | Answer::Cancelled => None,
                    answer @ (Answer::Silent | Answer::Gone(_)) => match said(ctx, server, answer) {
                        Baseline::Problem(problem) => Some(problem),
                        Baseline::Found(_) | Baseline::Cancelled => None,
                    },
                }
            }
        };
        sections.extend(section);
    }
    for section in sections {
        outcome.output.push_str("\n\n");
        outcome.output.push_str(&section);
        outcome.content.push(ToolContent::Text { text: section });
    }
}

/// A server's answer that holds no diagnostics, as the result says it.
fn said(ctx: &ToolContext, server: &LspServer, answer: Answer) -> Baseline {
    let name = &server.name;
    match answer {
        Answer::Found(found) => Baseline::Found(found),
        Answer::NoServer | Answer::Cancelled => Baseline::Cancelled,
        Answer::Silent => Baseline::Problem(format!(
            "`{name}` did not report within {} s; its diagnostics are left out.",
            ctx.lsp.wait().as_secs_f64()
        )),
        Answer::Gone(why) => Baseline::Problem(format!("`{name}` {why}; its diagnostics are left out.")),
    }
}

/// A run that gave no diagnostics, as the result says it.
fn problem(checker: &Checker, ran: Ran) -> Baseline {
    let command = &checker.command;
    match ran {
        Ran::Found(found) => Baseline::Found(found),
        Ran::Cancelled => Baseline::Cancelled,
        Ran::TimedOut => Baseline::Problem(format!(
            "`{command}` took longer than {} s; its diagnostics are left out.",
            checker.timeout.as_secs()
        )),
        Ran::NotStarted(why) => {
            Baseline::Problem(format!("`{command}` could not be started ({why}); its diagnostics are left out."))
        }
    }
}

/// The diagnostics of `new` that `old` does not account for, as a multiset on (severity, code,
/// message); `None` when there are none.
fn introduced(old: &[Diagnostic], new: Vec<Diagnostic>) -> Option<Vec<Diagnostic>> {
    let key = |found: &Diagnostic| (found.severity, found.code.clone(), found.message.clone());
    let mut had: HashMap<(Severity, Option<String>, String), usize> = HashMap::new();
    for found in old {
        *had.entry(key(found)).or_default() += 1;
    }
    let mut fresh = Vec::new();
    for found in new {
        match had.get_mut(&key(&found)) {
            Some(count) if *count > 0 => *count -= 1,
            Some(_) | None => fresh.push(found),
        }
    }
    fresh.sort_by_key(|found| (found.severity, found.line, found.column));
    (!fresh.is_empty()).then_some(fresh)
}

/// The result's section for the introduced diagnostics (at least one) of one checker or
/// server, `named` as its command line or name.
fn section(named: &str, shown: &str, fresh: &[Diagnostic]) -> String {
    let count = |severity: Severity| fresh.iter().filter(|found| found.severity == severity).count();
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let counts = match (count(Severity::Error), count(Severity::Warning)) {
        (errors, 0) => plural(errors, "error"),
        (0, warnings) => plural(warnings, "warning"),
        (errors, warnings) => format!("{} and {}", plural(errors, "error"), plural(warnings, "warning")),
    };
    let mut text = format!("The edit introduced {counts} in {shown} (`{named}`):");
    let mut bytes = 0;
    let mut listed = 0;
    for found in fresh.iter().take(MOST_SHOWN) {
        let line = one(shown, found);
        if bytes + line.len() > MOST_BYTES && listed > 0 {
            break;
        }
        let line = cut(&line, MOST_BYTES);
        bytes += line.len() + 1;
        text.push('\n');
        text.push_str(line);
        listed += 1;
    }
    if listed < fresh.len() {
        text.push_str(&format!("\n… and {} more.", fresh.len() - listed));
    }
    text
}

/// One diagnostic as a line: `src/lib.rs:12:5: error[E0308]: mismatched types`.
fn one(shown: &str, found: &Diagnostic) -> String {
    let column = found.column.map(|column| format!(":{column}")).unwrap_or_default();
    let code = found.code.as_deref().map(|code| format!("[{code}]")).unwrap_or_default();
    format!("{shown}:{}{column}: {}{code}: {}", found.line, found.severity.word(), found.message)
}

/// `text` cut to at most `most` bytes, at a character's edge.
fn cut(text: &str, most: usize) -> &str {
    if text.len() <= most {
        return text;
    }
    let mut end = most;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests;

//! The permission layer attacked as a hostile model would, each attack kept as the behaviour
//! that holds: `reading` (line continuations, here-documents, braces, escapes, lines that would
//! be slow or deep), `rules` (option values and response files as paths; interpreters,
//! wrappers, runner options and installs exact-only, and unknowable when a rejection exists),
//! `paths` (judged as the kernel resolves them, protected names), `options` (one table per
//! program of the options that run programs or read names and code from files; programs
//! without a table exact-only), `state` (builtins that set what a name runs, `env`'s
//! assignments, `coproc`, NUL, writing redirections), `trees` (recursive readers reaching
//! secrets or links out, links made earlier in the same line), `planning` (plan mode's
//! refusals, whatever a line hides). Each line was checked against
//! bash 5.2.

use super::fake::bash;
use super::*;

mod options;
mod paths;
mod planning;
mod reading;
mod rules;
mod state;
mod trees;

/// The rules "always allow" remembers for each of `approved`, in order.
fn approved(lines: &[&str]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for line in lines {
        let rule = rule_for(&bash(line), Action::Allow, Scope::Session, &rules)
            .unwrap_or_else(|| panic!("{line} offers a rule"));
        rules.push(rule);
    }
    rules
}

pub(super) fn deny(pattern: &str) -> Vec<Rule> {
    vec![Rule::new(Permission::Bash, pattern, Action::Deny, Scope::Session)]
}

/// Lines (after the rules of `approved`) that ask-mode allows although they must ask.
pub(super) fn wrongly_allowed(approved_lines: &[&str], lines: &[&str]) -> Vec<String> {
    let rules = approved(approved_lines);
    lines
        .iter()
        .filter(|line| decide(&bash(line), Mode::Ask, &rules) == Decision::Allow)
        .map(|line| format!("{line:?} allowed by {:?}", rules.iter().map(|r| &r.pattern).collect::<Vec<_>>()))
        .collect()
}

/// Lines that bypass mode allows despite a rejection of `pattern`.
pub(super) fn not_rejected(pattern: &str, lines: &[&str]) -> Vec<String> {
    let rules = deny(pattern);
    lines
        .iter()
        .filter(|line| decide(&bash(line), Mode::Bypass, &rules) == Decision::Allow)
        .map(|line| format!("{line:?} runs `{pattern}` in bypass"))
        .collect()
}

//! Permission policy, pure: (request, mode, remembered rules) → allow, ask or deny.
//!
//! Reads inside the workspace run freely. Writes, edits and shell commands ask unless a mode or a
//! remembered rule says otherwise; anything outside the workspace always asks (remembered "allow"
//! rules never reach outside it). Deny rules win over allow rules. A remembered shell rule matches
//! a command prefix (`cargo test` matches `cargo test --lib`) and never a compound command, so
//! `cargo test && rm -rf ~` still asks.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::tools::Workspace;

/// What a tool call wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Read,
    Edit,
    Bash,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Edit => "edit",
            Permission::Bash => "bash",
        }
    }
}

/// One thing to decide about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionRequest {
    pub permission: Permission,
    /// The absolute path, or the shell command.
    pub target: String,
    /// The path relative to the working directory, when it is inside the workspace.
    pub relative: Option<String>,
    pub inside: bool,
}

impl PermissionRequest {
    pub fn for_path(permission: Permission, workspace: &Workspace, path: &Path) -> Self {
        let inside = workspace.contains(path);
        let relative = path.strip_prefix(workspace.cwd()).ok().map(|p| p.display().to_string());
        Self { permission, target: path.display().to_string(), relative: relative.filter(|_| inside), inside }
    }

    pub fn for_command(command: &str) -> Self {
        Self { permission: Permission::Bash, target: command.trim().to_owned(), relative: None, inside: true }
    }
}

/// The session's permission posture (`session/set_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ask before edits and commands.
    Ask,
    /// Edits inside the workspace run; commands still ask.
    AcceptEdits,
    /// Edits and commands are refused.
    ReadOnly,
    /// Everything runs without asking.
    Bypass,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Ask, Mode::AcceptEdits, Mode::ReadOnly, Mode::Bypass];

    pub fn id(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::ReadOnly => "read-only",
            Mode::Bypass => "bypass",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::ReadOnly => "Read only",
            Mode::Bypass => "Bypass permissions",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Mode::Ask => "Ask before editing files or running commands",
            Mode::AcceptEdits => "Edit files in the workspace without asking; ask before commands",
            Mode::ReadOnly => "Read and search only; edits and commands are refused",
            Mode::Bypass => "Run everything without asking",
        }
    }

    pub fn parse(id: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| mode.id() == id)
    }
}

/// What a remembered rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Deny,
}

/// Where a rule lives: with the session, or with the project (every session in that directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Session,
    Project,
}

/// A remembered answer: `{permission, pattern, action, source}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub permission: Permission,
    /// A glob over workspace-relative paths, or a command prefix.
    pub pattern: String,
    pub action: Action,
    pub source: Scope,
}

/// The verdict on one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask,
    /// Refused without asking; the reason is for the model.
    Deny(String),
}

/// Decides a request under a mode and the remembered rules.
pub fn decide(request: &PermissionRequest, mode: Mode, rules: &[Rule]) -> Decision {
    let matching = |action: Action| {
        rules
            .iter()
            .find(|rule| rule.action == action && rule.permission == request.permission && matches(rule, request))
    };
    if let Some(rule) = matching(Action::Deny) {
        return Decision::Deny(format!(
            "a remembered rule denies {} `{}` ({} scope)",
            request.permission.as_str(),
            rule.pattern,
            scope_name(rule.source)
        ));
    }
    match (request.permission, mode) {
        (Permission::Read, _) if request.inside => return Decision::Allow,
        (_, Mode::Bypass) => return Decision::Allow,
        (Permission::Edit | Permission::Bash, Mode::ReadOnly) => {
            return Decision::Deny(
                "the session is in read-only mode; switch the mode to allow edits and commands".into(),
            );
        }
        (Permission::Edit, Mode::AcceptEdits) if request.inside => return Decision::Allow,
        (Permission::Read | Permission::Edit | Permission::Bash, Mode::Ask | Mode::AcceptEdits | Mode::ReadOnly) => {}
    }
    if request.inside && matching(Action::Allow).is_some() { Decision::Allow } else { Decision::Ask }
}

/// The rule that "always" answers to `request` would remember.
pub fn rule_for(request: &PermissionRequest, action: Action, source: Scope) -> Rule {
    let pattern = match request.permission {
        Permission::Read | Permission::Edit => "**".to_owned(),
        Permission::Bash => command_prefix(&request.target),
    };
    Rule { permission: request.permission, pattern, action, source }
}

/// How "always" is described to the user, e.g. "`cargo test` commands" or "edits in the workspace".
pub fn describe_rule(rule: &Rule) -> String {
    match rule.permission {
        Permission::Read => "reads in the workspace".to_owned(),
        Permission::Edit => "edits in the workspace".to_owned(),
        Permission::Bash => format!("`{}` commands", rule.pattern),
    }
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Session => "session",
        Scope::Project => "project",
    }
}

fn matches(rule: &Rule, request: &PermissionRequest) -> bool {
    match rule.permission {
        Permission::Read | Permission::Edit => {
            let Some(relative) = &request.relative else { return false };
            globset::Glob::new(&rule.pattern).map(|glob| glob.compile_matcher().is_match(relative)).unwrap_or(false)
        }
        Permission::Bash => {
            let prefix: Vec<&str> = rule.pattern.split_whitespace().collect();
            let starts = |command: &str| {
                let words: Vec<&str> = command.split_whitespace().collect();
                !prefix.is_empty() && words.starts_with(&prefix)
            };
            match rule.action {
                // An allow covers only a plain command; a deny catches the prefix in any part of it.
                Action::Allow => is_simple(&request.target) && starts(&request.target),
                Action::Deny => segments(&request.target).any(starts),
            }
        }
    }
}

/// The first word, and the second when it is a subcommand (`git status`, `cargo test`).
fn command_prefix(command: &str) -> String {
    let mut words = command.split_whitespace();
    let first = words.next().unwrap_or_default();
    match words.next() {
        Some(second)
            if second.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !second.starts_with('-') =>
        {
            format!("{first} {second}")
        }
        _ => first.to_owned(),
    }
}

const SHELL_OPERATORS: [&str; 10] = [";", "&", "|", "`", "$(", ">", "<", "\n", "(", ")"];

/// Whether a command is one plain command, with no chaining, pipes, substitution or redirection.
fn is_simple(command: &str) -> bool {
    !SHELL_OPERATORS.iter().any(|op| command.contains(op))
}

/// The commands a compound command is made of, roughly.
fn segments(command: &str) -> impl Iterator<Item = &str> {
    command.split([';', '&', '|', '\n', '(', ')', '`']).map(str::trim).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests;

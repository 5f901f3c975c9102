//! Permission policy, pure: (request, mode, remembered rules) → allow, ask or deny.
//!
//! A request carries the facts: for a path, where its final target lies (inside the workspace,
//! protected, outside, unknown); for a command line, what it runs once parsed and which of its
//! arguments reach outside the workspace. From those, [`decide`] applies these rules:
//! - A rejection rule holds in every mode, bypass included, however the program is spelled or
//!   wrapped; when a line's programs cannot all be known and a rejection exists, it asks.
//! - Reads inside the workspace run freely, except secrets (`.env*`, cairn's data).
//! - Outside the workspace, in protected places, and wherever a path or a line cannot be read,
//!   it asks (bypass aside), and no remembered "allow" applies.
//! - A remembered command rule covers a program (and subcommand) whose arguments stay in the
//!   workspace, or one exact line; a line is allowed when each of its commands is covered.
//!   Shells, wrappers and interpreters are only ever remembered exactly.
//! - A tool of another program (`tool`: an MCP tool), known only by its name, asks unless a rule
//!   names it; accept-edits runs it unasked only when it says it is read-only.
//! - A fetch of a web page (`fetch`) asks unless a rule names its host (`host.rs`), in every mode
//!   but bypass: it reaches outside the workspace as a read there would, and it is no edit, so
//!   accept-edits does not allow it; read-only asks too, since it only reads.
//! - Plan mode is for reading and planning: edits, lines that run anything but readers
//!   (`reading.rs`) and tools of other programs that do not say they only read are refused,
//!   telling the model to present its plan; the rest is judged as in ask mode, and an "allow"
//!   rule never lifts a refusal. Leaving it (`Subject::Plan`, the `exit_plan` tool) asks the user
//!   in plan mode and is refused in every other mode; no rule applies to it.
//!
//! [`rule_for`] is the rule an "always" answer remembers. Rules live with a session, a project,
//! or one headless run ([`Scope::Run`]: `exec --allow/--deny`, in memory only).

pub mod command;
mod facts;
mod gather;
pub mod host;
pub mod pattern;
mod reading;
pub mod shell;

use std::borrow::Cow;
use std::cell::OnceCell;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

pub use facts::{CommandFacts, Paths, Subject, names_subcommand};
use pattern::Pattern;

use crate::workspace::Place;

/// What a tool call wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Read,
    Edit,
    Bash,
    /// A tool of another program (an MCP server's), known by its name.
    Tool,
    /// A web page, known by its host.
    Fetch,
}

impl Permission {
    pub const ALL: [Permission; 5] =
        [Permission::Read, Permission::Edit, Permission::Bash, Permission::Tool, Permission::Fetch];

    /// The permission an [`as_str`](Self::as_str) name stands for.
    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|permission| permission.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Edit => "edit",
            Permission::Bash => "bash",
            Permission::Tool => "tool",
            Permission::Fetch => "fetch",
        }
    }
}

/// One thing to decide about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PermissionRequest {
    pub permission: Permission,
    /// What the user is asked about: a path's final target, or the command line.
    pub target: String,
    pub subject: Subject,
}

/// The session's permission posture (`session/set_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ask before edits and commands.
    Ask,
    /// Edits inside the workspace run; commands still ask.
    AcceptEdits,
    /// Read and plan: edits and commands that may change something are refused until the user
    /// approves a plan (`exit_plan`).
    Plan,
    /// Edits and commands are refused.
    ReadOnly,
    /// Everything runs without asking, except what a rule rejects.
    Bypass,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Ask, Mode::AcceptEdits, Mode::Plan, Mode::ReadOnly, Mode::Bypass];

    pub fn id(self) -> &'static str {
        match self {
            Mode::Ask => "ask",
            Mode::AcceptEdits => "accept-edits",
            Mode::Plan => "plan",
            Mode::ReadOnly => "read-only",
            Mode::Bypass => "bypass",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Ask => "Ask",
            Mode::AcceptEdits => "Accept edits",
            Mode::Plan => "Plan",
            Mode::ReadOnly => "Read only",
            Mode::Bypass => "Bypass permissions",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Mode::Ask => "Ask before editing files or running commands",
            Mode::AcceptEdits => "Edit files in the workspace without asking; ask before commands",
            Mode::Plan => "Read and plan only; the plan is shown for review before anything changes",
            Mode::ReadOnly => "Read and search only; edits and commands are refused",
            Mode::Bypass => "Run everything without asking, except what a rule rejects",
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

impl Action {
    pub const ALL: [Action; 2] = [Action::Allow, Action::Deny];

    /// The action an [`as_str`](Self::as_str) name stands for.
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|action| action.as_str() == name)
    }

    /// Its name as stored (the same as its JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        }
    }
}

/// Where a rule lives: with the session, with the project (every session in that directory),
/// or with one headless run (`cairn exec --allow/--deny`: kept in memory, never stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Session,
    Project,
    Run,
}

/// A remembered answer: `{permission, pattern, action, source}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rule {
    pub permission: Permission,
    /// A command rule (`cargo test`, `=exact line`) or a path glob; see [`pattern`].
    pub pattern: String,
    pub action: Action,
    pub source: Scope,
    /// The pattern as read, the first time a decision needed it (with the text it was read
    /// from, so a changed pattern is read again).
    #[serde(skip)]
    read: OnceLock<(String, Pattern)>,
    /// For a stand-in ([`Rule::unreadable`]), the stored rule it stands for; `None` for a rule
    /// that was read.
    #[serde(skip)]
    stands_for: Option<Unreadable>,
}

/// The stored rule a stand-in ([`Rule::unreadable`]) stands for, so revoking it removes exactly
/// that rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// A row of the project's rules, by its id.
    ProjectRow(i64),
    /// An entry of the session's rules (revoking rewrites the session's list without it).
    SessionEntry,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        (self.permission, &self.pattern, self.action, self.source)
            == (other.permission, &other.pattern, other.action, other.source)
    }
}

impl Eq for Rule {}

impl Rule {
    pub fn new(permission: Permission, pattern: &str, action: Action, source: Scope) -> Self {
        Rule { permission, pattern: pattern.to_owned(), action, source, read: OnceLock::new(), stands_for: None }
    }

    /// The pattern, read once (globs compiled) and kept with the rule.
    fn read(&self) -> Cow<'_, Pattern> {
        let (text, pattern) = self.read.get_or_init(|| (self.pattern.clone(), Pattern::read(self)));
        if *text == self.pattern { Cow::Borrowed(pattern) } else { Cow::Owned(Pattern::read(self)) }
    }

    /// A rule given on the command line as `PERMISSION:PATTERN` (`bash:cargo test`,
    /// `edit:src/**`, `tool:mcp__github__*`, `bash:=make deploy`, `fetch:*.rust-lang.org`), for
    /// this run only. A pattern
    /// that could not be applied is refused here, saying why, rather than made to ask.
    pub fn for_run(action: Action, text: &str) -> Result<Self, String> {
        let kinds = Permission::ALL.map(Permission::as_str).join(", ");
        let Some((permission, pattern)) = text.split_once(':') else {
            return Err(format!(
                "`{text}` is not PERMISSION:PATTERN (e.g. `bash:cargo test`); PERMISSION is one of {kinds}"
            ));
        };
        let Some(permission) = Permission::parse(permission.trim()) else {
            return Err(format!("`{text}`: unknown permission `{permission}`; use one of {kinds}"));
        };
        let rule = Rule::new(permission, pattern.trim(), action, Scope::Run);
        match &*rule.read() {
            Pattern::Unreadable(why) => Err(format!("`{text}`: {why}")),
            Pattern::Program(words) if action == Action::Allow => match command::program_rule_applies(words) {
                Ok(()) => Ok(rule),
                Err(why) => Err(format!(
                    "`{text}` would never apply ({why}); allow one exact line with `bash:={}`",
                    words.join(" ")
                )),
            },
            Pattern::Program(_) | Pattern::Exact(_) | Pattern::Paths { .. } | Pattern::Names(_) | Pattern::Hosts(_) => {
                Ok(rule)
            }
        }
    }

    /// A stand-in for the stored rule `stands_for`, which could not be read (`raw` is its text):
    /// it makes decisions ask until it is revoked, since it may have been a rejection.
    pub fn unreadable(raw: &str, stands_for: Unreadable) -> Self {
        let raw: String = raw.chars().take(200).collect();
        let source = match stands_for {
            Unreadable::ProjectRow(_) => Scope::Project,
            Unreadable::SessionEntry => Scope::Session,
        };
        let mut rule = Rule::new(Permission::Bash, &format!("{}{raw}", pattern::UNREADABLE), Action::Deny, source);
        rule.stands_for = Some(stands_for);
        rule
    }

    /// The stored rule this one stands in for, if it is a stand-in ([`Rule::unreadable`]).
    pub fn stands_for(&self) -> Option<Unreadable> {
        self.stands_for
    }
}

/// The verdict on one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Ask the user; the reason is shown with the question.
    Ask(String),
    /// Refused without asking; the reason is for the model.
    Deny(String),
}

/// Decides a request under a mode and the remembered rules.
/// For a session confined to its workspace (a principal's of `cairn serve --auth`, who answers
/// its own questions and is not the user the server runs as): the refusal of a path outside
/// the workspace, a secret or one that cannot be judged, whatever the mode; `None` for any
/// other request.
pub fn beyond_confinement(request: &PermissionRequest) -> Option<Decision> {
    match &request.subject {
        Subject::Path { place: Place::Outside | Place::Unknown(_) | Place::Protected { secret: true, .. } } => {
            Some(Decision::Deny(format!(
                "{} is outside this session's workspace or secret, and a client of `cairn serve --auth` reaches \
                 only its session's workspace, whatever the mode",
                request.target
            )))
        }
        _ => None,
    }
}

pub fn decide(request: &PermissionRequest, mode: Mode, rules: &[Rule]) -> Decision {
    let mut unreadable = None;
    // What a command line runs, worked out once if a rejection needs it.
    let runs = OnceCell::new();
    for rule in rules {
        let pattern = rule.read();
        let applies = rule.permission == request.permission || rule.pattern.starts_with(pattern::UNREADABLE);
        if let Pattern::Unreadable(why) = pattern.as_ref()
            && applies
        {
            unreadable.get_or_insert_with(|| format!("{why}; revoke it with /permissions"));
            continue;
        }
        if rule.action == Action::Deny && rule.permission == request.permission {
            match rejects(&pattern, request, &runs) {
                Some(Rejects::Yes) => {
                    return Decision::Deny(format!("a remembered rule rejects {}", describe_rule(rule)));
                }
                Some(Rejects::Maybe(why)) => {
                    return Decision::Ask(format!(
                        "{why}, so cairn cannot tell whether it runs what a remembered rule rejects ({})",
                        describe_rule(rule)
                    ));
                }
                None => {}
            }
        }
    }
    let decision = by_mode_and_rules(request, mode, rules);
    match (decision, unreadable) {
        (Decision::Allow, Some(why)) => Decision::Ask(why),
        (decision, _) => decision,
    }
}

enum Rejects {
    Yes,
    /// Cannot be ruled out; why.
    Maybe(String),
}

fn rejects(pattern: &Pattern, request: &PermissionRequest, runs: &OnceCell<Vec<command::Run>>) -> Option<Rejects> {
    match (&request.subject, pattern) {
        (Subject::Command(facts), Pattern::Exact(line)) => (facts.line == *line).then_some(Rejects::Yes),
        (Subject::Command(facts), Pattern::Program(words)) => facts.runs_program(words, runs),
        (Subject::Path { place }, Pattern::Paths { .. }) => {
            pattern.covers_path(place, &request.target).then_some(Rejects::Yes)
        }
        (Subject::Tool { .. }, Pattern::Names(glob)) => glob.is_match(&request.target).then_some(Rejects::Yes),
        (Subject::Host { host }, Pattern::Hosts(hosts)) => hosts.covers(host).then_some(Rejects::Yes),
        // Judged by the mode alone: `tool:*` rejecting every MCP tool must not shut plan mode.
        (Subject::Plan, _) => None,
        (
            Subject::Command(_),
            Pattern::Paths { .. } | Pattern::Names(_) | Pattern::Hosts(_) | Pattern::Unreadable(_),
        )
        | (
            Subject::Path { .. },
            Pattern::Program(_) | Pattern::Exact(_) | Pattern::Names(_) | Pattern::Hosts(_) | Pattern::Unreadable(_),
        )
        | (
            Subject::Tool { .. },
            Pattern::Program(_)
            | Pattern::Exact(_)
            | Pattern::Paths { .. }
            | Pattern::Hosts(_)
            | Pattern::Unreadable(_),
        )
        | (
            Subject::Host { .. },
            Pattern::Program(_)
            | Pattern::Exact(_)
            | Pattern::Paths { .. }
            | Pattern::Names(_)
            | Pattern::Unreadable(_),
        ) => None,
    }
}

fn by_mode_and_rules(request: &PermissionRequest, mode: Mode, rules: &[Rule]) -> Decision {
    let allowed = || {
        rules
            .iter()
            .filter(|rule| rule.action == Action::Allow && rule.permission == request.permission)
            .map(Rule::read)
            .collect::<Vec<_>>()
    };
    match &request.subject {
        Subject::Path { place } => {
            let edit = request.permission != Permission::Read;
            match (mode, place) {
                (Mode::Bypass, _) => Decision::Allow,
                (Mode::ReadOnly, _) if edit => Decision::Deny(READ_ONLY.into()),
                (Mode::Plan, _) if edit => Decision::Deny(PLANNING.into()),
                (_, Place::Unknown(why)) => Decision::Ask(why.clone()),
                (_, Place::Outside) => Decision::Ask(format!("{} is outside the workspace", request.target)),
                (_, Place::Protected { why, secret, .. }) if edit || *secret => {
                    Decision::Ask(format!("{} is protected: {why}", request.target))
                }
                (_, Place::Inside { .. } | Place::Protected { .. }) if !edit => Decision::Allow,
                (Mode::AcceptEdits, Place::Inside { .. }) => Decision::Allow,
                (Mode::Ask | Mode::AcceptEdits | Mode::Plan | Mode::ReadOnly, _) => {
                    if allowed().iter().any(|p| p.covers_path(place, &request.target)) {
                        Decision::Allow
                    } else {
                        Decision::Ask("edits ask in this mode".into())
                    }
                }
            }
        }
        Subject::Command(facts) => match mode {
            Mode::Bypass => Decision::Allow,
            Mode::ReadOnly => Decision::Deny(READ_ONLY.into()),
            Mode::Plan if !facts.only_reads() => Decision::Deny(PLANNING.into()),
            Mode::Ask | Mode::AcceptEdits | Mode::Plan => {
                match facts.uncovered(&allowed(), mode == Mode::AcceptEdits) {
                    Ok(()) => Decision::Allow,
                    Err(why) => Decision::Ask(why),
                }
            }
        },
        Subject::Tool { read_only, owner } => match mode {
            Mode::Bypass => Decision::Allow,
            Mode::ReadOnly if !read_only => Decision::Deny(READ_ONLY.into()),
            Mode::Plan if !read_only => Decision::Deny(PLANNING.into()),
            Mode::AcceptEdits if *read_only => Decision::Allow,
            Mode::Ask | Mode::AcceptEdits | Mode::Plan | Mode::ReadOnly => {
                if allowed().iter().any(|pattern| pattern.covers_name(&request.target)) {
                    Decision::Allow
                } else {
                    Decision::Ask(format!(
                        "`{}` is a tool of {owner}, and cairn cannot see what it does",
                        request.target
                    ))
                }
            }
        },
        Subject::Host { host } => match mode {
            Mode::Bypass => Decision::Allow,
            Mode::Ask | Mode::AcceptEdits | Mode::Plan | Mode::ReadOnly => {
                if allowed().iter().any(|pattern| pattern.covers_host(host)) {
                    Decision::Allow
                } else {
                    Decision::Ask(format!("fetching reads `{host}` over the network, outside the workspace"))
                }
            }
        },
        Subject::Plan => match mode {
            Mode::Plan => Decision::Ask("the plan is the user's to approve".into()),
            Mode::Ask | Mode::AcceptEdits | Mode::ReadOnly | Mode::Bypass => Decision::Deny(format!(
                "`{}` only leaves plan mode, and the session is in {} mode: there is no plan to present; \
                 go on with the task as this mode allows",
                request.target,
                mode.id()
            )),
        },
    }
}

const READ_ONLY: &str = "the session is in read-only mode; switch the mode to allow edits and commands";

/// Why plan mode refuses a change: what the model should do instead.
const PLANNING: &str = "the session is in plan mode: nothing may be changed (no edits, no commands \
     that may write, no tools that may change things) until the user approves a plan. Keep reading and \
     searching, then present the whole plan with `exit_plan`";

/// The rule an "always" answer to `request` remembers, given the rules already remembered;
/// `None` when no rule may cover it (outside the workspace, protected, unreadable).
pub fn rule_for(request: &PermissionRequest, action: Action, source: Scope, rules: &[Rule]) -> Option<Rule> {
    let pattern = match (&request.subject, action) {
        (Subject::Path { place: Place::Inside { .. } }, Action::Allow) => "**".to_owned(),
        (Subject::Path { .. }, Action::Allow) => return None,
        (Subject::Path { place: Place::Inside { relative } | Place::Protected { relative, .. } }, Action::Deny) => {
            pattern::escape_glob(relative)
        }
        (Subject::Path { place: Place::Outside }, Action::Deny) => pattern::escape_glob(&request.target),
        (Subject::Path { place: Place::Unknown(_) }, Action::Deny) => return None,
        (Subject::Command(facts), Action::Allow) => {
            let existing: Vec<_> = rules
                .iter()
                .filter(|r| r.action == Action::Allow && r.permission == Permission::Bash)
                .map(Rule::read)
                .collect();
            facts.allow_pattern(&existing)?
        }
        (Subject::Command(facts), Action::Deny) => facts.deny_pattern(),
        (Subject::Tool { .. }, Action::Allow | Action::Deny) => pattern::escape_glob(&request.target),
        (Subject::Host { host }, Action::Allow | Action::Deny) => host.clone(),
        (Subject::Plan, Action::Allow | Action::Deny) => return None,
    };
    Some(Rule::new(request.permission, &pattern, action, source))
}

/// What a hook (`PreToolUse`) said about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookAnswer {
    Allow,
    Ask(String),
    Deny(String),
}

/// The decision on `request` once a hook's answer is taken in: a hook's deny is a rejection
/// (it holds in every mode, bypass included); its ask asks whatever the mode and rules say,
/// unless they refuse; its allow lifts a question only where a remembered "allow" could: a path
/// inside the workspace and not protected, a line that parses, stays there and computes none of
/// its words, another program's tool, a web host. It never turns a refusal into an allow, nor
/// lifts a question about a place outside the workspace, a protected one, or leaving plan mode.
pub fn with_hook(decision: Decision, answer: &HookAnswer, request: &PermissionRequest) -> Decision {
    match (decision, answer) {
        (_, HookAnswer::Deny(why)) => Decision::Deny(format!("a hook denied it: {why}")),
        (Decision::Deny(why), _) => Decision::Deny(why),
        (Decision::Allow, HookAnswer::Ask(why)) => Decision::Ask(format!("a hook asks: {why}")),
        (Decision::Ask(why), HookAnswer::Ask(hook)) => Decision::Ask(format!("{why}; a hook asks too: {hook}")),
        (Decision::Allow, HookAnswer::Allow) => Decision::Allow,
        (Decision::Ask(why), HookAnswer::Allow) => {
            if hook_may_allow(request) {
                Decision::Allow
            } else {
                Decision::Ask(why)
            }
        }
    }
}

/// Whether a hook's allow may lift the question about `request`.
fn hook_may_allow(request: &PermissionRequest) -> bool {
    match &request.subject {
        Subject::Path { place: Place::Inside { .. } } => true,
        Subject::Path { place: Place::Protected { .. } | Place::Outside | Place::Unknown(_) } => false,
        // A word computed when the line runs (`"$HOME/.ssh/id_rsa"`, `$(…)`) may lead anywhere:
        // only the user lifts that question (a URL, kept with them, asks too).
        Subject::Command(facts) => facts.script.is_ok() && facts.escapes.is_empty() && facts.computed.is_empty(),
        Subject::Tool { .. } | Subject::Host { .. } => true,
        Subject::Plan => false,
    }
}

/// The programs (each with its subcommand words, if any) that rules reject: what the supervisor
/// refuses to start, however a command spells or hides it. Exact-line rules are about lines and
/// stay with the parser.
pub fn rejected_programs(rules: &[Rule]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for rule in rules.iter().filter(|rule| rule.action == Action::Deny && rule.permission == Permission::Bash) {
        if let Pattern::Program(words) = rule.read().as_ref()
            && !out.contains(words)
        {
            out.push(words.clone());
        }
    }
    out
}

/// How a rule is described to the user, in the question that offers it and in `/permissions`.
pub fn describe_rule(rule: &Rule) -> String {
    pattern::describe(rule)
}

#[cfg(test)]
mod attacks;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;

//! Slash commands: what the prompt box offers (`available_commands_update`) and how a prompt that
//! starts with one is read. A prompt naming no known command goes to the model unchanged.

use crate::history::Part;

/// One advertised command: name, description, input hint.
pub struct CommandInfo {
    pub name: &'static str,
    pub description: &'static str,
    pub hint: Option<&'static str>,
}

pub const COMMANDS: &[CommandInfo] = &[
    CommandInfo {
        name: "compact",
        description: "Summarize older messages to free context; nothing is deleted",
        hint: Some("what the summary should keep (optional)"),
    },
    CommandInfo {
        name: "rewind",
        description: "Hide the last n turns (default 1); the conversation continues from before them",
        hint: Some("number of turns"),
    },
    CommandInfo { name: "fork", description: "Copy this conversation into a new session", hint: None },
    CommandInfo { name: "model", description: "Show the models, or switch to one", hint: Some("provider/model") },
    CommandInfo { name: "status", description: "Context in use, limits, queue and state", hint: None },
    CommandInfo { name: "mcp", description: "The MCP servers: state, tools, errors", hint: None },
    CommandInfo { name: "jobs", description: "The background jobs: command, state, how they ended", hint: None },
    CommandInfo {
        name: "hooks",
        description: "The hooks loaded, where from, and whether they are trusted",
        hint: None,
    },
    CommandInfo {
        name: "permissions",
        description: "List remembered permission rules, revoke them, or keep one for the whole project",
        hint: Some("revoke <n> | revoke all | project <n>"),
    },
];

/// A command the user typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slash {
    Compact(Option<String>),
    Rewind(usize),
    Fork,
    Model(Option<String>),
    Status,
    Mcp,
    Jobs,
    Hooks,
    Permissions(Option<RuleChange>),
}

/// What `/permissions` changes in the remembered rules; a rule is named by its number in the
/// `/permissions` list, from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleChange {
    /// Forget one rule.
    Revoke(usize),
    /// Forget every rule.
    RevokeAll,
    /// Keep a session's rule for the whole project (every session in its directory).
    Project(usize),
}

impl Slash {
    /// Read-only or instant commands answer at once, even while a turn runs; the ones that change
    /// the history or the rules a turn is using wait their turn in the queue like a prompt.
    pub fn is_immediate(&self) -> bool {
        match self {
            Slash::Status | Slash::Mcp | Slash::Jobs | Slash::Hooks | Slash::Permissions(None) | Slash::Model(_) => {
                true
            }
            Slash::Compact(_) | Slash::Rewind(_) | Slash::Fork | Slash::Permissions(Some(_)) => false,
        }
    }
}

/// `None` when the prompt is not a command; `Some(Err)` when it is one used wrongly (the message
/// says how to use it).
pub fn parse(parts: &[Part]) -> Option<Result<Slash, String>> {
    let [Part::Text { text }] = parts else { return None };
    let line = text.trim().strip_prefix('/')?;
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    let arg = (!rest.is_empty()).then(|| rest.to_owned());
    let command = match name {
        "compact" => Ok(Slash::Compact(arg)),
        "rewind" => match arg.as_deref().map(str::parse::<usize>) {
            None => Ok(Slash::Rewind(1)),
            Some(Ok(n)) if n > 0 => Ok(Slash::Rewind(n)),
            Some(_) => Err(format!("/rewind takes a number of turns (1 or more), not `{rest}`")),
        },
        "fork" => Ok(Slash::Fork),
        "model" => Ok(Slash::Model(arg)),
        "status" => Ok(Slash::Status),
        "mcp" => Ok(Slash::Mcp),
        "jobs" => Ok(Slash::Jobs),
        "hooks" => Ok(Slash::Hooks),
        "permissions" => match rest.split_whitespace().collect::<Vec<_>>()[..] {
            [] => Ok(Slash::Permissions(None)),
            ["revoke", "all"] => Ok(Slash::Permissions(Some(RuleChange::RevokeAll))),
            ["revoke", n] => match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Slash::Permissions(Some(RuleChange::Revoke(n)))),
                _ => Err(format!("/permissions revoke takes a rule number from /permissions, or `all`, not `{n}`")),
            },
            ["project", n] => match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Slash::Permissions(Some(RuleChange::Project(n)))),
                _ => Err(format!("/permissions project takes a rule number from /permissions, not `{n}`")),
            },
            _ => Err("use /permissions to list the rules, then /permissions revoke <n>, /permissions revoke all \
                          or /permissions project <n>"
                .into()),
        },
        _ => return None,
    };
    Some(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Option<Result<Slash, String>> {
        parse(&[Part::Text { text: text.to_owned() }])
    }

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(read("/compact"), Some(Ok(Slash::Compact(None))));
        assert_eq!(
            read("/compact keep the API decisions"),
            Some(Ok(Slash::Compact(Some("keep the API decisions".into()))))
        );
        assert_eq!(read(" /rewind 2 "), Some(Ok(Slash::Rewind(2))));
        assert_eq!(read("/rewind"), Some(Ok(Slash::Rewind(1))));
        assert!(read("/rewind zero").unwrap().is_err());
        assert_eq!(read("/permissions revoke 3"), Some(Ok(Slash::Permissions(Some(RuleChange::Revoke(3))))));
        assert_eq!(read("/permissions revoke all"), Some(Ok(Slash::Permissions(Some(RuleChange::RevokeAll)))));
        assert_eq!(read("/permissions project 2"), Some(Ok(Slash::Permissions(Some(RuleChange::Project(2))))));
        assert!(read("/permissions project all").unwrap().unwrap_err().contains("rule number"));
        assert!(read("/permissions project").unwrap().unwrap_err().contains("/permissions project <n>"));
        assert_eq!(
            read("/model anthropic/claude-haiku-4-5"),
            Some(Ok(Slash::Model(Some("anthropic/claude-haiku-4-5".into()))))
        );
    }

    #[test]
    fn anything_else_goes_to_the_model() {
        assert_eq!(read("/usr/bin is where it lives"), None);
        assert_eq!(read("please /compact this"), None);
        assert_eq!(parse(&[Part::Text { text: "/status".into() }, Part::Text { text: "more".into() }]), None);
    }
}

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
        description: "Go back to before the last n turns (default 1): files, conversation or both (default); `undo` puts back the files of the last rewind",
        hint: Some("[n] [code|conversation|both] | undo"),
    },
    CommandInfo {
        name: "checkpoints",
        description: "The file checkpoints of this session: prompt, time, files changed",
        hint: None,
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
    Rewind(Rewinding),
    Checkpoints,
    Fork,
    Model(Option<String>),
    Status,
    Mcp,
    Jobs,
    Hooks,
    Permissions(Option<RuleChange>),
}

/// What `/rewind` goes back on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewinding {
    /// The last `turns` turns: their files, their messages, or both.
    Turns { turns: usize, reach: Reach },
    /// The files of the last rewind: back to what they were before it.
    Undo,
}

/// What a rewind of turns puts back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    Code,
    Conversation,
    Both,
}

impl Reach {
    pub fn code(self) -> bool {
        matches!(self, Reach::Code | Reach::Both)
    }

    pub fn conversation(self) -> bool {
        matches!(self, Reach::Conversation | Reach::Both)
    }
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
            // It reads the store only, but a turn's capture may be under way.
            Slash::Checkpoints => false,
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
        "rewind" => rewinding(rest).map(Slash::Rewind),
        "checkpoints" if rest.is_empty() => Ok(Slash::Checkpoints),
        "checkpoints" => Err(format!("/checkpoints takes nothing, not `{rest}`")),
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

/// `/rewind`'s words: `[n] [code|conversation|both]` in either order, or `undo`.
fn rewinding(rest: &str) -> Result<Rewinding, String> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    if words == ["undo"] {
        return Ok(Rewinding::Undo);
    }
    let (mut turns, mut reach) = (None, None);
    for word in words {
        match (word, word.parse::<usize>()) {
            (_, Ok(n)) if n > 0 && turns.is_none() => turns = Some(n),
            ("code" | "files", _) if reach.is_none() => reach = Some(Reach::Code),
            ("conversation" | "chat", _) if reach.is_none() => reach = Some(Reach::Conversation),
            ("both" | "all", _) if reach.is_none() => reach = Some(Reach::Both),
            _ => {
                return Err(format!(
                    "/rewind takes a number of turns (1 or more) and what to put back (code, conversation or \
                     both), or `undo`; not `{rest}`"
                ));
            }
        }
    }
    Ok(Rewinding::Turns { turns: turns.unwrap_or(1), reach: reach.unwrap_or(Reach::Both) })
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
        let turns = |turns, reach| Some(Ok(Slash::Rewind(Rewinding::Turns { turns, reach })));
        assert_eq!(read(" /rewind 2 "), turns(2, Reach::Both));
        assert_eq!(read("/rewind"), turns(1, Reach::Both));
        assert_eq!(read("/rewind code 3"), turns(3, Reach::Code));
        assert_eq!(read("/rewind 1 conversation"), turns(1, Reach::Conversation));
        assert_eq!(read("/rewind undo"), Some(Ok(Slash::Rewind(Rewinding::Undo))));
        assert!(read("/rewind zero").unwrap().is_err());
        assert!(read("/rewind 2 3").unwrap().is_err());
        assert!(read("/rewind code code").unwrap().is_err());
        assert!(read("/rewind undo 2").unwrap().is_err());
        assert_eq!(read("/checkpoints"), Some(Ok(Slash::Checkpoints)));
        assert!(read("/checkpoints 2").unwrap().is_err());
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

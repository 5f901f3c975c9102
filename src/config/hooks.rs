//! Hooks as written: cairn's `[hooks]` in config.toml and the `hooks` object of Claude Code's
//! `settings.json` files, which have the same shape (an event name → groups, each a `matcher`
//! and the `hooks` it runs), read into one [`HookTable`]. `[hooks] timeout_secs` is the time
//! limit of a hook that names none ([`HookSettings`]). Only `command` hooks run; a hook of
//! another type, and an event cairn does not fire, are left out with a note saying so.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// The events cairn fires, by their Claude Code names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
    SessionStart,
    PreCompact,
    Notification,
}

impl HookEvent {
    pub const ALL: [HookEvent; 7] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SessionStart,
        HookEvent::PreCompact,
        HookEvent::Notification,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Notification => "Notification",
        }
    }

    pub fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|event| event.name() == name)
    }
}

/// One group of an event: the hooks run when `matcher` matches (every time when it is empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct HookGroup {
    #[serde(default)]
    pub matcher: String,
    #[serde(default)]
    pub hooks: Vec<HookCommand>,
}

/// One hook: a shell command, with its own time limit in seconds if it names one.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct HookCommand {
    #[serde(rename = "type", default = "command_type")]
    pub kind: String,
    #[serde(default)]
    pub command: String,
    pub timeout: Option<u64>,
}

fn command_type() -> String {
    "command".to_owned()
}

/// Every event's groups, in the order they were written.
pub type HookTable = BTreeMap<HookEvent, Vec<HookGroup>>;

/// The default time limit of a hook.
pub const DEFAULT_HOOK_SECS: u64 = 60;
/// The longest time limit a hook may have.
const MOST_HOOK_SECS: u64 = 3600;

/// `[hooks]`: the user's own hooks and the default time limit of every hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookSettings {
    pub timeout: Duration,
    pub table: HookTable,
}

impl Default for HookSettings {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(DEFAULT_HOOK_SECS), table: HookTable::new() }
    }
}

/// `[hooks]` as written: `timeout_secs`, then `[[hooks.PreToolUse]]` tables and the like.
#[derive(Debug, Default, Deserialize)]
pub(super) struct FileHooks {
    timeout_secs: Option<u64>,
    #[serde(flatten)]
    events: BTreeMap<String, Vec<HookGroup>>,
}

impl FileHooks {
    pub(super) fn resolve(self) -> Result<HookSettings, String> {
        let timeout = match self.timeout_secs {
            None => DEFAULT_HOOK_SECS,
            Some(secs) if secs == 0 || secs > MOST_HOOK_SECS => {
                return Err(format!(
                    "[hooks] timeout_secs = {secs} is out of bounds; use from 1 to {MOST_HOOK_SECS} (leave it out for \
                     {DEFAULT_HOOK_SECS})"
                ));
            }
            Some(secs) => secs,
        };
        let mut table = HookTable::new();
        for (name, groups) in self.events {
            let Some(event) = HookEvent::parse(&name) else {
                let known: Vec<&str> = HookEvent::ALL.iter().map(|event| event.name()).collect();
                return Err(format!("[hooks] has no event `{name}`; use one of {}", known.join(", ")));
            };
            for group in &groups {
                if let Some(hook) = group.hooks.iter().find(|hook| hook.kind != "command") {
                    return Err(format!(
                        "[hooks.{name}]: a hook of type `{}` cannot run; cairn runs `type = \"command\"` hooks",
                        hook.kind
                    ));
                }
                if group.hooks.iter().any(|hook| hook.command.trim().is_empty()) {
                    return Err(format!("[hooks.{name}]: a hook has no `command`; say what to run"));
                }
            }
            table.insert(event, groups);
        }
        Ok(HookSettings { timeout: Duration::from_secs(timeout), table })
    }
}

/// The hooks of a Claude Code settings file (its `hooks` object), with a note for each thing
/// left out; a file that is not such JSON is an error naming the problem.
pub fn claude_hooks(text: &str) -> Result<(HookTable, Vec<String>), String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|err| format!("not valid JSON: {err}"))?;
    let mut notes = Vec::new();
    let mut table = HookTable::new();
    let Some(hooks) = value.get("hooks") else { return Ok((table, notes)) };
    let Some(events) = hooks.as_object() else { return Err("`hooks` is not an object".into()) };
    for (name, groups) in events {
        let Some(event) = HookEvent::parse(name) else {
            notes.push(format!("`{name}` hooks are not run by cairn"));
            continue;
        };
        let groups: Vec<HookGroup> = serde_json::from_value(groups.clone())
            .map_err(|err| format!("`hooks.{name}` is not a list of {{matcher, hooks}}: {err}"))?;
        let mut kept = Vec::new();
        for mut group in groups {
            let before = group.hooks.len();
            group.hooks.retain(|hook| hook.kind == "command" && !hook.command.trim().is_empty());
            if group.hooks.len() < before {
                notes.push(format!("`{name}` hooks that are not commands are not run by cairn"));
            }
            if !group.hooks.is_empty() {
                kept.push(group);
            }
        }
        if !kept.is_empty() {
            table.insert(event, kept);
        }
    }
    Ok((table, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<HookSettings, String> {
        toml::from_str::<FileHooks>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn the_toml_section_has_claude_codes_shape() {
        let settings = resolve(
            "timeout_secs = 5\n[[PreToolUse]]\nmatcher = \"bash|Edit\"\nhooks = [{ type = \"command\", command = \"x\", \
             timeout = 2 }]\n[[Stop]]\nhooks = [{ command = \"y\" }]\n",
        )
        .unwrap();
        assert_eq!(settings.timeout, Duration::from_secs(5));
        let pre = &settings.table[&HookEvent::PreToolUse][0];
        assert_eq!((pre.matcher.as_str(), pre.hooks[0].timeout), ("bash|Edit", Some(2)));
        assert_eq!(settings.table[&HookEvent::Stop][0].hooks[0].command, "y");
        assert_eq!(resolve("").unwrap(), HookSettings::default());
    }

    #[test]
    fn a_bad_section_names_the_setting() {
        assert!(resolve("timeout_secs = 0").unwrap_err().contains("[hooks] timeout_secs = 0"));
        assert!(resolve("[[PreToolUze]]\nhooks = []").unwrap_err().contains("no event `PreToolUze`"));
        assert!(resolve("[[Stop]]\nhooks = [{ type = \"prompt\", command = \"x\" }]").unwrap_err().contains("prompt"));
        assert!(resolve("[[Stop]]\nhooks = [{ command = \"\" }]").unwrap_err().contains("no `command`"));
    }

    #[test]
    fn a_claude_settings_file_gives_its_command_hooks_and_notes_the_rest() {
        let text = r#"{"permissions": {}, "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "a", "timeout": 3},
                                                          {"type": "prompt", "prompt": "p"}]}],
            "SubagentStop": [{"hooks": [{"type": "command", "command": "b"}]}]}}"#;
        let (table, notes) = claude_hooks(text).unwrap();
        assert_eq!(table[&HookEvent::PreToolUse][0].hooks.len(), 1);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(claude_hooks("{}").unwrap().0.is_empty());
        assert!(claude_hooks("{\"hooks\": 3}").unwrap_err().contains("not an object"));
        assert!(claude_hooks("nope").unwrap_err().contains("not valid JSON"));
    }
}

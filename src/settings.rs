//! A session's settings, typed, and named in this one place: the model, the permission mode,
//! the reasoning level and steering. [`Setting::parse`] reads one as a client sends it (a config
//! option's id and value), [`Setting::option`] is its name there, and [`Setting::kept`] says where
//! the store keeps it and as what. The session actor applies every setting through one command
//! and stores it with one write; adding a setting means a variant here, its effect in the actor,
//! and how the client is offered it (`acp::convert`).

use crate::llm::catalog::ThoughtLevel;
use crate::permissions::Mode;

/// One change to a session's settings.
#[derive(Clone, Debug, PartialEq)]
pub enum Setting {
    /// The `provider/model` of the next turn.
    Model(String),
    /// The permission mode, in effect at once.
    Mode(Mode),
    /// How hard a reasoning model thinks.
    Thought(ThoughtLevel),
    /// Whether prompts sent while a turn runs join it.
    Steer(bool),
}

/// A config option's value as a client sends it.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    Id(&'a str),
    Bool(bool),
}

/// Where the store keeps a setting: a column of the session's row, or a key of its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    Column(&'static str),
    Metadata(&'static str),
}

/// A setting a client asked for that does not exist, or a value it cannot take.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SettingError {
    #[error("unknown config option `{0}`; this session has: {OPTIONS}")]
    UnknownOption(String),
    #[error("unknown mode `{0}`; choose one of: ask, accept-edits, plan, read-only, bypass")]
    UnknownMode(String),
    #[error("unknown thought level `{0}`; choose one of: off, low, medium, high")]
    UnknownThought(String),
    #[error("session/set_config_option: `{0}` takes one of its string values")]
    WantsId(&'static str),
    #[error(r#"session/set_config_option: `{0}` takes a boolean: {{"type": "boolean", "value": true}}"#)]
    WantsBool(&'static str),
}

/// The options a session has, as its errors list them.
const OPTIONS: &str = "model, mode, thought_level (models that reason), steer";

impl Setting {
    /// Reads the config option `option` set to `value`.
    pub fn parse(option: &str, value: Value<'_>) -> Result<Self, SettingError> {
        let id = |name: &'static str| match value {
            Value::Id(id) => Ok(id),
            Value::Bool(_) => Err(SettingError::WantsId(name)),
        };
        match option {
            "model" => Ok(Setting::Model(id("model")?.to_owned())),
            "mode" => Self::mode(id("mode")?),
            "thought_level" => {
                let level = id("thought_level")?;
                ThoughtLevel::parse(level)
                    .map(Setting::Thought)
                    .ok_or_else(|| SettingError::UnknownThought(level.to_owned()))
            }
            "steer" => match value {
                Value::Bool(steer) => Ok(Setting::Steer(steer)),
                // The words, as a client that sends every value as text has them.
                Value::Id("true") => Ok(Setting::Steer(true)),
                Value::Id("false") => Ok(Setting::Steer(false)),
                Value::Id(_) => Err(SettingError::WantsBool("steer")),
            },
            other => Err(SettingError::UnknownOption(other.to_owned())),
        }
    }

    /// The mode named `id` (also what `session/set_mode` sends).
    pub fn mode(id: &str) -> Result<Self, SettingError> {
        Mode::parse(id).map(Setting::Mode).ok_or_else(|| SettingError::UnknownMode(id.to_owned()))
    }

    /// The mode's config option id.
    pub const MODE: &'static str = "mode";

    /// The config option's id.
    pub fn option(&self) -> &'static str {
        match self {
            Setting::Model(_) => "model",
            Setting::Mode(_) => Self::MODE,
            Setting::Thought(_) => "thought_level",
            Setting::Steer(_) => "steer",
        }
    }

    /// Where the store keeps the setting, and the value it keeps.
    pub fn kept(&self) -> (Kept, String) {
        match self {
            Setting::Model(model) => (Kept::Column("model"), model.clone()),
            Setting::Mode(mode) => (Kept::Column("mode"), mode.id().to_owned()),
            Setting::Thought(level) => (Kept::Metadata("thought_level"), level.id().to_owned()),
            Setting::Steer(steer) => {
                (Kept::Metadata("busy_prompt"), crate::config::BusyPrompt::from_steer(*steer).id().to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_reads_back_as_itself_and_bad_values_are_named() {
        let settings = [
            Setting::Model("openai/gpt-5".into()),
            Setting::Mode(Mode::AcceptEdits),
            Setting::Thought(ThoughtLevel::High),
            Setting::Steer(true),
        ];
        for setting in settings {
            let (_, kept) = setting.kept();
            let value = match &setting {
                Setting::Steer(steer) => Value::Bool(*steer),
                Setting::Model(_) | Setting::Mode(_) | Setting::Thought(_) => Value::Id(&kept),
            };
            assert_eq!(Setting::parse(setting.option(), value), Ok(setting.clone()));
        }
        assert_eq!(Setting::parse("mode", Value::Id("yolo")), Err(SettingError::UnknownMode("yolo".into())));
        assert_eq!(Setting::parse("steer", Value::Id("on")), Err(SettingError::WantsBool("steer")));
        assert_eq!(Setting::parse("steer", Value::Id("true")), Ok(Setting::Steer(true)));
        assert_eq!(Setting::parse("steer", Value::Id("false")), Ok(Setting::Steer(false)));
        assert_eq!(Setting::parse("model", Value::Bool(true)), Err(SettingError::WantsId("model")));
        let unknown = Setting::parse("colour", Value::Id("red")).unwrap_err().to_string();
        assert!(unknown.contains("`colour`") && unknown.contains("thought_level"), "{unknown}");
    }
}

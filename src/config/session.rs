//! `[session]`: how a session treats what the user sends while a turn runs (`busy_prompt`: a
//! [`BusyPrompt`], queue or steer), and the check on its value. Every error names the setting.

use serde::Deserialize;

/// What a prompt sent while a model turn runs does (`[session] busy_prompt`); a session may
/// choose otherwise through its `steer` config option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BusyPrompt {
    /// It waits for the running turn to end and runs as a turn of its own.
    #[default]
    Queue,
    /// It joins the running turn at its next step boundary.
    Steer,
}

impl BusyPrompt {
    /// The value as written in `config.toml` and stored with a session.
    pub fn id(self) -> &'static str {
        match self {
            BusyPrompt::Queue => "queue",
            BusyPrompt::Steer => "steer",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [BusyPrompt::Queue, BusyPrompt::Steer].into_iter().find(|busy| busy.id() == value)
    }

    /// The session's `steer` option: on or off.
    pub fn from_steer(steer: bool) -> Self {
        if steer { BusyPrompt::Steer } else { BusyPrompt::Queue }
    }
}

/// `[session]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSession {
    busy_prompt: Option<String>,
}

impl FileSession {
    /// The default for new and stored sessions; a value other than `queue` or `steer` is an
    /// error naming the setting.
    pub(super) fn resolve(&self) -> Result<BusyPrompt, String> {
        match self.busy_prompt.as_deref() {
            None => Ok(BusyPrompt::default()),
            Some(value) => BusyPrompt::parse(value).ok_or_else(|| {
                format!("[session] busy_prompt = {value:?} is not a choice; write \"queue\" (the default) or \"steer\"")
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<BusyPrompt, String> {
        toml::from_str::<FileSession>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn busy_prompts_queue_unless_the_file_says_steer() {
        assert_eq!(resolve("").unwrap(), BusyPrompt::Queue);
        assert_eq!(resolve("busy_prompt = \"queue\"").unwrap(), BusyPrompt::Queue);
        assert_eq!(resolve("busy_prompt = \"steer\"").unwrap(), BusyPrompt::Steer);
    }

    #[test]
    fn a_bad_busy_prompt_names_the_setting_and_the_choices() {
        let err = resolve("busy_prompt = \"interrupt\"").unwrap_err();
        assert!(err.starts_with("[session] busy_prompt = \"interrupt\""), "{err}");
        assert!(err.contains("\"queue\"") && err.contains("\"steer\""), "{err}");
        let err = resolve("busy_prompt = true").unwrap_err();
        assert!(err.contains("busy_prompt"), "{err}");
    }
}

//! `[subagents]`: what bounds the child turns the `task` tool starts, and the checks on its
//! values. Every error names the setting it is about.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ProviderConfig, normalize_model, split_model};

/// The limits of sub-agents.
#[derive(Clone, Debug, PartialEq)]
pub struct Subagents {
    /// Model requests one sub-agent may make.
    pub max_rounds: u32,
    /// How long one sub-agent may run.
    pub timeout: Duration,
    /// How deep sub-agents may nest: a sub-agent at this depth gets no `task` tool; 0 turns the
    /// `task` tool off.
    pub max_depth: u32,
    /// How many sub-agents one step runs at once.
    pub max_concurrent: usize,
    /// How many sub-agents one prompt may start in all, nested ones included.
    pub max_total: u32,
    /// The model sub-agents use (`provider/model`); `None`: the session's.
    pub model: Option<String>,
}

impl Default for Subagents {
    fn default() -> Self {
        Self {
            max_rounds: 20,
            timeout: Duration::from_secs(300),
            max_depth: 3,
            max_concurrent: 4,
            max_total: 32,
            model: None,
        }
    }
}

/// `[subagents]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSubagents {
    max_rounds: Option<u32>,
    timeout_secs: Option<u64>,
    max_depth: Option<u32>,
    max_concurrent: Option<usize>,
    max_total: Option<u32>,
    model: Option<String>,
}

/// Deeper than this is a mistake, not a plan.
const DEEPEST: u32 = 16;

impl FileSubagents {
    /// The settings this table asks for; a value out of range, or a model of a provider nobody
    /// configured, is an error naming the setting.
    pub(super) fn resolve(self, providers: &BTreeMap<String, ProviderConfig>) -> Result<Subagents, String> {
        let d = Subagents::default();
        let at_least_one = |name: &str, value: Option<u64>| match value {
            Some(0) => Err(format!("[subagents] {name} must be at least 1")),
            _ => Ok(()),
        };
        at_least_one("max_rounds", self.max_rounds.map(u64::from))?;
        at_least_one("timeout_secs", self.timeout_secs)?;
        at_least_one("max_concurrent", self.max_concurrent.and_then(|n| u64::try_from(n).ok()))?;
        at_least_one("max_total", self.max_total.map(u64::from))?;
        let max_depth = self.max_depth.unwrap_or(d.max_depth);
        if max_depth > DEEPEST {
            return Err(format!(
                "[subagents] max_depth = {max_depth} is more than {DEEPEST}; use 0 to turn sub-agents off"
            ));
        }
        let model = match self.model.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(model) => {
                let (provider, name) = split_model(model);
                if name.is_empty() {
                    return Err(format!("[subagents] model = {model:?} names no model; write it as provider/model"));
                }
                if !providers.contains_key(provider) {
                    let known: Vec<&str> = providers.keys().map(String::as_str).collect();
                    return Err(format!(
                        "[subagents] model = {model:?}: there is no provider `{provider}` (known: {}; add [providers.{provider}])",
                        known.join(", ")
                    ));
                }
                Some(normalize_model(model))
            }
        };
        Ok(Subagents {
            max_rounds: self.max_rounds.unwrap_or(d.max_rounds),
            timeout: self.timeout_secs.map_or(d.timeout, Duration::from_secs),
            max_depth,
            max_concurrent: self.max_concurrent.unwrap_or(d.max_concurrent),
            max_total: self.max_total.unwrap_or(d.max_total),
            model,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Subagents, String> {
        let mut providers = BTreeMap::new();
        providers.insert(
            "openai".to_owned(),
            ProviderConfig {
                api: super::super::Api::OpenaiChat,
                base_url: String::new(),
                api_key_env: None,
                api_key: None,
                models: Vec::new(),
                discover_models: false,
                prompt_cache_key: false,
            },
        );
        toml::from_str::<FileSubagents>(text).map_err(|err| err.to_string())?.resolve(&providers)
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(resolve("").unwrap(), Subagents::default());
        assert_eq!(Subagents::default().max_total, 32);
        let set =
            resolve("max_rounds = 5\ntimeout_secs = 9\nmax_depth = 0\nmax_concurrent = 2\nmax_total = 7\nmodel = \"gpt-5-mini\"\n")
                .unwrap();
        assert_eq!(
            set,
            Subagents {
                max_rounds: 5,
                timeout: Duration::from_secs(9),
                max_depth: 0,
                max_concurrent: 2,
                max_total: 7,
                model: Some("openai/gpt-5-mini".to_owned()),
            }
        );
    }

    #[test]
    fn errors_name_the_setting() {
        for (text, setting) in [
            ("max_rounds = 0", "max_rounds"),
            ("timeout_secs = 0", "timeout_secs"),
            ("max_concurrent = 0", "max_concurrent"),
            ("max_total = 0", "max_total"),
            ("max_depth = 99", "max_depth"),
            ("model = \"nowhere/x\"", "model"),
            ("model = \"openai/\"", "model"),
        ] {
            let err = resolve(text).unwrap_err();
            assert!(err.contains(&format!("[subagents] {setting}")), "{text}: {err}");
        }
        assert!(resolve("max_tasks = 3").unwrap_err().contains("max_tasks"));
    }
}

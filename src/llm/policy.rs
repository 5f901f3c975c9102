//! What each wire API does when the user said nothing: how hard a reasoning model thinks, and
//! which cheap model of the provider writes summaries. The configuration holds only what the
//! user wrote; these defaults are the providers' business, so they live with the providers.

use crate::config::{Api, Config, split_model};

use super::catalog::ThoughtLevel;

/// The level a reasoning model of this API runs at when the user chose none: Anthropic's think
/// only when asked; OpenAI's reasoning models default to medium effort.
pub fn thought(api: Api) -> ThoughtLevel {
    match api {
        Api::Anthropic => ThoughtLevel::Off,
        Api::OpenaiChat | Api::OpenaiResponses => ThoughtLevel::Medium,
    }
}

/// The cheap model of this API's provider, for helper work such as summaries.
pub fn small(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "claude-haiku-4-5",
        Api::OpenaiChat | Api::OpenaiResponses => "gpt-5-mini",
    }
}

/// The level `model` (`provider/model`) runs at when the user chose none; a provider the
/// configuration does not know is taken as OpenAI's.
pub fn default_thought(config: &Config, model: &str) -> ThoughtLevel {
    let (provider, _) = split_model(model);
    config.providers.get(provider).map_or(ThoughtLevel::Medium, |provider| thought(provider.api))
}

/// The cheap model of `model`'s provider (`gpt-5-mini`, `claude-haiku-4-5`) as
/// `provider/model`, when the provider lists it; else `None` (the caller keeps its own model).
pub fn small_model(config: &Config, model: &str) -> Option<String> {
    let (name, _) = split_model(model);
    let provider = config.providers.get(name)?;
    let small = small(provider.api);
    provider.models.iter().any(|m| m == small).then(|| format!("{name}/{small}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn config(toml: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, toml).unwrap();
        let path = file.to_string_lossy().into_owned();
        Config::from_env(&move |name| match name {
            "CAIRN_CONFIG" => Some(path.clone()),
            "CAIRN_HOME" => Some("/x".into()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn helpers_use_the_providers_small_model_when_it_is_listed() {
        let config = config("[providers.local]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodels = [\"qwen3\"]\n");
        assert_eq!(small_model(&config, "openai/gpt-5").as_deref(), Some("openai/gpt-5-mini"));
        assert_eq!(small_model(&config, "anthropic/claude-opus-4-1").as_deref(), Some("anthropic/claude-haiku-4-5"));
        assert_eq!(small_model(&config, "local/qwen3"), None, "a provider that does not list it keeps its own model");
        assert_eq!(small_model(&config, "nowhere/x"), None);
    }

    #[test]
    fn anthropic_thinks_only_when_asked_and_openai_at_medium() {
        let config = config("[providers.claude]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:1/v1\"\n");
        assert_eq!(default_thought(&config, "anthropic/claude-opus-4-1"), ThoughtLevel::Off);
        assert_eq!(default_thought(&config, "claude/claude-opus-4-1"), ThoughtLevel::Off, "by its API, not its name");
        assert_eq!(default_thought(&config, "openai/gpt-5"), ThoughtLevel::Medium);
        assert_eq!(default_thought(&config, "nowhere/x"), ThoughtLevel::Medium);
    }
}

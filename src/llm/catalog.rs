//! What cairn knows about models: context window, output limit, prices, whether they reason and
//! whether they accept images.
//!
//! A built-in table covers well-known models (matched by the longest name prefix, so dated
//! snapshots like `claude-sonnet-4-5-20250929` find their family); `[models."provider/model"]` in
//! `config.toml` overrides or adds entries. Models nobody describes get conservative defaults
//! (no images: a request carrying one would fail at a server that takes only text).
//! OpenAI-compatible providers with `discover_models = true` add what their `GET /models` lists.

use std::sync::RwLock;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{Api, Config, ProviderConfig, split_model};
use crate::history::Usage;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prices {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// One model's limits and prices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelInfo {
    pub context_window: u64,
    pub max_output: u64,
    pub prices: Option<Prices>,
    /// Takes a reasoning effort (OpenAI) or a thinking budget (Anthropic).
    pub reasoning: bool,
    /// Accepts images in its input (a `read` of a picture is sent as one).
    pub images: bool,
    /// Its provider searches the web for it ([`super::search`]): known models of OpenAI and
    /// Anthropic, through the Responses and Messages APIs only, unless `[search] provider =
    /// false`.
    pub web_search: bool,
}

impl ModelInfo {
    /// What `usage` cost at this model's prices; `None` when they are not known.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        self.prices.map(|prices| cost(usage, &prices))
    }

    /// A session's spending as shown beside this model's usage: only when its prices are known.
    pub fn shown_spend(&self, spent: f64) -> Option<f64> {
        self.prices.map(|_| spent)
    }
}

/// For models nobody describes.
const UNKNOWN: ModelInfo = ModelInfo {
    context_window: 128_000,
    max_output: 16_384,
    prices: None,
    reasoning: false,
    images: false,
    web_search: false,
};

/// A model of the table; each of them accepts images unless [`text_only`] says otherwise.
const fn known(window: u64, output: u64, prices: [f64; 4], reasoning: bool) -> ModelInfo {
    let [input, output_price, cache_read, cache_write] = prices;
    ModelInfo {
        context_window: window,
        max_output: output,
        prices: Some(Prices { input, output: output_price, cache_read, cache_write }),
        reasoning,
        images: true,
        web_search: true,
    }
}

const fn text_only(info: ModelInfo) -> ModelInfo {
    ModelInfo { images: false, ..info }
}

/// A model of the table its provider does not search the web for.
const fn no_search(info: ModelInfo) -> ModelInfo {
    ModelInfo { web_search: false, ..info }
}

/// Well-known models: name prefix → limits and list prices (input, output, cache read, cache write).
const BUILT_IN: &[(&str, ModelInfo)] = &[
    ("gpt-5-mini", known(400_000, 128_000, [0.25, 2.0, 0.025, 0.0], true)),
    ("gpt-5-nano", no_search(known(400_000, 128_000, [0.05, 0.4, 0.005, 0.0], true))),
    ("gpt-5", known(400_000, 128_000, [1.25, 10.0, 0.125, 0.0], true)),
    ("gpt-4.1-mini", known(1_047_576, 32_768, [0.4, 1.6, 0.1, 0.0], false)),
    ("gpt-4.1", known(1_047_576, 32_768, [2.0, 8.0, 0.5, 0.0], false)),
    ("gpt-4o-mini", known(128_000, 16_384, [0.15, 0.6, 0.075, 0.0], false)),
    ("gpt-4o", known(128_000, 16_384, [2.5, 10.0, 1.25, 0.0], false)),
    ("o4-mini", known(200_000, 100_000, [1.1, 4.4, 0.275, 0.0], true)),
    ("o3", known(200_000, 100_000, [2.0, 8.0, 0.5, 0.0], true)),
    ("claude-opus-4", known(200_000, 32_000, [15.0, 75.0, 1.5, 18.75], true)),
    ("claude-sonnet-4", known(200_000, 64_000, [3.0, 15.0, 0.3, 3.75], true)),
    ("claude-haiku-4", known(200_000, 64_000, [1.0, 5.0, 0.1, 1.25], true)),
    ("claude-3-5-haiku", text_only(known(200_000, 8_192, [0.8, 4.0, 0.08, 1.0], false))),
];

/// What is known about `provider/model`: config overrides over the built-in table over defaults.
pub fn info(config: &Config, model: &str) -> ModelInfo {
    let (provider, name) = split_model(model);
    let mut base = BUILT_IN
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(UNKNOWN, |(_, info)| *info);
    // Only these APIs carry a provider's search, and only when the user has not turned it off.
    let searchable = config.search.provider
        && config.providers.get(provider).is_some_and(|p| matches!(p.api, Api::OpenaiResponses | Api::Anthropic));
    base.web_search &= searchable;
    let Some(given) = config.models.get(model) else { return base };
    let prices = match (given.input_price, given.output_price, base.prices) {
        (Some(input), Some(output), _) => Some(Prices {
            input,
            output,
            cache_read: given.cache_read_price.unwrap_or(0.0),
            cache_write: given.cache_write_price.unwrap_or(0.0),
        }),
        (input, output, Some(known)) => Some(Prices {
            input: input.unwrap_or(known.input),
            output: output.unwrap_or(known.output),
            cache_read: given.cache_read_price.unwrap_or(known.cache_read),
            cache_write: given.cache_write_price.unwrap_or(known.cache_write),
        }),
        (_, _, None) => None,
    };
    ModelInfo {
        context_window: given.context_window.unwrap_or(base.context_window),
        max_output: given.max_output.unwrap_or(base.max_output),
        prices,
        reasoning: given.reasoning.unwrap_or(base.reasoning),
        images: given.images.unwrap_or(base.images),
        web_search: searchable && given.web_search.unwrap_or(base.web_search),
    }
}

/// What a step cost. Reasoning tokens are part of `output`, so they are not priced again.
pub fn cost(usage: &Usage, prices: &Prices) -> f64 {
    let per_token = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
    per_token(usage.input, prices.input)
        + per_token(usage.output, prices.output)
        + per_token(usage.cache_read, prices.cache_read)
        + per_token(usage.cache_write, prices.cache_write)
}

/// How hard a reasoning model thinks (the `thought_level` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThoughtLevel {
    Off,
    Low,
    Medium,
    High,
}

impl ThoughtLevel {
    pub const ALL: [ThoughtLevel; 4] = [ThoughtLevel::Off, ThoughtLevel::Low, ThoughtLevel::Medium, ThoughtLevel::High];

    pub fn id(self) -> &'static str {
        match self {
            ThoughtLevel::Off => "off",
            ThoughtLevel::Low => "low",
            ThoughtLevel::Medium => "medium",
            ThoughtLevel::High => "high",
        }
    }

    pub fn parse(id: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.id() == id)
    }

    /// An Anthropic thinking budget, in tokens; `None` means no extended thinking.
    pub fn thinking_budget(self) -> Option<u64> {
        match self {
            ThoughtLevel::Off => None,
            ThoughtLevel::Low => Some(4_096),
            ThoughtLevel::Medium => Some(16_384),
            ThoughtLevel::High => Some(32_768),
        }
    }

    /// An OpenAI reasoning effort.
    pub fn effort(self) -> &'static str {
        match self {
            ThoughtLevel::Off => "minimal",
            ThoughtLevel::Low => "low",
            ThoughtLevel::Medium => "medium",
            ThoughtLevel::High => "high",
        }
    }
}

/// Models found through `GET /models`, as `provider/model`, filled in the background.
#[derive(Default)]
pub struct Discovered(RwLock<Vec<String>>);

impl Discovered {
    pub fn list(&self) -> Vec<String> {
        self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Asks every provider with `discover_models` for its list; a failure only logs.
    pub async fn fill(&self, config: &Config) {
        for (name, provider) in config.providers.iter().filter(|(_, p)| p.discover_models) {
            match list_models(provider, config.key(provider)).await {
                Ok(models) => {
                    let mut found = self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                    found.extend(models.into_iter().map(|model| format!("{name}/{model}")));
                }
                Err(err) => tracing::warn!(provider = %name, %err, "could not list the provider's models"),
            }
        }
    }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

/// The largest model list read. Lists with every model's metadata run to a few hundred KiB.
const MAX_MODEL_LIST: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
enum DiscoveryError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the model list is larger than {MAX_MODEL_LIST} bytes")]
    TooLarge,
    #[error("the model list is not the expected JSON: {0}")]
    Json(#[from] serde_json::Error),
}

async fn list_models(
    provider: &ProviderConfig,
    key: Option<crate::config::Secret>,
) -> Result<Vec<String>, DiscoveryError> {
    let url = format!("{}/models", provider.base_url.trim_end_matches('/'));
    let mut request = super::http::client().await.get(url).timeout(Duration::from_secs(5));
    if let Some(key) = &key {
        request = request.bearer_auth(key.expose());
    }
    // An error status drops the response unread.
    let mut response = request.send().await?.error_for_status()?;
    let mut body = Vec::new();
    if !crate::net::read_at_most(&mut response, &mut body, MAX_MODEL_LIST).await? {
        return Err(DiscoveryError::TooLarge);
    }
    let list: ModelList = serde_json::from_slice(&body)?;
    Ok(list.data.into_iter().map(|entry| entry.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_models: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, toml_models).unwrap();
        let path = file.to_string_lossy().into_owned();
        Config::from_env(&move |name| match name {
            "CAIRN_CONFIG" => Some(path.clone()),
            "CAIRN_HOME" => Some("/tmp".into()),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn snapshots_find_their_family_and_config_overrides_win() {
        let config = config(
            "[models.\"anthropic/claude-sonnet-4-5\"]\ncontext_window = 1000000\n[models.\"ollama/qwen3\"]\ncontext_window = 32768\ninput_price = 0.0\noutput_price = 0.0\n",
        );
        let sonnet = info(&config, "anthropic/claude-sonnet-4-5-20250929");
        assert_eq!((sonnet.context_window, sonnet.max_output, sonnet.reasoning), (200_000, 64_000, true));
        assert_eq!(info(&config, "anthropic/claude-sonnet-4-5").context_window, 1_000_000);
        assert_eq!(info(&config, "openai/gpt-5-mini").prices.unwrap().input, 0.25);
        let local = info(&config, "ollama/qwen3");
        assert_eq!((local.context_window, local.prices.map(|p| p.output)), (32_768, Some(0.0)));
        assert_eq!(info(&config, "ollama/mystery"), UNKNOWN);
    }

    #[test]
    fn the_flagship_models_take_images_and_unknown_ones_only_when_configured() {
        let config = config("[models.\"ollama/llava\"]\nimages = true\n[models.\"openai/gpt-4o\"]\nimages = false\n");
        for model in ["anthropic/claude-sonnet-4-5", "anthropic/claude-opus-4-1", "openai/gpt-5", "openai/gpt-4.1-mini"]
        {
            assert!(info(&config, model).images, "{model}");
        }
        for model in ["ollama/qwen3", "anthropic/claude-3-5-haiku-latest", "openai/gpt-4o", "scripted/replies.json"] {
            assert!(!info(&config, model).images, "{model}");
        }
        assert!(info(&config, "ollama/llava").images, "configured");
    }

    #[test]
    fn cost_prices_each_kind_of_token_once() {
        let usage =
            Usage { input: 1_000_000, output: 100_000, reasoning: 80_000, cache_read: 2_000_000, cache_write: 10_000 };
        let prices = Prices { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 };
        let expected = 3.0 + 1.5 + 0.6 + 0.0375;
        assert!((cost(&usage, &prices) - expected).abs() < 1e-9, "{}", cost(&usage, &prices));
    }
}

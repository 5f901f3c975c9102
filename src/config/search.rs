//! `[search]`: where `web_search` looks ([`Search`]), and the checks on its values. Every error
//! names the setting.
//!
//! A model whose provider searches the web itself (OpenAI Responses, Anthropic) is offered that
//! search unless `provider = false`. A model without one is offered cairn's own `web_search`
//! when `url` names a search endpoint: a SearXNG instance (its JSON output enabled) or Brave's
//! search API, whose key is read from the variable `api_key_env` names. With neither, no web
//! search is offered. The endpoint is the user's choice, so it may be on their own machine or
//! network; it is still reached only over `http` or `https`.

use serde::Deserialize;

use super::Secret;

/// The web search settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    /// Offer the provider's own search to models that have one.
    pub provider: bool,
    /// Where cairn's own `web_search` asks, for models without one.
    pub endpoint: Option<SearchEndpoint>,
}

impl Default for Search {
    fn default() -> Self {
        Self { provider: true, endpoint: None }
    }
}

/// A search endpoint cairn calls itself.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchEndpoint {
    pub url: String,
    pub api: SearchApi,
    /// The key, read from `api_key_env` when the configuration was loaded.
    pub api_key: Option<Secret>,
    /// The variable the key comes from, named when it is missing.
    pub api_key_env: Option<String>,
}

/// Which search API the endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchApi {
    /// `GET url?q=…&format=json` → `{"results": [{url, title, content}]}`.
    Searxng,
    /// `GET url?q=…&count=…` with `X-Subscription-Token` → `{"web": {"results": [{url, title,
    /// description}]}}`.
    Brave,
}

/// `[search]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSearch {
    provider: Option<bool>,
    url: Option<String>,
    api: Option<SearchApi>,
    api_key_env: Option<String>,
}

impl FileSearch {
    /// The settings, the key read through `env`; a URL that is not `http(s)`, settings of an
    /// endpoint without its URL, or Brave without a key variable are errors naming the setting.
    pub(super) fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Search, String> {
        let provider = self.provider.unwrap_or(true);
        let Some(url) = &self.url else {
            if self.api.is_some() || self.api_key_env.is_some() {
                return Err("[search] api and api_key_env describe an endpoint: add its url, e.g. url = \
                     \"http://127.0.0.1:8888/search\" for a SearXNG instance"
                    .to_owned());
            }
            return Ok(Search { provider, endpoint: None });
        };
        let parsed = reqwest::Url::parse(url)
            .map_err(|err| format!("[search] url = {url:?} is not a URL ({err}); write it as https://host/path"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
            return Err(format!("[search] url = {url:?} must be an http:// or https:// URL with a host"));
        }
        let api = self.api.unwrap_or(if parsed.host_str() == Some("api.search.brave.com") {
            SearchApi::Brave
        } else {
            SearchApi::Searxng
        });
        if api == SearchApi::Brave && self.api_key_env.is_none() {
            return Err("[search] Brave's API needs a key: set api_key_env to the variable that holds it, e.g. \
                 api_key_env = \"BRAVE_API_KEY\""
                .to_owned());
        }
        let local = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
        if self.api_key_env.is_some() && parsed.scheme() == "http" && !local {
            return Err(format!(
                "[search] url = {url:?} would send the key of api_key_env in clear: use an https:// URL"
            ));
        }
        let api_key = self.api_key_env.as_deref().and_then(env).map(Secret);
        let endpoint = SearchEndpoint { url: url.clone(), api, api_key, api_key_env: self.api_key_env.clone() };
        Ok(Search { provider, endpoint: Some(endpoint) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn resolve(text: &str) -> Result<Search, String> {
        let env = |name: &str| (name == "BRAVE_API_KEY").then(|| "k".to_owned());
        toml::from_str::<FileSearch>(text).map_err(|err| err.to_string())?.resolve(&env)
    }

    #[test]
    fn the_providers_search_is_on_and_no_endpoint_is_set_by_default() {
        assert_eq!(resolve("").unwrap(), Search::default());
        assert!(!resolve("provider = false").unwrap().provider);
    }

    #[test]
    fn an_endpoint_speaks_searxng_unless_it_is_braves() {
        let searx = resolve("url = \"http://127.0.0.1:8888/search\"").unwrap().endpoint.unwrap();
        assert_eq!((searx.api, searx.api_key), (SearchApi::Searxng, None));
        let brave =
            resolve("url = \"https://api.search.brave.com/res/v1/web/search\"\napi_key_env = \"BRAVE_API_KEY\"")
                .unwrap()
                .endpoint
                .unwrap();
        assert_eq!(brave.api, SearchApi::Brave);
        assert_eq!(brave.api_key.map(|key| key.expose().to_owned()).as_deref(), Some("k"));
    }

    #[test]
    fn bad_endpoints_are_refused_naming_the_setting() {
        for (text, says) in [
            ("url = \"ftp://x/search\"", "http:// or https://"),
            ("url = \"not a url\"", "not a URL"),
            ("api = \"brave\"", "add its url"),
            ("url = \"https://api.search.brave.com/res/v1/web/search\"", "api_key_env"),
            ("url = \"http://x\"\napi = \"google\"", "unknown variant"),
            ("url = \"http://search.example/api\"\napi = \"brave\"\napi_key_env = \"BRAVE_API_KEY\"", "in clear"),
        ] {
            let err = resolve(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}

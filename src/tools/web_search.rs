//! `web_search` through a search endpoint of the user's (`[search] url`): a SearXNG instance or
//! Brave's search API, for models whose provider does not search the web itself (for those the
//! turn offers the provider's search instead and leaves this tool out).
//!
//! A call is judged as a fetch from the endpoint's host (`fetch:HOST` rules): it asks in every
//! mode but bypass unless a rule allows that host, since the query leaves the machine. The
//! endpoint is the user's choice, so it may be on their machine or network, and it is reached
//! through `net` like every request; its answer is read up to [`MAX_BYTES`] within `[fetch]
//! timeout_secs`, and each result comes back as a title, its URL and a short snippet, for the
//! model to `fetch` what it needs.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::config::{SearchApi, SearchEndpoint};
use crate::history::{ToolContent, ToolKind};
use crate::permissions::PermissionRequest;

/// The name the model calls it by (and the card of a provider's own search goes by).
pub const NAME: &str = "web_search";
/// The most of an endpoint's answer read.
pub const MAX_BYTES: usize = 1024 * 1024;
/// Results given when the model asks for no number, and the most it may ask for.
const DEFAULT_RESULTS: u8 = 8;
const MAX_RESULTS: u8 = 20;
/// The characters of a result's snippet kept.
const SNIPPET_CHARS: usize = 300;

/// The tool, holding the endpoint it asks.
pub struct WebSearch {
    endpoint: Arc<SearchEndpoint>,
    host: String,
}

impl WebSearch {
    /// The tool for `endpoint`; `None` when its URL names no host (the configuration checks it).
    /// A host the permission engine cannot name is never offered (a call could not be judged).
    pub fn new(endpoint: &SearchEndpoint) -> Option<Self> {
        let host = reqwest::Url::parse(&endpoint.url).ok()?.host_str()?.to_owned();
        PermissionRequest::for_host(&host)?;
        Some(Self { endpoint: Arc::new(endpoint.clone()), host })
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    /// What to search the web for
    pub query: String,
    /// How many results, 1 to 20 (default 8)
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub count: Option<u8>,
}

/// One result as the model and the card see it.
#[derive(Debug, PartialEq)]
struct Found {
    title: String,
    url: String,
    snippet: String,
}

#[async_trait::async_trait]
impl Tool for WebSearch {
    type Args = WebSearchArgs;

    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Search the web. Returns the title, URL and a snippet of each result; read a page with `fetch`. \
         Use it for what may have changed since your training (releases, APIs, errors) or what you do not know."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Fetch
    }

    fn parameters(&self) -> Value {
        super::schema_of::<WebSearchArgs>()
    }

    fn parse(&self, input: &str) -> Result<WebSearchArgs, ToolError> {
        let args: WebSearchArgs = super::registry::parse_args(self.name(), input, &|| self.parameters())?;
        if args.query.trim().is_empty() {
            return Err(ToolError::Tell("`query` is empty: say what to search for.".into()));
        }
        if args.query.chars().count() > 400 {
            return Err(ToolError::Tell("`query` is over 400 characters: search with a few words.".into()));
        }
        if let Some(count) = args.count.filter(|count| !(1..=MAX_RESULTS).contains(count)) {
            return Err(ToolError::Tell(format!("`count` is {count}: ask for 1 to {MAX_RESULTS} results.")));
        }
        Ok(args)
    }

    fn access(&self, _args: &WebSearchArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &WebSearchArgs, _workspace: &Workspace) -> String {
        format!("Search the web: {}", super::registry::one_line(args.query.trim()))
    }

    /// Judged as a fetch from the endpoint's host: the query leaves the machine.
    fn permission(&self, _args: &WebSearchArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        PermissionRequest::for_host(&self.host)
    }

    async fn run(&self, args: &WebSearchArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let count = args.count.unwrap_or(DEFAULT_RESULTS);
        let timeout = ctx.fetch.settings.timeout;
        // The turn's cancel drops the call, and the request with it.
        let found = tokio::time::timeout(timeout, self.ask(args.query.trim(), count)).await.map_err(|_| {
            ToolError::Tell(format!(
                "the search endpoint {} did not answer within {} s ([fetch] timeout_secs)",
                self.host,
                timeout.as_secs()
            ))
        })??;
        let text = render(args.query.trim(), &self.host, &found, count);
        Ok(ToolOutcome { output: text.clone(), content: vec![ToolContent::Text { text }], ..ToolOutcome::default() })
    }
}

impl WebSearch {
    /// Sends the query and reads the results.
    async fn ask(&self, query: &str, count: u8) -> Result<Vec<Found>, ToolError> {
        let endpoint = &*self.endpoint;
        let failed = |why: String| ToolError::Tell(format!("the search endpoint {} {why}", self.host));
        // No redirect is followed: it would reach a host nobody judged, with the key.
        let client = crate::net::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| failed(format!("could not be reached: {err}")))?;
        let mut url = reqwest::Url::parse(&endpoint.url).map_err(|err| failed(format!("is no URL: {err}")))?;
        let mut request = match endpoint.api {
            SearchApi::Searxng => {
                url.query_pairs_mut().append_pair("q", query).append_pair("format", "json");
                client.get(url)
            }
            SearchApi::Brave => {
                let Some(key) = &endpoint.api_key else {
                    let env = endpoint.api_key_env.as_deref().unwrap_or("the variable [search] api_key_env names");
                    return Err(ToolError::Tell(format!(
                        "Brave's search API needs a key and {env} is not set: set it where cairn starts"
                    )));
                };
                url.query_pairs_mut().append_pair("q", query).append_pair("count", &count.to_string());
                let mut token = reqwest::header::HeaderValue::from_str(key.expose())
                    .map_err(|_| failed("cannot be sent the key: it is not a valid header value".to_owned()))?;
                token.set_sensitive(true);
                client.get(url).header("X-Subscription-Token", token)
            }
        };
        request = request.header(reqwest::header::ACCEPT, "application/json");
        let mut response = request.send().await.map_err(|err| failed(format!("could not be reached: {err}")))?;
        let status = response.status();
        let mut body = Vec::new();
        let whole = crate::net::read_at_most(&mut response, &mut body, MAX_BYTES)
            .await
            .map_err(|err| failed(format!("broke off its answer: {err}")))?;
        if status.is_redirection() {
            return Err(failed(format!(
                "answered {status}, a redirect, which is not followed: set [search] url to where it leads"
            )));
        }
        if !status.is_success() {
            let start: String = String::from_utf8_lossy(&body).chars().take(200).collect();
            let hint = match (endpoint.api, status.as_u16()) {
                (SearchApi::Searxng, 403) => {
                    " (a SearXNG instance answers 403 when its JSON output is off: add `json` to `search.formats` in its settings.yml)"
                }
                (SearchApi::Brave, 401 | 403 | 422) => " (check the key in [search] api_key_env)",
                (_, 429) => " (too many searches: wait and try again)",
                _ => "",
            };
            return Err(failed(format!("answered {status}{hint}: {start}")));
        }
        if !whole {
            return Err(failed(format!("answered more than {} KiB: not a search answer", MAX_BYTES / 1024)));
        }
        let value: Value =
            serde_json::from_slice(&body).map_err(|err| failed(format!("answered with what is not JSON ({err})")))?;
        Ok(results(endpoint.api, &value).into_iter().take(usize::from(count)).collect())
    }
}

/// The results of an answer in `api`'s shape; entries without a URL are skipped.
fn results(api: SearchApi, value: &Value) -> Vec<Found> {
    let (list, snippet) = match api {
        SearchApi::Searxng => (value.get("results"), "content"),
        SearchApi::Brave => (value.pointer("/web/results"), "description"),
    };
    let text = |item: &Value, key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|item| text(item, "url").starts_with("http"))
        .map(|item| Found { title: text(item, "title"), url: text(item, "url"), snippet: text(item, snippet) })
        .collect()
}

/// The results as the model and the card read them.
fn render(query: &str, host: &str, found: &[Found], count: u8) -> String {
    if found.is_empty() {
        return format!("No results for \"{query}\" from {host}. Try other words.");
    }
    let mut text = format!("{} results for \"{query}\" from {host} (asked for {count}):\n", found.len());
    for (n, result) in found.iter().enumerate() {
        let title = super::registry::one_line(result.title.trim());
        let title = if title.is_empty() { result.url.clone() } else { title };
        let snippet: String =
            super::registry::one_line(strip_tags(&result.snippet).trim()).chars().take(SNIPPET_CHARS).collect();
        text.push_str(&format!("\n{}. {title}\n   {}\n", n + 1, result.url));
        if !snippet.is_empty() {
            text.push_str(&format!("   {snippet}\n"));
        }
    }
    text
}

/// `text` without the `<b>`-like tags search engines put in snippets.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        match c {
            '<' => inside = true,
            '>' if inside => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn both_answers_become_numbered_results_with_their_snippets() {
        let searx = json!({"results": [
            {"url": "https://a.example/", "title": "A\npage", "content": "first <b>hit</b>"},
            {"url": "javascript:alert(1)", "title": "bad"},
            {"url": "https://b.example/", "title": "", "content": ""}]});
        let found = results(SearchApi::Searxng, &searx);
        assert_eq!(found.len(), 2, "a result without an http URL is skipped");
        let text = render("q", "searx.local", &found, 8);
        assert_eq!(
            text,
            "2 results for \"q\" from searx.local (asked for 8):\n\n1. A page\n   https://a.example/\n   first hit\n\n2. https://b.example/\n   https://b.example/\n"
        );
        let brave = json!({"web": {"results": [{"url": "https://c.example/", "title": "C", "description": "d"}]}});
        assert_eq!(
            results(SearchApi::Brave, &brave),
            vec![Found { title: "C".into(), url: "https://c.example/".into(), snippet: "d".into() }]
        );
        assert_eq!(results(SearchApi::Brave, &json!({"unexpected": true})), Vec::new());
        assert_eq!(render("q", "h", &[], 8), "No results for \"q\" from h. Try other words.");
    }

    #[test]
    fn an_empty_or_rambling_query_is_refused() {
        let endpoint = SearchEndpoint {
            url: "http://127.0.0.1:1/search".into(),
            api: SearchApi::Searxng,
            api_key: None,
            api_key_env: None,
        };
        let tool = WebSearch::new(&endpoint).unwrap();
        assert!(tool.parse(r#"{"query": "  "}"#).is_err());
        let long = json!({"query": "x".repeat(401)}).to_string();
        assert!(tool.parse(&long).is_err());
        assert!(tool.parse(r#"{"query": "rust", "count": 21}"#).is_err());
        assert!(tool.parse(r#"{"query": "rust", "count": 0}"#).is_err());
        let args = tool.parse(r#"{"query": "rust"}"#).unwrap();
        assert_eq!(
            tool.permission(&args, &Workspace::new(std::path::Path::new("/w"), &[])).unwrap().target,
            "127.0.0.1"
        );
    }
}

//! A streamable HTTP server's transport, over cairn's reqwest, with the configured headers,
//! which follows redirects only within the configured origin.
//! The header checks are shared with `config`, which runs them when `config.toml` is read.

use std::collections::HashMap;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

/// Headers the transport sets itself; a configured one would clash.
const RESERVED: [&str; 4] = ["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// The transport to `url`; the error names what is wrong with the settings.
pub(super) fn transport(
    url: &str,
    headers: &[(String, String)],
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    check_url(url)?;
    let mut map = HashMap::new();
    for (name, value) in headers {
        let (name, value) = header(name, value)?;
        map.insert(name, value);
    }
    let client = crate::net::client_builder()
        .redirect(reqwest::redirect::Policy::custom(same_origin))
        .build()
        .map_err(|err| format!("cannot build an HTTP client: {err}"))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(map);
    Ok(StreamableHttpClientTransport::with_client(client, config))
}

/// At most this many redirects are followed.
const MAX_REDIRECTS: usize = 5;

/// Follows a redirect only within the configured URL's origin (scheme, host and port): the
/// configured headers (a token) never go to another server, nor from `https` to `http`.
fn same_origin(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt.previous().first().map(reqwest::Url::origin);
    if first.is_some_and(|origin| origin != attempt.url().origin()) {
        let to = attempt.url().to_string();
        attempt.error(format!("it redirects to another server ({to}), which is not followed"))
    } else if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error(format!("it redirects more than {MAX_REDIRECTS} times"))
    } else {
        attempt.follow()
    }
}

/// Whether `url` is an `http` or `https` URL.
pub fn check_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("`{url}` is not a URL: {err}"))?;
    match parsed.scheme() {
        "http" | "https" => Ok(()),
        other => Err(format!("`{url}` is not an http(s) URL (scheme `{other}`)")),
    }
}

/// A configured header, checked.
pub fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not a valid header name"))?;
    if RESERVED.contains(&parsed.as_str()) {
        return Err(format!("header `{name}` is set by the MCP transport itself"));
    }
    let value = HeaderValue::from_str(value)
        .map_err(|_| format!("the value of header `{name}` is not a valid header value"))?;
    Ok((parsed, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_headers_are_checked() {
        assert!(check_url("https://example.com/mcp").is_ok());
        assert!(check_url("ftp://example.com").unwrap_err().contains("scheme `ftp`"));
        assert!(check_url("example.com").is_err());
        assert!(header("Authorization", "Bearer x").is_ok());
        assert!(header("Mcp-Session-Id", "x").unwrap_err().contains("set by the MCP transport"));
        assert!(header("bad name", "x").is_err());
        assert!(header("X-Ok", "line\nbreak").is_err());
    }
}

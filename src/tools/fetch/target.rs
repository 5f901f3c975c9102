//! Where one hop of a `fetch` goes: the URL, judged ([`parse`], [`redirect`]: `http` or
//! `https`, no user name or password, a host that is a host), and the addresses its host
//! resolves to, each judged ([`resolve`], with [`super::address`]): the only ones the request
//! may connect to.
//!
//! A name is resolved here, once, and the request is pinned to what came back (the client is
//! told to use exactly those addresses for that name), so a DNS answer that changes between the
//! check and the connection (rebinding) cannot take the request elsewhere. An address written
//! in the URL, in any of the spellings a URL parser accepts (`0x7f000001`, `2130706433`,
//! `127.1`, `[::ffff:127.0.0.1]`), is judged as the address it is. `localhost` and names below
//! it are loopback by definition (RFC 6761) and refused before any lookup. A name that resolves
//! to any refused address is refused whole.

use std::net::{IpAddr, SocketAddr};

use url::{Host, Url};

use super::address::{Blocked, blocked};
use crate::permissions::host::canonical;
use crate::tools::ToolError;

/// A URL `fetch` may request: `http` or `https`, no credentials, a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub url: Url,
    /// The host, canonical (as rules name it).
    pub host: String,
}

/// `text` as a URL `fetch` may request, its fragment dropped (it is never sent); the error
/// tells the model what is wrong.
pub fn parse(text: &str) -> Result<Target, ToolError> {
    let url = Url::parse(text.trim()).map_err(|err| {
        ToolError::Tell(format!("`{}` is not a URL ({err}); give a full http:// or https:// URL", shorten(text)))
    })?;
    judge(url).map_err(ToolError::Tell)
}

/// A redirect's `Location`, resolved against the URL that gave it and judged as [`parse`]
/// judges.
pub fn redirect(from: &Url, location: &str) -> Result<Target, ToolError> {
    let url = from.join(location).map_err(|err| {
        ToolError::Tell(format!("{from} redirects to `{}`, which is not a URL ({err})", shorten(location)))
    })?;
    judge(url).map_err(|why| ToolError::Tell(format!("{from} redirects elsewhere, which was not followed: {why}")))
}

fn judge(mut url: Url) -> Result<Target, String> {
    match url.scheme() {
        "http" | "https" => {}
        scheme => {
            return Err(format!(
                "`{}` is a {scheme}: URL; fetch reads http:// and https:// URLs only (for a local file, use read)",
                shorten(url.as_str())
            ));
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{}` carries a user name or password (user@host); fetch sends no credentials, so give the URL without them",
            shorten(url.as_str())
        ));
    }
    let host = url.host_str().and_then(canonical).ok_or_else(|| {
        format!("`{}` names no host fetch can reach; give a host name or an address", shorten(url.as_str()))
    })?;
    url.set_fragment(None);
    Ok(Target { url, host })
}

/// Where the request for `target` may connect: its address, or every address its name resolves
/// to, when none of them is refused (`allow_private` lifts what [`Blocked::private`] says).
/// The ports are the URL's.
pub async fn resolve(target: &Target, allow_private: bool) -> Result<Vec<SocketAddr>, ToolError> {
    let port = target.url.port_or_known_default().unwrap_or(80);
    let refuse = |ip: IpAddr, why: Blocked, literal: bool| {
        let lift = if why.private() {
            " (`[fetch] allow_private = true` in config.toml allows it, for a page served on the user's own machine \
             or network)"
        } else {
            ""
        };
        let what = if literal { ip.to_string() } else { format!("`{}` resolves to {ip}, which", target.host) };
        ToolError::Tell(format!("{} is not fetched: {what} is {}{lift}", target.url, why.describe()))
    };
    let check = |ip: IpAddr, literal: bool| match blocked(ip) {
        Some(why) if !(allow_private && why.private()) => Err(refuse(ip, why, literal)),
        Some(_) | None => Ok(SocketAddr::new(ip, port)),
    };
    match target.url.host() {
        Some(Host::Ipv4(ip)) => return Ok(vec![check(ip.into(), true)?]),
        Some(Host::Ipv6(ip)) => return Ok(vec![check(ip.into(), true)?]),
        Some(Host::Domain(_)) | None => {}
    }
    if (target.host == "localhost" || target.host.ends_with(".localhost")) && !allow_private {
        return Err(ToolError::Tell(format!(
            "{} is not fetched: `{}` is this machine (a loopback name){}",
            target.url,
            target.host,
            " (`[fetch] allow_private = true` in config.toml allows it, for a page served on the user's own machine)"
        )));
    }
    let found = tokio::net::lookup_host((target.host.as_str(), port))
        .await
        .map_err(|err| ToolError::Tell(format!("cannot resolve `{}`: {err}", target.host)))?;
    let mut addresses = Vec::new();
    for address in found {
        let checked = check(address.ip(), false)?;
        if !addresses.contains(&checked) {
            addresses.push(checked);
        }
    }
    if addresses.is_empty() {
        return Err(ToolError::Tell(format!("`{}` resolves to no address", target.host)));
    }
    Ok(addresses)
}

/// A text from the model or a server, cut for a message.
pub fn shorten(text: &str) -> String {
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() { format!("{cut}…") } else { cut }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match parse(url) {
            Err(ToolError::Tell(why)) => why,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn only_http_and_https_urls_without_credentials_are_fetched() {
        for (url, says) in [
            ("file:///etc/passwd", "is a file: URL"),
            ("ftp://example.com/x", "is a ftp: URL"),
            ("gopher://example.com/", "is a gopher: URL"),
            ("javascript:alert(1)", "is a javascript: URL"),
            ("data:text/html,<p>x", "is a data: URL"),
            ("http://user:pass@example.com/", "user name or password"),
            ("https://user@example.com/", "user name or password"),
            ("https://:pw@example.com/", "user name or password"),
            ("example.com", "is not a URL"),
            ("/etc/passwd", "is not a URL"),
            ("http://*.example.com/", "names no host"),
        ] {
            let why = refused(url);
            assert!(why.contains(says), "{url}: {why}");
        }
        let target = parse(" https://Docs.RS/std#section ").unwrap();
        assert_eq!(target.url.as_str(), "https://docs.rs/std");
        assert_eq!(target.host, "docs.rs");
        assert_eq!(parse("http://0x7f000001:8080/x").unwrap().host, "127.0.0.1");
        assert_eq!(parse("http://[::ffff:7f00:1]/").unwrap().host, "[::ffff:127.0.0.1]");
    }

    #[test]
    fn a_redirect_is_judged_like_a_url() {
        let from = Url::parse("https://example.com/a/b").unwrap();
        assert_eq!(redirect(&from, "../c?d=1").unwrap().url.as_str(), "https://example.com/c?d=1");
        assert_eq!(redirect(&from, "//other.example/x").unwrap().host, "other.example");
        for (location, says) in
            [("file:///etc/passwd", "is a file: URL"), ("ftp://x/", "is a ftp: URL"), ("http://u:p@x/", "password")]
        {
            match redirect(&from, location) {
                Err(ToolError::Tell(why)) => {
                    assert!(why.starts_with("https://example.com/a/b redirects elsewhere"), "{why}");
                    assert!(why.contains(says), "{location}: {why}");
                }
                other => panic!("{location}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn literal_and_named_loopback_is_refused_unless_private_addresses_are_allowed() {
        for url in [
            "http://127.0.0.1/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://127.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://a.b.localhost:8080/",
        ] {
            let target = parse(url).unwrap();
            match resolve(&target, false).await {
                Err(ToolError::Tell(why)) => {
                    assert!(why.contains("loopback"), "{url}: {why}");
                    assert!(why.contains("allow_private"), "{url}: {why}");
                }
                other => panic!("{url}: {other:?}"),
            }
            if target.host != "a.b.localhost" {
                assert!(resolve(&target, true).await.is_ok(), "{url} with private addresses allowed");
            }
        }
        let metadata = parse("http://169.254.169.254/latest/meta-data").unwrap();
        for allow_private in [false, true] {
            match resolve(&metadata, allow_private).await {
                Err(ToolError::Tell(why)) => {
                    assert!(why.contains("metadata"), "{why}");
                    assert!(!why.contains("allow_private"), "nothing lifts it: {why}");
                }
                other => panic!("{other:?}"),
            }
        }
        let pinned = resolve(&parse("http://127.0.0.1:8080/").unwrap(), true).await.unwrap();
        assert_eq!(pinned, [SocketAddr::from(([127, 0, 0, 1], 8080))]);
    }
}

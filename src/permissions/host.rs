//! Hosts as `fetch` rules name them: the host a request is about, in one canonical spelling,
//! and a rule's pattern over hosts ([`HostPattern`]): `docs.rs` (that host), `*.rust-lang.org`
//! (its subdomains, at any depth, not the domain itself), `*` (every host), or an address
//! (`127.0.0.1`, `[::1]`).
//!
//! Both sides are spelled the way a URL parser spells a host: a name in lowercase ASCII (an
//! international name in its `xn--` form) without a trailing dot, an IPv4 address in dotted
//! decimal, an IPv6 address compressed within brackets. A pattern is read through the same
//! parser, so `DOCS.rs.`, `docs.rs` and a URL's `docs.rs` are one host, and `0x7f.1` is
//! `127.0.0.1`. A pattern with a scheme, a port, a path or a wildcard elsewhere than a leading
//! `*.` is not a host pattern, and says so.

use url::Host;

/// A rule's pattern over hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Every host.
    Any,
    /// Exactly this host (canonical).
    Exact(String),
    /// The subdomains of this domain (canonical), at any depth.
    Below(String),
}

impl HostPattern {
    /// Reads a rule's pattern; the error says what a host pattern looks like.
    pub fn read(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text == "*" {
            return Ok(HostPattern::Any);
        }
        let shape = "a fetch rule names a host: `docs.rs`, `*.rust-lang.org` for its subdomains, `*` for every \
                     host, or an address such as `127.0.0.1`";
        if text.is_empty() {
            return Err(format!("a fetch rule is empty; {shape}"));
        }
        if text.contains("://") || text.contains('/') {
            return Err(format!("`{text}` is a URL, not a host; {shape}"));
        }
        if let Some(domain) = text.strip_prefix("*.") {
            return match canonical(domain) {
                Some(domain) if !domain.starts_with('[') && domain.parse::<std::net::Ipv4Addr>().is_err() => {
                    Ok(HostPattern::Below(domain))
                }
                Some(_) => Err(format!("`{text}`: an address has no subdomains; {shape}")),
                None => Err(format!("`{text}` does not name a domain after `*.`; {shape}")),
            };
        }
        if text.contains('*') {
            return Err(format!("`{text}`: `*` may only stand alone or open the pattern as `*.`; {shape}"));
        }
        canonical(text).map(HostPattern::Exact).ok_or_else(|| format!("`{text}` is not a host; {shape}"))
    }

    /// Whether this pattern covers `host` (canonical, as [`canonical`] gives it).
    pub fn covers(&self, host: &str) -> bool {
        match self {
            HostPattern::Any => true,
            HostPattern::Exact(exact) => exact == host,
            HostPattern::Below(domain) => {
                host.len() > domain.len() + 1
                    && host.ends_with(domain.as_str())
                    && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
            }
        }
    }

    /// What it covers, in the words of a question and of `/permissions`.
    pub fn describe(&self) -> String {
        match self {
            HostPattern::Any => "fetches from every host".to_owned(),
            HostPattern::Exact(host) => format!("fetches from `{host}`"),
            HostPattern::Below(domain) => format!("fetches from the subdomains of `{domain}`"),
        }
    }
}

/// `host` spelled as a URL parser spells it (see the module's doc), or `None` when it is not a
/// host: a name with a character no host name has (a port, `*`, `@`, a space), an empty label.
/// An IPv6 address may come with or without its brackets.
pub fn canonical(host: &str) -> Option<String> {
    let host = host.trim();
    let bracketed = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_owned() };
    match Host::parse(&bracketed).ok()? {
        Host::Ipv4(address) => Some(address.to_string()),
        Host::Ipv6(address) => Some(format!("[{address}]")),
        Host::Domain(name) => {
            let name = name.strip_suffix('.').unwrap_or(&name).to_ascii_lowercase();
            let label = |label: &str| {
                !label.is_empty() && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            };
            name.split('.').all(label).then_some(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(pattern: &str, host: &str) -> bool {
        let host = canonical(host).unwrap_or_else(|| panic!("{host} is a host"));
        HostPattern::read(pattern).unwrap().covers(&host)
    }

    #[test]
    fn a_wildcard_covers_subdomains_and_nothing_that_merely_ends_alike() {
        for host in ["doc.rust-lang.org", "a.b.rust-lang.org", "DOC.Rust-Lang.org", "doc.rust-lang.org."] {
            assert!(covers("*.rust-lang.org", host), "{host}");
        }
        for host in ["rust-lang.org", "evilrust-lang.org", "rust-lang.org.evil.test", "rust-lang.org.", "org"] {
            assert!(!covers("*.rust-lang.org", host), "{host}");
        }
        assert!(covers("*.example.test", "docs.example.test"));
        assert!(!covers("*.example.test", "evilexample.test"));
        assert!(!covers("*.example.test", "example.test.evil"));
    }

    #[test]
    fn an_exact_host_covers_that_host_however_it_is_spelled() {
        assert!(covers("docs.rs", "DOCS.RS."));
        assert!(covers("Docs.RS.", "docs.rs"));
        assert!(!covers("docs.rs", "www.docs.rs"));
        assert!(!covers("docs.rs", "docs.rs.evil.test"));
        assert!(covers("127.0.0.1", "127.1"));
        assert!(covers("127.0.0.1", "0x7f000001"));
        assert!(covers("::1", "[::1]"));
        assert!(covers("[0:0::1]", "[::1]"));
        assert!(!covers("127.0.0.1", "[::ffff:127.0.0.1]"), "another spelling of an address is another host");
        assert!(covers("bücher.example", "xn--bcher-kva.example"));
        assert!(covers("*", "anything.example"));
        assert!(covers("*", "[::1]"));
    }

    #[test]
    fn what_is_not_a_host_pattern_says_what_one_is() {
        for (text, says) in [
            ("", "empty"),
            ("https://docs.rs", "is a URL"),
            ("docs.rs/std", "is a URL"),
            ("docs.rs:443", "is not a host"),
            ("*docs.rs", "`*` may only"),
            ("docs.*.rs", "`*` may only"),
            ("*.", "does not name a domain"),
            ("*.127.0.0.1", "an address has no subdomains"),
            ("*.[::1]", "an address has no subdomains"),
            ("user@docs.rs", "is not a host"),
            ("docs..rs", "is not a host"),
            ("docs rs", "is not a host"),
        ] {
            let err = HostPattern::read(text).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
            assert!(err.contains("`*.rust-lang.org`"), "{text:?}: {err}");
        }
    }

    #[test]
    fn hosts_are_spelled_one_way() {
        assert_eq!(canonical("Example.COM.").as_deref(), Some("example.com"));
        assert_eq!(canonical("2130706433").as_deref(), Some("127.0.0.1"));
        assert_eq!(canonical("[::FFFF:7f00:1]").as_deref(), Some("[::ffff:127.0.0.1]"));
        assert_eq!(canonical("*.example.com"), None);
        assert_eq!(canonical("a b"), None);
    }
}

//! `[fetch]`: what the `fetch` tool may reach and for how long ([`Fetch`]), and the checks on
//! its values. Every error names the setting.
//!
//! `allow_private` lifts the refusal of loopback, private (RFC 1918, ULA), link-local and
//! shared (CGNAT) addresses, for a developer who means to read a page served on their own
//! machine or network; the cloud metadata addresses, and addresses no web server has
//! (unspecified, multicast, broadcast, reserved), stay refused. `timeout_secs` bounds one call,
//! every redirect and the conversion included.

use std::time::Duration;

use serde::Deserialize;

/// The `fetch` tool's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    /// Loopback, private, link-local and shared addresses may be fetched.
    pub allow_private: bool,
    /// The longest one call may take, redirects and conversion included.
    pub timeout: Duration,
}

/// The default `timeout_secs`.
pub const DEFAULT_FETCH_SECS: u64 = 30;
/// The longest `timeout_secs` may be: a call longer than that is better made by a command.
pub const MAX_FETCH_SECS: u64 = 300;

impl Default for Fetch {
    fn default() -> Self {
        Self { allow_private: false, timeout: Duration::from_secs(DEFAULT_FETCH_SECS) }
    }
}

/// `[fetch]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFetch {
    allow_private: Option<bool>,
    timeout_secs: Option<u64>,
}

impl FileFetch {
    /// The settings; a time limit of nothing, or of more than [`MAX_FETCH_SECS`], is an error
    /// naming the setting.
    pub(super) fn resolve(&self) -> Result<Fetch, String> {
        let timeout = match self.timeout_secs {
            None => DEFAULT_FETCH_SECS,
            Some(0) => {
                return Err(format!(
                    "[fetch] timeout_secs must be more than 0; leave it out for the default ({DEFAULT_FETCH_SECS})"
                ));
            }
            Some(secs) if secs > MAX_FETCH_SECS => {
                return Err(format!(
                    "[fetch] timeout_secs = {secs} is more than {MAX_FETCH_SECS}; use at most that (a download that \
                     long is better made by a command)"
                ));
            }
            Some(secs) => secs,
        };
        Ok(Fetch { allow_private: self.allow_private.unwrap_or(false), timeout: Duration::from_secs(timeout) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Fetch, String> {
        toml::from_str::<FileFetch>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn private_addresses_are_refused_unless_the_file_allows_them() {
        assert_eq!(resolve("").unwrap(), Fetch::default());
        assert!(!Fetch::default().allow_private);
        assert_eq!(Fetch::default().timeout, Duration::from_secs(30));
        let lifted = resolve("allow_private = true\ntimeout_secs = 5").unwrap();
        assert!(lifted.allow_private);
        assert_eq!(lifted.timeout, Duration::from_secs(5));
    }

    #[test]
    fn a_bad_value_names_the_setting() {
        let err = resolve("allow_private = \"yes\"").unwrap_err();
        assert!(err.contains("allow_private"), "{err}");
        let err = resolve("timeout_secs = 0").unwrap_err();
        assert!(err.starts_with("[fetch] timeout_secs must be more than 0"), "{err}");
        let err = resolve("timeout_secs = 3600").unwrap_err();
        assert!(err.starts_with("[fetch] timeout_secs = 3600 is more than 300"), "{err}");
        let err = resolve("timeout_secs = -1").unwrap_err();
        assert!(err.contains("timeout_secs"), "{err}");
        let err = resolve("allow_privat = true").unwrap_err();
        assert!(err.contains("allow_privat"), "{err}");
    }
}

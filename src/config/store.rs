//! `[store]` of config.toml: `url`, the PostgreSQL database `cairn serve` keeps sessions in,
//! shared by every replica given the same one, instead of the SQLite file in the data
//! directory. `cairn serve --store URL` wins over it. The URL's password is never shown: errors
//! and logs name the database as `user@host:port/database`. `lease_ttl_secs`: how long a
//! replica's hold on a session's turn lasts unrenewed, so how soon another replica closes the
//! turn of one that died (within a quarter more).

use serde::Deserialize;

use super::ConfigError;

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    /// `postgres://user:password@host:port/database`, or a `key=value` connection string.
    #[serde(default)]
    pub url: Option<String>,
    /// Seconds a lease lives unrenewed (renewed every third of that).
    #[serde(default)]
    pub lease_ttl_secs: Option<u64>,
}

/// The default `lease_ttl_secs`: a dead replica's turn is closed within about 19 s.
pub const LEASE_TTL_SECS: u64 = 15;
/// Bounds of `lease_ttl_secs`: shorter would lapse under a loaded database's pauses, longer would
/// leave a dead replica's clients waiting minutes.
const LEASE_TTL_BOUNDS: std::ops::RangeInclusive<u64> = 2..=300;

impl FileStore {
    /// `lease_ttl_secs`, checked against its bounds.
    pub fn lease_ttl(&self) -> Result<std::time::Duration, ConfigError> {
        let secs = self.lease_ttl_secs.unwrap_or(LEASE_TTL_SECS);
        if !LEASE_TTL_BOUNDS.contains(&secs) {
            return Err(ConfigError::Setting {
                setting: "[store] lease_ttl_secs".into(),
                why: format!(
                    "{secs} is out of bounds; give {} to {} seconds ({LEASE_TTL_SECS} by default)",
                    LEASE_TTL_BOUNDS.start(),
                    LEASE_TTL_BOUNDS.end()
                ),
            });
        }
        Ok(std::time::Duration::from_secs(secs))
    }

    /// The URL, checked: one that does not parse is refused naming the key, never its text.
    pub fn resolve(self) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.url.filter(|url| !url.trim().is_empty()) else { return Ok(None) };
        let refused = |why: String| ConfigError::Setting {
            setting: "[store] url".into(),
            why: format!("{why}; write postgres://user:password@host:port/database (the password is never shown)"),
        };
        let parsed: tokio_postgres::Config =
            url.parse().map_err(|err: tokio_postgres::Error| refused(err.to_string()))?;
        if parsed.get_hosts().is_empty() {
            return Err(refused("it names no host".into()));
        }
        Ok(Some(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_checked_and_a_bad_one_is_refused_without_its_password() {
        let good =
            FileStore { url: Some("postgres://cairn:s3cret@db.internal:5432/cairn".into()), ..Default::default() };
        assert!(good.resolve().unwrap().is_some());
        assert_eq!(FileStore { url: Some("  ".into()), ..Default::default() }.resolve().unwrap(), None);
        let bad = FileStore { url: Some("postgres://cairn:s3cret@db:notaport/cairn".into()), ..Default::default() };
        let why = bad.resolve().unwrap_err().to_string();
        assert!(why.contains("[store] url"), "{why}");
        assert!(!why.contains("s3cret"), "{why}");
    }

    #[test]
    fn a_lease_lasts_fifteen_seconds_unless_set_within_its_bounds() {
        assert_eq!(FileStore::default().lease_ttl().unwrap(), std::time::Duration::from_secs(15));
        let short = FileStore { lease_ttl_secs: Some(3), ..Default::default() };
        assert_eq!(short.lease_ttl().unwrap(), std::time::Duration::from_secs(3));
        for bad in [0, 1, 301] {
            let why =
                FileStore { lease_ttl_secs: Some(bad), ..Default::default() }.lease_ttl().unwrap_err().to_string();
            assert!(why.contains("[store] lease_ttl_secs") && why.contains("2 to 300"), "{why}");
        }
    }
}

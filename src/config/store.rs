//! `[store]` of config.toml: `url`, the PostgreSQL database `cairn serve` keeps sessions in,
//! shared by every replica given the same one, instead of the SQLite file in the data
//! directory (`cairn serve --store URL` wins over it); `events_kept_secs`, how long that
//! database keeps the rows of its event log that other replicas follow live turns by; and
//! `lease_ttl_secs`, how long a replica's hold on a session's turn lasts unrenewed, so how soon
//! another replica closes the turn of one that died (within a quarter more). The URL's
//! password is never shown: errors and logs name the database as `user@host:port/database`.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

/// The default `events_kept_secs`: 15 minutes, many times what a follower that is keeping up
/// (or one that just started, from the `seq` its history was read at) ever reads back.
pub const DEFAULT_EVENTS_KEPT: Duration = Duration::from_secs(900);
/// The bounds of `events_kept_secs`: a minute at least (a follower reconnecting must find the
/// rows it missed), a week at most.
const LEAST_EVENTS_KEPT: u64 = 60;
const MOST_EVENTS_KEPT: u64 = 604_800;

/// `[store]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreSettings {
    /// `url`: the PostgreSQL database, if any.
    pub url: Option<String>,
    /// `events_kept_secs`: how old a row of the event log may grow before it is pruned (the
    /// newest row of each session is always kept).
    pub events_kept: Duration,
    /// `lease_ttl_secs`: how long a replica's lease on a session lives unrenewed.
    pub lease_ttl: Duration,
}

/// The default `lease_ttl_secs`: a dead replica's turn is closed within about 19 s.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);
/// Bounds of `lease_ttl_secs`: shorter would lapse under a loaded database's pauses, longer would
/// leave a dead replica's clients waiting minutes.
const LEASE_TTL_BOUNDS: std::ops::RangeInclusive<u64> = 2..=300;

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    /// `postgres://user:password@host:port/database`, or a `key=value` connection string.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub events_kept_secs: Option<u64>,
    /// Seconds a lease lives unrenewed (renewed every third of that).
    #[serde(default)]
    pub lease_ttl_secs: Option<u64>,
}

impl FileStore {
    /// The settings, checked: a URL that does not parse is refused naming the key, never its
    /// text; a time out of bounds naming the key and the bounds.
    pub fn resolve(self) -> Result<StoreSettings, ConfigError> {
        let events_kept = match self.events_kept_secs {
            None => DEFAULT_EVENTS_KEPT,
            Some(secs) if (LEAST_EVENTS_KEPT..=MOST_EVENTS_KEPT).contains(&secs) => Duration::from_secs(secs),
            Some(secs) => {
                return Err(ConfigError::Setting {
                    setting: "[store] events_kept_secs".into(),
                    why: format!(
                        "{secs} is out of bounds; use from {LEAST_EVENTS_KEPT} (a minute) to {MOST_EVENTS_KEPT} (a week), \
                         or leave it out for {}",
                        DEFAULT_EVENTS_KEPT.as_secs()
                    ),
                });
            }
        };
        let lease_ttl = match self.lease_ttl_secs {
            None => DEFAULT_LEASE_TTL,
            Some(secs) if LEASE_TTL_BOUNDS.contains(&secs) => Duration::from_secs(secs),
            Some(secs) => {
                return Err(ConfigError::Setting {
                    setting: "[store] lease_ttl_secs".into(),
                    why: format!(
                        "{secs} is out of bounds; give {} to {} seconds, or leave it out for {}",
                        LEASE_TTL_BOUNDS.start(),
                        LEASE_TTL_BOUNDS.end(),
                        DEFAULT_LEASE_TTL.as_secs()
                    ),
                });
            }
        };
        let Some(url) = self.url.filter(|url| !url.trim().is_empty()) else {
            return Ok(StoreSettings { url: None, events_kept, lease_ttl });
        };
        let refused = |why: String| ConfigError::Setting {
            setting: "[store] url".into(),
            why: format!("{why}; write postgres://user:password@host:port/database (the password is never shown)"),
        };
        // `sslmode` and `sslrootcert` as libpq knows them, then the rest as tokio-postgres does.
        let split = crate::pgurl::split(&url).map_err(refused)?;
        let parsed: tokio_postgres::Config =
            split.rest.parse().map_err(|err: tokio_postgres::Error| refused(err.to_string()))?;
        if parsed.get_hosts().is_empty() {
            return Err(refused("it names no host".into()));
        }
        Ok(StoreSettings { url: Some(url), events_kept, lease_ttl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_checked_and_a_bad_one_is_refused_without_its_password() {
        let url = |url: &str| FileStore { url: Some(url.into()), ..Default::default() };
        assert!(url("postgres://cairn:s3cret@db.internal:5432/cairn").resolve().unwrap().url.is_some());
        let verified = url("postgres://cairn:s3cret@db.internal/cairn?sslmode=verify-full&sslrootcert=/etc/ca.pem");
        assert!(verified.resolve().unwrap().url.is_some(), "libpq's sslmode values are known");
        assert_eq!(url("  ").resolve().unwrap().url, None);
        for bad in ["postgres://cairn:s3cret@db:notaport/cairn", "postgres://cairn:s3cret@db/cairn?sslmode=verify"] {
            let why = url(bad).resolve().unwrap_err().to_string();
            assert!(why.contains("[store] url"), "{why}");
            assert!(!why.contains("s3cret"), "{why}");
        }
    }

    #[test]
    fn event_rows_are_kept_fifteen_minutes_unless_the_file_says_otherwise_within_a_minute_and_a_week() {
        let kept = |secs| FileStore { events_kept_secs: secs, ..Default::default() }.resolve();
        assert_eq!(kept(None).unwrap().events_kept, Duration::from_secs(900));
        assert_eq!(kept(Some(60)).unwrap().events_kept, Duration::from_secs(60));
        assert_eq!(kept(Some(604_800)).unwrap().events_kept, Duration::from_secs(604_800));
        for bad in [0, 59, 604_801] {
            let why = kept(Some(bad)).unwrap_err().to_string();
            assert!(why.contains("[store] events_kept_secs") && why.contains("604800"), "{why}");
        }
    }

    #[test]
    fn a_lease_lasts_fifteen_seconds_unless_set_within_its_bounds() {
        assert_eq!(FileStore::default().resolve().unwrap().lease_ttl, Duration::from_secs(15));
        let short = FileStore { lease_ttl_secs: Some(3), ..Default::default() };
        assert_eq!(short.resolve().unwrap().lease_ttl, Duration::from_secs(3));
        for bad in [0, 1, 301] {
            let why = FileStore { lease_ttl_secs: Some(bad), ..Default::default() }.resolve().unwrap_err().to_string();
            assert!(why.contains("[store] lease_ttl_secs") && why.contains("2 to 300"), "{why}");
        }
    }
}

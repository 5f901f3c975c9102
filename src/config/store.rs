//! `[store]` of config.toml: `url`, the PostgreSQL database `cairn serve` keeps sessions in,
//! shared by every replica given the same one, instead of the SQLite file in the data
//! directory (`cairn serve --store URL` wins over it), and `events_kept_secs`, how long that
//! database keeps the rows of its event log that other replicas follow live turns by. The URL's
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
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    /// `postgres://user:password@host:port/database`, or a `key=value` connection string.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub events_kept_secs: Option<u64>,
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
        let Some(url) = self.url.filter(|url| !url.trim().is_empty()) else {
            return Ok(StoreSettings { url: None, events_kept });
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
        Ok(StoreSettings { url: Some(url), events_kept })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_checked_and_a_bad_one_is_refused_without_its_password() {
        let url = |url: &str| FileStore { url: Some(url.into()), events_kept_secs: None };
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
        let kept = |secs| FileStore { url: None, events_kept_secs: secs }.resolve();
        assert_eq!(kept(None).unwrap().events_kept, Duration::from_secs(900));
        assert_eq!(kept(Some(60)).unwrap().events_kept, Duration::from_secs(60));
        assert_eq!(kept(Some(604_800)).unwrap().events_kept, Duration::from_secs(604_800));
        for bad in [0, 59, 604_801] {
            let why = kept(Some(bad)).unwrap_err().to_string();
            assert!(why.contains("[store] events_kept_secs") && why.contains("604800"), "{why}");
        }
    }
}

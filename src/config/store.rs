//! `[store]` of config.toml: `url`, the PostgreSQL database `cairn serve` keeps sessions in,
//! shared by every replica given the same one, instead of the SQLite file in the data
//! directory. `cairn serve --store URL` wins over it. The URL's password is never shown: errors
//! and logs name the database as `user@host:port/database`.

use serde::Deserialize;

use super::ConfigError;

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileStore {
    /// `postgres://user:password@host:port/database`, or a `key=value` connection string.
    #[serde(default)]
    pub url: Option<String>,
}

impl FileStore {
    /// The URL, checked: one that does not parse is refused naming the key, never its text.
    pub fn resolve(self) -> Result<Option<String>, ConfigError> {
        let Some(url) = self.url.filter(|url| !url.trim().is_empty()) else { return Ok(None) };
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
        Ok(Some(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_checked_and_a_bad_one_is_refused_without_its_password() {
        let good = FileStore { url: Some("postgres://cairn:s3cret@db.internal:5432/cairn".into()) };
        assert!(good.resolve().unwrap().is_some());
        let verified = "postgres://cairn:s3cret@db.internal/cairn?sslmode=verify-full&sslrootcert=/etc/ca.pem";
        assert!(FileStore { url: Some(verified.into()) }.resolve().unwrap().is_some(), "libpq's sslmode values");
        assert_eq!(FileStore { url: Some("  ".into()) }.resolve().unwrap(), None);
        for bad in ["postgres://cairn:s3cret@db:notaport/cairn", "postgres://cairn:s3cret@db/cairn?sslmode=verify"] {
            let why = FileStore { url: Some(bad.into()) }.resolve().unwrap_err().to_string();
            assert!(why.contains("[store] url"), "{why}");
            assert!(!why.contains("s3cret"), "{why}");
        }
    }
}

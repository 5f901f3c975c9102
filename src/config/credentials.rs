//! Keys saved by `cairn login`: `credentials.toml` beside `config.toml`, readable by its owner
//! only, never copied into the database or the logs.
//!
//! The file maps a provider's key variable to the key (`OPENAI_API_KEY = "sk-…"` under
//! `[keys]`), so a key in the environment, under the same name, wins over the file
//! (`Config::key` asks both, in that order). It is read when a key is needed (a turn, the model
//! menu), not once at start, so a login in a terminal counts for the editor's next prompt; it is
//! rewritten whole through a temporary file created exclusively with mode 0600, so a crash
//! leaves the old file or the new one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Secret;

/// The file's shape.
#[derive(Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    keys: BTreeMap<String, String>,
}

/// Why the credentials could not be saved or read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot write {path}: {source}; check that its directory is writable, or set XDG_CONFIG_HOME")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {why}; fix or remove it, then log in again")]
    Read { path: PathBuf, why: String },
}

/// Where the saved keys are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    path: PathBuf,
}

impl Credentials {
    pub fn at(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved key for `variable`, if any. A file that cannot be read holds none (and says so
    /// in the log, without its content).
    pub fn get(&self, variable: &str) -> Option<Secret> {
        self.usable().remove(variable)
    }

    /// Every saved key that is not empty, by variable, from one read of the file. A file that
    /// cannot be read holds none (and says so in the log, without its content).
    pub fn usable(&self) -> BTreeMap<String, Secret> {
        match self.read() {
            Ok(file) => {
                file.keys.into_iter().filter(|(_, key)| !key.trim().is_empty()).map(|(v, k)| (v, Secret(k))).collect()
            }
            Err(err) => {
                tracing::warn!(%err, "saved keys are ignored");
                BTreeMap::new()
            }
        }
    }

    /// The variables that have a saved key.
    pub fn saved(&self) -> Result<Vec<String>, CredentialsError> {
        Ok(self.read()?.keys.into_keys().collect())
    }

    /// Saves `key` for `variable`, keeping the other keys.
    pub fn save(&self, variable: &str, key: &str) -> Result<(), CredentialsError> {
        let mut file = self.read()?;
        file.keys.insert(variable.to_owned(), key.to_owned());
        self.write(&file)
    }

    /// Forgets the key of `variable`, or every key; returns how many were forgotten.
    pub fn forget(&self, variable: Option<&str>) -> Result<usize, CredentialsError> {
        let (file, forgotten) = match (variable, self.read()) {
            (None, Ok(file)) => (File::default(), file.keys.len()),
            // A file that cannot be read holds nothing worth keeping: logging out empties it.
            (None, Err(CredentialsError::Read { .. })) => (File::default(), 1),
            (None, Err(err)) => return Err(err),
            (Some(variable), read) => {
                let mut file = read?;
                let forgotten = usize::from(file.keys.remove(variable).is_some());
                (file, forgotten)
            }
        };
        if forgotten > 0 {
            self.write(&file)?;
        }
        Ok(forgotten)
    }

    fn read(&self) -> Result<File, CredentialsError> {
        use std::os::unix::fs::PermissionsExt;
        let fail = |why: String| CredentialsError::Read { path: self.path.clone(), why };
        match std::fs::symlink_metadata(&self.path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
            Err(err) => return Err(fail(err.to_string())),
            Ok(meta) if !meta.is_file() => {
                return Err(fail("it is not a regular file (cairn keeps keys only in one, not behind a link)".into()));
            }
            // Keys readable by others: make them private again, as `cairn login` wrote them.
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600))
                    .map_err(|err| fail(format!("it is readable by others and cannot be made private: {err}")))?;
            }
            Ok(_) => {}
        }
        let text = std::fs::read_to_string(&self.path).map_err(|err| fail(err.to_string()))?;
        // The parser's message may quote the file, keys included: say only where it is wrong.
        toml::from_str(&text).map_err(|err| {
            let line = err.span().map_or(0, |span| text[..span.start.min(text.len())].lines().count().max(1));
            fail(format!(
                "it is not valid at line {line}; it should hold `[keys]` and lines such as `OPENAI_API_KEY = \"sk-…\"`"
            ))
        })
    }

    /// Writes the whole file 0600 aside under a random name, then renames it into place
    /// (`aside::replace`).
    fn write(&self, file: &File) -> Result<(), CredentialsError> {
        use std::os::unix::fs::DirBuilderExt;
        let fail = |source| CredentialsError::Write { path: self.path.clone(), source };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(fail)?;
        let text = toml::to_string(file).map_err(|err| fail(std::io::Error::other(err)))?;
        crate::aside::replace(&self.path, text.as_bytes()).map(drop).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_saved_private_read_back_and_forgotten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let credentials = Credentials::at(dir.path().join("cairn").join("credentials.toml"));
        assert_eq!(credentials.get("OPENAI_API_KEY"), None, "no file holds no key");
        credentials.save("OPENAI_API_KEY", "sk-one").unwrap();
        credentials.save("ANTHROPIC_API_KEY", "sk-ant").unwrap();
        assert_eq!(credentials.get("OPENAI_API_KEY").unwrap().expose(), "sk-one");
        let mode = std::fs::metadata(credentials.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(credentials.forget(Some("OPENAI_API_KEY")).unwrap(), 1);
        assert_eq!(credentials.get("OPENAI_API_KEY"), None);
        assert_eq!(credentials.saved().unwrap(), ["ANTHROPIC_API_KEY"]);
        assert_eq!(credentials.forget(None).unwrap(), 1);
        assert!(credentials.saved().unwrap().is_empty());
    }

    #[test]
    fn a_garbled_file_holds_no_key_and_says_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        std::fs::write(&path, "keys = [oops").unwrap();
        let credentials = Credentials::at(path);
        assert_eq!(credentials.get("OPENAI_API_KEY"), None);
        let err = credentials.save("OPENAI_API_KEY", "sk").unwrap_err().to_string();
        assert!(err.contains("credentials.toml") && err.contains("fix or remove it"), "{err}");
        assert_eq!(credentials.forget(None).unwrap(), 1, "logging out removes what cannot be read");
        assert!(credentials.saved().unwrap().is_empty());
    }

    #[test]
    fn a_broken_file_is_described_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.toml");
        std::fs::write(&path, "keys = \"sk-live-SECRET123\"\n").unwrap();
        let err = Credentials::at(path).saved().unwrap_err().to_string();
        assert!(!err.contains("SECRET"), "{err}");
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn a_link_is_not_followed_and_an_open_file_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.toml");
        std::fs::write(&elsewhere, "[keys]\nOPENAI_API_KEY = \"sk-planted\"\n").unwrap();
        let link = dir.path().join("credentials.toml");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let credentials = Credentials::at(link);
        assert_eq!(credentials.get("OPENAI_API_KEY"), None, "a planted link is not read");
        assert!(credentials.save("OPENAI_API_KEY", "sk-new").unwrap_err().to_string().contains("not a regular file"));
        assert!(std::fs::read_to_string(&elsewhere).unwrap().contains("sk-planted"), "nor written through");

        let open = dir.path().join("open.toml");
        std::fs::write(&open, "[keys]\nOPENAI_API_KEY = \"sk-open\"\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Credentials::at(open.clone()).get("OPENAI_API_KEY").unwrap().expose(), "sk-open");
        assert_eq!(std::fs::metadata(&open).unwrap().permissions().mode() & 0o777, 0o600);
    }
}

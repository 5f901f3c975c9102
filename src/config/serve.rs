//! `[serve]` of config.toml: `url`, the `cairn serve` that `cairn acp` (what an editor launches)
//! bridges to instead of serving here, as `cairn acp --server URL` does.
//!
//! `cairn acp` has to know it before it answers `initialize`, while the rest of the
//! configuration loads on its own thread after the first answer. So [`url`] reads only this:
//! the file, and a parse of it only when it names `serve` at all, which keeps a setup without
//! the table at one file read on the way to the first answer.

use std::path::Path;

use serde::Deserialize;

use super::ConfigError;

/// `[serve]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileServe {
    /// `ws://HOST:PORT/acp`, a Unix socket's path, or `local` (the socket in the user's runtime
    /// directory).
    pub url: Option<String>,
}

/// The config file with its `[serve]` alone; everything else is checked by the full load.
#[derive(Deserialize)]
struct OnlyServe {
    #[serde(default)]
    serve: FileServe,
}

/// `[serve] url` of the config file `env` points to, if there is one.
pub fn url(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, ConfigError> {
    let Some(path) = super::file_path(env) else { return Ok(None) };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        // A missing file (even one named on purpose) is the full load's to report.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ConfigError::Read { path, source }),
    };
    if !text.contains("serve") {
        return Ok(None);
    }
    from_text(&path, &text)
}

fn from_text(path: &Path, text: &str) -> Result<Option<String>, ConfigError> {
    let only: OnlyServe = toml::from_str(text)
        .map_err(|err| ConfigError::Setting { setting: format!("{} [serve]", path.display()), why: err.to_string() })?;
    Ok(only.serve.url.filter(|url| !url.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_read_from_serve_and_nothing_else_is_looked_at() {
        let path = Path::new("config.toml");
        let text = "model = \"openai/x\"\n[limits]\nwhatever = 1\n[serve]\nurl = \"ws://127.0.0.1:7420/acp\"\n";
        assert_eq!(from_text(path, text).unwrap().as_deref(), Some("ws://127.0.0.1:7420/acp"));
        assert_eq!(from_text(path, "[serve]\n").unwrap(), None);
        assert_eq!(from_text(path, "[serve]\nurl = \"  \"\n").unwrap(), None);
        let wrong = from_text(path, "[serve]\nadress = \"x\"\n").unwrap_err().to_string();
        assert!(wrong.contains("[serve]") && wrong.contains("adress"), "{wrong}");
    }

    #[test]
    fn no_file_means_no_url() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        let env = |name: &str| (name == "CAIRN_CONFIG").then(|| missing.to_string_lossy().into_owned());
        assert_eq!(url(&env).unwrap(), None);
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "model = \"openai/x\"\n").unwrap();
        let env = |name: &str| (name == "CAIRN_CONFIG").then(|| file.to_string_lossy().into_owned());
        assert_eq!(url(&env).unwrap(), None);
    }
}

//! Settings checked where they are read, so that a wrong one is refused with its name and the
//! fix instead of being retried, ignored or resolved against whatever directory the editor
//! started cairn in: endpoints need a scheme, a model reference needs a model, the data
//! directory and the log file must be absolute.

use std::path::PathBuf;

use super::ConfigError;

/// `setting` (as the user writes it: `OPENAI_BASE_URL`, `[providers.x] base_url`) is a URL cairn
/// can send requests to.
pub(super) fn base_url(setting: &str, url: &str) -> Result<(), ConfigError> {
    let refuse = |why: String| Err(ConfigError::Setting { setting: setting.to_owned(), why });
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    match rest {
        None => refuse(format!(
            "`{url}` has no http:// or https:// scheme; write the whole endpoint, e.g. https://api.example.com/v1"
        )),
        Some(host) if host.trim_matches('/').is_empty() => refuse(format!("`{url}` names no host")),
        Some(_) => Ok(()),
    }
}

/// `setting` (`CAIRN_MODEL`, `model`) is `provider/model` with a model, or a bare model name.
pub(super) fn model(setting: &str, model: &str) -> Result<(), ConfigError> {
    let (provider, name) = super::split_model(model.trim());
    if name.trim().is_empty() || provider.trim().is_empty() {
        return Err(ConfigError::Setting {
            setting: setting.to_owned(),
            why: format!("`{model}` is not `provider/model`: write both, e.g. openai/gpt-5"),
        });
    }
    Ok(())
}

/// `CAIRN_HOME` as given: absolute, since a relative one would follow the editor's directory.
pub(super) fn home(value: &str) -> Result<PathBuf, ConfigError> {
    let path = PathBuf::from(value);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(ConfigError::Setting {
            setting: "CAIRN_HOME".to_owned(),
            why: format!(
                "`{value}` is relative, so it would depend on the directory cairn is started in; give an absolute path"
            ),
        })
    }
}

/// `log_file` as written in `config.toml`: absolute, or under the home directory (`~/…`); a
/// relative one would follow the directory the editor starts cairn in.
pub(super) fn log_file(value: &str, home: Option<&std::path::Path>) -> Result<PathBuf, ConfigError> {
    let refuse = |why: String| Err(ConfigError::Setting { setting: "log_file (config.toml)".to_owned(), why });
    let path = match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        (Some(_), None) => {
            return refuse(format!("`{value}` starts with ~/ but there is no home directory; give an absolute path"));
        }
        (None, _) => PathBuf::from(value),
    };
    if !path.is_absolute() {
        return refuse(format!(
            "`{value}` is relative, so it would depend on the directory cairn is started in; give an absolute path or ~/…"
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_settings_are_refused_naming_them() {
        for url in ["https://api.openai.com/v1", "http://localhost:11434/v1"] {
            assert!(base_url("OPENAI_BASE_URL", url).is_ok(), "{url}");
        }
        for url in ["api.openai.com/v1", "localhost:11434", "https://", "ftp://x"] {
            let err = base_url("OPENAI_BASE_URL", url).unwrap_err().to_string();
            assert!(err.starts_with("OPENAI_BASE_URL: ") && err.contains(url), "{err}");
        }
        assert!(model("CAIRN_MODEL", "openai/gpt-5").is_ok());
        assert!(model("CAIRN_MODEL", "gpt-5").is_ok());
        for bad in ["openai/", "/gpt-5", " ", "anthropic/ "] {
            let err = model("CAIRN_MODEL", bad).unwrap_err().to_string();
            assert!(err.starts_with("CAIRN_MODEL: ") && err.contains("provider/model"), "{bad}: {err}");
        }
        assert_eq!(home("/var/lib/cairn").unwrap(), PathBuf::from("/var/lib/cairn"));
        assert!(home("data").unwrap_err().to_string().starts_with("CAIRN_HOME: `data` is relative"));
        let home_dir = std::path::Path::new("/home/u");
        assert_eq!(log_file("~/cairn.log", Some(home_dir)).unwrap(), PathBuf::from("/home/u/cairn.log"));
        assert_eq!(log_file("/var/log/cairn.log", None).unwrap(), PathBuf::from("/var/log/cairn.log"));
        let err = log_file("cairn.log", Some(home_dir)).unwrap_err().to_string();
        assert!(err.starts_with("log_file (config.toml): `cairn.log` is relative"), "{err}");
    }
}

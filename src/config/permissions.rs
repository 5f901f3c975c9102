//! `[permissions]`: where an "always allow" answer to a permission question is remembered
//! (`remember`: a [`Remember`], this session or this project), and the check on its value.
//! Every error names the setting.

use serde::Deserialize;

/// Where the one "always allow" option of a permission question keeps its rule
/// (`[permissions] remember`). The other scope stays reachable: `/permissions project <n>`
/// keeps a session's rule for the whole project.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Remember {
    /// With the session that asked.
    #[default]
    Session,
    /// With the project: every session in the same directory.
    Project,
}

impl Remember {
    /// The value as written in `config.toml`.
    pub fn id(self) -> &'static str {
        match self {
            Remember::Session => "session",
            Remember::Project => "project",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [Remember::Session, Remember::Project].into_iter().find(|remember| remember.id() == value)
    }
}

/// `[permissions]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePermissions {
    remember: Option<String>,
}

impl FilePermissions {
    /// Where "always allow" answers go; a value other than `session` or `project` is an error
    /// naming the setting.
    pub(super) fn resolve(&self) -> Result<Remember, String> {
        match self.remember.as_deref() {
            None => Ok(Remember::default()),
            Some(value) => Remember::parse(value).ok_or_else(|| {
                format!(
                    "[permissions] remember = {value:?} is not a choice; write \"session\" (the default: \"always \
                     allow\" holds in the session that asked) or \"project\" (every session in that directory)"
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Remember, String> {
        toml::from_str::<FilePermissions>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn always_is_remembered_in_the_session_unless_the_file_says_project() {
        assert_eq!(resolve("").unwrap(), Remember::Session);
        assert_eq!(resolve("remember = \"session\"").unwrap(), Remember::Session);
        assert_eq!(resolve("remember = \"project\"").unwrap(), Remember::Project);
    }

    #[test]
    fn a_bad_value_names_the_setting_and_the_choices() {
        let err = resolve("remember = \"forever\"").unwrap_err();
        assert!(err.starts_with("[permissions] remember = \"forever\" is not a choice"), "{err}");
        assert!(err.contains("\"session\"") && err.contains("\"project\""), "{err}");
        let err = resolve("remember = true").unwrap_err();
        assert!(err.contains("remember"), "{err}");
        let err = resolve("rememebr = \"project\"").unwrap_err();
        assert!(err.contains("rememebr"), "{err}");
    }
}

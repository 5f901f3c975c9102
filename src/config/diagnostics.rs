//! `[checks]`: the project's checkers run after `write` and `edit` ([`Checks`]): for each
//! `[[checks.after_edit]]` a glob of the files it covers (relative to the workspace root, e.g.
//! `**/*.rs`), the command line (`cargo check --message-format short`, run by `bash -c`) and
//! its own time limit, else `[checks] timeout_secs`. Only the user's `config.toml` holds them:
//! no file a repository brings names a command here. Every error names the setting and the fix.

use std::time::Duration;

use serde::Deserialize;

/// The default time limit of one checker run.
pub const DEFAULT_CHECK_SECS: u64 = 30;
/// The longest time limit a checker may name: a check runs twice per edit (before and after).
pub const MOST_CHECK_SECS: u64 = 600;

/// The checkers of the user's config.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    pub after_edit: Vec<Checker>,
}

/// One checker: what files it covers and what it runs.
#[derive(Clone, Debug)]
pub struct Checker {
    /// The glob as written (shown in errors).
    pub glob: String,
    /// Matches a path relative to the workspace root.
    pub matcher: globset::GlobMatcher,
    /// The command line, run with `bash -c` in the workspace root.
    pub command: String,
    pub timeout: Duration,
}

impl Checks {
    /// The checkers covering `relative` (a path inside the workspace root, `/`-separated).
    pub fn covering<'a>(&'a self, relative: &'a std::path::Path) -> impl Iterator<Item = &'a Checker> + 'a {
        self.after_edit.iter().filter(move |checker| checker.matcher.is_match(relative))
    }

    /// The longest any checker may take: what an edit may spend on checks, run before and after.
    pub fn longest(&self) -> Duration {
        self.after_edit.iter().map(|checker| checker.timeout).max().unwrap_or_default()
    }
}

/// `[checks]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileChecks {
    timeout_secs: Option<u64>,
    #[serde(default)]
    after_edit: Vec<FileChecker>,
}

/// One `[[checks.after_edit]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileChecker {
    glob: Option<String>,
    command: Option<String>,
    timeout_secs: Option<u64>,
}

fn seconds(setting: &str, secs: Option<u64>, default: u64) -> Result<Duration, String> {
    match secs {
        None => Ok(Duration::from_secs(default)),
        Some(secs) if secs == 0 || secs > MOST_CHECK_SECS => Err(format!(
            "{setting} = {secs} is out of bounds; use from 1 to {MOST_CHECK_SECS} seconds (leave it out for {default})"
        )),
        Some(secs) => Ok(Duration::from_secs(secs)),
    }
}

impl FileChecks {
    /// The checkers; a missing or wrong value is an error naming the setting.
    pub(super) fn resolve(&self) -> Result<Checks, String> {
        let default = seconds("[checks] timeout_secs", self.timeout_secs, DEFAULT_CHECK_SECS)?.as_secs();
        let mut after_edit = Vec::with_capacity(self.after_edit.len());
        for (n, given) in self.after_edit.iter().enumerate() {
            let named = format!("[[checks.after_edit]] #{}", n + 1);
            let Some(glob) = given.glob.as_deref().filter(|glob| !glob.trim().is_empty()) else {
                return Err(format!(
                    "{named} has no `glob`; name the files it checks, e.g. glob = \"**/*.rs\" (relative to the workspace root)"
                ));
            };
            // The glob is matched against the file's path relative to its root, which never
            // starts with `/` or `./` and holds no `..`: such a glob would silently check nothing.
            if glob.starts_with('/') || glob.starts_with("./") || glob.split('/').any(|part| part == "..") {
                return Err(format!(
                    "{named} glob = \"{glob}\" can never match: it is matched against paths relative to the workspace root, \
                     with no leading `/` or `./` and no `..`; write one such as \"src/**/*.rs\""
                ));
            }
            let matcher = globset::GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|err| {
                    format!("{named} glob = \"{glob}\" is not a glob ({err}); write one such as \"**/*.rs\"")
                })?
                .compile_matcher();
            let Some(command) = given.command.as_deref().filter(|command| !command.trim().is_empty()) else {
                return Err(format!(
                    "{named} has no `command`; give the checker's command line, e.g. command = \"cargo check --message-format short\""
                ));
            };
            let timeout = seconds(&format!("{named} timeout_secs"), given.timeout_secs, default)?;
            after_edit.push(Checker { glob: glob.to_owned(), matcher, command: command.to_owned(), timeout });
        }
        Ok(Checks { after_edit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<Checks, String> {
        toml::from_str::<FileChecks>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn no_checker_unless_the_file_names_one() {
        assert!(resolve("").unwrap().after_edit.is_empty());
        assert_eq!(resolve("").unwrap().longest(), Duration::ZERO);
    }

    #[test]
    fn a_checker_covers_the_files_of_its_glob_with_its_own_limit_or_the_table_s() {
        let checks = resolve(
            "timeout_secs = 10\n[[after_edit]]\nglob = \"**/*.rs\"\ncommand = \"cargo check\"\n\
             [[after_edit]]\nglob = \"web/*.ts\"\ncommand = \"tsc\"\ntimeout_secs = 40\n",
        )
        .unwrap();
        let names = |path: &str| {
            checks.covering(std::path::Path::new(path)).map(|checker| checker.command.clone()).collect::<Vec<_>>()
        };
        assert_eq!(names("src/lib.rs"), ["cargo check"]);
        assert_eq!(names("lib.rs"), ["cargo check"]);
        assert_eq!(names("web/a.ts"), ["tsc"]);
        assert!(names("web/deep/a.ts").is_empty(), "a single * stays within one directory");
        assert!(names("README.md").is_empty());
        assert_eq!(checks.after_edit[0].timeout, Duration::from_secs(10));
        assert_eq!(checks.longest(), Duration::from_secs(40));
    }

    #[test]
    fn a_bad_checker_names_the_setting_and_the_fix() {
        let err = resolve("[[after_edit]]\ncommand = \"tsc\"\n").unwrap_err();
        assert!(err.starts_with("[[checks.after_edit]] #1 has no `glob`"), "{err}");
        let err = resolve("[[after_edit]]\nglob = \"*.rs\"\n").unwrap_err();
        assert!(err.contains("has no `command`"), "{err}");
        let err = resolve("[[after_edit]]\nglob = \"src/[\"\ncommand = \"x\"\n").unwrap_err();
        assert!(err.contains("glob = \"src/[\" is not a glob"), "{err}");
        let err = resolve("[[after_edit]]\nglob = \"*\"\ncommand = \"x\"\ntimeout_secs = 0\n").unwrap_err();
        assert!(err.starts_with("[[checks.after_edit]] #1 timeout_secs = 0 is out of bounds"), "{err}");
        let err = resolve("timeout_secs = 601\n").unwrap_err();
        assert!(err.starts_with("[checks] timeout_secs = 601"), "{err}");
        let err = resolve("[[after_edit]]\nglob = \"*\"\ncmd = \"x\"\n").unwrap_err();
        assert!(err.contains("cmd"), "{err}");
    }

    #[test]
    fn a_glob_no_relative_path_can_match_is_refused() {
        for glob in ["./src/*.rs", "/home/me/project/**/*.rs", "../other/*.rs", "src/../*.rs"] {
            let err = resolve(&format!("[[after_edit]]\nglob = {glob:?}\ncommand = \"x\"\n")).unwrap_err();
            assert!(err.starts_with(&format!("[[checks.after_edit]] #1 glob = \"{glob}\" can never match")), "{err}");
            assert!(err.contains("relative to the workspace root"), "{err}");
        }
        assert!(resolve("[[after_edit]]\nglob = \"src/..x/*.rs\"\ncommand = \"x\"\n").is_ok());
    }
}

//! `[lsp]`: the language servers asked for diagnostics after `write` and `edit` ([`LspSettings`]).
//! Four are built in, each chosen by the edited file's extension and used only when its program
//! is found on `PATH`: `rust-analyzer` (`.rs`), `typescript-language-server --stdio`
//! (`.ts`, `.tsx`, `.js`, `.jsx`, `.mjs`, `.cjs`), `pyright-langserver --stdio` (`.py`, named
//! `pyright`) and `gopls` (`.go`). `[lsp] enabled = false` turns them all off,
//! `[lsp.servers.<name>]` adds a server (`command`, `extensions`) or changes or disables
//! (`enabled = false`) a built-in one, and `[lsp] wait_ms` bounds how long an edit waits for a
//! server's diagnostics. Only the user's `config.toml` holds them: no file a repository brings
//! names a program to run. Every error names the setting and the fix.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// How long an edit waits for a server's diagnostics unless `[lsp] wait_ms` says otherwise.
pub const DEFAULT_WAIT_MS: u64 = 3000;
/// The bounds of `[lsp] wait_ms`.
pub const WAIT_MS: std::ops::RangeInclusive<u64> = 100..=60_000;

/// The language servers of the user's config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LspSettings {
    /// `[lsp] enabled`: false asks no server at all.
    pub enabled: bool,
    /// How long one wait for a server's diagnostics may take (`[lsp] wait_ms`).
    pub wait: Duration,
    /// The servers in the order they are chosen: the user's own first, then the built-in ones
    /// not disabled.
    pub servers: Vec<LspServer>,
}

/// One language server: its name, its command line and the extensions of the files it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LspServer {
    pub name: String,
    /// The program (found on `PATH` unless it is a path) and its arguments.
    pub command: Vec<String>,
    /// Without the dot: `rs`, `tsx`.
    pub extensions: Vec<String>,
    /// A built-in server is used only when its program is found; the user's own is reported
    /// when it cannot start.
    pub builtin: bool,
}

impl Default for LspSettings {
    fn default() -> Self {
        Self { enabled: true, wait: Duration::from_millis(DEFAULT_WAIT_MS), servers: builtin() }
    }
}

impl LspSettings {
    /// The server for a file named `file`, by its extension; `None` when none covers it or
    /// `[lsp]` is off.
    pub fn for_file(&self, file: &std::path::Path) -> Option<&LspServer> {
        let extension = file.extension()?.to_str()?;
        self.servers
            .iter()
            .filter(|_| self.enabled)
            .find(|server| server.extensions.iter().any(|covered| covered == extension))
    }
}

/// The built-in servers.
fn builtin() -> Vec<LspServer> {
    let server = |name: &str, command: &[&str], extensions: &[&str]| LspServer {
        name: name.to_owned(),
        command: command.iter().map(|part| (*part).to_owned()).collect(),
        extensions: extensions.iter().map(|part| (*part).to_owned()).collect(),
        builtin: true,
    };
    vec![
        server("rust-analyzer", &["rust-analyzer"], &["rs"]),
        server(
            "typescript-language-server",
            &["typescript-language-server", "--stdio"],
            &["ts", "tsx", "js", "jsx", "mjs", "cjs"],
        ),
        server("pyright", &["pyright-langserver", "--stdio"], &["py"]),
        server("gopls", &["gopls"], &["go"]),
    ]
}

/// `[lsp]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLsp {
    enabled: Option<bool>,
    wait_ms: Option<u64>,
    #[serde(default)]
    servers: BTreeMap<String, FileServer>,
}

/// One `[lsp.servers.<name>]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    enabled: Option<bool>,
    command: Option<Vec<String>>,
    extensions: Option<Vec<String>>,
}

impl FileLsp {
    /// The servers; a missing or wrong value is an error naming the setting.
    pub(super) fn resolve(self) -> Result<LspSettings, String> {
        let wait_ms = self.wait_ms.unwrap_or(DEFAULT_WAIT_MS);
        if !WAIT_MS.contains(&wait_ms) {
            return Err(format!(
                "[lsp] wait_ms = {wait_ms} is out of bounds; use from {} to {} milliseconds (leave it out for {DEFAULT_WAIT_MS})",
                WAIT_MS.start(),
                WAIT_MS.end()
            ));
        }
        let mut builtin = builtin();
        let mut own = Vec::new();
        for (name, given) in self.servers {
            let named = format!("[lsp.servers.{name}]");
            if let Some(command) = &given.command
                && command.first().is_none_or(|program| program.trim().is_empty())
            {
                return Err(format!(
                    "{named} command is empty; give the program and its arguments, e.g. command = [\"gopls\"]"
                ));
            }
            if let Some(extensions) = &given.extensions {
                if extensions.is_empty() {
                    return Err(format!(
                        "{named} extensions is empty; name the files it covers, e.g. extensions = [\"go\"] \
                         (or set enabled = false)"
                    ));
                }
                if let Some(bad) =
                    extensions.iter().find(|extension| extension.is_empty() || extension.contains(['.', '/', '*', ' ']))
                {
                    return Err(format!(
                        "{named} extensions holds \"{bad}\"; write an extension without its dot, e.g. \"rs\""
                    ));
                }
            }
            let enabled = given.enabled.unwrap_or(true);
            match builtin.iter().position(|server| server.name == name) {
                Some(at) if !enabled => drop(builtin.remove(at)),
                Some(at) => {
                    let server = &mut builtin[at];
                    if let Some(command) = given.command {
                        server.command = command;
                        server.builtin = false;
                    }
                    if let Some(extensions) = given.extensions {
                        server.extensions = extensions;
                    }
                }
                None if !enabled => {}
                None => {
                    let (Some(command), Some(extensions)) = (given.command, given.extensions) else {
                        return Err(format!(
                            "{named} is not a built-in server, so it needs both `command` and `extensions`, e.g. \
                             command = [\"my-server\", \"--stdio\"] and extensions = [\"txt\"]"
                        ));
                    };
                    own.push(LspServer { name, command, extensions, builtin: false });
                }
            }
        }
        own.extend(builtin);
        Ok(LspSettings { enabled: self.enabled.unwrap_or(true), wait: Duration::from_millis(wait_ms), servers: own })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn resolve(text: &str) -> Result<LspSettings, String> {
        toml::from_str::<FileLsp>(text).map_err(|err| err.to_string())?.resolve()
    }

    fn name(settings: &LspSettings, file: &str) -> Option<String> {
        settings.for_file(Path::new(file)).map(|server| server.name.clone())
    }

    #[test]
    fn the_built_in_servers_cover_their_languages_by_extension() {
        let settings = resolve("").unwrap();
        assert_eq!(settings, LspSettings::default());
        assert_eq!(name(&settings, "src/lib.rs").as_deref(), Some("rust-analyzer"));
        assert_eq!(name(&settings, "web/a.tsx").as_deref(), Some("typescript-language-server"));
        assert_eq!(name(&settings, "x.cjs").as_deref(), Some("typescript-language-server"));
        assert_eq!(name(&settings, "a.py").as_deref(), Some("pyright"));
        assert_eq!(name(&settings, "main.go").as_deref(), Some("gopls"));
        assert_eq!(name(&settings, "README.md"), None);
        assert_eq!(name(&settings, "Makefile"), None);
        assert_eq!(settings.wait, Duration::from_millis(DEFAULT_WAIT_MS));
    }

    #[test]
    fn a_server_is_added_changed_or_disabled_and_all_can_be_turned_off() {
        let settings = resolve(
            "wait_ms = 500\n[servers.stub]\ncommand = [\"python3\", \"stub.py\"]\nextensions = [\"txt\", \"rs\"]\n\
             [servers.gopls]\nenabled = false\n[servers.pyright]\ncommand = [\"basedpyright-langserver\", \"--stdio\"]\n",
        )
        .unwrap();
        assert_eq!(name(&settings, "a.txt").as_deref(), Some("stub"));
        assert_eq!(name(&settings, "a.rs").as_deref(), Some("stub"), "the user's own come first");
        assert_eq!(name(&settings, "a.go"), None);
        let pyright = settings.for_file(Path::new("a.py")).unwrap();
        assert_eq!(pyright.command[0], "basedpyright-langserver");
        assert!(!pyright.builtin, "a command of the user's is reported when it cannot start");
        assert_eq!(settings.wait, Duration::from_millis(500));
        let off = resolve("enabled = false\n").unwrap();
        assert_eq!(name(&off, "a.rs"), None);
    }

    #[test]
    fn a_bad_table_names_the_setting_and_the_fix() {
        for (text, said) in [
            ("wait_ms = 50\n", "[lsp] wait_ms = 50 is out of bounds"),
            ("wait_ms = 60001\n", "[lsp] wait_ms = 60001 is out of bounds"),
            ("[servers.x]\ncommand = [\"x\"]\n", "[lsp.servers.x] is not a built-in server"),
            ("[servers.x]\ncommand = []\nextensions = [\"x\"]\n", "[lsp.servers.x] command is empty"),
            ("[servers.x]\ncommand = [\"x\"]\nextensions = [\".x\"]\n", "extensions holds \".x\""),
            ("[servers.gopls]\nextensions = []\n", "[lsp.servers.gopls] extensions is empty"),
            ("[servers.gopls]\ncmd = [\"gopls\"]\n", "cmd"),
            ("timeout = 3\n", "timeout"),
        ] {
            let err = resolve(text).unwrap_err();
            assert!(err.contains(said), "{text}: {err}");
        }
    }
}

//! The MCP servers of `config.toml`: `[mcp_servers.<name>]` tables (a program with `command`,
//! `args` and `env`, or an endpoint with `url` and `headers`; `enabled = false` leaves one out)
//! and `[mcp]` (`startup_timeout_secs`). Checked when the file is read into `mcp::ServerConfig`s
//! and `mcp::McpSettings`, each error naming the setting; servers come out in name order, which
//! is the order their tools are offered in.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::mcp::{McpSettings, ServerConfig, Transport, check_header, check_name, check_url};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMcpServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default = "enabled")]
    enabled: bool,
    /// `false` runs this server without the sandbox (still supervised, with the scrubbed
    /// environment, and killed with the session).
    sandbox: Option<bool>,
}

fn enabled() -> bool {
    true
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMcp {
    startup_timeout_secs: Option<u64>,
}

/// The enabled servers, checked.
pub(super) fn servers(file: BTreeMap<String, FileMcpServer>) -> Result<Vec<ServerConfig>, String> {
    let mut servers = Vec::new();
    for (name, given) in file {
        let at = format!("[mcp_servers.{}]", toml_key(&name));
        check_name(&name).map_err(|why| format!("{at}: {why}"))?;
        let transport = match (given.command, given.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at} has both `command` and `url`; a server is a program (command) or an HTTP endpoint (url)"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at} needs `command` (a program speaking MCP on stdin/stdout) or `url` (a streamable HTTP endpoint)"
                ));
            }
            (Some(command), None) => {
                if !given.headers.is_empty() {
                    return Err(format!("{at}: `headers` are for `url` servers; a `command` server takes `env`"));
                }
                if command.trim().is_empty() {
                    return Err(format!("{at}: `command` is empty"));
                }
                Transport::Stdio {
                    command,
                    args: given.args,
                    env: given.env.into_iter().collect(),
                    sandboxed: given.sandbox.unwrap_or(true),
                }
            }
            (None, Some(url)) => {
                if !given.args.is_empty() || !given.env.is_empty() || given.sandbox.is_some() {
                    return Err(format!(
                        "{at}: `args`, `env` and `sandbox` are for `command` servers; a `url` server takes `headers`"
                    ));
                }
                check_url(&url).map_err(|why| format!("{at} url: {why}"))?;
                for (header, value) in &given.headers {
                    check_header(header, value).map_err(|why| format!("{at} headers: {why}"))?;
                }
                Transport::Http { url, headers: given.headers.into_iter().collect() }
            }
        };
        if given.enabled {
            servers.push(ServerConfig { name, transport });
        }
    }
    Ok(servers)
}

/// `[mcp]`, checked.
pub(super) fn settings(file: &FileMcp) -> Result<McpSettings, String> {
    let mut settings = McpSettings::default();
    match file.startup_timeout_secs {
        Some(0) => return Err("[mcp] startup_timeout_secs must be at least 1".to_owned()),
        Some(secs) => settings.startup_timeout = Duration::from_secs(secs),
        None => {}
    }
    Ok(settings)
}

/// A table key as it would be written in the file.
fn toml_key(name: &str) -> String {
    let bare = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { name.to_owned() } else { format!("{name:?}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<(Vec<ServerConfig>, McpSettings), String> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            mcp_servers: BTreeMap<String, FileMcpServer>,
            #[serde(default)]
            mcp: FileMcp,
        }
        let file: File = toml::from_str(text).map_err(|err| err.to_string())?;
        Ok((servers(file.mcp_servers)?, settings(&file.mcp)?))
    }

    #[test]
    fn servers_and_settings_are_read() {
        let (servers, settings) = read(
            "[mcp]\nstartup_timeout_secs = 3\n\
             [mcp_servers.web]\nurl = \"https://example.com/mcp\"\nheaders = { Authorization = \"Bearer t\" }\n\
             [mcp_servers.fs]\ncommand = \"npx\"\nargs = [\"-y\", \"server-fs\"]\nenv = { ROOT = \"/x\" }\n\
             [mcp_servers.off]\ncommand = \"x\"\nenabled = false\n",
        )
        .unwrap();
        assert_eq!(settings.startup_timeout, Duration::from_secs(3));
        assert_eq!(
            servers,
            [
                ServerConfig::stdio("fs", "npx", vec!["-y".into(), "server-fs".into()])
                    .with_env(vec![("ROOT".into(), "/x".into())]),
                ServerConfig::http("web", "https://example.com/mcp", vec![("Authorization".into(), "Bearer t".into())]),
            ]
        );
        assert_eq!(read("").unwrap().1, McpSettings::default());
    }

    #[test]
    fn mistakes_are_refused_naming_the_setting() {
        for (text, expected) in [
            ("[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n", "[mcp_servers.a] has both `command` and `url`"),
            ("[mcp_servers.a]\nargs = []\n", "[mcp_servers.a] needs `command`"),
            ("[mcp_servers.\"my server\"]\ncommand = \"x\"\n", "[mcp_servers.\"my server\"]: `my server` holds ` `"),
            ("[mcp_servers.a__b]\ncommand = \"x\"\n", "contains `__`"),
            ("[mcp_servers.\"\"]\ncommand = \"x\"\n", "a server needs a name"),
            ("[mcp_servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n", "`headers` are for `url` servers"),
            (
                "[mcp_servers.a]\nurl = \"http://h\"\nenv = { A = \"b\" }\n",
                "`args`, `env` and `sandbox` are for `command`",
            ),
            ("[mcp_servers.a]\nurl = \"h\"\n", "[mcp_servers.a] url: `h` is not a URL"),
            ("[mcp_servers.a]\nurl = \"http://h\"\nheaders = { Accept = \"x\" }\n", "set by the MCP transport"),
            ("[mcp_servers.a]\ncommand = \" \"\n", "`command` is empty"),
            ("[mcp]\nstartup_timeout_secs = 0\n", "at least 1"),
        ] {
            let err = read(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
        assert!(read("[mcp_servers.a]\ncommand = \"x\"\ncwd = \"/\"\n").unwrap_err().contains("cwd"));
    }
}

//! `cairn doctor`: checks the setup and prints one line per finding, `ok`, `warn` or `fail`:
//! the config file, the default model and its provider, the providers' keys (never their
//! values), whether each provider in use answers (one `GET <base>/models` without a key; any
//! HTTP answer counts, with how long it took), the database (path, size, schema version,
//! `PRAGMA integrity_check`, read without changing it), the MCP servers of the config (started,
//! waited for as a session waits, then stopped) and where logs go. Exits 0 when nothing failed,
//! 1 otherwise. Like `exec` and `inspect`, it writes stdout, and only in this command.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use crate::config::{Api, Config, split_model};
use crate::mcp::{ServerState, Servers};

/// How long a provider has to answer the reachability request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a finding means for the setup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

/// Prints findings as they come, and remembers whether one failed.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, status: Status, what: &str, detail: &str) {
        let word = match status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        };
        self.failed |= status == Status::Fail;
        let detail = crate::visible::text(detail);
        let _ = writeln!(std::io::stdout().lock(), "{word:<4}  {what}: {detail}");
    }
}

/// Runs every check; the exit status (0 nothing failed, 1 otherwise).
pub async fn run() -> u8 {
    let mut report = Report::default();
    let config = match Config::load() {
        Ok(config) => config,
        // The checks that need no file go on, with the environment and the defaults.
        Err(err) => match Config::load_without_file() {
            Ok(config) => {
                let err = one_line(&err.to_string());
                report.line(Status::Fail, "config", &format!("{err} (the checks below leave the file out)"));
                config
            }
            Err(_) => {
                report.line(Status::Fail, "config", &err.to_string());
                return 1;
            }
        },
    };
    let log_file = config.log_file.as_deref().map(crate::logging::use_config_file).transpose();
    match (&config.file, &config.config_dir) {
        _ if report.failed => {}
        (Some(file), _) => report.line(Status::Ok, "config", &format!("{} (valid)", file.display())),
        (None, Some(dir)) => report.line(
            Status::Ok,
            "config",
            &format!("no file at {} (defaults and the environment)", dir.join("config.toml").display()),
        ),
        (None, None) => report.line(Status::Ok, "config", "no config file (defaults and the environment)"),
    }
    model(&mut report, &config);
    keys(&mut report, &config);
    reachable(&mut report, &config).await;
    database(&mut report, &config);
    if let Some(url) = &config.store_url {
        shared_database(&mut report, url).await;
    }
    mcp(&mut report, &config).await;
    match (log_file, crate::logging::file()) {
        (Err(why), _) => report.line(Status::Fail, "log file", &why),
        (Ok(_), Some((path, crate::logging::Source::Flag))) => {
            let overridden = config
                .log_file
                .as_ref()
                .map_or(String::new(), |file| format!("; log_file {} of config.toml is not used", file.display()));
            report.line(Status::Ok, "log file", &format!("{} (--log-file){overridden}", path.display()));
        }
        (Ok(_), Some((path, crate::logging::Source::Config))) => {
            report.line(Status::Ok, "log file", &format!("{} (log_file in config.toml)", path.display()));
        }
        (Ok(_), None) => report.line(
            Status::Ok,
            "log file",
            "none: logs go to stderr only (set log_file in config.toml, or pass --log-file, to keep them)",
        ),
    }
    u8::from(report.failed)
}

/// A multi-line error (TOML's quotes the line as `3 | key = …` and points at the column under
/// it) as one finding's line: its sentences and the quoted line, without the pointer.
fn one_line(text: &str) -> String {
    let part = |line: &str| -> Option<String> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('|') {
            return None;
        }
        match line.split_once(" | ") {
            Some((number, quoted)) if number.parse::<u64>().is_ok() => Some(quoted.trim().to_owned()),
            _ => Some(line.to_owned()),
        }
    };
    text.lines().filter_map(part).collect::<Vec<_>>().join(": ")
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::OpenaiChat => "openai-chat",
        Api::OpenaiResponses => "openai-responses",
        Api::Anthropic => "anthropic",
    }
}

fn model(report: &mut Report, config: &Config) {
    let (provider, _) = split_model(&config.model);
    if let Err(err) = crate::llm::resolve(config, &config.model) {
        report.line(Status::Fail, "model", &format!("{}: {err}", config.model));
        return;
    }
    let detail = match config.providers.get(provider) {
        Some(settings) => {
            format!("{} (provider {provider}, {} API at {})", config.model, api_name(settings.api), settings.base_url)
        }
        None => format!("{} (answers from a file)", config.model),
    };
    report.line(Status::Ok, "model", &detail);
}

fn keys(report: &mut Report, config: &Config) {
    let (default, _) = split_model(&config.model);
    for (name, provider) in &config.providers {
        match (&provider.api_key_env, &provider.api_key) {
            (None, _) => report.line(Status::Ok, "key", &format!("{name}: none needed")),
            (Some(variable), Some(_)) => report.line(Status::Ok, "key", &format!("{name}: {variable} is set")),
            (Some(variable), None) if name == default => report.line(
                Status::Fail,
                "key",
                &format!(
                    "{name}: {variable} is not set, and the default model needs it; set it, or choose another model"
                ),
            ),
            (Some(variable), None) => report.line(
                Status::Warn,
                "key",
                &format!("{name}: {variable} is not set; its models are left out of the editor's menu"),
            ),
        }
    }
}

/// Probes each endpoint in use once: the default model's provider, and those with their key or
/// needing none. Providers sharing an endpoint share the probe.
async fn reachable(report: &mut Report, config: &Config) {
    let (default, _) = split_model(&config.model);
    let mut endpoints: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, provider) in &config.providers {
        let in_use = name == default || provider.api_key_env.is_none() || provider.api_key.is_some();
        if in_use && !provider.base_url.is_empty() {
            endpoints.entry(provider.base_url.as_str()).or_default().push(name);
        }
    }
    let client = match crate::net::client_builder().timeout(PROBE_TIMEOUT).connect_timeout(PROBE_TIMEOUT).build() {
        Ok(client) => client,
        Err(err) => {
            report.line(Status::Fail, "reachable", &format!("cannot build an HTTP client: {err}"));
            return;
        }
    };
    if endpoints.is_empty() {
        report.line(Status::Ok, "reachable", "no provider endpoint in use");
        return;
    }
    let probes = endpoints.keys().map(|base| probe(&client, base));
    let answers = futures::future::join_all(probes).await;
    for ((base, names), answer) in endpoints.iter().zip(answers) {
        let names = names.join(", ");
        match answer {
            Ok((status, took)) => report.line(
                Status::Ok,
                "reachable",
                &format!("{names}: {base} answered HTTP {status} in {} ms", took.as_millis()),
            ),
            Err(why) => report.line(Status::Fail, "reachable", &format!("{names}: {base}: {why}")),
        }
    }
}

/// `GET <base>/models`, without a key: the status and how long the answer took.
async fn probe(client: &reqwest::Client, base: &str) -> Result<(u16, Duration), String> {
    let url = format!("{}/models", base.trim_end_matches('/'));
    let started = Instant::now();
    match client.get(&url).send().await {
        Ok(response) => Ok((response.status().as_u16(), started.elapsed())),
        Err(err) => {
            let mut why = if err.is_timeout() {
                format!("no answer within {} s", PROBE_TIMEOUT.as_secs())
            } else {
                "cannot connect".to_owned()
            };
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                why.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            Err(why)
        }
    }
}

fn database(report: &mut Report, config: &Config) {
    let path = config.database_path();
    match crate::store::health::check(&path) {
        Ok(None) => report.line(
            Status::Ok,
            "database",
            &format!("{} does not exist yet; cairn creates it at first use", path.display()),
        ),
        Ok(Some(health)) => {
            let size = health.size.div_ceil(1024);
            report.line(
                Status::Ok,
                "database",
                &format!(
                    "{} ({size} KiB, {})",
                    path.display(),
                    crate::inspect::sessions(usize::try_from(health.sessions).unwrap_or(0))
                ),
            );
            let (status, note) = match health.version.cmp(&health.supported) {
                std::cmp::Ordering::Equal => (Status::Ok, "current".to_owned()),
                std::cmp::Ordering::Less => {
                    (Status::Ok, format!("cairn upgrades it to {} when it next opens it", health.supported))
                }
                std::cmp::Ordering::Greater => {
                    (Status::Fail, format!("newer than this cairn supports ({}); upgrade cairn", health.supported))
                }
            };
            report.line(status, "schema", &format!("version {} ({note})", health.version));
            if health.is_intact() {
                report.line(Status::Ok, "integrity", "ok (PRAGMA integrity_check)");
            } else {
                let found = health.integrity.join("; ");
                report.line(
                    Status::Fail,
                    "integrity",
                    &format!("{found}; copy the database aside before anything else writes to it"),
                );
            }
        }
        Err(err) => report.line(Status::Fail, "database", &err.to_string()),
    }
}

/// The PostgreSQL store of `[store] url`: reachable, its schema, and the turns its leases say
/// are running or were left by a replica that died.
async fn shared_database(report: &mut Report, url: &str) {
    use crate::store::pg::{PgTarget, health};
    let target = match PgTarget::parse(url) {
        Ok(target) => target,
        Err(err) => return report.line(Status::Fail, "shared store", &err.to_string()),
    };
    let health = match health::check(&target).await {
        Ok(health) => health,
        Err(err) => return report.line(Status::Fail, "shared store", &err.to_string()),
    };
    let sessions = crate::inspect::sessions(usize::try_from(health.sessions).unwrap_or(0));
    report.line(Status::Ok, "shared store", &format!("PostgreSQL at {target} ({sessions}; [store] url)"));
    let (status, note) = match health.version.cmp(&health.supported) {
        std::cmp::Ordering::Equal => (Status::Ok, "current".to_owned()),
        std::cmp::Ordering::Less => {
            (Status::Ok, format!("the next `cairn serve` to start upgrades it to {}", health.supported))
        }
        std::cmp::Ordering::Greater => (
            Status::Fail,
            format!(
                "newer than this cairn supports ({}); upgrade this replica to the version the others run",
                health.supported
            ),
        ),
    };
    report.line(status, "shared schema", &format!("version {} ({note})", health.version));
    let lapsed = match health.lapsed {
        0 => String::new(),
        n => format!("; {n} left by a replica that stopped mid-turn, closed by the next running replica's sweep"),
    };
    report.line(Status::Ok, "leases", &format!("{} turns running{lapsed}", health.running));
}

/// Starts the config's MCP servers in the current directory, waits for them as a prompt would
/// (`[mcp] startup_timeout_secs`), reports each, and stops them.
async fn mcp(report: &mut Report, config: &Config) {
    if config.mcp_servers.is_empty() {
        report.line(Status::Ok, "mcp", "no servers configured");
        return;
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::path::PathBuf::from("/"));
    let sandbox = crate::mcp::Sandbox::new(&config.process, vec![cwd], Vec::new());
    let (servers, _notices) = Servers::start(config.mcp_servers.clone(), &config.mcp, sandbox);
    let timeout = config.mcp.startup_timeout;
    servers.ready(timeout).await;
    for server in servers.status() {
        let name = &server.name;
        match server.state {
            ServerState::Ready { tools } => report.line(Status::Ok, "mcp", &format!("{name}: ready, {tools} tools")),
            ServerState::Failed { why, stderr, .. } => {
                let tail = stderr.lines().last().map_or(String::new(), |line| format!(" (stderr: {line})"));
                report.line(Status::Fail, "mcp", &format!("{name}: {why}{tail}"));
            }
            ServerState::Starting => report.line(
                Status::Fail,
                "mcp",
                &format!("{name}: not ready within {} s ([mcp] startup_timeout_secs)", timeout.as_secs()),
            ),
            ServerState::Stopped => report.line(Status::Fail, "mcp", &format!("{name}: stopped")),
        }
    }
    servers.shutdown().await;
}

//! `cairn login` and `cairn logout`: saving a provider's key instead of exporting it, which is
//! what an editor's login button runs in a terminal (the ACP terminal auth method), and what an
//! editor's key form does through [`save_key`] (the ACP agent method `key`).
//!
//! Login picks a provider that takes a key (asked for in a terminal, or `--provider`), reads the
//! key (typed without echo in a terminal, or one line on stdin), checks it with one cheap request
//! (`GET <base_url>/models`: a refusal is reported in the provider's words and nothing is saved),
//! and saves it in `credentials.toml`. The key is never printed, logged or stored elsewhere.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use crate::config::credentials::CredentialsError;
use crate::config::{Api, Config, ProviderConfig};

/// Why a login or logout did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("unknown provider `{0}`; providers that take a key: {1}")]
    UnknownProvider(String, String),
    #[error("provider `{0}` takes no key (it has no api_key_env); nothing to log in to")]
    Keyless(String),
    #[error("name the provider with --provider (one of: {0}) when stdin is not a terminal")]
    NoProvider(String),
    #[error("no key was given; paste it (or pipe it on stdin) and press Enter")]
    EmptyKey,
    #[error("cannot read the key: {0}")]
    Input(std::io::Error),
    #[error("interrupted; nothing was saved")]
    Interrupted,
    #[error("{url} refused the key (HTTP {status}): {detail}. Nothing was saved; check the key and try again")]
    Rejected { url: String, status: u16, detail: String },
    #[error(
        "cannot reach {url} to check the key ({detail}); nothing was saved. Check base_url, or run `cairn login --no-check` to save it unchecked"
    )]
    Unreachable { url: String, detail: String },
    #[error("no config directory to save keys in: set XDG_CONFIG_HOME (or HOME)")]
    NoConfigDir,
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
}

/// What the login did, for the user.
pub struct LoggedIn {
    pub provider: String,
    pub variable: String,
    /// A word about the check when it could not confirm the key (`None`: the server accepted it).
    pub unconfirmed: Option<String>,
}

/// The providers a login can save a key for, by name.
pub fn keyed(config: &Config) -> Vec<(&str, &ProviderConfig)> {
    config.providers.iter().filter(|(_, p)| p.api_key_env.is_some()).map(|(name, p)| (name.as_str(), p)).collect()
}

/// Provider `name` and the variable its key is saved under, if it takes a key.
fn target<'a>(config: &'a Config, name: &str) -> Result<(&'a ProviderConfig, String), LoginError> {
    let Some(provider) = config.providers.get(name) else {
        let names = keyed(config).iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
        return Err(LoginError::UnknownProvider(name.to_owned(), names));
    };
    let Some(variable) = provider.api_key_env.clone() else { return Err(LoginError::Keyless(name.to_owned())) };
    Ok((provider, variable))
}

/// Runs a login: which provider, which key, checked unless `check` is off, then saved.
pub async fn login(config: &Config, provider: Option<String>, check: bool) -> Result<LoggedIn, LoginError> {
    config.credentials.as_ref().ok_or(LoginError::NoConfigDir)?;
    let choices = keyed(config);
    let names = choices.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
    let terminal = std::io::stdin().is_terminal();
    let name = match provider {
        Some(name) => name,
        None if terminal => choose(&choices)?,
        None => return Err(LoginError::NoProvider(names)),
    };
    let (_, variable) = target(config, &name)?;
    let key = read_key(&name, &variable, terminal).await?;
    save_key(config, &name, &key, check).await
}

/// Checks `key` with provider `name` (one request, unless `check` is off) and saves it where
/// `cairn login` saves keys: what a login does once it has the key, from a terminal or from an
/// editor's form. A key the provider refuses, or that cannot be checked, is saved nowhere; the
/// key never appears in an error or a log line.
pub async fn save_key(config: &Config, name: &str, key: &str, check: bool) -> Result<LoggedIn, LoginError> {
    let credentials = config.credentials.as_ref().ok_or(LoginError::NoConfigDir)?;
    let (provider, variable) = target(config, name)?;
    let key = key.trim();
    if key.is_empty() {
        return Err(LoginError::EmptyKey);
    }
    let unconfirmed = if check { verify(provider, key).await? } else { Some("not checked (--no-check)".to_owned()) };
    credentials.save(&variable, key)?;
    Ok(LoggedIn { provider: name.to_owned(), variable, unconfirmed })
}

/// Forgets the saved key of `provider`, or every saved key; returns how many.
pub fn logout(config: &Config, provider: Option<&str>) -> Result<usize, LoginError> {
    let credentials = config.credentials.as_ref().ok_or(LoginError::NoConfigDir)?;
    let variable = match provider {
        None => None,
        Some(name) => {
            let names = keyed(config).iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
            let provider =
                config.providers.get(name).ok_or_else(|| LoginError::UnknownProvider(name.to_owned(), names))?;
            Some(provider.api_key_env.clone().ok_or_else(|| LoginError::Keyless(name.to_owned()))?)
        }
    };
    Ok(credentials.forget(variable.as_deref())?)
}

/// Asks which provider, in the terminal.
fn choose(choices: &[(&str, &ProviderConfig)]) -> Result<String, LoginError> {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "Which provider is the key for?");
    for (n, (name, provider)) in choices.iter().enumerate() {
        let variable = provider.api_key_env.as_deref().unwrap_or_default();
        let _ = writeln!(err, "  {}. {name} ({variable}, {})", n + 1, provider.base_url);
    }
    let _ = write!(err, "Number or name: ");
    let _ = err.flush();
    let answer = read_line()?;
    let answer = answer.trim();
    let picked = answer
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|n| choices.get(n))
        .map(|(name, _)| (*name).to_owned());
    Ok(picked.unwrap_or_else(|| answer.to_owned()))
}

/// Reads the key: in a terminal without echo (through `stty`, restored afterwards, Ctrl-C
/// included), otherwise the first line of stdin.
async fn read_key(provider: &str, variable: &str, terminal: bool) -> Result<String, LoginError> {
    let key = if terminal {
        let _ = write!(std::io::stderr().lock(), "Paste the key for {provider} ({variable}); it will not show: ");
        let _ = std::io::stderr().flush();
        let hidden = stty("-echo");
        // Read on a blocking thread, so Ctrl-C (which would end the process with echo still
        // off) is caught here and the terminal restored first.
        let key = tokio::select! {
            read = tokio::task::spawn_blocking(read_line) => {
                read.unwrap_or_else(|err| Err(LoginError::Input(std::io::Error::other(err))))
            }
            _ = tokio::signal::ctrl_c() => Err(LoginError::Interrupted),
        };
        if hidden {
            stty("echo");
        }
        let _ = writeln!(std::io::stderr().lock());
        key?
    } else {
        read_line()?
    };
    let key = key.trim().to_owned();
    if key.is_empty() {
        return Err(LoginError::EmptyKey);
    }
    Ok(key)
}

fn read_line() -> Result<String, LoginError> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(LoginError::Input)?;
    Ok(line)
}

/// Sets the terminal's mode with `stty` on stdin; whether it worked.
fn stty(mode: &str) -> bool {
    std::process::Command::new("stty")
        .arg(mode)
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Asks the provider's model list with the key: a 401 or 403 refuses it; another answer that
/// is not a success (a server without `/models`) cannot confirm it, which is said but allowed.
async fn verify(provider: &ProviderConfig, key: &str) -> Result<Option<String>, LoginError> {
    let url = format!("{}/models", provider.base_url.trim_end_matches('/'));
    let request = crate::llm::http::client().await.get(&url).timeout(Duration::from_secs(15));
    let request = match provider.api {
        Api::Anthropic => request.header("x-api-key", key).header("anthropic-version", "2023-06-01"),
        Api::OpenaiChat | Api::OpenaiResponses => request.bearer_auth(key),
    };
    let response = request
        .send()
        .await
        .map_err(|err| LoginError::Unreachable { url: url.clone(), detail: crate::llm::sse::transport_detail(&err) })?;
    let status = response.status().as_u16();
    if response.status().is_success() {
        return Ok(None);
    }
    let mut body = Vec::new();
    let mut response = response;
    let _ = crate::net::read_at_most(&mut response, &mut body, 64 * 1024).await;
    let detail = crate::llm::sse::error_detail(&String::from_utf8_lossy(&body));
    if status == 401 || status == 403 {
        return Err(LoginError::Rejected { url, status, detail });
    }
    Ok(Some(format!("{url} answered HTTP {status} ({detail}), so the key could not be confirmed")))
}

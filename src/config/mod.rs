//! Configuration: environment over `config.toml` over defaults. The only module that reads env.
//!
//! Settings: `CAIRN_MODEL` (`provider/model`, provider defaults to `openai`), `OPENAI_BASE_URL`,
//! `OPENAI_API_KEY`, `CAIRN_HOME` (data directory) and `CAIRN_CONFIG` (config file path). The file,
//! `$XDG_CONFIG_HOME/cairn/config.toml` by default, holds the same settings plus extra
//! OpenAI-compatible providers (`[providers.<name>]`), model overrides (`[models."p/m"]`), turn
//! limits (`[limits]`, in `limits`), compaction settings (`[compaction]`), what `fetch` may reach
//! (`[fetch]`, in `fetch`, carried with the turn's limits), sub-agents
//! (`[subagents]`, in `subagents`), a busy session's prompts (`[session]`, in `session`), where
//! "always allow" answers are remembered (`[permissions]`, in `permissions`), what
//! local processes get (`[sandbox]`, `[tools]`, in `process`), MCP servers
//! (`[mcp_servers.<name>]`, `[mcp]`, in `mcp`), background jobs (`[jobs]`, in `jobs`), file
//! checkpoints (`[checkpoints]`, in `checkpoints`), the checkers run after edits (`[checks]`, carried
//! with the turn's limits), the language servers asked after edits (`[lsp]`, in `lsp`), hooks
//! (`[hooks]`, in `hooks`, which also reads Claude Code's settings files), `[telemetry]` (in
//! `telemetry`) and `log_file` (where logs also go; `crate::logging` opens it, and `--log-file`
//! wins over it). A `CAIRN_CONFIG` naming no file is refused. Keys are
//! [`Secret`]s, never shown in logs; [`Config::key`] is the one lookup of a key.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

mod checkpoints;
mod checks;
pub mod credentials;
mod diagnostics;
mod fetch;
mod hidden;
pub mod hooks;
mod jobs;
mod limits;
mod lsp;
mod mcp;
mod permissions;
mod process;
mod search;
pub mod serve;
mod session;
mod store;
mod subagents;
mod telemetry;

pub use checkpoints::CheckpointSettings;
pub use diagnostics::{Checker, Checks, DEFAULT_CHECK_SECS};
pub use fetch::{Fetch, MAX_FETCH_SECS};
pub use hooks::{HookEvent, HookSettings};
pub use jobs::JobSettings;
pub use limits::{Compaction, ContentPattern, Limits, LoopLimits};
pub use lsp::{LspServer, LspSettings};
pub use permissions::Remember;
pub use search::{Search, SearchApi, SearchEndpoint};
pub use session::BusyPrompt;
pub use subagents::Subagents;
pub use telemetry::TelemetrySettings;

use crate::mcp::{McpSettings, ServerConfig};
use crate::process::ProcessPolicy;

/// The model used when neither `CAIRN_MODEL` nor `model` in the config file says otherwise.
pub const DEFAULT_MODEL: &str = "openai/gpt-5";
const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
const OPENAI_MODELS: &[&str] = &["gpt-5", "gpt-5-mini", "gpt-4.1", "gpt-4.1-mini"];
const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
const ANTHROPIC_MODELS: &[&str] = &["claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"];

/// Everything cairn needs to know before it serves a request.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the database lives (`CAIRN_HOME`).
    pub data_dir: PathBuf,
    /// The model for new sessions, as `provider/model`.
    pub model: String,
    /// Every provider by name; `openai` is always present.
    pub providers: BTreeMap<String, ProviderConfig>,
    pub limits: Limits,
    pub compaction: Compaction,
    /// What bounds the sub-agents of the `task` tool (`[subagents]`).
    pub subagents: Subagents,
    /// What a prompt sent while a turn runs does, for sessions that did not choose (`[session]
    /// busy_prompt`).
    pub busy_prompt: BusyPrompt,
    /// Where an "always allow" answer is remembered (`[permissions] remember`).
    pub remember: Remember,
    /// Per-model overrides of the built-in catalog, by `provider/model`.
    pub models: BTreeMap<String, ModelOverride>,
    /// The model that writes session titles; `None` uses the session's model.
    pub title_model: Option<String>,
    /// The config file that was read, if one existed.
    pub file: Option<PathBuf>,
    /// Where the config file lives (or would), which tools must not change unasked.
    pub config_dir: Option<PathBuf>,
    /// The keys `cairn login` saved (`credentials.toml` in `config_dir`).
    pub credentials: Option<credentials::Credentials>,
    /// The user's home, where user-level instructions and skills live (`~/.agents`).
    pub home_dir: Option<PathBuf>,
    /// `XDG_CONFIG_HOME` when set (absolute): the user's programs' configuration.
    pub config_home: Option<PathBuf>,
    /// Sandbox, environment and launcher of local commands (`[sandbox]`, `[tools]`).
    pub process: Arc<ProcessPolicy>,
    /// Every session's MCP servers from the file (`[mcp_servers.<name>]`), enabled ones only.
    pub mcp_servers: Vec<ServerConfig>,
    /// `[mcp]`.
    pub mcp: McpSettings,
    /// `log_file`: where logs also go (absolute, `~/` expanded); `--log-file` wins over it.
    pub log_file: Option<PathBuf>,
    /// `[serve] url`: the `cairn serve` that `cairn acp` bridges to (read early by `serve::url`).
    pub serve_url: Option<String>,
    /// `[store] url`: the PostgreSQL database `cairn serve` shares with its other replicas.
    pub store_url: Option<String>,
    /// `[store] events_kept_secs`: how long that database keeps its event log's rows.
    pub store_events_kept: std::time::Duration,
    /// `[store] lease_ttl_secs`: how long a replica's lease on a session lives unrenewed.
    pub lease_ttl: std::time::Duration,
    /// `[search]`: the provider's own web search, or an endpoint of the user's.
    pub search: Search,
    /// `[jobs]`: a session's background processes.
    pub jobs: JobSettings,
    /// `[checkpoints]`: the file checkpoints behind `/rewind`.
    pub checkpoints: CheckpointSettings,
    /// `[hooks]`: the user's own hooks and their default time limit.
    pub hooks: HookSettings,
    /// The language servers asked for diagnostics after edits (`[lsp]`).
    pub lsp: LspSettings,
    /// `[telemetry]`: what the OpenTelemetry export may carry (prompts).
    pub telemetry: TelemetrySettings,
}

/// The config file `env` points to (`CAIRN_CONFIG`, else `config.toml` in cairn's directory of
/// the user's configuration), absolute: relative settings mean the directory cairn was started
/// in, now and later.
fn file_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let path = env("CAIRN_CONFIG").map(PathBuf::from).or_else(|| {
        env("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(dirs::config_dir)
            .map(|dir| dir.join("cairn").join("config.toml"))
    });
    path.map(|path| std::path::absolute(&path).unwrap_or(path))
}

/// Which wire API a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `POST /chat/completions` (OpenAI and every compatible server).
    OpenaiChat,
    /// `POST /responses`.
    OpenaiResponses,
    /// `POST /messages`.
    Anthropic,
}

/// What `config.toml` may say about one model (`[models."provider/model"]`); prices are USD per
/// million tokens.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOverride {
    pub context_window: Option<u64>,
    pub max_output: Option<u64>,
    pub input_price: Option<f64>,
    pub output_price: Option<f64>,
    pub cache_read_price: Option<f64>,
    pub cache_write_price: Option<f64>,
    /// Whether the model takes a reasoning effort or thinking budget.
    pub reasoning: Option<bool>,
    /// Whether the model accepts images (a `read` of a picture is sent to it as one).
    pub images: Option<bool>,
    /// Whether its provider searches the web for it (OpenAI Responses, Anthropic).
    pub web_search: Option<bool>,
}

/// A model endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderConfig {
    pub api: Api,
    pub base_url: String,
    /// The environment variable holding the API key; `None` sends no key (local servers).
    pub api_key_env: Option<String>,
    /// The key read from `api_key_env` when the configuration was loaded.
    pub api_key: Option<Secret>,
    /// Models offered in the editor's model picker.
    pub models: Vec<String>,
    /// Ask the server's `GET /models` for more (OpenAI-compatible servers).
    pub discover_models: bool,
    /// Requests carry `prompt_cache_key` (the session's id), so an OpenAI server routes a
    /// session's requests to the same prompt cache: on for the built-in OpenAI providers at
    /// OpenAI's URL, off for any other server unless its table says `prompt_cache_key = true`
    /// (a strict server refuses fields it does not know).
    pub prompt_cache_key: bool,
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("no data directory: set CAIRN_HOME (or XDG_DATA_HOME) to where cairn may keep its database")]
    NoDataDir,
    #[error("{setting}: {why}")]
    Setting { setting: String, why: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    model: Option<String>,
    home: Option<PathBuf>,
    #[serde(default)]
    providers: BTreeMap<String, FileProvider>,
    #[serde(default)]
    limits: limits::FileLimits,
    #[serde(default)]
    compaction: limits::FileCompaction,
    #[serde(default)]
    models: BTreeMap<String, ModelOverride>,
    title_model: Option<String>,
    log_file: Option<String>,
    #[serde(default)]
    sandbox: process::FileSandbox,
    #[serde(default)]
    tools: process::FileTools,
    #[serde(default)]
    mcp_servers: BTreeMap<String, mcp::FileMcpServer>,
    #[serde(default)]
    mcp: mcp::FileMcp,
    #[serde(default)]
    subagents: subagents::FileSubagents,
    #[serde(default)]
    session: session::FileSession,
    #[serde(default)]
    permissions: permissions::FilePermissions,
    #[serde(default)]
    serve: serve::FileServe,
    #[serde(default)]
    store: store::FileStore,
    #[serde(default)]
    fetch: fetch::FileFetch,
    #[serde(default)]
    search: search::FileSearch,
    #[serde(default)]
    jobs: jobs::FileJobs,
    #[serde(default)]
    checkpoints: checkpoints::FileCheckpoints,
    #[serde(default)]
    hooks: hooks::FileHooks,
    #[serde(default)]
    checks: diagnostics::FileChecks,
    #[serde(default)]
    lsp: lsp::FileLsp,
    #[serde(default)]
    telemetry: TelemetrySettings,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvider {
    api: Option<Api>,
    base_url: Option<String>,
    #[serde(default)]
    discover_models: bool,
    prompt_cache_key: Option<bool>,
    api_key_env: Option<String>,
    #[serde(default)]
    models: Vec<String>,
}

impl Config {
    /// Reads the process environment and the config file it points to.
    pub fn load() -> Result<Self, ConfigError> {
        Self::load_from(true)
    }

    /// The process environment and the defaults alone, as if there were no config file: what
    /// `cairn doctor` still checks with when the file is unusable.
    pub fn load_without_file() -> Result<Self, ConfigError> {
        Self::load_from(false)
    }

    fn load_from(read_file: bool) -> Result<Self, ConfigError> {
        let vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let lookup = |name: &str| {
            let value = vars.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.to_str());
            value.filter(|v| !v.is_empty()).map(str::to_owned)
        };
        Self::build(&lookup, &vars, read_file)
    }

    /// Builds the configuration from an environment lookup (tests pass their own). Keys copied
    /// under other names are not found this way; [`Config::load`] finds them.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::build(env, &[], true)
    }

    fn build(
        env: &dyn Fn(&str) -> Option<String>,
        vars: &[(OsString, OsString)],
        read_file: bool,
    ) -> Result<Self, ConfigError> {
        let path = file_path(env).filter(|_| read_file);
        let (file, file_path) = match &path {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => (parse_file(path, &text)?, Some(path.clone())),
                // The default place may hold no file; a file named on purpose must exist.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound && env("CAIRN_CONFIG").is_none() => {
                    (FileConfig::default(), None)
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ConfigError::Setting {
                        setting: "CAIRN_CONFIG".to_owned(),
                        why: format!("{} does not exist; create it, or unset CAIRN_CONFIG", path.display()),
                    });
                }
                Err(source) => return Err(ConfigError::Read { path: path.clone(), source }),
            },
            None => (FileConfig::default(), None),
        };

        let data_dir = env("CAIRN_HOME")
            .map(|home| checks::home(&home))
            .transpose()?
            .or(file.home)
            .or_else(|| env("XDG_DATA_HOME").map(PathBuf::from).or_else(dirs::data_dir).map(|d| d.join("cairn")))
            .ok_or(ConfigError::NoDataDir)?;
        let data_dir = std::path::absolute(&data_dir).unwrap_or(data_dir);

        let builtin = |api, url: &str, key: &str, models: &[&str]| ProviderConfig {
            api,
            base_url: url.to_owned(),
            api_key_env: Some(key.to_owned()),
            api_key: None,
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            discover_models: false,
            prompt_cache_key: api != Api::Anthropic,
        };
        let mut providers = BTreeMap::new();
        providers
            .insert("openai".to_owned(), builtin(Api::OpenaiChat, OPENAI_BASE_URL, "OPENAI_API_KEY", OPENAI_MODELS));
        providers.insert(
            "openai-responses".to_owned(),
            builtin(Api::OpenaiResponses, OPENAI_BASE_URL, "OPENAI_API_KEY", OPENAI_MODELS),
        );
        providers.insert(
            "anthropic".to_owned(),
            builtin(Api::Anthropic, ANTHROPIC_BASE_URL, "ANTHROPIC_API_KEY", ANTHROPIC_MODELS),
        );
        // Providers whose table says whether to send `prompt_cache_key`.
        let mut cache_key_given: Vec<String> = Vec::new();
        for (name, given) in file.providers {
            let entry_name = name.clone();
            let entry = providers.entry(name).or_insert_with(|| ProviderConfig {
                api: Api::OpenaiChat,
                base_url: String::new(),
                api_key_env: None,
                api_key: None,
                models: Vec::new(),
                discover_models: false,
                prompt_cache_key: false,
            });
            if let Some(api) = given.api {
                entry.api = api;
            }
            entry.discover_models |= given.discover_models;
            if let Some(cache_key) = given.prompt_cache_key {
                entry.prompt_cache_key = cache_key;
                cache_key_given.push(entry_name.clone());
            }
            if let Some(base_url) = given.base_url {
                checks::base_url(&format!("[providers.{entry_name}] base_url"), &base_url)?;
                entry.base_url = base_url;
            }
            if given.api_key_env.is_some() {
                entry.api_key_env = given.api_key_env;
            }
            if !given.models.is_empty() {
                entry.models = given.models;
            }
        }
        // The environment wins over the file for the built-in providers' endpoints.
        for (variable, names) in
            [("OPENAI_BASE_URL", &["openai", "openai-responses"][..]), ("ANTHROPIC_BASE_URL", &["anthropic"][..])]
        {
            if let Some(url) = env(variable) {
                checks::base_url(variable, &url)?;
                for name in names {
                    if let Some(provider) = providers.get_mut(*name) {
                        provider.base_url.clone_from(&url);
                    }
                }
            }
        }
        for (name, provider) in &mut providers {
            provider.api_key = provider.api_key_env.as_deref().and_then(env).map(Secret);
            // A built-in OpenAI provider pointed at another server sends no `prompt_cache_key`
            // unless its table asks for it: a strict compatible server refuses unknown fields.
            if provider.base_url.trim_end_matches('/') != OPENAI_BASE_URL && !cache_key_given.contains(name) {
                provider.prompt_cache_key = false;
            }
        }
        // A setting the file gets wrong: the message names it.
        let invalid = |message| ConfigError::Parse { path: file_path.clone().unwrap_or_default(), message };
        let mut limits = file.limits.resolve().map_err(invalid)?;
        let compaction = file.compaction.resolve(normalize_model);
        let subagents = file.subagents.resolve(&providers).map_err(invalid)?;
        limits.tasks_at_once = subagents.max_concurrent;
        limits.image_max_bytes = file.tools.image_max_bytes().map_err(invalid)?;
        limits.fetch = file.fetch.resolve().map_err(invalid)?;
        limits.checks = Arc::new(file.checks.resolve().map_err(invalid)?);
        let search = file.search.resolve(env).map_err(invalid)?;
        let busy_prompt = file.session.resolve().map_err(invalid)?;
        let remember = file.permissions.resolve().map_err(invalid)?;
        let model = match (env("CAIRN_MODEL"), file.model) {
            (Some(model), _) => checks::model("CAIRN_MODEL", &model).map(|()| model)?,
            (None, Some(model)) => checks::model("model (config.toml)", &model).map(|()| model)?,
            (None, None) => DEFAULT_MODEL.to_owned(),
        };
        let models = file.models.into_iter().map(|(name, given)| (normalize_model(&name), given)).collect();
        let title_model = file.title_model.as_deref().map(normalize_model);
        let home_dir = env("HOME").map(PathBuf::from).or_else(dirs::home_dir);
        let config_home = env("XDG_CONFIG_HOME").map(PathBuf::from).filter(|dir| dir.is_absolute());
        let log_file = file.log_file.as_deref().map(|path| checks::log_file(path, home_dir.as_deref())).transpose()?;
        let environment =
            process::Environment { lookup: env, vars, home: home_dir.as_deref(), uid: crate::process::current_uid() };
        let config_dir = path.as_deref().and_then(Path::parent).map(Path::to_path_buf);
        let own: Vec<PathBuf> = std::iter::once(data_dir.clone()).chain(config_dir.clone()).collect();
        crate::process::running::share_in(&data_dir);
        let process = process::policy(file.sandbox, &file.tools, &providers, &environment, &own).map_err(invalid)?;
        let mcp_servers = mcp::servers(file.mcp_servers).map_err(invalid)?;
        let mcp = mcp::settings(&file.mcp).map_err(invalid)?;
        let jobs = file.jobs.resolve().map_err(invalid)?;
        let checkpoints = file.checkpoints.resolve().map_err(invalid)?;
        let hooks = file.hooks.resolve().map_err(invalid)?;
        let lsp = file.lsp.resolve().map_err(invalid)?;
        let store::StoreSettings { url: store_url, events_kept: store_events_kept, lease_ttl } =
            file.store.resolve()?;
        Ok(Self {
            data_dir,
            model: normalize_model(&model),
            providers,
            limits,
            compaction,
            subagents,
            busy_prompt,
            remember,
            models,
            title_model,
            file: file_path,
            config_dir,
            credentials: path
                .as_deref()
                .and_then(Path::parent)
                .map(|dir| credentials::Credentials::at(dir.join("credentials.toml"))),
            home_dir,
            config_home,
            process,
            mcp_servers,
            mcp,
            log_file,
            serve_url: file.serve.url,
            store_url,
            lease_ttl,
            store_events_kept,
            search,
            jobs,
            checkpoints,
            hooks,
            lsp,
            telemetry: file.telemetry,
        })
    }

    /// The directories no workspace root may be, contain or (some) lie inside
    /// ([`crate::workspace::Guard::of`] lists them).
    pub fn workspace_guard(&self) -> std::sync::Arc<crate::workspace::Guard> {
        let (home, xdg) = (self.home_dir.as_deref(), self.config_home.as_deref());
        crate::workspace::Guard::recent(home, xdg, &self.process.hidden, &self.data_dir, self.config_dir.as_deref())
    }

    /// The database file inside the data directory.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("cairn.db")
    }

    /// The variable to set for `model`'s provider, when it needs a key and has none.
    pub fn missing_key(&self, model: &str) -> Option<&str> {
        self.provider_missing_key(split_model(model).0)
    }

    fn provider_missing_key(&self, provider: &str) -> Option<&str> {
        let config = self.providers.get(provider)?;
        let variable = config.api_key_env.as_deref()?;
        self.key(config).is_none().then_some(variable)
    }

    /// The key of `provider`: its variable in the environment, else the key `cairn login` saved
    /// under that variable's name (read now, so a login counts at once).
    pub fn key(&self, provider: &ProviderConfig) -> Option<Secret> {
        provider.api_key.clone().or_else(|| {
            let variable = provider.api_key_env.as_deref()?;
            self.credentials.as_ref()?.get(variable)
        })
    }

    /// Every model the editor may pick, as `provider/model`, the default first; providers
    /// without their key are left out (choosing one would fail at the first prompt).
    pub fn models(&self) -> Vec<String> {
        let mut models = vec![self.model.clone()];
        // The saved keys are read once for the whole menu, and only if a provider needs them.
        let saved = std::cell::OnceCell::new();
        let has_key = |config: &ProviderConfig| match (&config.api_key, config.api_key_env.as_deref()) {
            (Some(_), _) | (None, None) => true,
            (None, Some(variable)) => saved
                .get_or_init(|| self.credentials.as_ref().map(credentials::Credentials::usable).unwrap_or_default())
                .contains_key(variable),
        };
        for (provider, config) in &self.providers {
            if !has_key(config) {
                continue;
            }
            for model in &config.models {
                let full = format!("{provider}/{model}");
                if !models.contains(&full) {
                    models.push(full);
                }
            }
        }
        models
    }
}

/// A credential; its `Debug` output never shows the value, so it cannot leak into logs.
#[derive(Clone, PartialEq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Splits `provider/model`; a bare model name belongs to `openai`.
pub fn split_model(model: &str) -> (&str, &str) {
    model.split_once('/').unwrap_or(("openai", model))
}

/// A model reference given as `setting` (a command-line flag), checked and normalized as
/// `CAIRN_MODEL` is.
pub fn checked_model(setting: &str, model: &str) -> Result<String, ConfigError> {
    checks::model(setting, model)?;
    Ok(normalize_model(model))
}

/// `provider/model` as the rest of cairn reads it. `scripted:<file>` (the scripted model) becomes
/// `scripted/<absolute file>`: a relative file is found from where cairn was started, as a user
/// typing it expects, not from each session's directory.
fn normalize_model(model: &str) -> String {
    let model = model.trim();
    if let Some(file) = model.strip_prefix("scripted:") {
        let file = std::path::absolute(file).unwrap_or_else(|_| PathBuf::from(file));
        return format!("scripted/{}", file.display());
    }
    let (provider, name) = split_model(model);
    format!("{provider}/{name}")
}

fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    toml::from_str(text).map_err(|err| ConfigError::Parse { path: path.to_owned(), message: err.to_string() })
}

#[cfg(test)]
mod tests;

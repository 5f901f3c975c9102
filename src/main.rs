//! The `cairn` binary: ACP on stdio by default; `cairn exec`, `cairn sessions`, `cairn store`,
//! `cairn login`, `cairn logout` and `cairn doctor` headless.
//!
//! Parses the command line, makes the process undumpable (keys live in its environment and
//! memory), loads the configuration (choosing the supervisor as the launcher of local commands),
//! opens the store and hands over. In ACP mode the configuration and the store load on a blocking
//! thread while `initialize` is already answered (`acp::serve`). Logs go to stderr (filtered by
//! `CAIRN_LOG`, e.g. `CAIRN_LOG=debug`) and optionally to a file (`cairn::logging`). Started as
//! `cairn __supervise …`, it is instead the supervisor of one local command
//! (`process::supervisor`), decided before anything else is set up.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cairn::config::Config;
use cairn::permissions::{Action, Mode, Rule};
use cairn::process::Launcher;
use cairn::store::Store;
use clap::{Parser, Subcommand};

/// What `cairn --help` adds after the options: how it is used and where its settings live.
const AFTER_HELP: &str = "\
With no command (or `cairn acp`), cairn serves the Agent Client Protocol (JSON-RPC lines) on
stdin and stdout: it is started by an editor (Zed, Neovim, Emacs, JetBrains) or a client such as
acpx, not typed.

Model:   CAIRN_MODEL=provider/model (openai/gpt-5, anthropic/claude-sonnet-4-5, or a provider
         of your own from config.toml); the editor's model menu switches it per session.
Keys:    OPENAI_API_KEY, ANTHROPIC_API_KEY (or the variable a provider's api_key_env names).
Config:  $XDG_CONFIG_HOME/cairn/config.toml (~/.config/cairn/config.toml), or CAIRN_CONFIG.
Data:    $XDG_DATA_HOME/cairn (~/.local/share/cairn), or CAIRN_HOME.
Logs:    stderr, filtered by CAIRN_LOG (e.g. CAIRN_LOG=debug); --log-file (or log_file in
         config.toml) to keep them.
Check:   `cairn doctor` tests the config, keys, providers, database and MCP servers.";

#[derive(Parser)]
#[command(
    name = "cairn",
    version,
    about = "An AI coding agent for editors, speaking ACP on stdio",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Also append logs to this file (wins over `log_file` in config.toml).
    #[arg(long, global = true)]
    log_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Agent Client Protocol on stdin/stdout: what cairn does with no command, under
    /// the name registries and clients such as acpx launch. `cairn acp login` is `cairn login`
    /// (an editor's login button appends `login` to the command it launches cairn with).
    Acp {
        #[command(subcommand)]
        then: Option<AcpThen>,
        /// Be a bridge to a running `cairn serve` (`ws://HOST:PORT/acp`, `wss://…`, a Unix socket's path,
        /// or `local`, the default: the socket `cairn serve --listen local` makes in your runtime
        /// directory) instead of serving here: the sessions live in the server, and quitting the
        /// editor mid-turn only detaches. When no server answers, cairn says so on stderr and
        /// serves here. CAIRN_SERVE_TOKEN, when set, is sent as the bearer token of a server
        /// run with --auth; a server that refuses it ends cairn with an error. `[serve] url` in
        /// config.toml does the same for a plain `cairn acp`.
        #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "local")]
        server: Option<String>,
    },
    /// Serve ACP over WebSocket (`ws://ADDR/acp`) and Streamable HTTP (`http://ADDR/acp`) to any
    /// number of clients, with sessions that
    /// outlive their connections: a client that goes away mid-turn only detaches, and another
    /// may load the session and follow its turn. Stops at SIGTERM or SIGINT. `cairn serve token
    /// …` manages the tokens `--auth` checks.
    Serve {
        #[command(subcommand)]
        then: Option<ServeThen>,
        /// IP:PORT, or the path of a Unix socket (made readable by you alone). An address other
        /// than loopback needs --auth.
        #[arg(long, default_value = cairn::serve::DEFAULT_LISTEN)]
        listen: String,
        /// Let in only requests carrying `Authorization: Bearer SECRET` of a token `cairn serve
        /// token create` made (not revoked); each client sees only its principal's sessions.
        #[arg(long)]
        auth: bool,
        /// Seconds between pings; a client silent for two of them is disconnected.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
        heartbeat: u64,
        /// Connections open at once; more are answered 503.
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_connections: u64,
        /// With --auth, connections one token's principal may hold at once; more are answered 503.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_connections_per_token: u64,
        /// Serve over TLS (wss://, https://) with this PEM certificate chain; needs --tls-key.
        #[arg(long, requires = "tls_key", value_name = "FILE")]
        tls_cert: Option<std::path::PathBuf>,
        /// The PEM private key of --tls-cert.
        #[arg(long, requires = "tls_cert", value_name = "FILE")]
        tls_key: Option<std::path::PathBuf>,
        /// Keep sessions in this PostgreSQL database (`postgres://user:password@host:port/db`)
        /// instead of the SQLite file in the data directory; wins over `[store] url`. cairn
        /// never shows its password, but a command line is visible to every local user: put a
        /// URL with a password in `[store] url` instead.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// Run one prompt headless and print the answer as it streams. Exit status: 0 done, 1 an
    /// error, 2 a usage mistake, 3 a limit stopped the turn, 130 interrupted.
    Exec(ExecArgs),
    /// Save a provider's API key (checked with one request) in credentials.toml beside
    /// config.toml, readable only by you; a key in the environment still wins. This is what an
    /// editor's login button runs.
    Login(LoginArgs),
    /// Forget the saved key of a provider, or every saved key.
    Logout {
        #[arg(long)]
        provider: Option<String>,
    },
    /// Inspect stored sessions: list, show, export, import, remove, prune.
    Sessions {
        #[command(subcommand)]
        command: cairn::inspect::SessionsCommand,
    },
    /// The stores sessions are kept in: `cairn store migrate --from sqlite: --to postgres://…`
    /// copies every session from one to the other.
    Store {
        #[command(subcommand)]
        command: cairn::inspect::migrate::StoreCommand,
    },
    /// Check the setup: config, model and keys, providers reachable, database, MCP servers, log
    /// file. Exit status: 0 if nothing failed, 1 otherwise.
    Doctor,
}

#[derive(Subcommand)]
enum ServeThen {
    /// The bearer tokens `cairn serve --auth` lets in: create, list, revoke.
    Token {
        #[command(subcommand)]
        command: cairn::serve::tokens::TokenCommand,
    },
}

#[derive(Subcommand)]
enum AcpThen {
    /// The same as `cairn login`.
    Login(LoginArgs),
}

#[derive(clap::Args)]
struct LoginArgs {
    /// The provider (`openai`, `anthropic`, or one of config.toml); asked when stdin is a
    /// terminal.
    #[arg(long)]
    provider: Option<String>,
    /// Save the key without checking it with the provider.
    #[arg(long)]
    no_check: bool,
}

#[derive(clap::Args)]
struct ExecArgs {
    /// What to ask; `-` reads it from stdin.
    prompt: String,
    /// Continue this session instead of starting a new one.
    #[arg(long, conflicts_with_all = ["continue_latest", "fork"])]
    session: Option<String>,
    /// Continue the latest session of the working directory.
    #[arg(long = "continue", conflicts_with = "fork")]
    continue_latest: bool,
    /// Start a new session from a copy of this one (the original is left as it is).
    #[arg(long)]
    fork: Option<String>,
    /// The working directory of a new session or fork, and whose latest session --continue
    /// takes (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Permission mode: ask (questions become refusals, as nobody can answer them),
    /// accept-edits, plan (prints a plan, changes nothing), read-only or bypass. Default: the
    /// session's mode, `ask` for a new one.
    #[arg(long, value_parser = parse_mode)]
    mode: Option<Mode>,
    /// The model, as `provider/model` (or `scripted:FILE.json`, a model answering from a
    /// file); a continued session switches to it. Default: CAIRN_MODEL or config.toml.
    #[arg(long)]
    model: Option<String>,
    /// Print every session update as a JSON line, as ACP shapes it, then a last line with the
    /// stop reason, the session id and its usage.
    #[arg(long)]
    json: bool,
    /// Allow what this rule covers without asking, for this run: PERMISSION:PATTERN, e.g.
    /// `bash:cargo test`, `edit:src/**`, `tool:mcp__github__*` (repeatable). Never reaches
    /// outside the workspace or protected files.
    #[arg(long, value_name = "RULE", value_parser = allow_rule)]
    allow: Vec<Rule>,
    /// Refuse what this rule covers, in every mode (bypass included), for this run; same form
    /// as --allow (repeatable).
    #[arg(long, value_name = "RULE", value_parser = deny_rule)]
    deny: Vec<Rule>,
}

fn allow_rule(text: &str) -> Result<Rule, String> {
    Rule::for_run(Action::Allow, text)
}

fn deny_rule(text: &str) -> Result<Rule, String> {
    Rule::for_run(Action::Deny, text)
}

/// How cairn starts itself as a supervisor: through the running executable, even if the file
/// was replaced or deleted since.
const SELF_EXE: &str = "/proc/self/exe";

/// The longest the exit waits for the telemetry exporters to send what they hold.
const TELEMETRY_FLUSH: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    if let Some(code) = cairn::process::supervisor::intercept() {
        return code;
    }
    // Keys live in this process's environment and memory; commands run as the same user.
    cairn::process::deny_inspection();
    let cli = if acp_without_options() { Cli { log_file: None, command: None } } else { Cli::parse() };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => return fail(&format!("cannot start the async runtime: {err}")),
    };
    // Only when an `OTEL_EXPORTER_OTLP_*` endpoint is set; otherwise nothing is built.
    let lookup = |name: &str| std::env::var(name).ok();
    let telemetry = cairn::telemetry::from_env(&lookup, runtime.handle());
    if let Err(why) = cairn::logging::init(cli.log_file.as_deref(), telemetry) {
        return fail(&why);
    }
    let code = runtime.block_on(run(cli.command));
    // What the exporters hold is sent while the runtime still runs, within a bound.
    cairn::telemetry::shutdown(TELEMETRY_FLUSH);
    // Do not wait for a stdin read that may still be parked on a blocking thread.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

/// Whether cairn was started as editors start it, `cairn` or `cairn acp` with nothing else: then
/// the command line is not parsed, which saves building the whole command tree before the
/// editor's `initialize` can be answered.
fn acp_without_options() -> bool {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next()) {
        (None, _) => true,
        (Some(only), None) => only == "acp",
        (Some(_), Some(_)) => false,
    }
}

/// Bridges the editor on stdio to the `cairn serve` at `server`; serves it here when no server
/// answers, and ends with an error when the server refuses the token.
async fn bridge(server: &str) -> ExitCode {
    let target = match cairn::serve::bridge::Target::parse(server) {
        Ok(target) => target,
        Err(why) => return fail(&why),
    };
    use cairn::serve::bridge::Credential;
    let token = std::env::var("CAIRN_SERVE_TOKEN").ok().filter(|token| !token.is_empty());
    let credential = match token {
        Some(token) => Some(Credential::Token(token)),
        None => target.local_address().and_then(|address| {
            let config = Config::load().ok()?;
            cairn::serve::secret::read_for(&config.data_dir, &address).map(Credential::Local)
        }),
    };
    match cairn::serve::bridge::connect(target, credential).await {
        Ok(connected) => cairn::serve::bridge::run(connected).await,
        Err(cairn::serve::bridge::NotConnected::Refused(why)) => return fail(&why),
        Err(cairn::serve::bridge::NotConnected::NoAnswer(why)) => {
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr().lock(), "cairn: no server answers at {why}; serving here instead");
            cairn::acp::serve(setup).await;
        }
    }
    ExitCode::SUCCESS
}

/// Serves to the end, or, when telemetry exports, until SIGTERM, so that what it holds is
/// flushed at exit (`main`); without telemetry SIGTERM ends the process as it always did.
async fn until_terminated(serving: impl Future<Output = ()>) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    let term = if cairn::telemetry::active() { signal(SignalKind::terminate()).ok() } else { None };
    let Some(mut term) = term else {
        serving.await;
        return ExitCode::SUCCESS;
    };
    tokio::select! {
        () = serving => ExitCode::SUCCESS,
        _ = term.recv() => ExitCode::from(143),
    }
}

/// Loads the configuration and opens (creating and migrating) the store.
fn setup() -> Result<(Store, Arc<Config>), String> {
    let config = configure()?;
    let store = Store::open(&config.database_path()).map_err(|err| err.to_string())?;
    Ok((store, Arc::new(config)))
}

/// Loads the configuration and opens the store a server keeps sessions in: the PostgreSQL
/// database `store` (or `[store] url`) names, else the SQLite file.
async fn setup_shared(store: Option<String>) -> Result<(Store, Arc<Config>), String> {
    let config = configure()?;
    let store = match store.or_else(|| config.store_url.clone()) {
        Some(url) => Store::open_postgres(&url, config.lease_ttl, config.store_events_kept)
            .await
            .map_err(|err| err.to_string())?,
        None => Store::open(&config.database_path()).map_err(|err| err.to_string())?,
    };
    Ok((store, Arc::new(config)))
}

/// Loads the configuration and applies what the process takes from it (its log file, what
/// telemetry may export, the launcher of sandboxed commands).
fn configure() -> Result<Config, String> {
    let mut config = Config::load().map_err(|err| err.to_string())?;
    if let Some(path) = &config.log_file {
        cairn::logging::use_config_file(path)?;
    }
    cairn::telemetry::set_log_prompts(config.telemetry.log_prompts);
    Arc::make_mut(&mut config.process).launcher = Launcher::Supervisor(PathBuf::from(SELF_EXE));
    Ok(config)
}

async fn run(command: Option<Command>) -> ExitCode {
    match command {
        Some(Command::Acp { then: None, server: Some(server) }) => bridge(&server).await,
        None | Some(Command::Acp { then: None, server: None }) => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "cairn serves ACP on stdin/stdout for an editor; try `cairn --help` or `cairn exec \"…\"`"
                );
            }
            // `[serve] url` decides where the editor is served, so it is read first, alone: a
            // file read when the file names no `serve`. An error in it is the full load's to
            // report, to the editor.
            let lookup = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
            if let Ok(Some(server)) = cairn::config::serve::url(&lookup) {
                return bridge(&server).await;
            }
            // `initialize` needs neither: it is answered while they load.
            until_terminated(cairn::acp::serve(setup)).await
        }
        Some(Command::Serve { then: Some(ServeThen::Token { command }), store, .. }) => {
            let (store, _) = match setup_shared(store).await {
                Ok(setup) => setup,
                Err(why) => return fail(&why),
            };
            match cairn::serve::tokens::run(store, command).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(&err.to_string()),
            }
        }
        Some(Command::Serve {
            then: None,
            listen,
            auth,
            heartbeat,
            max_connections,
            max_connections_per_token,
            tls_cert,
            tls_key,
            store,
        }) => {
            let listen = match cairn::serve::Listen::parse(&listen, auth) {
                Ok(listen) => listen,
                Err(why) => return fail(&why),
            };
            let limits = cairn::serve::Limits {
                heartbeat: std::time::Duration::from_secs(heartbeat),
                connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
                per_principal: usize::try_from(max_connections_per_token).unwrap_or(usize::MAX),
            };
            let tls = tls_cert.zip(tls_key).map(|(cert, key)| cairn::serve::TlsFiles { cert, key });
            let setup = match setup_shared(store).await {
                Ok(setup) => setup,
                Err(why) => return fail(&why),
            };
            match cairn::serve::run(listen, limits, auth, tls, move || Ok(setup)).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => fail(&why),
            }
        }
        Some(Command::Exec(args)) => exec(args).await,
        Some(Command::Login(args) | Command::Acp { then: Some(AcpThen::Login(args)), .. }) => {
            login(args.provider, !args.no_check).await
        }
        Some(Command::Logout { provider }) => logout(provider.as_deref()),
        Some(Command::Sessions { command }) => {
            let (store, _) = match setup_shared(None).await {
                Ok(setup) => setup,
                Err(why) => return fail(&why),
            };
            match cairn::inspect::run(store, command).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    fail(&err.to_string());
                    ExitCode::from(err.exit_code())
                }
            }
        }
        Some(Command::Store { command }) => {
            let config = match configure() {
                Ok(config) => config,
                Err(why) => return fail(&why),
            };
            match cairn::inspect::migrate::run(
                command,
                &config.database_path(),
                config.store_url.clone(),
                (config.lease_ttl, config.store_events_kept),
            )
            .await
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(&err.to_string()),
            }
        }
        Some(Command::Doctor) => ExitCode::from(cairn::doctor::run().await),
    }
}

/// `cairn login`: saves a key and says where, or why not.
async fn login(provider: Option<String>, check: bool) -> ExitCode {
    let config = match Config::load() {
        Ok(config) => config,
        Err(err) => return fail(&err.to_string()),
    };
    match cairn::login::login(&config, provider, check).await {
        Err(err @ cairn::login::LoginError::Interrupted) => {
            fail(&err.to_string());
            ExitCode::from(130)
        }
        Ok(done) => {
            use std::io::Write as _;
            let mut err = std::io::stderr().lock();
            let path = config.credentials.as_ref().map(|c| c.path().display().to_string()).unwrap_or_default();
            let _ = writeln!(err, "Saved the key for {} ({}) in {path}.", done.provider, done.variable);
            if let Some(why) = done.unconfirmed {
                let _ = writeln!(err, "Note: {why}.");
            }
            if std::env::var_os(&done.variable).is_some_and(|value| !value.is_empty()) {
                let _ =
                    writeln!(err, "Note: {} is set in this environment, and wins over the saved key.", done.variable);
            }
            ExitCode::SUCCESS
        }
        Err(err) => fail(&err.to_string()),
    }
}

/// `cairn logout`: forgets saved keys.
fn logout(provider: Option<&str>) -> ExitCode {
    let config = match Config::load() {
        Ok(config) => config,
        Err(err) => return fail(&err.to_string()),
    };
    match cairn::login::logout(&config, provider) {
        Ok(forgotten) => {
            use std::io::Write as _;
            let keys = if forgotten == 1 { "key" } else { "keys" };
            let _ = writeln!(std::io::stderr().lock(), "Forgot {forgotten} saved {keys}.");
            ExitCode::SUCCESS
        }
        Err(err) => fail(&err.to_string()),
    }
}

/// `cairn exec`: checks the arguments (a mistake exits 2), runs the turn, and exits as it ended.
async fn exec(args: ExecArgs) -> ExitCode {
    use cairn::exec::{ExecRequest, Target};
    let usage = |why: &str| {
        fail(why);
        ExitCode::from(2)
    };
    // The model's HTTP client is built beside the configuration and the store, not after them.
    tokio::task::spawn_blocking(cairn::llm::http::prepare);
    let (store, config) = match setup() {
        Ok(setup) => setup,
        Err(why) => return fail(&why),
    };
    // One spelling per directory, as sessions store it: `/w/` is `/w`.
    let cwd = match args.cwd.map_or_else(std::env::current_dir, std::path::absolute) {
        Ok(cwd) if cwd.is_dir() => cwd.components().collect::<PathBuf>(),
        Ok(cwd) => return usage(&format!("--cwd {} is not a directory that exists", cwd.display())),
        Err(err) => return fail(&format!("cannot resolve the working directory: {err}")),
    };
    let model = match args.model.map(|model| cairn::config::checked_model("--model", &model)).transpose() {
        Ok(model) => model,
        Err(why) => return usage(&why.to_string()),
    };
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        if let Err(err) = tokio::io::AsyncReadExt::read_to_string(&mut tokio::io::stdin(), &mut text).await {
            return usage(&format!("cannot read the prompt from stdin: {err}"));
        }
        text
    } else {
        args.prompt
    };
    let target = match (args.session, args.continue_latest, args.fork) {
        (Some(id), ..) => Target::Session(id),
        (None, true, _) => Target::Continue,
        (None, false, Some(id)) => Target::Fork(id),
        (None, false, None) => Target::New,
    };
    let rules = args.deny.into_iter().chain(args.allow).collect();
    let request = ExecRequest { prompt, target, cwd, mode: args.mode, model, json: args.json, rules };
    match cairn::exec::exec(store, config, request).await {
        Ok(finished) => ExitCode::from(finished.exit_code()),
        Err(err) => {
            fail(&err.to_string());
            ExitCode::from(err.exit_code())
        }
    }
}

fn parse_mode(id: &str) -> Result<Mode, String> {
    Mode::parse(id).ok_or_else(|| {
        let known: Vec<&str> = Mode::ALL.iter().map(|mode| mode.id()).collect();
        format!("unknown mode `{id}`; choose one of: {}", known.join(", "))
    })
}

fn fail(why: &str) -> ExitCode {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "cairn: {}", cairn::visible::text(why));
    ExitCode::FAILURE
}

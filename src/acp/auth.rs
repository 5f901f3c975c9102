//! Logging in over ACP: the auth methods `initialize` offers (a terminal running `cairn login`
//! to clients that can run one, a key typed into an elicitation form to clients that announced
//! forms, the environment to all), what `authenticate` does with the form (`key`), and the
//! auth-required answer editors meet with their login flow when no key is usable.
//!
//! The form asks for a provider and its key; the key is then checked and saved by
//! [`crate::login::save_key`], exactly as `cairn login` does, so a key the provider refuses is
//! saved nowhere. The key is never logged nor quoted back. A connection acting for a token's
//! principal (`cairn serve --auth`) may not save the server's keys.

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use super::convert::session_error;
use super::form::{self, Filled};
use super::rpc::Peer;
use crate::config::Config;
use crate::login::LoginError;
use crate::session::{Registry, SessionError};

/// The terminal auth method: the client runs `cairn login` in a terminal.
pub const LOGIN_METHOD: &str = "login";
/// The agent auth method: keys already in the environment.
pub const ENVIRONMENT_METHOD: &str = "environment";
/// The agent auth method that asks for a provider and its key in an elicitation form.
pub const KEY_METHOD: &str = "key";

/// The form's fields, named so that sorted (as the schema's map keeps them) the provider comes
/// before the key.
const PROVIDER: &str = "provider";
const KEY: &str = "secret";

/// Whether the client can run a terminal auth method: it says so in `auth.terminal` (or, as the
/// ACP Registry's checker does, in `_meta["terminal-auth"]`).
pub fn runs_terminal_auth(capabilities: &acp::ClientCapabilities) -> bool {
    let in_meta = capabilities.meta.as_ref().and_then(|meta| meta.get("terminal-auth")).and_then(Value::as_bool);
    capabilities.auth.terminal || in_meta == Some(true)
}

/// The ways to log in: the environment always; a terminal running `cairn login` only for a client
/// that can run one (ACP forbids offering it otherwise; the client appends `args` to the command
/// it launched cairn with, so `cairn login` and `cairn acp login` both log in); a key typed into
/// a form only for a client that shows forms (`forms`), and last, so a client that takes the
/// first method on its own never opens a form unasked.
pub fn auth_methods(terminal: bool, forms: bool) -> Vec<acp::AuthMethod> {
    let mut methods = Vec::new();
    if terminal {
        methods.push(acp::AuthMethod::Terminal(
            acp::AuthMethodTerminal::new(LOGIN_METHOD, "Log in with an API key")
                .description(
                    "Runs `cairn login` in a terminal: pick a provider and paste its key; it is checked and saved for cairn only"
                        .to_owned(),
                )
                .args(vec!["login".to_owned()]),
        ));
    }
    methods.push(acp::AuthMethod::Agent(
        acp::AuthMethodAgent::new(ENVIRONMENT_METHOD, "Use API keys from the environment").description(
            "OPENAI_API_KEY, ANTHROPIC_API_KEY or a provider's api_key_env, set where the editor starts cairn"
                .to_owned(),
        ),
    ));
    if forms {
        methods.push(acp::AuthMethod::Agent(acp::AuthMethodAgent::new(KEY_METHOD, "Enter an API key").description(
            "Pick a provider and paste its key into a form; it is checked and saved for cairn only, as `cairn login` does"
                .to_owned(),
        )));
    }
    methods
}

/// Auth-required (which editors answer with their login button) when the default model's
/// provider has no key, in the environment or saved.
pub fn needs_no_login(config: &crate::config::Config) -> Result<(), acp::Error> {
    match config.missing_key(&config.model) {
        None => Ok(()),
        Some(variable) => {
            let (provider, _) = crate::config::split_model(&config.model);
            let error = crate::llm::LlmError::MissingKey { provider: provider.to_owned(), env: variable.to_owned() };
            Err(session_error(&SessionError::Model(error)))
        }
    }
}

/// The refusal a connection acting for a token's principal (`cairn serve --auth`) meets when it
/// would change the keys saved on the server (`doing`, such as "logout forgets the keys saved on
/// the server"); `command` is what to run on the server instead.
pub fn refused_to_principal(doing: &str, command: &str) -> acp::Error {
    acp::Error::new(
        acp::ErrorCode::InvalidRequest.into(),
        format!("{doing}, which a client of `cairn serve --auth` may not do; run `{command}` on the server"),
    )
}

fn auth_required(message: String) -> acp::Error {
    acp::Error::new(acp::ErrorCode::AuthRequired.into(), message)
}

/// `authenticate` with [`KEY_METHOD`]: asks for a provider and its key in a form (scoped to the
/// `authenticate` request, as no session exists yet), checks the key and saves it as `cairn
/// login` does, then answers as `authenticate` does once a key is usable. `forms`: whether the
/// client announced elicitation forms.
pub async fn enter_key(peer: Peer, forms: bool, sessions: Registry) -> Result<acp::AuthenticateResponse, acp::Error> {
    let config = sessions.config();
    if !forms {
        return Err(acp::Error::new(
            acp::ErrorCode::InvalidParams.into(),
            format!(
                "authenticate: `{KEY_METHOD}` asks for the key in a form, and this client announced no elicitation \
                 forms; {}",
                elsewhere(config)
            ),
        ));
    }
    let request = super::rpc::current_request_id()
        .and_then(|id| serde_json::from_value::<acp::RequestId>(id).ok())
        .ok_or_else(|| acp::Error::invalid_request().data("authenticate with a form needs an integer or string id"))?;
    let fail = |err: crate::tools::host::HostError| acp::Error::new(acp::ErrorCode::InternalError.into(), err.0);
    let Some(response) = form::send(&peer, &key_form(config, request), true).await.map_err(fail)? else {
        return Err(auth_required(format!("This editor does not show forms after all; {}", elsewhere(config))));
    };
    let content = match form::filled(response, true).map_err(fail)? {
        Filled::Accepted(content) => content,
        Filled::Declined | Filled::Cancelled => {
            return Err(auth_required(format!("No key was entered, so nothing was saved; {}", elsewhere(config))));
        }
    };
    let provider = form::text(&content, PROVIDER, false).map_err(fail)?;
    let key = form::text(&content, KEY, true).map_err(fail)?;
    let Some(provider) = provider else {
        return Err(auth_required("No provider was picked; pick the one the key is for, then try again".to_owned()));
    };
    let Some(key) = key else {
        return Err(auth_required(format!(
            "No key was entered for {provider}, so nothing was saved; paste it and try again"
        )));
    };
    let saved = crate::login::save_key(config, &provider, &key, true).await.map_err(|err| login_error(&err))?;
    tracing::info!(provider = %saved.provider, variable = %saved.variable, "saved a key entered in the editor's form");
    if saved.unconfirmed.is_some() {
        tracing::info!(provider = %saved.provider, "the provider could not confirm the key; it was saved anyway, as `cairn login` does");
    }
    match needs_no_login(config) {
        Ok(()) => Ok(acp::AuthenticateResponse::new()),
        Err(missing) => Err(auth_required(format!(
            "Saved the key for {} ({}), but the default model {} still has none: {}",
            saved.provider, saved.variable, config.model, missing.message
        ))),
    }
}

/// The form: which provider (the default model's, if it takes a key, picked already) and the key.
fn key_form(config: &Config, request: acp::RequestId) -> acp::CreateElicitationRequest {
    let (default, _) = crate::config::split_model(&config.model);
    let keyed = crate::login::keyed(config);
    let options: Vec<acp::EnumOption> = keyed
        .iter()
        .map(|(name, provider)| {
            let variable = provider.api_key_env.as_deref().unwrap_or_default();
            acp::EnumOption::new(*name, format!("{name} ({variable})")).description(provider.base_url.clone())
        })
        .collect();
    let mut provider = acp::StringPropertySchema::new().title("Provider").one_of(options);
    if keyed.iter().any(|(name, _)| *name == default) {
        provider = provider.default_value(default.to_owned());
    }
    let key = acp::StringPropertySchema::new().title("API key").description(
        "Checked with one request to the provider, then saved for cairn only (credentials.toml, readable by you alone)"
            .to_owned(),
    );
    let schema = acp::ElicitationSchema::new().property(PROVIDER, provider, true).property(KEY, key, true);
    let mode = acp::ElicitationFormMode::new(acp::ElicitationRequestScope::new(request), schema);
    acp::CreateElicitationRequest::new(mode, "Log in to cairn: pick the provider and paste its API key.")
}

/// What else logs in, for an error: `cairn login` in a terminal, or the default model's key
/// variable where the editor starts cairn.
fn elsewhere(config: &Config) -> String {
    let variable =
        config.missing_key(&config.model).map_or_else(|| "the provider's key variable".to_owned(), str::to_owned);
    format!("log in with `cairn login` in a terminal, or set {variable} where the editor starts cairn, then try again")
}

/// A login that did not happen, as `authenticate` answers it: auth-required while the user can
/// do something about it, an internal error when the keys cannot be saved at all.
fn login_error(err: &LoginError) -> acp::Error {
    match err {
        LoginError::UnknownProvider(..)
        | LoginError::Keyless(_)
        | LoginError::NoProvider(_)
        | LoginError::EmptyKey
        | LoginError::Input(_)
        | LoginError::Interrupted
        | LoginError::Rejected { .. }
        | LoginError::Unreachable { .. } => auth_required(err.to_string()),
        LoginError::NoConfigDir | LoginError::Credentials(_) => {
            acp::Error::new(acp::ErrorCode::InternalError.into(), err.to_string())
        }
    }
}

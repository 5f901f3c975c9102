//! Logging in over ACP: the auth methods `initialize` offers (a terminal running `cairn login`
//! to clients that can run one, the environment to all) and the auth-required answer editors
//! meet with their login button when no key is usable.

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use super::convert::session_error;
use crate::session::SessionError;

/// The terminal auth method: the client runs `cairn login` in a terminal.
pub const LOGIN_METHOD: &str = "login";
/// The agent auth method: keys already in the environment.
pub const ENVIRONMENT_METHOD: &str = "environment";

/// Whether the client can run a terminal auth method: it says so in `auth.terminal` (or, as the
/// ACP Registry's checker does, in `_meta["terminal-auth"]`).
pub fn runs_terminal_auth(capabilities: &acp::ClientCapabilities) -> bool {
    let in_meta = capabilities.meta.as_ref().and_then(|meta| meta.get("terminal-auth")).and_then(Value::as_bool);
    capabilities.auth.terminal || in_meta == Some(true)
}

/// The ways to log in: the environment always; a terminal running `cairn login` only for a client
/// that can run one (ACP forbids offering it otherwise). The client appends `args` to the command
/// it launched cairn with, so `cairn login` and `cairn acp login` both log in.
pub fn auth_methods(terminal: bool) -> Vec<acp::AuthMethod> {
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

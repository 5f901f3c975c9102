//! One function per ACP method, dispatched by name from the peer's reader loop.
//!
//! Each handler parses its params (a failure names the field), does whatever must happen in wire
//! order synchronously (queueing a prompt, cancelling), and returns the rest as a future. The
//! client's `cwd` and `additionalDirectories` are checked before a session sees them: absolute,
//! existing directories that may be a workspace root (`workspace::Guard`). The client is a
//! [`WireSink`] (`sink.rs`). On a server ([`Served`]) the sessions are the server's: a
//! connection views each session it opens, prompts or changes the settings of, and its end only
//! stops the viewing (no turn is cancelled, nothing shut down). Every session id a request
//! names goes through [`Agent::session`]: a connection acting for a principal of `cairn serve
//! --auth` that does not own the session is answered exactly as if it did not exist.

mod extensions;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;
use futures::FutureExt;
use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::auth::{
    ENVIRONMENT_METHOD, KEY_METHOD, LOGIN_METHOD, auth_methods, enter_key, needs_no_login, refused_to_principal,
    runs_terminal_auth,
};
use super::convert::{block_to_part, client_prompt, invalid_params, modes, session_error, stop_reason, usage_update};
use super::opening::Opening;
use super::rpc::Handler;
use super::served::Served;
use super::sink::WireSink;
use crate::ids::{SessionId, iso8601};
use crate::session::{Principal, Registry, SessionError};
use crate::settings::{self, Setting};
use crate::store::Listing;

/// Sessions per `session/list` page.
const PAGE_SIZE: usize = 50;

type Answer = Result<BoxFuture<'static, Result<Value, acp::Error>>, acp::Error>;

/// The ACP agent: what `cairn` serves on stdio, and on each connection of `cairn serve`.
pub struct Agent {
    sink: Arc<WireSink>,
    /// The sessions, or why they could not be set up (bad config, unusable database), once
    /// the store is open.
    sessions: Opening,
    /// On a server, this connection's view of the server's sessions.
    served: Option<Arc<Served>>,
}

impl Agent {
    pub fn new(sink: Arc<WireSink>, sessions: Opening, served: Option<Served>) -> Self {
        Self { sink, sessions, served: served.map(Arc::new) }
    }

    /// On a server, this connection sees `session` from now on.
    fn view(&self, session: &SessionId) {
        if let Some(served) = &self.served {
            served.view(session);
        }
    }

    /// The session a request names, if this connection may touch it; else the error a session
    /// that does not exist gets. The one way a handler turns a wire id into a session.
    fn session(&self, id: &acp::SessionId) -> Result<SessionId, acp::Error> {
        let id = SessionId::from_string(id.0.clone());
        if self.sees(&id) { Ok(id) } else { Err(session_error(&SessionError::NotFound(id))) }
    }

    /// Whether this connection may touch session `id`: on stdio and without `--auth`, any.
    fn sees(&self, id: &SessionId) -> bool {
        let Some(served) = &self.served else { return true };
        match self.sessions.get() {
            Ok(sessions) => served.principal.sees(sessions.store(), id),
            Err(_) => served.principal == Principal::Local,
        }
    }

    /// The owner of the sessions this connection creates.
    fn owner(&self) -> Option<String> {
        self.served.as_ref().and_then(|served| served.principal.owner())
    }

    fn sessions(&self) -> Result<Registry, acp::Error> {
        self.sessions.get().clone().map_err(|why| acp::Error::new(acp::ErrorCode::InternalError.into(), why))
    }

    fn initialize(&self, params: Value) -> Answer {
        let request: acp::InitializeRequest = parse(INITIALIZE, params)?;
        self.sink.features.learn(&request.client_capabilities);
        let capabilities = acp::AgentCapabilities::new()
            .load_session(true)
            .prompt_capabilities(acp::PromptCapabilities::new().image(true).audio(false).embedded_context(true))
            .mcp_capabilities(acp::McpCapabilities::new().http(true).sse(false))
            .session_capabilities(
                acp::SessionCapabilities::new()
                    .list(acp::SessionListCapabilities::new())
                    .resume(acp::SessionResumeCapabilities::new())
                    .close(acp::SessionCloseCapabilities::new())
                    .delete(acp::SessionDeleteCapabilities::new())
                    .fork(acp::SessionForkCapabilities::new())
                    .additional_directories(acp::SessionAdditionalDirectoriesCapabilities::new())
                    .system_prompt(
                        acp::SessionSystemPromptCapabilities::new().mode(
                            acp::SessionSystemPromptModeCapabilities::new()
                                .override_(acp::SessionSystemPromptOverrideCapabilities::new()),
                        ),
                    )
                    .title(acp::SessionTitleCapabilities::new())
                    .status(acp::SessionStatusCapabilities::new())
                    .archive(acp::SessionArchiveCapabilities::new()),
            )
            .auth(acp::AgentAuthCapabilities::new().logout(acp::LogoutCapabilities::new()));
        let response = acp::InitializeResponse::new(agent_client_protocol_schema::ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .auth_methods(auth_methods(runs_terminal_auth(&request.client_capabilities), self.takes_keys()))
            .agent_info(acp::Implementation::new("cairn", env!("CARGO_PKG_VERSION")).title("cairn".to_owned()))
            .meta(extensions::steering_supported());
        ready(&response)
    }

    /// Whether this client may save a key through a form: it shows forms, and it does not act
    /// for a token's principal (whose client may not change the server's keys).
    fn takes_keys(&self) -> bool {
        self.sink.features.forms.load(std::sync::atomic::Ordering::Relaxed) && self.owner().is_none()
    }

    /// `authenticate`: the client ran `cairn login` in a terminal (`login`), or the keys are in
    /// the environment (`environment`): either way the keys are read when needed, so this checks
    /// that the default model's provider now has one. `key` asks for one in a form first.
    fn authenticate(&self, params: Value) -> Answer {
        let request: acp::AuthenticateRequest = parse(AUTHENTICATE, params)?;
        let method = request.method_id.0.as_ref();
        if method == KEY_METHOD && self.owner().is_some() {
            return Err(refused_to_principal("logging in with `key` saves a key on the server", "cairn login"));
        }
        if method == KEY_METHOD {
            let (peer, forms, sessions) = (self.sink.peer.clone(), self.takes_keys(), self.sessions()?);
            return Ok(async move { to_value(&enter_key(peer, forms, sessions).await?) }.boxed());
        }
        if ![LOGIN_METHOD, ENVIRONMENT_METHOD].contains(&method) {
            return Err(invalid_params(format!(
                "authenticate: unknown methodId `{method}`; cairn offers `{LOGIN_METHOD}`, `{ENVIRONMENT_METHOD}` and \
                 `{KEY_METHOD}`"
            )));
        }
        let sessions = self.sessions()?;
        needs_no_login(sessions.config())?;
        ready(&acp::AuthenticateResponse::new())
    }

    /// `logout`: forgets every key `cairn login` saved (keys in the environment stay).
    fn logout(&self, params: Value) -> Answer {
        let _: acp::LogoutRequest = parse(LOGOUT, params)?;
        if self.owner().is_some() {
            return Err(refused_to_principal("logout forgets the keys saved on the server", "cairn logout"));
        }
        let sessions = self.sessions()?;
        if let Some(credentials) = &sessions.config().credentials {
            credentials
                .forget(None)
                .map_err(|err| acp::Error::new(acp::ErrorCode::InternalError.into(), err.to_string()))?;
        }
        ready(&acp::LogoutResponse::new())
    }

    /// A directory the client gives as a workspace root (`cwd`, each of
    /// `additionalDirectories`): absolute, an existing directory, and none that would bring the
    /// whole disk, the home directory, the configuration of the user's programs or cairn's own
    /// data and configuration (its database, saved keys, MCP servers) into the workspace, where
    /// accept-edits writes without asking and commands may write ([`crate::workspace::Guard`]).
    /// Answers it as given, as sessions store their directory.
    fn workspace_root(&self, field: &str, path: PathBuf) -> Result<PathBuf, acp::Error> {
        self.judged_root(field, path).map(|(given, _)| given)
    }

    /// A checked root as given and as resolved once, links followed.
    fn judged_root(&self, field: &str, path: PathBuf) -> Result<(PathBuf, PathBuf), acp::Error> {
        let path = directory(field, path)?;
        let sessions = self.sessions()?;
        let resolved = sessions
            .config()
            .workspace_guard()
            .settle(&path)
            .map_err(|refused| invalid_params(format!("`{field}` {refused}")))?;
        Ok((path, resolved))
    }

    /// The client's `additionalDirectories`, each checked and resolved once (they live in the
    /// session's memory: a link among them re-pointed later does not move them).
    fn additional_directories(&self, paths: Vec<PathBuf>) -> Result<Vec<PathBuf>, acp::Error> {
        let field = "additionalDirectories";
        paths.into_iter().map(|path| self.judged_root(field, path).map(|(_, resolved)| resolved)).collect()
    }

    fn new_session(&self, params: Value) -> Answer {
        let request: acp::NewSessionRequest = parse(SESSION_NEW, with_mcp_servers(params))?;
        let cwd = self.workspace_root("cwd", request.cwd)?;
        let extra = self.additional_directories(request.additional_directories)?;
        let system = client_prompt(SESSION_NEW, request.system_prompt)?;
        let sessions = self.sessions()?;
        needs_no_login(sessions.config())?;
        let (sink, served, owner) = (Arc::clone(&self.sink), self.served.clone(), self.owner());
        Ok(async move {
            let attach = sink.attach(request.mcp_servers, extra, system);
            let view = sessions.create(&cwd, owner, attach).await.map_err(|err| session_error(&err))?;
            if let Some(served) = served {
                served.view(&view.id);
            }
            sink.send_commands_after_response(&view.id, &view.commands);
            to_value(
                &acp::NewSessionResponse::new(view.id.to_string())
                    .modes(modes(&view))
                    .config_options(sink.options(&view)),
            )
        }
        .boxed())
    }

    fn load_session(&self, params: Value) -> Answer {
        let request: acp::LoadSessionRequest = parse(SESSION_LOAD, with_mcp_servers(params))?;
        // The session works in its stored directory, checked again when it goes live.
        self.workspace_root("cwd", request.cwd)?;
        let extra = self.additional_directories(request.additional_directories)?;
        let system = client_prompt(SESSION_LOAD, request.system_prompt)?;
        let id = self.session(&request.session_id)?;
        // Queued now, in wire order: the replay shows everything sent before this line was
        // read, and what the running turn sends after it comes after the replay, never twice.
        let (attach, announced) = self.sink.attach_early(request.mcp_servers, extra, system);
        let loaded = self.sessions()?.load(&id, attach, self.served.as_ref().map(|served| &served.viewer));
        // After the hold the load took: what this connection is sent from here on is either
        // in the replay or after it.
        self.view(&id);
        let (sink, served) = (Arc::clone(&self.sink), self.served.clone());
        Ok(async move {
            sink.peer.signal_after_response(announced);
            // The replay is queued before the answer, and the running turn's updates after it.
            let view = Served::found(served.as_deref(), &id, loaded.await)?;
            sink.send_wire(&id, usage_update(&view));
            sink.send_commands_after_response(&id, &view.commands);
            to_value(&acp::LoadSessionResponse::new().modes(modes(&view)).config_options(sink.options(&view)))
        }
        .boxed())
    }

    fn resume_session(&self, params: Value) -> Answer {
        let request: acp::ResumeSessionRequest = parse(SESSION_RESUME, with_mcp_servers(params))?;
        self.workspace_root("cwd", request.cwd)?;
        let extra = self.additional_directories(request.additional_directories)?;
        let system = client_prompt(SESSION_RESUME, request.system_prompt)?;
        let id = self.session(&request.session_id)?;
        // Queued now, in wire order: a prompt right behind this request finds the session
        // attached to these servers, not started without them and then restarted.
        let (attach, announced) = self.sink.attach_early(request.mcp_servers, extra, system);
        let resumed = self.sessions()?.resume(&id, attach);
        self.view(&id);
        let (sink, served) = (Arc::clone(&self.sink), self.served.clone());
        Ok(async move {
            sink.peer.signal_after_response(announced);
            let view = Served::found(served.as_deref(), &id, resumed.await)?;
            sink.send_wire(&id, usage_update(&view));
            sink.send_commands_after_response(&id, &view.commands);
            to_value(&acp::ResumeSessionResponse::new().modes(modes(&view)).config_options(sink.options(&view)))
        }
        .boxed())
    }

    fn fork_session(&self, params: Value) -> Answer {
        let request: acp::ForkSessionRequest = parse(SESSION_FORK, with_mcp_servers(params))?;
        let cwd = self.workspace_root("cwd", request.cwd)?;
        let extra = self.additional_directories(request.additional_directories)?;
        let system = client_prompt(SESSION_FORK, request.system_prompt)?;
        let parent = self.session(&request.session_id)?;
        let sessions = self.sessions()?;
        let (sink, served) = (Arc::clone(&self.sink), self.served.clone());
        Ok(async move {
            let attach = sink.attach(request.mcp_servers, extra, system);
            let view = sessions.fork(&parent, &cwd, attach).await.map_err(|err| session_error(&err))?;
            if let Some(served) = served {
                served.view(&view.id);
            }
            sink.send_commands_after_response(&view.id, &view.commands);
            to_value(
                &acp::ForkSessionResponse::new(view.id.to_string())
                    .modes(modes(&view))
                    .config_options(sink.options(&view)),
            )
        }
        .boxed())
    }

    fn close_session(&self, params: Value) -> Answer {
        let request: acp::CloseSessionRequest = parse(SESSION_CLOSE, params)?;
        let sessions = self.sessions()?;
        let id = self.session(&request.session_id)?;
        let served = self.served.clone();
        Ok(async move {
            sessions.close(&id).await.map_err(|err| session_error(&err))?;
            if let Some(served) = served {
                served.hub.forget(&id);
            }
            to_value(&acp::CloseSessionResponse::new())
        }
        .boxed())
    }

    fn delete_session(&self, params: Value) -> Answer {
        let request: acp::DeleteSessionRequest = parse(SESSION_DELETE, params)?;
        let sessions = self.sessions()?;
        // Deleting a session that does not exist succeeds; so does one this connection may not see.
        let Ok(id) = self.session(&request.session_id) else {
            return ready(&acp::DeleteSessionResponse::new());
        };
        let served = self.served.clone();
        Ok(async move {
            sessions.delete(&id).await.map_err(|err| session_error(&err))?;
            if let Some(served) = served {
                served.hub.forget(&id);
            }
            to_value(&acp::DeleteSessionResponse::new())
        }
        .boxed())
    }

    fn list_sessions(&self, params: Value) -> Answer {
        let request: acp::ListSessionsRequest = parse(SESSION_LIST, params)?;
        let cwd = request.cwd.map(|cwd| absolute("cwd", cwd)).transpose()?;
        // `{"_meta": {"cairn": {"subagents": true}}}` lists sub-agents' sessions too.
        let subagents = request
            .meta
            .as_ref()
            .and_then(|meta| meta.get("cairn"))
            .and_then(|cairn| cairn.get("subagents"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let archived = extensions::archive_filter(request.archived)?;
        let (sessions, owner) = (self.sessions()?, self.owner());
        Ok(async move {
            let cwd = cwd.map(|cwd| cwd.to_string_lossy().into_owned());
            // Sessions never prompted are left out: a client that opens one it does not use
            // (CodeCompanion opens two per chat) would fill its picker with untitled ones.
            let listing = Listing { owner, cwd, subagents, unprompted: false, archived };
            let page = sessions.list(listing, request.cursor, PAGE_SIZE).await.map_err(|err| session_error(&err))?;
            let infos = page
                .sessions
                .into_iter()
                .map(|row| {
                    let status = sessions.status(&row.id);
                    let mut meta = acp::Meta::new();
                    let mut cairn = serde_json::json!({ "status": status.as_str() });
                    if let Some(parent) = &row.parent_id {
                        cairn["parentId"] = parent.as_str().into();
                    }
                    if let Some(agent) = &row.subagent {
                        cairn["subagent"] = agent.as_str().into();
                    }
                    meta.insert("cairn".to_owned(), cairn);
                    acp::SessionInfo::new(row.id.to_string(), row.cwd)
                        .title(row.title)
                        .updated_at(iso8601(row.updated_at))
                        .archived(row.archived_at.is_some())
                        .meta(meta)
                })
                .collect();
            to_value(&acp::ListSessionsResponse::new(infos).next_cursor(page.next_cursor))
        }
        .boxed())
    }

    fn set_config_option(&self, mut params: Value) -> Answer {
        // A bare `true` is what some clients send for a boolean option: taken as the typed form.
        if let Some(object) = params.as_object_mut()
            && object.get("value").is_some_and(Value::is_boolean)
            && !object.contains_key("type")
        {
            object.insert("type".to_owned(), Value::from("boolean"));
        }
        let request: acp::SetSessionConfigOptionRequest = parse(SESSION_SET_CONFIG_OPTION, params)?;
        let sessions = self.sessions()?;
        let value = match &request.value {
            acp::SessionConfigOptionValue::Boolean { value } => settings::Value::Bool(*value),
            acp::SessionConfigOptionValue::ValueId { value } => settings::Value::Id(&value.0),
            // A shape newer than this agent (free text, say): no option here takes it.
            _ => settings::Value::Id(""),
        };
        let setting = Setting::parse(&request.config_id.0, value).map_err(|err| session_error(&err.into()))?;
        let id = self.session(&request.session_id)?;
        self.view(&id);
        let changed = sessions.set(&id, setting.clone());
        let (sink, served) = (Arc::clone(&self.sink), self.served.clone());
        // Replicas sharing the store: the session's actor showed every client of this process
        // the change as it committed, in the log's order.
        let shown = sessions.store().logs_events();
        Ok(async move {
            let view = Served::after_change(served.as_deref(), &id, changed.await)?;
            match setting {
                _ if shown => {}
                // Keep clients that follow the legacy modes API in step.
                Setting::Mode(_) => sink
                    .send_wire(&id, acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(view.mode.id()))),
                // A new model may change the other options (thinking).
                Setting::Model(_) | Setting::Steer(_) => {
                    let options = acp::ConfigOptionUpdate::new(sink.options(&view));
                    sink.send_wire(&id, acp::SessionUpdate::ConfigOptionUpdate(options));
                }
                Setting::Thought(_) => {}
            }
            // … and the window.
            if matches!(setting, Setting::Model(_)) {
                sink.send_wire(&id, usage_update(&view));
            }
            to_value(&acp::SetSessionConfigOptionResponse::new(sink.options(&view)))
        }
        .boxed())
    }

    fn set_mode(&self, params: Value) -> Answer {
        let request: acp::SetSessionModeRequest = parse(SESSION_SET_MODE, params)?;
        let setting = Setting::mode(&request.mode_id.0).map_err(|err| session_error(&err.into()))?;
        let sessions = self.sessions()?;
        let id = self.session(&request.session_id)?;
        self.view(&id);
        let changed = sessions.set(&id, setting);
        let (sink, served) = (Arc::clone(&self.sink), self.served.clone());
        // Replicas sharing the store: the session's actor showed the change as it committed.
        let shown = sessions.store().logs_events();
        Ok(async move {
            let view = Served::after_change(served.as_deref(), &id, changed.await)?;
            // Keep clients that follow config options in step.
            if !shown {
                sink.send_wire(
                    &id,
                    acp::SessionUpdate::ConfigOptionUpdate(acp::ConfigOptionUpdate::new(sink.options(&view))),
                );
            }
            to_value(&acp::SetSessionModeResponse::new())
        }
        .boxed())
    }

    fn prompt(&self, params: Value) -> Answer {
        let request: acp::PromptRequest = parse(SESSION_PROMPT, params)?;
        if request.prompt.is_empty() {
            return Err(invalid_params("session/prompt: `prompt` must hold at least one content block"));
        }
        let parts = request.prompt.into_iter().map(block_to_part).collect::<Result<Vec<_>, _>>()?;
        let (sessions, id) = (self.sessions()?, self.session(&request.session_id)?);
        tracing::trace!(target: "cairn::timing", session = %id, "prompt read");
        if let Some(served) = &self.served {
            served.drive(&id);
        }
        let turn = sessions.prompt(&id, parts);
        let served = self.served.clone();
        Ok(async move {
            let end = Served::found(served.as_deref(), &id, turn.await)?;
            to_value(&acp::PromptResponse::new(stop_reason(end.stop)).usage(extensions::turn_usage(end.usage)))
        }
        .boxed())
    }
}

/// The method names of the agent side, as the schema crate spells them (as patterns).
const AGENT: acp::AgentMethodNames = acp::AGENT_METHOD_NAMES;
const INITIALIZE: &str = AGENT.initialize;
const AUTHENTICATE: &str = AGENT.authenticate;
const LOGOUT: &str = AGENT.logout;
const SESSION_NEW: &str = AGENT.session_new;
const SESSION_LOAD: &str = AGENT.session_load;
const SESSION_RESUME: &str = AGENT.session_resume;
const SESSION_FORK: &str = AGENT.session_fork;
const SESSION_CLOSE: &str = AGENT.session_close;
const SESSION_DELETE: &str = AGENT.session_delete;
const SESSION_LIST: &str = AGENT.session_list;
const SESSION_SET_CONFIG_OPTION: &str = AGENT.session_set_config_option;
const SESSION_SET_MODE: &str = AGENT.session_set_mode;
const SESSION_PROMPT: &str = AGENT.session_prompt;
const SESSION_CANCEL: &str = AGENT.session_cancel;

impl Handler for Agent {
    fn request(&self, method: &str, params: Value) -> Answer {
        match method {
            INITIALIZE => self.initialize(params),
            AUTHENTICATE => self.authenticate(params),
            LOGOUT => self.logout(params),
            SESSION_NEW => self.new_session(params),
            SESSION_LOAD => self.load_session(params),
            SESSION_RESUME => self.resume_session(params),
            SESSION_FORK => self.fork_session(params),
            SESSION_CLOSE => self.close_session(params),
            SESSION_DELETE => self.delete_session(params),
            SESSION_LIST => self.list_sessions(params),
            SESSION_SET_CONFIG_OPTION => self.set_config_option(params),
            SESSION_SET_MODE => self.set_mode(params),
            SESSION_PROMPT => self.prompt(params),
            extensions::STREAM_RESUME => self.stream_resume(params),
            extensions::SESSION_SET_TITLE => self.set_title(params),
            extensions::SESSION_STATUS => self.session_status(params),
            extensions::SESSION_ARCHIVE => self.archive(params, true),
            extensions::SESSION_UNARCHIVE => self.archive(params, false),
            extensions::STEERING => self.steering(params),
            _ => Err(super::rpc::error(acp::ErrorCode::MethodNotFound, format!("Method not found: `{method}`"))
                .data(serde_json::json!({ "method": method }))),
        }
    }

    fn notification(&self, method: &str, params: Value) {
        match method {
            SESSION_CANCEL => match parse::<acp::CancelNotification>(method, params) {
                Ok(cancel) => {
                    if let (Ok(sessions), Ok(id)) = (self.sessions.get(), self.session(&cancel.session_id)) {
                        sessions.cancel(&id);
                    }
                }
                Err(err) => tracing::warn!(%err, "ignoring a malformed session/cancel"),
            },
            _ => tracing::debug!(method, "ignoring an unknown notification"),
        }
    }

    /// On a server, the connection only stops viewing: the sessions are the server's, and their
    /// turns go on. Else the process is ending, and so are the sessions.
    fn shutdown(&self) -> BoxFuture<'static, ()> {
        if let Some(served) = &self.served {
            served.hub.detach(&served.viewer);
            return async {}.boxed();
        }
        match self.sessions.get() {
            Ok(sessions) => {
                let sessions = sessions.clone();
                async move { sessions.shutdown().await }.boxed()
            }
            Err(_) => async {}.boxed(),
        }
    }
}

/// Deserializes params; a failure names the method and the field.
fn parse<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, acp::Error> {
    let params = if params.is_null() { Value::Object(serde_json::Map::new()) } else { params };
    serde_path_to_error::deserialize(params).map_err(|err| {
        let path = err.path().to_string();
        let why = if path == "." {
            format!("{method}: {}", err.inner())
        } else {
            format!("{method}: `{path}`: {}", err.inner())
        };
        invalid_params(why)
    })
}

/// `mcpServers` is required on the wire, but clients omit it; treat a missing list as empty.
fn with_mcp_servers(mut params: Value) -> Value {
    if let Value::Object(fields) = &mut params {
        fields.entry("mcpServers").or_insert_with(|| Value::Array(Vec::new()));
    }
    params
}

fn absolute(field: &str, path: PathBuf) -> Result<PathBuf, acp::Error> {
    if Path::new(&path).is_absolute() {
        // One spelling per directory, so `/w/` and `/w` are the same session root.
        Ok(path.components().collect())
    } else {
        Err(invalid_params(format!("`{field}` must be an absolute path, got `{}`", path.display())))
    }
}

/// [`absolute`], and a directory that exists: a session's tools run there, and would otherwise
/// fail later with "No such file or directory".
fn directory(field: &str, path: PathBuf) -> Result<PathBuf, acp::Error> {
    let path = absolute(field, path)?;
    match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_dir() => Ok(path),
        Ok(_) => Err(invalid_params(format!("`{field}` {} is not a directory", path.display()))),
        Err(err) => Err(invalid_params(format!(
            "`{field}` {} cannot be used as the session's directory: {err}",
            path.display()
        ))),
    }
}

fn to_value<T: Serialize>(value: &T) -> Result<Value, acp::Error> {
    serde_json::to_value(value).map_err(|err| acp::Error::internal_error().data(err.to_string()))
}

fn ready<T: Serialize>(value: &T) -> Answer {
    let value = to_value(value);
    Ok(async move { value }.boxed())
}

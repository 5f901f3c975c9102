//! The one builder of an [`agent::Turn`]: everything a session's turn, `/compact` and a
//! sub-agent's turn are made of, chosen here and nowhere else.
//!
//! - the model, resolved once ([`Model`]: its reference, catalog entry and provider) and kept by
//!   the session until its model changes, with the model that writes its summaries ([`Models`]);
//! - the system prompt ([`system`], [`prepare_system`]): the same bytes for every turn of a
//!   session, assembled off the actor from the moment the session goes live;
//! - the workspace ([`workspace`]): the session's roots, cairn's own directories protected;
//! - the tool registry ([`session_tools`]): the built-ins, `web_search` where `[search] url` is
//!   set, `skill` where the project or the user has skills, the MCP tools ready in time, `task`;
//! - the turn itself ([`Setup::turn`]), borrowing the history, the recorder and the rules.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::subagent;
use crate::agent::compact::Summarizer;
use crate::agent::prompt::{self, ClientPrompt, SystemPrompt};
use crate::agent::{AgentEvent, Recorder, Run, Toolbox, Turn};
use crate::config::{Config, Limits, Remember, Secret};
use crate::history::Message;
use crate::ids::MessageId;
use crate::llm::catalog::{self, ModelInfo, ThoughtLevel};
use crate::llm::retry::RetryPolicy;
use crate::llm::{self, LlmError, Provider};
use crate::mcp::{ServerState, Servers};
use crate::permissions::{Mode, Rule, Scope};
use crate::process::ProcessPolicy;
use crate::tools::{Host, Registry, Workspace};

/// A model resolved once: what the session names it, what the catalog knows of it, and the
/// provider that serves it.
pub struct Model {
    /// `provider/model`, stored on each message.
    pub reference: String,
    pub info: ModelInfo,
    resolved: llm::Resolved,
    /// The key the provider was built with: one saved by `cairn login` may change meanwhile.
    key: Option<Secret>,
}

impl Model {
    /// Resolves `reference` against the configured providers (no request is sent).
    pub fn resolve(config: &Config, reference: &str) -> Result<Arc<Self>, LlmError> {
        let key = key_of(config, reference);
        let resolved = llm::resolve(config, reference)?;
        Ok(Arc::new(Self { reference: reference.to_owned(), info: catalog::info(config, reference), resolved, key }))
    }

    /// Whether the provider's key is still the one this model was built with (a login or a
    /// logout since makes it stale).
    fn is_current(&self, config: &Config) -> bool {
        key_of(config, &self.reference) == self.key
    }

    pub fn provider(&self) -> &dyn Provider {
        self.resolved.provider.as_ref()
    }

    /// The name the provider knows.
    pub fn name(&self) -> &str {
        &self.resolved.model
    }
}

/// A session's model and the one that writes its summaries, resolved together and again only
/// when the session's model changes.
#[derive(Clone)]
pub struct Models {
    pub main: Arc<Model>,
    pub summaries: Arc<Model>,
}

impl Models {
    pub fn resolve(config: &Config, reference: &str) -> Result<Self, LlmError> {
        let main = Model::resolve(config, reference)?;
        let summaries = summaries_for(config, &main);
        Ok(Self { main, summaries })
    }

    /// Whether both are still built with the keys in effect now.
    pub fn is_current(&self, config: &Config) -> bool {
        self.main.is_current(config) && self.summaries.is_current(config)
    }
}

/// The key `reference`'s provider would be built with now.
fn key_of(config: &Config, reference: &str) -> Option<Secret> {
    let (provider, _) = crate::config::split_model(reference);
    config.providers.get(provider).and_then(|provider| config.key(provider))
}

/// The model that writes summaries: `[compaction] model`, else `title_model`, else the small
/// model of the session's provider, else the session's own. One that cannot be used (unknown,
/// no key) falls back to the session's model.
fn summaries_for(config: &Config, main: &Arc<Model>) -> Arc<Model> {
    let wanted = config
        .compaction
        .model
        .clone()
        .or_else(|| config.title_model.clone())
        .or_else(|| llm::policy::small_model(config, &main.reference));
    match wanted.map(|model| (Model::resolve(config, &model), model)) {
        Some((Ok(model), _)) => model,
        Some((Err(err), model)) => {
            tracing::warn!(%model, %err, "the compaction model cannot be used; the session's model summarizes");
            Arc::clone(main)
        }
        None => Arc::clone(main),
    }
}

/// The summarizer of compactions, with `[compaction]`'s settings.
pub fn summarizer<'a>(config: &Config, model: &'a Model) -> Summarizer<'a> {
    Summarizer {
        provider: model.provider(),
        model: model.name().to_owned(),
        info: model.info,
        model_ref: model.reference.clone(),
        settings: config.compaction.clone(),
        retry: RetryPolicy { retries: config.compaction.retries, base: config.limits.retry_base },
    }
}

/// Everything a turn is built from but what it borrows (history, recorder, rules).
pub struct Setup {
    pub config: Arc<Config>,
    pub model: Arc<Model>,
    /// Who summarizes when the context fills up; `None` turns compaction off (sub-agents).
    pub summaries: Option<Arc<Model>>,
    pub system: Arc<SystemPrompt>,
    pub tools: Arc<Registry>,
    pub workspace: Workspace,
    pub host: Arc<dyn Host>,
    /// The session's mode; it may change while the turn runs.
    pub mode: watch::Receiver<Mode>,
    /// Where the turn changes the session's mode (a plan approved); `None` for a sub-agent.
    pub switch: Option<watch::Sender<Mode>>,
    /// How local commands are started (environment, sandbox, supervisor).
    pub process: Arc<ProcessPolicy>,
    /// The session's background jobs (a sub-agent's own, which end with it).
    pub jobs: crate::tools::Jobs,
    /// The session's language servers (a sub-agent shares its parent's).
    pub lsp: crate::tools::Lsp,
    /// The session's rules file for its lasting processes (`Toolbox::rulebook`).
    pub rulebook: Option<Arc<crate::process::Rulebook>>,
    pub limits: Limits,
    /// The level the user chose, sent only to models that reason.
    pub thought: Option<ThoughtLevel>,
    /// What the session has cost so far (USD).
    pub spent: f64,
    /// The context in use after the session's last step.
    pub context_used: u64,
    /// The session is a principal's of `cairn serve --auth` (`Toolbox::confined`).
    pub confined: bool,
}

impl Setup {
    /// The turn, borrowing what the actor lends it.
    pub fn turn<'a>(
        &'a self,
        history: &'a mut Vec<Message>,
        recorder: &'a mut dyn Recorder,
        rules: &'a mut Vec<Rule>,
        cancel: CancellationToken,
        run: Run,
    ) -> Turn<'a> {
        Turn {
            provider: self.model.provider(),
            model: self.model.name().to_owned(),
            model_ref: self.model.reference.clone(),
            system: Arc::clone(&self.system),
            history,
            recorder,
            cancel,
            limits: self.limits.clone(),
            tools: Toolbox {
                workspace: self.workspace.clone(),
                host: Arc::clone(&self.host),
                mode: self.mode.clone(),
                switch: self.switch.clone(),
                rules,
                rulebook: self.rulebook.clone(),
                remember: match self.config.remember {
                    Remember::Session => Scope::Session,
                    Remember::Project => Scope::Project,
                },
                process: Arc::clone(&self.process),
                registry: Arc::clone(&self.tools),
                jobs: self.jobs.clone(),
                lsp: self.lsp.clone(),
                checkpoints: None,
                confined: self.confined,
            },
            info: self.model.info,
            thought: self.thought,
            spent: self.spent,
            context_used: self.context_used,
            summarizer: self.summaries.as_deref().map(|model| summarizer(&self.config, model)),
            run,
        }
    }
}

/// The workspace of a session in `cwd` with the client's `directories`; cairn's own data and
/// config directories are never part of it, and what `[sandbox] hidden` hides from commands is
/// secret to the file tools too.
pub fn workspace(config: &Config, cwd: &Path, directories: &[std::path::PathBuf]) -> Workspace {
    let own = [Some(config.data_dir.clone()), config.config_dir.clone()];
    let policy = &config.process;
    Workspace::new(cwd, directories).protecting(own.into_iter().flatten()).hiding(
        &policy.hidden,
        &policy.hidden_names,
        &policy.visible_names,
    )
}

/// The system prompt for a session in `cwd` whose model is offered `tools` (`role`: what a
/// sub-agent is told about itself; `client`: what the editor asked for).
pub async fn system(
    config: &Config,
    cwd: &Path,
    tools: &[Arc<serde_json::Value>],
    role: Option<String>,
    client: Option<ClientPrompt>,
) -> SystemPrompt {
    let mut sources =
        prompt::gather(cwd, config.home_dir.as_deref(), config.config_dir.as_deref(), tools, &config.process).await;
    sources.role = role;
    sources.client = client;
    prompt::assemble(&sources)
}

/// A system prompt being assembled; every turn of the session awaits the same one.
pub type SystemFuture = futures::future::Shared<futures::future::BoxFuture<'static, Arc<SystemPrompt>>>;

/// Starts assembling a session's system prompt on its own task, listing the built-in tools and
/// `task` with the project's named agents, with the editor's instructions (`client`).
pub fn prepare_system(config: &Arc<Config>, cwd: &Path, client: Option<ClientPrompt>) -> SystemFuture {
    use futures::FutureExt;
    let (config, cwd) = (Arc::clone(config), cwd.to_path_buf());
    let fallback = prompt::Sources { client: client.clone(), ..prompt::Sources::default() };
    let task = tokio::spawn(async move {
        let (agents, _warned) = crate::tools::agents::load(&cwd, config.home_dir.as_deref());
        let tools = subagent::catalog(&config.subagents, &Registry::builtin(), &agents);
        Arc::new(system(&config, &cwd, &tools, None, client).await)
    });
    async move {
        task.await.unwrap_or_else(|err| {
            tracing::error!(%err, "assembling the system prompt failed; using the base instructions");
            Arc::new(prompt::assemble(&fallback))
        })
    }
    .boxed()
    .shared()
}

/// The tools of one of the session's turns: the built-in ones, those of the MCP servers ready
/// once the servers still starting have had up to `[mcp] startup_timeout` (a cancel stops the
/// wait), and `task`, whose sub-agents share `parent`. Servers left behind are named in a notice
/// that is kept with the conversation. `cut` holds the turn to some tools (a command's
/// `allowed-tools`): it is applied before `task` is made, so the sub-agents get no more either,
/// and again after, so `task` stays only where it is kept.
pub async fn session_tools(
    servers: Option<&Servers>,
    config: &Config,
    parent: subagent::Parent,
    cancel: &CancellationToken,
    recorder: &mut dyn Recorder,
    cut: &(dyn Fn(&Registry) -> Registry + Sync),
) -> Arc<Registry> {
    let mut registry = Registry::builtin();
    // A search endpoint of the user's, for models without a search of their provider's (the
    // turn leaves it out for the others).
    if let Some(search) = config.search.endpoint.as_ref().and_then(crate::tools::web_search::WebSearch::new) {
        let _ = registry.add(search);
    }
    // The project's and the user's skills, loaded on demand.
    let (home, own) = (config.home_dir.as_deref(), config.config_dir.as_deref());
    if let Some(skills) =
        crate::tools::skill::SkillTool::new(crate::tools::skill::discover(Path::new(&parent.cwd), home, own))
    {
        let _ = registry.add(skills);
    }
    if let Some(servers) = servers {
        let wait = config.mcp.startup_timeout;
        let settled = tokio::select! {
            settled = servers.ready(wait) => settled,
            () = cancel.cancelled() => true,
        };
        if !settled {
            let starting: Vec<String> = servers
                .status()
                .into_iter()
                .filter(|server| server.state == ServerState::Starting)
                .map(|server| format!("`{}`", server.name))
                .collect();
            let text = format!(
                "MCP server {} still starting after {} s; this prompt goes on without its tools.",
                starting.join(", "),
                wait.as_secs()
            );
            recorder.record(AgentEvent::Notice { message: MessageId::generate(), text });
        }
        crate::tools::add_server_tools(&mut registry, servers);
    }
    let registry = cut(&registry);
    Arc::new(cut(&subagent::tools(&registry, parent)))
}

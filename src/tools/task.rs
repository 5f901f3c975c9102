//! `task`: a sub-agent. The call runs a child turn on the same turn engine with its own history,
//! limits and (for a named agent) instructions and tools, and the child's final answer is the
//! call's result. Running it is the session layer's business: the tool holds a [`Delegate`],
//! which this module only names, so tools know nothing of sessions or the store. A call is
//! [`Access::Delegate`]: its sub-agent's own calls are judged one by one, so it runs beside other
//! sub-agents.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::agents::NamedAgent;
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::ToolKind;
use crate::permissions::PermissionRequest;

/// The name the model calls it by.
pub const NAME: &str = "task";

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// A few words naming the task, shown to the user
    pub description: String,
    /// Everything the sub-agent needs: it sees nothing of this conversation
    pub prompt: String,
    /// A named agent to run it (listed in the tool description); omit for a general sub-agent
    #[serde(default)]
    pub agent: Option<String>,
}

/// Runs sub-agents: implemented by the session layer, which stores the child's history.
#[async_trait::async_trait]
pub trait Delegate: Send + Sync + 'static {
    /// Runs a sub-agent for `task` (as `agent` when it is a named one) to its end. Its final
    /// answer is the result; its progress goes to `ctx.progress`; it stops when `ctx.cancel`
    /// fires. A sub-agent that fails or reaches a limit is a failed outcome (`failed`, with its
    /// last words), never more; `Err` when it could not even start.
    async fn run(
        &self,
        task: &TaskArgs,
        agent: Option<&NamedAgent>,
        ctx: &ToolContext,
    ) -> Result<ToolOutcome, ToolError>;
}

pub struct Task {
    agents: Arc<[NamedAgent]>,
    delegate: Arc<dyn Delegate>,
    description: String,
    timeout: Duration,
}

impl Task {
    /// The tool, offering `agents` by name; a sub-agent may run for `timeout`.
    pub fn new(agents: Arc<[NamedAgent]>, delegate: Arc<dyn Delegate>, timeout: Duration) -> Self {
        let description = describe(&agents);
        Self { agents, delegate, description, timeout }
    }
}

/// What the model reads about the tool, with the named agents it may ask for.
pub fn describe(agents: &[NamedAgent]) -> String {
    let mut text = String::from(
        "Start a sub-agent: a fresh agent with your tools (a named agent may have fewer) that works on `prompt` \
         alone and answers with a report, which is this call's result. Use it for self-contained research or \
         work that would fill your context. Several task calls in one answer run at the same time. The \
         sub-agent sees nothing of this conversation, so put everything it needs into `prompt`.",
    );
    if agents.is_empty() {
        text.push_str(" No named agents are defined (.agents/agents/*.md).");
    } else {
        text.push_str("\nNamed agents (pass `agent`):");
        for agent in agents {
            text.push_str(&format!("\n- {}: {}", agent.name, agent.description));
        }
    }
    text
}

#[async_trait::async_trait]
impl Tool for Task {
    type Args = TaskArgs;

    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }

    fn parameters(&self) -> Value {
        super::schema_of::<TaskArgs>()
    }

    fn access(&self, _args: &TaskArgs) -> Access {
        Access::Delegate
    }

    fn title(&self, args: &TaskArgs, _workspace: &Workspace) -> String {
        match &args.agent {
            Some(agent) => format!("Sub-agent {agent}: {}", args.description.trim()),
            None => format!("Sub-agent: {}", args.description.trim()),
        }
    }

    /// Starting one needs nothing; each of its own calls is judged as it comes.
    fn permission(&self, _args: &TaskArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }

    fn timeout(&self, _args: &TaskArgs, _default: Duration) -> Duration {
        self.timeout
    }

    async fn run(&self, args: &TaskArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let agent = match args.agent.as_deref().map(str::trim).filter(|name| !name.is_empty()) {
            None => None,
            Some(name) => match self.agents.iter().find(|agent| agent.name == name) {
                Some(agent) => Some(agent),
                None if self.agents.is_empty() => {
                    return Err(ToolError::Tell(format!(
                        "Unknown agent `{name}`: this project defines no named agents. Omit `agent` for a general sub-agent."
                    )));
                }
                None => {
                    let known: Vec<&str> = self.agents.iter().map(|agent| agent.name.as_str()).collect();
                    return Err(ToolError::Tell(format!(
                        "Unknown agent `{name}`. Known agents: {}. Omit `agent` for a general sub-agent.",
                        known.join(", ")
                    )));
                }
            },
        };
        self.delegate.run(args, agent, ctx).await
    }
}

//! The [`Registry`]: a session's tools behind one object-safe face, and the [`Invocation`] a
//! parsed call becomes.
//!
//! A [`Tool`] is generic over its arguments; the registry keeps each one as an `Entry` (name,
//! kind, schema, parse) and a parsed call as a `Call` that carries the tool and its typed
//! arguments together, so the turn handles every tool alike without knowing any of them. The
//! catalog the model sees is built once, when a tool is added; a second tool by a name already
//! taken is refused. A registry can withhold tools from a turn (`withhold`, `keep`: a sub-agent's
//! cut): a call to one is told why.

use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::{Location, ToolContent, ToolKind};
use crate::permissions::PermissionRequest;

/// A set of tools, in the order the model sees them.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<Arc<dyn Entry>>,
    /// `{name, description, parameters}` of each tool, in the same order; shared, since every
    /// turn clones a session's registry and the schemas never change.
    specs: Vec<Arc<Value>>,
    /// Tools left out on purpose, with why: what a call to one of them is told.
    withheld: Vec<(String, String)>,
}

/// Two tools by one name: the second is not added.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("a tool named `{0}` is already registered")]
pub struct Collision(pub String);

impl Registry {
    /// The built-in tools: `read`, `write`, `edit`, `glob`, `grep`, `bash`, `job_output`,
    /// `job_input`, `job_kill`, `fetch`, `todo`, `question` and `exit_plan`.
    pub fn builtin() -> Registry {
        static BUILTIN: LazyLock<Registry> = LazyLock::new(|| {
            let mut registry = Registry::default();
            let added = [
                registry.add(super::read::Read),
                registry.add(super::write::Write),
                registry.add(super::edit::Edit),
                registry.add(super::glob::Glob),
                registry.add(super::grep::Grep),
                registry.add(super::bash::Bash),
                registry.add(super::jobs::JobOutput),
                registry.add(super::jobs::JobInput),
                registry.add(super::jobs::JobKill),
                registry.add(super::fetch::Fetch),
                registry.add(super::todo::Todo),
                registry.add(super::question::AskUser),
                registry.add(super::exit_plan::ExitPlan),
            ];
            debug_assert!(added.iter().all(Result::is_ok), "built-in tool names are distinct");
            registry
        });
        BUILTIN.clone()
    }

    /// Adds a tool after the others; a name already taken is refused.
    pub fn add<T: Tool>(&mut self, tool: T) -> Result<(), Collision> {
        if self.entries.iter().any(|entry| entry.name() == tool.name()) {
            return Err(Collision(tool.name().to_owned()));
        }
        self.withheld.retain(|(name, _)| name != tool.name());
        let spec = json!({"name": tool.name(), "description": tool.description(), "parameters": tool.parameters()});
        self.entries.push(Arc::new(Arc::new(tool)));
        self.specs.push(Arc::new(spec));
        Ok(())
    }

    /// This set without the tool `name` (present or not); a call to it is told `why`.
    pub fn withhold(&self, name: &str, why: &str) -> Registry {
        let mut kept = self.keep(|tool| tool != name, why);
        kept.withheld.retain(|(withheld, _)| withheld != name);
        kept.withheld.push((name.to_owned(), why.to_owned()));
        kept
    }

    /// This set with only the tools `keep` accepts; a call to another is told `why`.
    pub fn keep(&self, keep: impl Fn(&str) -> bool, why: &str) -> Registry {
        let mut kept = Registry { withheld: self.withheld.clone(), ..Registry::default() };
        for (entry, spec) in self.entries.iter().zip(&self.specs) {
            if keep(entry.name()) {
                kept.entries.push(Arc::clone(entry));
                kept.specs.push(Arc::clone(spec));
            } else {
                kept.withheld.retain(|(name, _)| name != entry.name());
                kept.withheld.push((entry.name().to_owned(), why.to_owned()));
            }
        }
        kept
    }

    /// The catalog the model sees: `{name, description, parameters}` per tool.
    pub fn specs(&self) -> &[Arc<Value>] {
        &self.specs
    }

    /// The tools' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|entry| entry.name())
    }

    /// The editor's icon for a call to `name`; [`ToolKind::Other`] for a name nobody has.
    pub fn kind(&self, name: &str) -> ToolKind {
        self.entry(name).map_or(ToolKind::Other, |entry| entry.kind())
    }

    /// Validates a model's call; the error tells the model what to fix.
    pub fn parse(&self, name: &str, input: &str) -> Result<Invocation, ToolError> {
        match self.entry(name) {
            Some(entry) => entry.parse(input),
            None => {
                let names: Vec<&str> = self.names().collect();
                let names = names.join(", ");
                match self.withheld.iter().find(|(withheld, _)| withheld == name) {
                    Some((_, why)) => Err(ToolError::Tell(format!(
                        "The tool `{name}` is not available here: {why}. Available tools: {names}."
                    ))),
                    None => Err(ToolError::Tell(format!("Unknown tool `{name}`. Available tools: {names}."))),
                }
            }
        }
    }

    fn entry(&self, name: &str) -> Option<&Arc<dyn Entry>> {
        self.entries.iter().find(|entry| entry.name() == name)
    }
}

/// At most this many characters of a title.
const MAX_TITLE: usize = 200;

/// `text` as one line of at most [`MAX_TITLE`] characters for a title the user reads: line
/// breaks, other control characters (terminal escapes) and the invisible characters that
/// reorder text (bidirectional overrides and isolates) become spaces, so nothing the model or
/// a server writes can push the rest of a title out of sight or make it read differently.
pub fn one_line(text: &str) -> String {
    let hidden =
        |c: char| c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c) || ('\u{2066}'..='\u{2069}').contains(&c);
    let mut line = String::with_capacity(text.len().min(MAX_TITLE * 4));
    let mut count = 0;
    for word in text.split(|c: char| c.is_whitespace() || hidden(c)).filter(|word| !word.is_empty()) {
        if count > 0 {
            line.push(' ');
            count += 1;
        }
        for c in word.chars() {
            if count >= MAX_TITLE {
                line.push('…');
                return line;
            }
            line.push(c);
            count += 1;
        }
    }
    line
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// A tool as the registry keeps it, its argument type erased.
trait Entry: Send + Sync {
    fn name(&self) -> &str;
    fn kind(&self) -> ToolKind;
    fn parse(&self, input: &str) -> Result<Invocation, ToolError>;
}

impl<T: Tool> Entry for Arc<T> {
    fn name(&self) -> &str {
        Tool::name(self.as_ref())
    }

    fn kind(&self) -> ToolKind {
        Tool::kind(self.as_ref())
    }

    fn parse(&self, input: &str) -> Result<Invocation, ToolError> {
        let args = Tool::parse(self.as_ref(), input)?;
        Ok(Invocation { call: Arc::new(Bound { tool: Arc::clone(self), args }), judged: None })
    }
}

/// A validated call: a tool with its arguments, and the target its permission was decided on
/// once it was. Cheap to clone.
#[derive(Clone)]
pub struct Invocation {
    call: Arc<dyn Call>,
    judged: Option<Arc<str>>,
}

impl Invocation {
    /// This call, allowed on `request`'s target: when it runs, its tool acts only while its
    /// path still leads there (`ToolContext::judged`).
    pub fn judged_on(&self, request: Option<&PermissionRequest>) -> Invocation {
        Invocation { call: Arc::clone(&self.call), judged: request.map(|request| Arc::from(request.target.as_str())) }
    }

    /// The target this call's permission was decided on, if it was.
    pub fn judged(&self) -> Option<&str> {
        self.judged.as_deref()
    }

    pub fn name(&self) -> &str {
        self.call.name()
    }

    pub fn kind(&self) -> ToolKind {
        self.call.kind()
    }

    pub fn access(&self) -> Access {
        self.call.access()
    }

    /// A short description for the editor, on one line ([`one_line`]: the model and MCP
    /// servers write parts of it). A path that a symlink sends elsewhere is shown with where it
    /// lands: `Write notes.txt → /elsewhere/notes.txt`.
    pub fn title(&self, workspace: &Workspace) -> String {
        one_line(&self.call.title(workspace))
    }

    /// The files this call touches, at their final targets.
    pub fn locations(&self, workspace: &Workspace) -> Vec<Location> {
        self.call.locations(workspace)
    }

    /// What must be allowed before this call runs; `None` needs nothing.
    pub fn permission(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        self.call.permission(workspace)
    }

    /// Reading the file this call changes, for calls that change one (what its preview reads).
    pub fn read_request(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        self.call.read_request(workspace)
    }

    /// What the user sees when asked about this call: the whole-file diff an edit would make,
    /// the command line a shell call would run. `Err` when the call cannot succeed as it is.
    pub async fn preview(&self, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        self.call.preview(ctx).await
    }

    /// How long the call may run.
    pub fn timeout(&self, default: Duration) -> Duration {
        self.call.timeout(default)
    }

    /// Runs the call. Dropping the future stops it (and kills any process it started).
    pub async fn run(&self, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        self.call.run(ctx).await
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.call.debug(f)
    }
}

/// A call with its tool, its argument type erased.
#[async_trait::async_trait]
trait Call: Send + Sync {
    fn name(&self) -> &str;
    fn kind(&self) -> ToolKind;
    fn access(&self) -> Access;
    fn title(&self, workspace: &Workspace) -> String;
    fn locations(&self, workspace: &Workspace) -> Vec<Location>;
    fn permission(&self, workspace: &Workspace) -> Option<PermissionRequest>;
    fn read_request(&self, workspace: &Workspace) -> Option<PermissionRequest>;
    async fn preview(&self, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError>;
    fn timeout(&self, default: Duration) -> Duration;
    async fn run(&self, ctx: &ToolContext) -> Result<ToolOutcome, ToolError>;
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

struct Bound<T: Tool> {
    tool: Arc<T>,
    args: T::Args,
}

#[async_trait::async_trait]
impl<T: Tool> Call for Bound<T> {
    fn name(&self) -> &str {
        self.tool.name()
    }
    fn kind(&self) -> ToolKind {
        self.tool.kind()
    }
    fn access(&self) -> Access {
        self.tool.access(&self.args)
    }
    fn title(&self, workspace: &Workspace) -> String {
        self.tool.title(&self.args, workspace)
    }
    fn locations(&self, workspace: &Workspace) -> Vec<Location> {
        self.tool.locations(&self.args, workspace)
    }
    fn permission(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        self.tool.permission(&self.args, workspace)
    }
    fn read_request(&self, workspace: &Workspace) -> Option<PermissionRequest> {
        self.tool.read_request(&self.args, workspace)
    }
    async fn preview(&self, ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        self.tool.preview(&self.args, ctx).await
    }
    fn timeout(&self, default: Duration) -> Duration {
        self.tool.timeout(&self.args, default)
    }
    async fn run(&self, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        self.tool.run(&self.args, ctx).await
    }
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.tool.name(), self.args)
    }
}

/// A call's JSON arguments as `T`; the error says what is wrong and shows the schema.
pub(super) fn parse_args<T: DeserializeOwned>(
    name: &str,
    input: &str,
    schema: &dyn Fn() -> Value,
) -> Result<T, ToolError> {
    let value: Value = if input.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(input).map_err(|err| {
            ToolError::Tell(format!(
                "The arguments of `{name}` are not valid JSON ({err}). Send a JSON object matching its schema."
            ))
        })?
    };
    serde_path_to_error::deserialize(value).map_err(|err| {
        ToolError::Tell(format!(
            "Invalid arguments for `{name}`: {} (at `{}`). Expected: {}",
            err.inner(),
            err.path(),
            schema()
        ))
    })
}

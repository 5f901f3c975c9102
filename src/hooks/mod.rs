//! Hooks, compatible with Claude Code's: commands run at points of a session, which can allow,
//! deny or ask about a tool call, add context for the model, block a prompt or the end of a
//! turn. [`Hooks`] is a session's set, read from cairn's `[hooks]`, `~/.claude/settings.json`,
//! and the project's `.claude/settings.json` and `.claude/settings.local.json` (in that order);
//! [`Hooks::fire`] runs an event's matching hooks side by side (`matcher`), each under the
//! session's process policy with its time limit (`run`), and reads what they say (`reply`).
//!
//! A project's files are code the repository brings: their hooks run only once the user trusts
//! that content (`trust`: asked the first time one of them would run, remembered per hash).
//! The user's own files and config run unasked. A project file that is a symlink, or one that
//! cannot be read, runs nothing and says why. The set is read again before each turn
//! ([`Hooks::load`]); while no file changed the session keeps its set, and with it the answers
//! it has and what it already said. Imports neither `acp`, `session`, `store` nor `agent`: the
//! turn calls it, and it asks its questions through the editor's [`Permissions`].

mod matcher;
mod reply;
mod run;
pub mod trust;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

pub use crate::config::HookEvent;
use crate::config::hooks::{HookTable, claude_hooks};
use crate::config::{Config, HookSettings};
use crate::process::ProcessPolicy;
use crate::tools::host::Permissions;
pub use matcher::claude_name;
pub use reply::{Fired, Verdict};
use trust::TrustFile;

/// The most a settings file may hold to be read.
const MOST_FILE_BYTES: u64 = 1024 * 1024;
/// The longest time limit a hook may name.
const MOST_SECS: u64 = 3600;

/// Where a set of hooks comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `[hooks]` in cairn's config.toml.
    Config,
    /// `~/.claude/settings.json`.
    User,
    /// The project's `.claude/settings.json` or `.claude/settings.local.json`.
    Project,
}

/// One file's (or the config's) hooks.
struct Source {
    origin: Origin,
    path: Option<PathBuf>,
    hash: Option<String>,
    table: HookTable,
    /// Whether its hooks may run, once known: always for the user's own, as answered for a
    /// project's.
    allowed: tokio::sync::OnceCell<bool>,
}

impl Source {
    fn named(&self) -> String {
        match (&self.path, self.origin) {
            (Some(path), _) => path.display().to_string(),
            (None, _) => "[hooks] in config.toml".to_owned(),
        }
    }
}

/// A session's hooks.
pub struct Hooks {
    sources: Vec<Source>,
    timeout: Duration,
    project: PathBuf,
    session: String,
    policy: Arc<ProcessPolicy>,
    roots: Vec<PathBuf>,
    trust: TrustFile,
    /// What could not be read, said with the first event.
    notes: Vec<String>,
    /// The notes were said.
    noted: AtomicBool,
    /// `SessionStart` has fired for this session.
    started: AtomicBool,
}

/// An event about to fire: which one, what its matchers match, and its own input fields.
pub struct Event<'a> {
    pub kind: HookEvent,
    /// What a group's matcher is matched against (a tool's names, a source, a trigger); empty
    /// for events without matchers.
    pub names: Vec<&'a str>,
    pub fields: Map<String, Value>,
}

impl Hooks {
    /// The hooks of a session in `project`, reading the files again; `previous` (the session's
    /// set so far) is kept when nothing changed.
    pub fn load(
        config: &Config,
        project: &Path,
        roots: Vec<PathBuf>,
        session: &str,
        previous: Option<&Arc<Hooks>>,
    ) -> Arc<Hooks> {
        let mut notes = Vec::new();
        let mut sources = vec![configured(&config.hooks)];
        let user = config.home_dir.as_ref().map(|home| home.join(".claude").join("settings.json"));
        if let Some(path) = user {
            sources.extend(read_file(&path, Origin::User, &mut notes));
        }
        for name in ["settings.json", "settings.local.json"] {
            let path = project.join(".claude").join(name);
            if sources.iter().any(|source| source.path.as_ref() == Some(&path)) {
                continue;
            }
            sources.extend(read_file(&path, Origin::Project, &mut notes));
        }
        sources.retain(|source| !source.table.is_empty());
        if let Some(previous) = previous
            && same(&previous.sources, &sources)
            && previous.project == project
        {
            return Arc::clone(previous);
        }
        let started = previous.is_some_and(|previous| previous.started.load(Ordering::Relaxed));
        Arc::new(Hooks {
            sources,
            timeout: config.hooks.timeout,
            project: project.to_path_buf(),
            session: session.to_owned(),
            policy: Arc::clone(&config.process),
            roots,
            trust: TrustFile::in_dir(&config.data_dir),
            notes,
            noted: AtomicBool::new(false),
            started: AtomicBool::new(started),
        })
    }

    /// Whether firing `event` may do anything: a hook is loaded for it (trusted or not), or
    /// what could not be read is still to be said.
    pub fn any(&self, event: HookEvent) -> bool {
        self.sources.iter().any(|source| source.table.contains_key(&event))
            || (!self.notes.is_empty() && !self.noted.load(Ordering::Relaxed))
    }

    /// True the first time it is asked for this session: `SessionStart` fires then.
    pub fn first_start(&self) -> bool {
        !self.started.swap(true, Ordering::Relaxed)
    }

    /// Runs the hooks `event` matches, side by side, and reads what they said. A project's
    /// hooks run only once trusted: the first that would run asks `asker` about its file.
    pub async fn fire(
        &self,
        event: Event<'_>,
        mode: &str,
        asker: Option<&dyn Permissions>,
        cancel: &CancellationToken,
    ) -> Fired {
        let mut fired = Fired::default();
        if !self.noted.swap(true, Ordering::Relaxed) {
            fired.problems.extend(self.notes.iter().cloned());
        }
        let mut chosen = Vec::new();
        for source in &self.sources {
            let Some(groups) = source.table.get(&event.kind) else { continue };
            let mut hooks = Vec::new();
            for group in groups {
                let applies =
                    if event.names.is_empty() { Ok(true) } else { matcher::matches(&group.matcher, &event.names) };
                match applies {
                    Ok(true) => hooks.extend(group.hooks.iter()),
                    Ok(false) => {}
                    Err(why) => fired.problems.push(format!("{}: {why}", source.named())),
                }
            }
            if hooks.is_empty() || !self.allowed(source, asker, &mut fired).await {
                continue;
            }
            chosen.extend(hooks.into_iter().map(|hook| (source, hook)));
        }
        if chosen.is_empty() {
            return fired;
        }
        let mut input = Map::new();
        input.insert("session_id".into(), self.session.clone().into());
        input.insert("transcript_path".into(), "".into());
        input.insert("cwd".into(), self.project.to_string_lossy().into_owned().into());
        input.insert("permission_mode".into(), mode.into());
        input.insert("hook_event_name".into(), event.kind.name().into());
        input.extend(event.fields);
        let input = Value::Object(input).to_string();
        let place = run::Place { policy: &self.policy, project: &self.project, roots: &self.roots, rejected: &[] };
        let runs = chosen.iter().map(|(_, hook)| {
            let limit = hook.timeout.map_or(self.timeout, |secs| Duration::from_secs(secs.clamp(1, MOST_SECS)));
            run::run(&place, &hook.command, input.as_bytes(), limit, cancel)
        });
        let ended = futures::future::join_all(runs).await;
        for ((source, hook), ran) in chosen.iter().zip(ended) {
            let label = format!("The {} hook `{}` (from {})", event.kind.name(), shown(&hook.command), source.named());
            fired.take(event.kind, &label, ran);
        }
        fired
    }

    /// Whether `source`'s hooks may run, asking about a project's file the first time.
    async fn allowed(&self, source: &Source, asker: Option<&dyn Permissions>, fired: &mut Fired) -> bool {
        let (Origin::Project, Some(path), Some(hash)) = (source.origin, &source.path, &source.hash) else {
            return true;
        };
        let mut said = None;
        let allowed = *source
            .allowed
            .get_or_init(|| async {
                if let Some(answer) = self.trust.answer(path, hash) {
                    if !answer {
                        said = Some(refused(path));
                    }
                    return answer;
                }
                let Some(asker) = asker else {
                    said = Some(format!(
                        "The hooks of {} did not run: nobody can be asked whether to trust them here.",
                        path.display()
                    ));
                    return false;
                };
                let commands = commands_of(source);
                match trust::ask(asker, path, hash, &commands).await {
                    Some(answer) => {
                        if let Err(err) = self.trust.remember(path, hash, answer) {
                            tracing::warn!(%err, "the answer about a project's hooks could not be kept");
                        }
                        if !answer {
                            said = Some(refused(path));
                        }
                        answer
                    }
                    None => {
                        said =
                            Some(format!("The hooks of {} did not run: the question was withdrawn.", path.display()));
                        false
                    }
                }
            })
            .await;
        fired.problems.extend(said);
        allowed
    }

    /// What `/hooks` shows: every file with hooks, whether they run, and what they run.
    pub fn describe(&self) -> String {
        if self.sources.is_empty() && self.notes.is_empty() {
            return "No hooks are loaded. cairn reads them from [hooks] in config.toml, ~/.claude/settings.json and \
                    the project's .claude/settings.json and .claude/settings.local.json."
                .to_owned();
        }
        let mut lines = Vec::new();
        for source in &self.sources {
            let state = match (source.origin, &source.path, &source.hash) {
                (Origin::Project, Some(path), Some(hash)) => {
                    match source.allowed.get().copied().or_else(|| self.trust.answer(path, hash)) {
                        Some(true) => "trusted",
                        Some(false) => "refused: its hooks do not run",
                        None => "not trusted yet: cairn asks before its first hook runs",
                    }
                }
                _ => "yours: runs without asking",
            };
            let hash = source.hash.as_deref().map(|hash| format!(", sha256 {}", &hash[..hash.len().min(12)]));
            lines.push(format!("{} ({state}{})", source.named(), hash.unwrap_or_default()));
            for (event, groups) in &source.table {
                for group in groups {
                    let matcher =
                        if group.matcher.is_empty() { String::new() } else { format!(" [{}]", group.matcher) };
                    for hook in &group.hooks {
                        lines.push(format!("  {}{matcher}: {}", event.name(), shown(&hook.command)));
                    }
                }
            }
        }
        lines.extend(self.notes.iter().map(|note| format!("Not loaded: {note}")));
        lines.join("\n")
    }
}

fn refused(path: &Path) -> String {
    format!(
        "The hooks of {} did not run: you chose not to trust this version of the file (an edit asks again).",
        path.display()
    )
}

/// `[hooks]` of config.toml as a source.
fn configured(settings: &HookSettings) -> Source {
    Source {
        origin: Origin::Config,
        path: None,
        hash: None,
        table: settings.table.clone(),
        allowed: tokio::sync::OnceCell::new_with(Some(true)),
    }
}

/// A Claude Code settings file as a source; `None` when it does not exist or cannot be used
/// (then `notes` says why).
fn read_file(path: &Path, origin: Origin, notes: &mut Vec<String>) -> Option<Source> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let dir_linked = path.parent().and_then(|dir| std::fs::symlink_metadata(dir).ok()).is_some_and(|m| m.is_symlink());
    if origin == Origin::Project && (meta.is_symlink() || dir_linked) {
        notes.push(format!("{} is a symbolic link; a project's hooks are read only from a plain file", path.display()));
        return None;
    }
    if meta.len() > MOST_FILE_BYTES {
        notes.push(format!("{} is larger than 1 MiB; its hooks are not read", path.display()));
        return None;
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) => {
            notes.push(format!("{} cannot be read: {err}", path.display()));
            return None;
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    match claude_hooks(&text) {
        Ok((table, left_out)) => {
            notes.extend(left_out.into_iter().map(|note| format!("{}: {note}", path.display())));
            let allowed = match origin {
                Origin::Project => tokio::sync::OnceCell::new(),
                Origin::Config | Origin::User => tokio::sync::OnceCell::new_with(Some(true)),
            };
            Some(Source { origin, path: Some(path.to_path_buf()), hash: Some(trust::hash(&bytes)), table, allowed })
        }
        Err(why) => {
            notes.push(format!("{}: {why}; its hooks are not run", path.display()));
            None
        }
    }
}

/// Whether two reads found the same files with the same contents and the same config.
fn same(before: &[Source], now: &[Source]) -> bool {
    before.len() == now.len()
        && before.iter().zip(now).all(|(a, b)| a.path == b.path && a.hash == b.hash && a.table == b.table)
}

/// Every command of a source, with its event and matcher, for the trust question.
fn commands_of(source: &Source) -> Vec<String> {
    let mut commands = Vec::new();
    for (event, groups) in &source.table {
        for group in groups {
            for hook in &group.hooks {
                let matcher = if group.matcher.is_empty() { String::new() } else { format!(" ({})", group.matcher) };
                commands.push(format!("{}{matcher}: {}", event.name(), shown(&hook.command)));
            }
        }
    }
    commands
}

/// A command as it is named: one line, at most 200 characters.
fn shown(command: &str) -> String {
    let line = command.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = line.chars().take(200).collect();
    if shown.len() < line.len() {
        shown.push('…');
    }
    shown
}

/// A session's mode as Claude Code names it (`permission_mode`).
pub fn permission_mode(mode: crate::permissions::Mode) -> &'static str {
    use crate::permissions::Mode;
    match mode {
        Mode::Ask | Mode::ReadOnly => "default",
        Mode::AcceptEdits => "acceptEdits",
        Mode::Plan => "plan",
        Mode::Bypass => "bypassPermissions",
    }
}

/// A tool's names for matchers: cairn's and Claude Code's.
pub fn tool_names(tool: &str) -> Vec<&str> {
    std::iter::once(tool).chain(claude_name(tool)).collect()
}

//! Commands from files, and skills as commands: what a session offers beside its built-in slash
//! commands, read from the disk and read again when those files change.
//!
//! Where they come from, the first of a name winning (project over user, nearest project
//! directory first, as `workspace::project_dirs` lists them):
//! - the project's `.agents/commands/`, `.claude/commands/` (Markdown, optional front matter:
//!   `description`, `argument-hint`, `allowed-tools`, `model`) and `.gemini/commands/` (TOML:
//!   `description`, `prompt`);
//! - the user's `~/.agents/commands/`, `~/.claude/commands/`, `~/.codex/prompts/` (Markdown),
//!   `~/.gemini/commands/` (TOML) and `commands/` beside cairn's config file;
//! - then every skill (`tools::skill`), under its name.
//!
//! A file in a subdirectory is namespaced with `:` (`frontend/test.md` is `/frontend:test`), as
//! Claude Code and Gemini CLI name them. A name is made of letters, digits, `-`, `_` and `.`
//! per part; a file whose name is anything else is skipped with a warning, as is one larger
//! than [`MAX_FILE`], one that cannot be read, and one that leads (by a symlink) out of its
//! commands directory. A command or skill whose name is a built-in command's is offered as
//! `project:NAME`, `user:NAME` or `skill:NAME`: the built-in keeps its name. At most
//! [`MAX_COMMANDS`] are read. How a command's text is made is in `expand`.

pub mod expand;

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::session::commands::COMMANDS;
use crate::tools::front::{self, Field};
use crate::tools::skill::{self, SkillInfo};

/// A larger command file is skipped.
pub const MAX_FILE: u64 = 64 * 1024;
/// At most this many commands are read.
pub const MAX_COMMANDS: usize = 200;
/// How deep namespaces go (`a/b/c.md` is `a:b:c`).
const MAX_DEPTH: usize = 3;
/// Entries looked at when checking whether anything changed.
const MAX_STAMPED: usize = 2_000;

/// A command as the prompt box offers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advertised {
    pub name: String,
    pub description: String,
    pub hint: Option<String>,
}

/// How a command's file is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// Markdown: `$ARGUMENTS`, `$1`…`$9`, `@file`.
    Markdown,
    /// Gemini CLI's TOML: `{{args}}`, `@{file}`; `!{…}` is not run.
    Gemini,
    /// A skill: its `SKILL.md`, loaded when the command is used.
    Skill(Box<SkillInfo>),
}

/// One command read from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Custom {
    /// What the user types after `/`.
    pub name: String,
    pub description: String,
    pub hint: Option<String>,
    /// The text the arguments go into.
    pub template: String,
    pub flavor: Flavor,
    /// The only tools its turn may use (`allowed-tools`), lowercased as cairn names them.
    pub tools: Option<Vec<String>>,
    /// The model its turn runs on (`model`).
    pub model: Option<String>,
    pub path: PathBuf,
}

/// Where commands are looked for.
#[derive(Clone, Debug)]
pub struct Places {
    pub cwd: PathBuf,
    pub home: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
}

/// A session's commands from files and skills, and what their directories looked like.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    commands: Vec<Custom>,
    stamp: Vec<(PathBuf, Option<SystemTime>, u64)>,
}

/// A directory commands are read from.
struct Root {
    dir: PathBuf,
    flavor: Flavor,
    /// What its commands are called beside a built-in of their name.
    prefix: &'static str,
}

impl Catalog {
    /// Reads every command of `places`.
    pub fn load(places: &Places) -> Self {
        let roots = roots(places);
        let skills = skill::discover(&places.cwd, places.home.as_deref(), places.config_dir.as_deref());
        let mut catalog = Catalog { commands: Vec::new(), stamp: stamp(&roots, &skill_roots(places)) };
        for root in &roots {
            let mut files = Vec::new();
            walk(&root.dir, &root.dir, &root.flavor, 0, &mut files);
            files.sort();
            for path in files {
                if catalog.commands.len() >= MAX_COMMANDS {
                    tracing::warn!(path = %path.display(), "at most {MAX_COMMANDS} commands are read; the others are skipped");
                    return catalog;
                }
                match read(root, &path) {
                    Ok(command) => catalog.add(command, root.prefix),
                    Err(why) => tracing::warn!(path = %path.display(), "this command file is skipped: {why}"),
                }
            }
        }
        for found in skills {
            let command = Custom {
                name: found.name.clone(),
                description: found.description.clone(),
                hint: None,
                template: String::new(),
                tools: None,
                model: None,
                path: found.file(),
                flavor: Flavor::Skill(Box::new(found)),
            };
            catalog.add(command, "skill");
        }
        catalog
    }

    /// Reads the commands again when their directories or files changed since; whether the
    /// set offered changed.
    pub fn refresh(&mut self, places: &Places) -> bool {
        if stamp(&roots(places), &skill_roots(places)) == self.stamp {
            return false;
        }
        let before = self.advertised();
        *self = Catalog::load(places);
        self.advertised() != before
    }

    /// The command typed as `name`.
    pub fn find(&self, name: &str) -> Option<&Custom> {
        self.commands.iter().find(|command| command.name == name)
    }

    /// The built-in commands, then these.
    pub fn advertised(&self) -> Vec<Advertised> {
        let builtin = COMMANDS.iter().map(|command| Advertised {
            name: command.name.to_owned(),
            description: command.description.to_owned(),
            hint: command.hint.map(str::to_owned),
        });
        let custom = self.commands.iter().map(|command| Advertised {
            name: command.name.clone(),
            description: command.description.clone(),
            hint: command.hint.clone(),
        });
        builtin.chain(custom).collect()
    }

    /// Keeps `command` unless its name is taken; beside a built-in it takes `prefix:`.
    fn add(&mut self, mut command: Custom, prefix: &str) {
        if COMMANDS.iter().any(|builtin| builtin.name == command.name) {
            command.name = format!("{prefix}:{}", command.name);
        }
        if self.find(&command.name).is_some() {
            tracing::debug!(command = %command.name, path = %command.path.display(), "a command of this name was found first; this one is ignored");
        } else {
            self.commands.push(command);
        }
    }
}

/// The command directories, first wins.
fn roots(places: &Places) -> Vec<Root> {
    let chain = crate::workspace::project_dirs(&places.cwd, places.home.as_deref());
    let mut roots = Vec::new();
    for dir in chain.iter().rev() {
        roots.push(Root { dir: dir.join(".agents/commands"), flavor: Flavor::Markdown, prefix: "project" });
        roots.push(Root { dir: dir.join(".claude/commands"), flavor: Flavor::Markdown, prefix: "project" });
        roots.push(Root { dir: dir.join(".gemini/commands"), flavor: Flavor::Gemini, prefix: "project" });
    }
    if let Some(home) = &places.home {
        for (sub, flavor) in [
            (".agents/commands", Flavor::Markdown),
            (".claude/commands", Flavor::Markdown),
            (".codex/prompts", Flavor::Markdown),
            (".gemini/commands", Flavor::Gemini),
        ] {
            roots.push(Root { dir: home.join(sub), flavor, prefix: "user" });
        }
    }
    if let Some(dir) = &places.config_dir {
        roots.push(Root { dir: dir.join("commands"), flavor: Flavor::Markdown, prefix: "user" });
    }
    roots
}

fn skill_roots(places: &Places) -> Vec<PathBuf> {
    skill::roots(&places.cwd, places.home.as_deref(), places.config_dir.as_deref())
}

/// The command files under `dir`, to [`MAX_DEPTH`].
fn walk(base: &Path, dir: &Path, flavor: &Flavor, depth: usize, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let extension = if *flavor == Flavor::Gemini { "toml" } else { "md" };
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if files.len() > MAX_COMMANDS {
            return;
        }
        if path.is_dir() {
            if depth + 1 < MAX_DEPTH && skill::inside(base, &path).is_ok() {
                walk(base, &path, flavor, depth + 1, files);
            }
        } else if path.extension().is_some_and(|ext| ext == extension) {
            files.push(path);
        }
    }
}

/// What the directories hold now, as sizes and times, without reading any file.
fn stamp(roots: &[Root], skill_roots: &[PathBuf]) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    let mut stamp = Vec::new();
    let note = |path: &Path, stamp: &mut Vec<_>| {
        if let Ok(meta) = std::fs::metadata(path) {
            stamp.push((path.to_owned(), meta.modified().ok(), meta.len()));
        }
    };
    let mut dirs: Vec<PathBuf> = roots.iter().map(|root| root.dir.clone()).collect();
    while let Some(dir) = dirs.pop() {
        if stamp.len() >= MAX_STAMPED {
            break;
        }
        note(&dir, &mut stamp);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
            if path.is_dir() {
                if path.strip_prefix(&dir).is_ok() && path.components().count() < dir.components().count() + MAX_DEPTH {
                    dirs.push(path);
                }
            } else {
                note(&path, &mut stamp);
            }
        }
    }
    // A skill's `SKILL.md`, under each `skills` directory.
    for root in skill_roots {
        note(root, &mut stamp);
        let Ok(entries) = std::fs::read_dir(root) else { continue };
        for dir in entries.filter_map(Result::ok).map(|entry| entry.path()).take(MAX_STAMPED) {
            note(&dir.join("SKILL.md"), &mut stamp);
        }
    }
    stamp.sort();
    stamp
}

/// Reads one command file of `root`.
fn read(root: &Root, path: &Path) -> Result<Custom, String> {
    let relative = path.strip_prefix(&root.dir).map_err(|_| "it is not in its directory".to_owned())?;
    let name = name_of(relative)?;
    let real = skill::inside(&root.dir, path)?;
    let text = read_bounded(&real)?;
    let mut command = match root.flavor {
        Flavor::Gemini => gemini(&text)?,
        Flavor::Markdown | Flavor::Skill(_) => markdown(&text)?,
    };
    command.name = name;
    command.path = path.to_owned();
    command.flavor = root.flavor.clone();
    if command.description.is_empty() {
        command.description =
            format!("{} command ({})", if root.prefix == "user" { "Your" } else { "Project" }, relative.display());
    }
    command.description = crate::visible::line(&command.description).chars().take(300).collect();
    command.hint = command.hint.map(|hint| crate::visible::line(&hint).chars().take(200).collect());
    Ok(command)
}

/// `frontend/test.md` is `frontend:test`.
fn name_of(relative: &Path) -> Result<String, String> {
    let stem = relative.with_extension("");
    let mut parts = Vec::new();
    for part in stem.components() {
        let std::path::Component::Normal(part) = part else {
            return Err("its path is not plain names".to_owned());
        };
        let part = part.to_str().ok_or("its name is not UTF-8")?;
        if part.is_empty()
            || part.starts_with('.')
            || !part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "its name `{}` may only use letters, digits, `-`, `_` and `.` (and not start with `.`)",
                part.escape_debug()
            ));
        }
        parts.push(part);
    }
    Ok(parts.join(":"))
}

/// A regular file's text, when it is at most [`MAX_FILE`] long.
fn read_bounded(path: &Path) -> Result<String, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| err.to_string())?;
    let meta = file.metadata().map_err(|err| err.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    if meta.len() > MAX_FILE {
        return Err(format!("it is larger than {} KiB", MAX_FILE / 1024));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE).read_to_end(&mut bytes).map_err(|err| err.to_string())?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// A Markdown command: optional front matter, then the prompt.
fn markdown(text: &str) -> Result<Custom, String> {
    let front = front::parse_optional(text)?;
    let tools = front.get("allowed-tools").map(|field| match field {
        Field::List(items) => items.iter().map(|item| tool_name(item)).collect(),
        Field::Text(text) => split_tools(text).iter().map(|item| tool_name(item)).collect(),
    });
    let model = front.text("model");
    if let Some(model) = model.as_ref().filter(|model| crate::llm::scripted::named(model)) {
        return Err(format!("its model `{model}` is the scripted one, which only the user may choose"));
    }
    Ok(Custom {
        name: String::new(),
        description: front.text("description").unwrap_or_default(),
        hint: front.text("argument-hint"),
        template: front.body.trim().to_owned(),
        flavor: Flavor::Markdown,
        tools,
        model,
        path: PathBuf::new(),
    })
}

/// A Gemini CLI command: TOML with `prompt` and an optional `description`.
fn gemini(text: &str) -> Result<Custom, String> {
    #[derive(serde::Deserialize)]
    struct Command {
        prompt: String,
        #[serde(default)]
        description: Option<String>,
    }
    let command: Command =
        toml::from_str(text).map_err(|err| format!("it is not a command (`prompt = \"…\"`): {err}"))?;
    Ok(Custom {
        name: String::new(),
        description: command.description.unwrap_or_default(),
        hint: None,
        template: command.prompt,
        flavor: Flavor::Gemini,
        tools: None,
        model: None,
        path: PathBuf::new(),
    })
}

/// `Bash(git add:*), Read` is `Bash(git add:*)` and `Read`: commas inside parentheses stay.
fn split_tools(text: &str) -> Vec<String> {
    let list = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    let (mut items, mut current, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | ' ' if depth == 0 => {
                if !current.trim().is_empty() {
                    items.push(std::mem::take(&mut current));
                }
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        items.push(current);
    }
    items
}

/// A tool as Claude Code names it, as cairn does: `Bash(git status:*)` is `bash` (the pattern
/// grants nothing: every call is still judged), `WebFetch` is `fetch`.
pub fn tool_name(item: &str) -> String {
    let item = front::unquote(item.trim()).trim();
    let bare = item.split_once('(').map_or(item, |(name, _)| name).trim();
    match bare.to_ascii_lowercase().as_str() {
        "multiedit" => "edit".to_owned(),
        "webfetch" => "fetch".to_owned(),
        "websearch" => "web_search".to_owned(),
        "todowrite" => "todo".to_owned(),
        "ls" => "glob".to_owned(),
        lower if lower.starts_with("mcp__") => bare.to_owned(),
        lower => lower.to_owned(),
    }
}

#[cfg(test)]
mod tests;

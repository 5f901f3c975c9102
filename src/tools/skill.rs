//! Skills and the `skill` tool. A skill is a directory holding `SKILL.md` (front matter `name`
//! and `description`, then instructions) and whatever files it refers to. They are found in
//! `.agents/skills/` and `.claude/skills/` of the project's directories (nearest first, as
//! `workspace::project_dirs` lists them), then in the user's `~/.agents/skills/`,
//! `~/.claude/skills/` and `skills/` beside cairn's config file; the first skill of a name wins,
//! and at most [`MAX_SKILLS`] are read.
//!
//! The tool loads a skill on demand (its `SKILL.md`, and a list of the files beside it), judged
//! by the permission engine as a read of that `SKILL.md`. Nothing of a skill is read outside its
//! own directory: a skill directory that leads out of its `skills` directory, or a `SKILL.md`
//! that leads out of its skill directory (by a symlink, by `..`), is refused; the file is opened
//! beneath its directory without following any symlink (`beneath`), and read up to
//! [`MAX_SKILL_FILE`]. The session layer uses the same [`load`] for a skill typed as a slash
//! command.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::ToolKind;
use crate::permissions::{Permission, PermissionRequest};

/// Where skills live, under each project directory and the home directory.
const SKILL_DIRS: &[&str] = &[".agents/skills", ".claude/skills"];
/// At most this many skills are read (each is listed in the system prompt).
pub const MAX_SKILLS: usize = 64;
/// A larger `SKILL.md` is read this far, and the model told it was cut.
pub const MAX_SKILL_FILE: u64 = 128 * 1024;
/// At most this many files beside `SKILL.md` are listed.
const MAX_LISTED: usize = 100;
/// How deep the listing of a skill's directory goes.
const MAX_DEPTH: usize = 3;
pub const NAME: &str = "skill";

/// A skill found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillInfo {
    pub name: String,
    /// One line.
    pub description: String,
    /// The skill's directory, as found under its `skills` directory.
    pub dir: PathBuf,
    /// The `skills` directory it was found in.
    pub root: PathBuf,
}

impl SkillInfo {
    /// Its `SKILL.md`, as found (what a permission is asked for).
    pub fn file(&self) -> PathBuf {
        self.dir.join("SKILL.md")
    }
}

/// A skill as loaded: its instructions and the files beside them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// `SKILL.md` after its front matter.
    pub body: String,
    /// The skill's directory, its links resolved.
    pub dir: PathBuf,
    /// Paths relative to `dir`, sorted.
    pub files: Vec<String>,
    /// `SKILL.md` was longer than [`MAX_SKILL_FILE`].
    pub cut: bool,
}

impl Loaded {
    /// The text the model is given.
    pub fn render(&self, name: &str) -> String {
        let mut text = format!("Skill `{name}` (its directory: {})\n\n{}", self.dir.display(), self.body.trim());
        if self.cut {
            text.push_str(&format!("\n\n(SKILL.md was cut at {} KiB.)", MAX_SKILL_FILE / 1024));
        }
        if !self.files.is_empty() {
            text.push_str("\n\nFiles in the skill's directory (read them when the skill says to):");
            for file in &self.files {
                text.push_str(&format!("\n- {file}"));
            }
        }
        text
    }
}

/// The skills of the project around `cwd`, then the user's, nearest first; the first of a
/// name wins.
pub fn discover(cwd: &Path, home: Option<&Path>, config_dir: Option<&Path>) -> Vec<SkillInfo> {
    let mut skills: Vec<SkillInfo> = Vec::new();
    for root in roots(cwd, home, config_dir) {
        let Ok(entries) = std::fs::read_dir(&root) else { continue };
        let mut dirs: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            if skills.len() >= MAX_SKILLS {
                tracing::warn!(root = %root.display(), "at most {MAX_SKILLS} skills are read; the others are skipped");
                return skills;
            }
            match describe(&root, &dir) {
                Ok(Some(skill)) if skills.iter().any(|known| known.name == skill.name) => {
                    tracing::debug!(skill = %skill.name, dir = %dir.display(), "a skill of this name was found nearer; this one is ignored");
                }
                Ok(Some(skill)) => skills.push(skill),
                Ok(None) => {}
                Err(why) => tracing::warn!(dir = %dir.display(), "this skill is skipped: {why}"),
            }
        }
    }
    skills
}

/// The `skills` directories of a session in `cwd`, nearest first.
pub fn roots(cwd: &Path, home: Option<&Path>, config_dir: Option<&Path>) -> Vec<PathBuf> {
    let chain = crate::workspace::project_dirs(cwd, home);
    let mut roots: Vec<PathBuf> = chain.iter().rev().flat_map(|d| SKILL_DIRS.iter().map(move |s| d.join(s))).collect();
    if let Some(home) = home {
        roots.extend(SKILL_DIRS.iter().map(|s| home.join(s)));
    }
    roots.extend(config_dir.map(|dir| dir.join("skills")));
    roots.dedup();
    roots
}

/// The skill in `dir`, if it holds one.
fn describe(root: &Path, dir: &Path) -> Result<Option<SkillInfo>, String> {
    if !dir.join("SKILL.md").exists() {
        return Ok(None);
    }
    let (text, _) = read_skill_file(root, dir)?;
    let fallback = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let front = super::front::parse_optional(&text).unwrap_or_default();
    let name = front.text("name").unwrap_or(fallback);
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(format!("its name `{}` may only use letters, digits, `-`, `_` and `.`", name.escape_debug()));
    }
    let first_line =
        || front.body.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or("").to_owned();
    let line = front.text("description").unwrap_or_else(first_line);
    let description = crate::visible::line(&line).chars().take(200).collect();
    Ok(Some(SkillInfo { name, description, dir: dir.to_owned(), root: root.to_owned() }))
}

/// Loads `skill`: its instructions and the files beside them.
pub fn load(skill: &SkillInfo) -> Result<Loaded, String> {
    let (text, cut) = read_skill_file(&skill.root, &skill.dir)?;
    let front = super::front::parse_optional(&text)
        .unwrap_or_else(|_| super::front::FrontMatter { fields: Vec::new(), body: text.clone() });
    let dir = inside(&skill.root, &skill.dir)?;
    let mut files = Vec::new();
    list(&dir, &dir, 0, &mut files);
    files.sort();
    Ok(Loaded { body: front.body, dir, files, cut })
}

/// `SKILL.md` of the skill in `dir`, read beneath it up to [`MAX_SKILL_FILE`]; whether it was cut.
fn read_skill_file(root: &Path, dir: &Path) -> Result<(String, bool), String> {
    let real_dir = inside(root, dir)?;
    let real_file = inside(&real_dir, &dir.join("SKILL.md"))?;
    let file = crate::beneath::open_read(std::slice::from_ref(&real_dir), &real_file)
        .map_err(|err| format!("its SKILL.md cannot be opened: {err}"))?;
    let metadata = file.metadata().map_err(|err| err.to_string())?;
    if !metadata.is_file() {
        return Err("its SKILL.md is not a regular file".to_owned());
    }
    let mut bytes = Vec::new();
    file.take(MAX_SKILL_FILE).read_to_end(&mut bytes).map_err(|err| format!("its SKILL.md cannot be read: {err}"))?;
    let cut = metadata.len() > MAX_SKILL_FILE;
    Ok((String::from_utf8_lossy(&bytes).into_owned(), cut))
}

/// `path`'s final target, when it lies inside `root`'s.
pub fn inside(root: &Path, path: &Path) -> Result<PathBuf, String> {
    let real_root = root.canonicalize().map_err(|err| format!("{} cannot be resolved: {err}", root.display()))?;
    let real = path.canonicalize().map_err(|err| format!("{} cannot be resolved: {err}", path.display()))?;
    if real.starts_with(&real_root) {
        Ok(real)
    } else {
        Err(format!(
            "{} leads to {}, outside {}: a skill's files must lie inside its own directory",
            path.display(),
            real.display(),
            real_root.display()
        ))
    }
}

/// The files under `dir` (relative to `base`), links leading out of `base` left out.
fn list(base: &Path, dir: &Path, depth: usize, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if files.len() >= MAX_LISTED {
            return;
        }
        let Ok(relative) = path.strip_prefix(base) else { continue };
        if relative == Path::new("SKILL.md") {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.file_type().is_symlink() && inside(base, &path).is_err() {
            continue;
        }
        if meta.is_dir() {
            if depth + 1 < MAX_DEPTH {
                list(base, &path, depth + 1, files);
            }
        } else {
            files.push(crate::visible::line(&relative.to_string_lossy()).into_owned());
        }
    }
}

/// The `skill` tool, over the skills of the session's project.
pub struct SkillTool {
    skills: Arc<[SkillInfo]>,
}

impl SkillTool {
    /// `None` when there is no skill to load.
    pub fn new(skills: Vec<SkillInfo>) -> Option<Self> {
        (!skills.is_empty()).then(|| Self { skills: skills.into() })
    }

    fn find(&self, name: &str) -> Option<&SkillInfo> {
        self.skills.iter().find(|skill| skill.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillArgs {
    /// The skill's name, as the system prompt lists it
    pub name: String,
}

#[async_trait::async_trait]
impl Tool for SkillTool {
    type Args = SkillArgs;

    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Load a skill (listed under # Skills in the system prompt) when the task matches it: returns its \
         instructions and the files in its directory."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    fn parameters(&self) -> Value {
        super::schema_of::<SkillArgs>()
    }

    fn access(&self, _args: &SkillArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &SkillArgs, _workspace: &Workspace) -> String {
        format!("Load skill {}", crate::visible::line(&args.name))
    }

    fn permission(&self, args: &SkillArgs, workspace: &Workspace) -> Option<PermissionRequest> {
        let skill = self.find(&args.name)?;
        Some(PermissionRequest::for_path(Permission::Read, workspace, &skill.file()))
    }

    async fn run(&self, args: &SkillArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let Some(skill) = self.find(&args.name).cloned() else {
            let names: Vec<&str> = self.skills.iter().map(|skill| skill.name.as_str()).collect();
            return Err(ToolError::Tell(format!(
                "there is no skill named `{}`; the skills are: {}",
                crate::visible::line(&args.name),
                names.join(", ")
            )));
        };
        let loaded =
            super::blocking(ctx, move |_| load(&skill).map_err(ToolError::Tell).map(|l| (skill.name, l))).await;
        let (name, loaded) = loaded?;
        Ok(ToolOutcome { output: loaded.render(&name), ..ToolOutcome::default() })
    }
}

#[cfg(test)]
#[path = "skill_tests.rs"]
mod tests;

//! The system prompt: assembled once per session in a fixed order, and its SHA-256 digest.
//!
//! Order (never shuffled, so the provider's prompt cache keeps hitting): base instructions (or,
//! where the editor overrides them, the editor's) → what the editor appends → a sub-agent's role (only in a sub-agent's prompt) → project instructions (`AGENTS.md`,
//! `CLAUDE.md`; user level first, then from the repository root down to the working directory,
//! or the working directory alone outside a repository, nearest last, as
//! `workspace::project_dirs` lists them; capped, with a warning) → skills index
//! (found by `tools::skill`: name, one line, where) →
//! environment (cwd, platform, date, git branch and status) → tool catalog. [`gather`] reads the
//! disk and git; [`assemble`] is pure.
//! The session computes it once, so it is byte-stable across that session's turns; the digest
//! is stored on every assistant message (`MessageMeta::system_digest`).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt as _;

use crate::process::{Confinement, ProcessPolicy, SandboxMode};
use crate::workspace::{Place, Workspace};

const BASE: &str = "You are cairn, a coding agent working inside the user's editor. \
Answer precisely and concisely. When you refer to code, name files by their paths relative to the \
working directory. Say so plainly when you are unsure. Instructions from the project below take \
precedence over your defaults; nearer files take precedence over farther ones.";

/// What the model is told with each request while the session is in plan mode (the system
/// prompt itself never changes with the mode).
pub const PLAN_MODE: &str = "[Plan mode] The session is in plan mode: the user wants a plan to review before \
anything is changed. Read, search and think; edits, commands that may change anything and tools that may change \
things are refused. When the plan is complete, call `exit_plan` with the whole plan in Markdown: the goal, what \
changes in which files and how, the steps in order, and how the result will be checked. The user then approves \
it (and you implement it) or says what to change. If the request needs no change at all, just answer it.";

/// How many characters of project instructions the prompt takes (about 8,000 tokens).
pub const INSTRUCTIONS_CAP: usize = 32_000;
const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "CLAUDE.md"];
/// The most of one project instruction file read (more than the cap takes, in bytes).
const INSTRUCTIONS_READ: u64 = 4 * INSTRUCTIONS_CAP as u64;
const GIT_TIMEOUT: Duration = Duration::from_secs(2);
/// What of git's status is read: the branch line and more lines than anyone counts.
const GIT_OUTPUT: u64 = 1 << 20;
const NO_REPOSITORY: &str = "not a git repository";

/// System-level instructions the editor gave the session (ACP `systemPrompt`), kept with it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClientPrompt {
    pub mode: ClientMode,
    /// The text of the client's content blocks, joined by blank lines.
    pub text: String,
}

/// How the editor's instructions combine with cairn's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientMode {
    /// After cairn's base instructions.
    Append,
    /// Instead of cairn's base instructions. The project's instructions, the skills, the
    /// environment and the tool catalog stay: the model needs them for its tools and for
    /// permissions to work.
    Override,
}

impl ClientPrompt {
    /// How `/status` names it.
    pub fn describe(&self) -> String {
        let chars = self.text.chars().count();
        match self.mode {
            ClientMode::Append => format!("the editor's, appended to cairn's ({chars} characters)"),
            ClientMode::Override => format!("the editor's, replacing cairn's base instructions ({chars} characters)"),
        }
    }
}

/// A session's system prompt, its digest, and what went wrong assembling it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemPrompt {
    pub text: String,
    /// Lowercase hex SHA-256 of `text`, stored on every assistant message.
    pub digest: String,
    /// For the user: instructions that were cut to fit the cap.
    pub warnings: Vec<String>,
}

/// What the prompt is made of, read from the disk and git.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub cwd: PathBuf,
    /// Instruction files, outermost first, with their text.
    pub instructions: Vec<(PathBuf, String)>,
    /// Skills: name, one line, where.
    pub skills: Vec<(String, String, PathBuf)>,
    pub date: String,
    /// "branch main, 3 changed files", or why there is none.
    pub git: String,
    /// The tool catalog: `{name, description, parameters}` specs.
    pub tools: Vec<std::sync::Arc<Value>>,
    /// For a sub-agent: what it is and its agent's instructions, right after the base.
    pub role: Option<String>,
    /// What the editor asked for (`systemPrompt`), if anything.
    pub client: Option<ClientPrompt>,
}

/// Reads everything the prompt of a session in `cwd` needs.
pub async fn gather(
    cwd: &Path,
    home: Option<&Path>,
    config_dir: Option<&Path>,
    tools: &[std::sync::Arc<Value>],
    policy: &ProcessPolicy,
) -> Sources {
    let chain = crate::workspace::project_dirs(cwd, home);
    let user: Vec<PathBuf> = home.map(|h| vec![h.join(".agents"), h.join(".claude")]).unwrap_or_default();
    let mut instructions = Vec::new();
    for dir in &user {
        for name in INSTRUCTION_FILES {
            let path = dir.join(name);
            if let Ok(text) = tokio::fs::read_to_string(&path).await
                && !text.trim().is_empty()
            {
                instructions.push((path, text));
            }
        }
    }
    // What `[sandbox] hidden` hides is never read, its patterns matched from the project's top
    // and from `cwd` (the session's root, where the sandbox matches them).
    let project = Workspace::new(chain.first().map_or(cwd, PathBuf::as_path), &[cwd.to_owned()]).hiding(
        &policy.hidden,
        &policy.hidden_names,
        &policy.visible_names,
    );
    for dir in &chain {
        for name in INSTRUCTION_FILES {
            let path = dir.join(name);
            if let Some(text) = read_in_project(&project, &path)
                && !text.trim().is_empty()
            {
                instructions.push((path, text));
            }
        }
    }
    let skills = crate::tools::skill::discover(cwd, home, config_dir)
        .into_iter()
        .map(|skill| {
            let file = skill.file();
            (skill.name, skill.description, file)
        })
        .collect();
    Sources {
        cwd: cwd.to_owned(),
        instructions,
        skills,
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        git: git_summary(cwd, policy).await,
        tools: tools.to_vec(),
        role: None,
        client: None,
    }
}

/// A project's instruction file, read only where it ends inside the project: what it holds goes
/// to the model, and a command may have made it a link to a key in `~/.ssh`, to cairn's saved
/// keys, to the project's `.env` or to what `[sandbox] hidden` hides. A link to another file of the project (`CLAUDE.md` to
/// `AGENTS.md`) is followed; the target is then opened beneath the project's root without
/// following any link, as it was judged.
fn read_in_project(project: &Workspace, path: &Path) -> Option<String> {
    use std::io::Read as _;
    let located = project.locate(path);
    match located.place {
        Place::Inside { .. } | Place::Protected { secret: false, .. } => {}
        Place::Protected { secret: true, .. } | Place::Outside | Place::Unknown(_) => return None,
    }
    let file = crate::beneath::open_read(project.roots(), &located.real?).ok()?;
    let mut text = String::new();
    file.take(INSTRUCTIONS_READ).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The branch and how many files changed, from `git status --porcelain --branch`, for the
/// repository git finds from `cwd` (a `GIT_DIR` in cairn's environment does not point it
/// elsewhere). With no `.git` in `cwd` or above, there is none and git is not started: a
/// session's first prompt waits for this summary. The workspace may be a directory nobody
/// vetted, and the repository git finds one a command made (above the workspace, in a shared
/// temporary directory): git runs like a command, in the sandbox, read-only and offline, so a
/// filter its configuration names or a `git` planted on `PATH` runs confined. It is also told
/// to run no fsmonitor, not to take a bare repository it found by itself, not to descend into
/// submodules and not to take locks.
async fn git_summary(cwd: &Path, policy: &ProcessPolicy) -> String {
    if !cwd.ancestors().any(|dir| dir.join(".git").exists()) {
        return NO_REPOSITORY.to_owned();
    }
    // Read-only, unless the user turned the sandbox off altogether.
    let sandbox = if policy.sandbox == SandboxMode::Off { SandboxMode::Off } else { SandboxMode::ReadOnly };
    let mut confined = ProcessPolicy { sandbox, network: false, ..policy.clone() };
    confined.env.remove.extend(["GIT_DIR", "GIT_WORK_TREE"].map(OsString::from));
    let args = [
        "-c",
        "core.fsmonitor=false",
        "-c",
        "safe.bareRepository=explicit",
        "--no-optional-locks",
        "status",
        "--porcelain=v1",
        "--branch",
        "--untracked-files=normal",
        "--ignore-submodules=all",
    ]
    .map(OsStr::new);
    let roots = [cwd.to_owned()];
    let confinement = Confinement { roots: &roots, rejected: &[], rules: None };
    let mut git = match confined.spawn(OsStr::new("git"), &args, cwd, confinement).await {
        Ok(git) => git,
        Err(_) => return "git is not available".to_owned(),
    };
    let stdout = git.take_stdout();
    let run = async {
        let mut text = Vec::new();
        if let Some(stdout) = stdout {
            let _ = stdout.take(GIT_OUTPUT).read_to_end(&mut text).await;
        }
        (text, git.wait().await)
    };
    let ran = tokio::time::timeout(GIT_TIMEOUT, run).await;
    git.stop().await;
    let text = match ran {
        Ok((text, Ok(status))) if status.success() => text,
        // 127: the supervisor found no `git` to run.
        Ok((_, Ok(status))) if status.code() == Some(127) => return "git is not available".to_owned(),
        Ok((_, Ok(_))) => return NO_REPOSITORY.to_owned(),
        Ok((_, Err(_))) => return "git is not available".to_owned(),
        Err(_) => return "git status took too long".to_owned(),
    };
    let text = String::from_utf8_lossy(&text);
    let mut lines = text.lines();
    let branch = lines
        .next()
        .and_then(|l| l.strip_prefix("## "))
        .map(|l| l.strip_prefix("No commits yet on ").unwrap_or(l))
        .map(|l| l.split("...").next().unwrap_or(l).trim().to_owned())
        .unwrap_or_default();
    let changed = lines.filter(|l| !l.trim().is_empty()).count();
    let files = if changed == 1 { "file" } else { "files" };
    format!("branch {branch}, {changed} changed {files}")
}

/// Puts the prompt together from its sources, in the fixed order.
pub fn assemble(sources: &Sources) -> SystemPrompt {
    let mut text = String::new();
    match &sources.client {
        Some(ClientPrompt { mode: ClientMode::Override, text: own }) => text.push_str(own.trim()),
        Some(ClientPrompt { mode: ClientMode::Append, text: own }) => {
            text.push_str(BASE);
            text.push_str("\n\n# From the editor\n");
            text.push_str(own.trim());
        }
        None => text.push_str(BASE),
    }
    let mut warnings = Vec::new();
    if let Some(role) = &sources.role {
        text.push_str("\n\n# Sub-agent\n");
        text.push_str(role.trim());
    }
    if !sources.instructions.is_empty() {
        text.push_str("\n\n# Project instructions\n");
        let mut room = INSTRUCTIONS_CAP;
        for (path, body) in &sources.instructions {
            let body = body.trim();
            if room == 0 {
                warnings.push(format!(
                    "{} was left out: the project instructions exceed {INSTRUCTIONS_CAP} characters",
                    path.display()
                ));
                continue;
            }
            text.push_str(&format!("\n## {}\n", path.display()));
            if body.len() <= room {
                text.push_str(body);
                room -= body.len();
            } else {
                let cut = floor_char_boundary(body, room);
                text.push_str(&body[..cut]);
                text.push_str("\n[… truncated: the project instructions exceed the cap]");
                warnings.push(format!(
                    "{} was truncated: the project instructions exceed {INSTRUCTIONS_CAP} characters",
                    path.display()
                ));
                room = 0;
            }
            text.push('\n');
        }
    }
    if !sources.skills.is_empty() {
        text.push_str(
            "\n\n# Skills\nWhen the task matches a skill, load it with the skill tool (or read its SKILL.md).\n",
        );
        for (name, line, path) in &sources.skills {
            text.push_str(&format!("- {name}: {line} ({})\n", path.display()));
        }
    }
    text.push_str(&format!(
        "\n\n# Environment\n- Working directory: {}\n- Platform: {} ({})\n- Date: {}\n- Git: {}",
        sources.cwd.display(),
        std::env::consts::OS,
        std::env::consts::ARCH,
        sources.date,
        sources.git
    ));
    if !sources.tools.is_empty() {
        text.push_str("\n\n# Tools\n");
        for spec in &sources.tools {
            let name = spec["name"].as_str().unwrap_or_default();
            let description = spec["description"].as_str().unwrap_or_default();
            text.push_str(&format!("- {name}: {description}\n"));
        }
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let digest = crate::digest::sha256_hex(text.as_bytes());
    SystemPrompt { text, digest, warnings }
}

fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at.min(text.len())).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::ChildEnv;

    #[tokio::test]
    async fn instructions_layer_from_the_user_level_down_to_the_workspace_nearest_last() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let repo = home.join("code/repo");
        let sub = repo.join("crates/app");
        std::fs::create_dir_all(sub.join(".agents/skills/release")).unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(home.join(".agents")).unwrap();
        std::fs::write(home.join("code/AGENTS.md"), "outside the repo: never read").unwrap();
        std::fs::write(home.join(".agents/AGENTS.md"), "user level").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "repo root").unwrap();
        std::fs::write(repo.join("CLAUDE.md"), "repo root, claude").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "nearest").unwrap();
        std::fs::write(
            sub.join(".agents/skills/release/SKILL.md"),
            "---\nname: release\ndescription: Cut a release of the crate\n---\n# Release\nSteps…",
        )
        .unwrap();
        let sources = gather(&sub, Some(&home), None, &[], &ProcessPolicy::default()).await;
        let prompt = assemble(&sources);
        let at =
            |needle: &str| prompt.text.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{}", prompt.text));
        assert!(at("You are cairn") < at("user level"));
        assert!(at("user level") < at("repo root\n"));
        assert!(at("repo root\n") < at("repo root, claude"));
        assert!(at("repo root, claude") < at("nearest"));
        assert!(at("nearest") < at("# Skills"));
        assert!(at("- release: Cut a release of the crate") < at("# Environment"));
        assert!(!prompt.text.contains("never read"), "the walk stops at the repository root");
        assert_eq!(prompt.digest.len(), 64);
        assert_eq!(assemble(&sources), prompt, "the same sources give the same bytes");
    }

    #[test]
    fn instructions_over_the_cap_are_cut_with_a_warning() {
        let sources = Sources {
            cwd: PathBuf::from("/w"),
            instructions: vec![
                (PathBuf::from("/w/AGENTS.md"), "x".repeat(INSTRUCTIONS_CAP + 10)),
                (PathBuf::from("/w/sub/AGENTS.md"), "more".into()),
            ],
            ..Sources::default()
        };
        let prompt = assemble(&sources);
        assert!(prompt.text.contains("[… truncated"));
        assert_eq!(prompt.warnings.len(), 2, "{:?}", prompt.warnings);
        assert!(prompt.text.len() < INSTRUCTIONS_CAP + 1_000);
    }

    #[test]
    fn the_editors_prompt_is_appended_or_replaces_only_the_base_instructions() {
        let sources = |client: Option<ClientPrompt>| Sources {
            cwd: PathBuf::from("/w"),
            instructions: vec![(PathBuf::from("/w/AGENTS.md"), "project rules".into())],
            tools: vec![std::sync::Arc::new(serde_json::json!({"name": "read", "description": "Reads"}))],
            client,
            ..Sources::default()
        };
        let text = |mode, own: &str| assemble(&sources(Some(ClientPrompt { mode, text: own.into() }))).text;

        let appended = text(ClientMode::Append, "Answer in French.");
        let at = |needle: &str| appended.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{appended}"));
        assert!(at("You are cairn") < at("# From the editor\nAnswer in French."));
        assert!(at("Answer in French.") < at("project rules"), "system-level, before the project's");

        let replaced = text(ClientMode::Override, "You are Zed's assistant.");
        assert!(replaced.starts_with("You are Zed's assistant.\n\n# Project instructions"), "{replaced}");
        assert!(!replaced.contains("You are cairn"));
        for kept in ["project rules", "# Environment", "- Working directory: /w", "# Tools\n- read: Reads"] {
            assert!(replaced.contains(kept), "an override keeps {kept:?}:\n{replaced}");
        }
        let none = assemble(&sources(None));
        assert!(none.text.starts_with(BASE) && !none.text.contains("# From the editor"));
        assert_ne!(
            assemble(&sources(Some(ClientPrompt { mode: ClientMode::Append, text: "x".into() }))).digest,
            none.digest
        );
    }

    #[tokio::test]
    async fn instructions_that_lead_out_of_the_project_or_to_its_secrets_are_not_read() {
        let root = tempfile::tempdir().unwrap();
        let (repo, outside) = (root.path().join("repo"), root.path().join("home/.ssh"));
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("id_ed25519"), "PRIVATE KEY").unwrap();
        std::fs::write(repo.join(".env"), "API_TOKEN=1").unwrap();
        std::fs::write(repo.join("docs.md"), "the shared instructions").unwrap();
        // As a command could leave them: links to a key outside and to the project's secret.
        std::os::unix::fs::symlink(outside.join("id_ed25519"), repo.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(".env", repo.join("CLAUDE.md")).unwrap();
        // A link to another file of the project is the usual way to share one file.
        std::os::unix::fs::symlink("../docs.md", repo.join("sub/AGENTS.md")).unwrap();
        let sources = gather(&repo.join("sub"), None, None, &[], &ProcessPolicy::default()).await;
        let read: Vec<&str> = sources.instructions.iter().map(|(_, text)| text.as_str()).collect();
        assert_eq!(read, ["the shared instructions"]);
    }

    /// What `[sandbox] hidden` hides never reaches the prompt, its patterns matched from the
    /// working directory (where the sandbox matches them) or the project's top; `visible`
    /// takes a file back.
    #[tokio::test]
    async fn instructions_that_lead_to_what_the_sandbox_hides_are_not_read() {
        let root = tempfile::tempdir().unwrap();
        let (repo, sub) = (root.path().join("repo"), root.path().join("repo/sub"));
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(sub.join("secrets")).unwrap();
        std::fs::create_dir_all(repo.join("vault")).unwrap();
        std::fs::write(sub.join("secrets/prod.yaml"), "db: hunter2").unwrap();
        std::fs::write(sub.join("secrets/shared.md"), "the shared instructions").unwrap();
        std::fs::write(repo.join("vault/key"), "PRIVATE KEY").unwrap();
        std::os::unix::fs::symlink("sub/secrets/prod.yaml", repo.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("vault/key", repo.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink("./secrets/../secrets/prod.yaml", sub.join("CLAUDE.md")).unwrap();
        std::os::unix::fs::symlink("secrets/shared.md", sub.join("AGENTS.md")).unwrap();
        let policy = ProcessPolicy {
            hidden: vec![repo.join("vault")],
            hidden_names: vec!["secrets/**".into()],
            visible_names: vec!["secrets/shared.md".into()],
            ..ProcessPolicy::default()
        };
        let sources = gather(&sub, None, None, &[], &policy).await;
        let read: Vec<&str> = sources.instructions.iter().map(|(_, text)| text.as_str()).collect();
        assert_eq!(read, ["the shared instructions"]);
    }

    #[tokio::test]
    async fn git_is_started_only_where_a_repository_could_be_found() {
        let root = tempfile::tempdir().unwrap();
        // A `git` that notes each start, first on the child's PATH.
        let bin = root.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let started = root.path().join("started");
        let fake = bin.join("git");
        std::fs::write(&fake, format!("#!/bin/sh\necho x >> {}\necho '## main'\n", started.display())).unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        // Started outside the sandbox here (the direct launcher): its `bin` must lie where no
        // command writes, which the default's `/tmp` would be.
        let env = ProcessPolicy {
            env: ChildEnv { path: Some(bin.clone().into_os_string()), ..ChildEnv::default() },
            writable: Vec::new(),
            ..ProcessPolicy::default()
        };

        let plain = root.path().join("plain/sub");
        std::fs::create_dir_all(&plain).unwrap();
        assert_eq!(git_summary(&plain, &env).await, "not a git repository");
        assert!(!started.exists(), "no .git here or above: git is not started");

        let repo = root.path().join("repo");
        std::fs::create_dir_all(repo.join("deep/er")).unwrap();
        std::fs::write(repo.join(".git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(git_summary(&repo.join("deep/er"), &env).await, "branch main, 0 changed files");
        assert!(started.exists(), "a .git file above (a worktree) is a repository to ask git about");
    }
}

//! Named agents: the sub-agents a project defines in `.agents/agents/*.md` and
//! `.claude/agents/*.md`, which a `task` call may ask for by name.
//!
//! A file is front matter between `---` lines, then the agent's extra instructions:
//!
//! ```text
//! ---
//! name: reviewer
//! description: Reviews a change for bugs
//! model: openai/gpt-5-mini
//! tools: read, grep, glob
//! ---
//! You review code. …
//! ```
//!
//! Front matter is read by `front`. `name` and `description` are required; `model` and `tools` (a list, written `a, b`, `[a, b]`
//! or one `- a` per line; it restricts the agent to those tools) are optional, and other keys
//! are ignored. Files are looked for from the working directory up to its repository's root
//! (in the working directory alone outside a repository), nearest first; the first agent of a name wins, and at most [`MAX_AGENTS`] are read. A file that
//! cannot be read as an agent is skipped with a warning that names it, and never stops the
//! session.

use std::path::{Path, PathBuf};

use super::front::{Field, unquote};

/// Where named agents live, under each project directory.
const AGENT_DIRS: &[&str] = &[".agents/agents", ".claude/agents"];
/// A larger file is not an agent definition.
const MAX_FILE: u64 = 256 * 1024;
/// At most this many named agents are read (each is listed in every request's `task` tool).
pub const MAX_AGENTS: usize = 64;

/// An agent a project defined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedAgent {
    pub name: String,
    /// One line for the `task` tool's description.
    pub description: String,
    /// The model it runs on (`provider/model`), when it says.
    pub model: Option<String>,
    /// The only tools it gets, when it says (lowercase names).
    pub tools: Option<Vec<String>>,
    /// Its extra system instructions.
    pub instructions: String,
    pub path: PathBuf,
}

/// The named agents of the project around `cwd`, nearest first, and a warning per file skipped.
pub fn load(cwd: &Path, home: Option<&Path>) -> (Vec<NamedAgent>, Vec<String>) {
    let mut agents: Vec<NamedAgent> = Vec::new();
    let mut warnings = Vec::new();
    for dir in crate::workspace::project_dirs(cwd, home).iter().rev() {
        for sub in AGENT_DIRS {
            let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
            let mut files: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
                .collect();
            files.sort();
            for path in files {
                if agents.len() >= MAX_AGENTS {
                    let warning = format!(
                        "the agent file {} and any further ones were skipped: at most {MAX_AGENTS} named agents are read",
                        path.display()
                    );
                    tracing::warn!("{warning}");
                    warnings.push(warning);
                    return (agents, warnings);
                }
                match read(&path) {
                    Ok(agent) if agents.iter().any(|known| known.name == agent.name) => {
                        tracing::debug!(agent = %agent.name, path = %path.display(), "an agent of this name was found nearer; this one is ignored");
                    }
                    Ok(agent) => agents.push(agent),
                    Err(why) => {
                        let warning = format!("the agent file {} was skipped: {why}", path.display());
                        tracing::warn!("{warning}");
                        warnings.push(warning);
                    }
                }
            }
        }
    }
    (agents, warnings)
}

fn read(path: &Path) -> Result<NamedAgent, String> {
    let metadata = std::fs::metadata(path).map_err(|err| err.to_string())?;
    if !metadata.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    if metadata.len() > MAX_FILE {
        return Err(format!("it is larger than {} KiB", MAX_FILE / 1024));
    }
    let text = std::fs::read_to_string(path).map_err(|err| err.to_string())?;
    parse(&text, path)
}

/// Reads one agent file's text.
pub fn parse(text: &str, path: &Path) -> Result<NamedAgent, String> {
    let front = super::front::parse(text)?;
    let name = front.text("name").ok_or("its front matter has no `name`")?;
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(format!("its name `{name}` may only use letters, digits, `-` and `_`"));
    }
    let description = front.text("description").ok_or("its front matter has no `description`")?;
    let tools = front.get("tools").map(|field| match field {
        Field::List(items) => items.iter().map(|item| tool_name(item)).collect(),
        Field::Text(value) => {
            let list = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')).unwrap_or(value);
            list.split(',').map(tool_name).filter(|tool| !tool.is_empty()).collect()
        }
    });
    let model = front.text("model");
    // The scripted model answers from a file it names: a cloned repository's agent would choose
    // its own tool calls. It is the user's to pick (`CAIRN_MODEL`, `--model`), never a file's.
    if let Some(model) = &model
        && crate::llm::scripted::named(model)
    {
        return Err(format!("its model `{model}` is the scripted one, which only the user may choose"));
    }
    Ok(NamedAgent {
        name,
        description: description.chars().take(300).collect(),
        model,
        tools,
        instructions: front.body.trim().to_owned(),
        path: path.to_owned(),
    })
}

/// A tool as a list names it: `Read` and `"read"` are `read`.
pub fn tool_name(item: &str) -> String {
    unquote(item.trim()).trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_in_its_usual_shapes() {
        let path = Path::new("x.md");
        let agent = parse(
            "---\nname: reviewer\ndescription: \"Reviews code\"\nmodel: openai/gpt-5-mini\ntools: Read, grep\ncolor: red\n---\nBe strict.\n",
            path,
        )
        .unwrap();
        assert_eq!(agent.name, "reviewer");
        assert_eq!(agent.description, "Reviews code");
        assert_eq!(agent.model.as_deref(), Some("openai/gpt-5-mini"));
        for model in ["scripted/.agents/r.json", "scripted:r.json", " Scripted/r.json"] {
            let text = format!("---\nname: r\ndescription: d\nmodel: {model}\n---\nGo.\n");
            let refused = parse(&text, Path::new("r.md")).unwrap_err();
            assert!(refused.contains("only the user may choose"), "{model}: {refused}");
        }
        assert_eq!(agent.tools, Some(vec!["read".to_owned(), "grep".to_owned()]));
        assert_eq!(agent.instructions, "Be strict.");
        let listed = parse("---\nname: a\ndescription: d\ntools:\n  - read\n  - 'glob'\n---\n", path).unwrap();
        assert_eq!(listed.tools, Some(vec!["read".to_owned(), "glob".to_owned()]));
        let inline = parse("---\nname: a\ndescription: d\ntools: [bash]\n---\nbody", path).unwrap();
        assert_eq!(inline.tools, Some(vec!["bash".to_owned()]));
        assert_eq!(parse("---\nname: a\ndescription: d\n---\n", path).unwrap().tools, None);
    }

    #[test]
    fn malformed_files_say_why() {
        let path = Path::new("x.md");
        for (text, why) in [
            ("name: a\n", "front matter"),
            ("---\nname: a\ndescription: d\n", "closing"),
            ("---\ndescription: d\n---\n", "no `name`"),
            ("---\nname: a b\ndescription: d\n---\n", "may only use"),
            ("---\nname: a\n---\n", "no `description`"),
            ("---\nname: a\ndescription: d\njust words\n---\n", "line 4"),
        ] {
            let err = parse(text, path).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_workspace_with_countless_agent_files_gets_a_bounded_few() {
        let dir = tempfile::tempdir().unwrap();
        let agents_dir = dir.path().join(".agents/agents");
        std::fs::create_dir_all(&agents_dir).unwrap();
        for n in 0..MAX_AGENTS + 50 {
            let text = format!("---\nname: a{n:03}\ndescription: {}\n---\n", "d".repeat(300));
            std::fs::write(agents_dir.join(format!("a{n:03}.md")), text).unwrap();
        }
        let (agents, warnings) = load(dir.path(), None);
        assert_eq!(agents.len(), MAX_AGENTS);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(&format!("a{MAX_AGENTS:03}.md and any further ones")), "{warnings:?}");
    }

    #[test]
    fn nearest_wins_and_bad_files_are_skipped_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let sub = root.join("sub");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join(".claude/agents")).unwrap();
        std::fs::create_dir_all(sub.join(".agents/agents")).unwrap();
        std::fs::write(root.join(".claude/agents/a.md"), "---\nname: a\ndescription: far\n---\n").unwrap();
        std::fs::write(root.join(".claude/agents/b.md"), "---\nname: b\ndescription: only\n---\n").unwrap();
        std::fs::write(sub.join(".agents/agents/a.md"), "---\nname: a\ndescription: near\n---\n").unwrap();
        std::fs::write(sub.join(".agents/agents/bad.md"), "no front matter").unwrap();
        let (agents, warnings) = load(&sub, None);
        let found: Vec<(&str, &str)> = agents.iter().map(|a| (a.name.as_str(), a.description.as_str())).collect();
        assert_eq!(found, [("a", "near"), ("b", "only")]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("bad.md"), "{warnings:?}");
    }
}

//! Commands read from each source, named, bounded, and expanded.

use std::os::unix::fs::symlink;

use super::expand::{Judge, expand, gemini, markdown, split_args};
use super::*;
use crate::permissions::Mode;
use crate::tools::Workspace;

struct Dirs {
    _root: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let (home, project) = (root.path().join("home"), root.path().join("work/project"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(project.join(".git")).unwrap();
        Self { _root: root, home, project }
    }

    fn write(&self, path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn places(&self) -> Places {
        Places { cwd: self.project.clone(), home: Some(self.home.clone()), config_dir: None }
    }

    fn catalog(&self) -> Catalog {
        Catalog::load(&self.places())
    }
}

fn names(catalog: &Catalog) -> Vec<String> {
    catalog.advertised().into_iter().map(|c| c.name).filter(|n| COMMANDS.iter().all(|b| b.name != n)).collect()
}

#[test]
fn commands_from_every_source_project_over_user() {
    let dirs = Dirs::new();
    let (p, h) = (&dirs.project, &dirs.home);
    dirs.write(
        &p.join(".agents/commands/review.md"),
        "---\ndescription: Review a change\nargument-hint: <pr number>\nallowed-tools: Read, Grep, Bash(git diff:*)\nmodel: openai/mock-model\n---\nReview PR $1 carefully.\n",
    );
    dirs.write(&p.join(".claude/commands/frontend/test.md"), "Run the frontend tests for $ARGUMENTS");
    dirs.write(
        &p.join(".gemini/commands/git/commit.toml"),
        "description = \"Write a commit\"\nprompt = \"\"\"Commit: {{args}}\"\"\"\n",
    );
    dirs.write(&h.join(".claude/commands/review.md"), "---\ndescription: the user's review\n---\nmine");
    dirs.write(&h.join(".codex/prompts/draft.md"), "---\ndescription: Draft a PR\n---\nDraft $1 and $2");
    dirs.write(&h.join(".gemini/commands/explain.toml"), "prompt = \"Explain\"\n");
    dirs.write(&h.join(".agents/commands/notes.md"), "notes");
    let catalog = dirs.catalog();
    assert_eq!(names(&catalog), ["review", "frontend:test", "git:commit", "notes", "draft", "explain"]);
    let review = catalog.find("review").unwrap();
    assert_eq!(review.description, "Review a change");
    assert_eq!(review.hint.as_deref(), Some("<pr number>"));
    assert_eq!(review.tools, Some(vec!["read".to_owned(), "grep".to_owned(), "bash".to_owned()]));
    assert_eq!(review.model.as_deref(), Some("openai/mock-model"));
    assert_eq!(catalog.find("git:commit").unwrap().flavor, Flavor::Gemini);
    assert!(catalog.find("notes").unwrap().description.contains("Your command (notes.md)"));
}

#[test]
fn a_name_taken_by_a_built_in_gets_a_prefix() {
    let dirs = Dirs::new();
    dirs.write(&dirs.project.join(".claude/commands/compact.md"), "project compact");
    dirs.write(&dirs.home.join(".claude/commands/status.md"), "user status");
    dirs.write(&dirs.project.join(".agents/skills/model/SKILL.md"), "---\nname: model\ndescription: d\n---\nx");
    dirs.write(&dirs.project.join(".agents/skills/release/SKILL.md"), "---\nname: release\ndescription: Ship\n---\nx");
    let catalog = dirs.catalog();
    assert_eq!(names(&catalog), ["project:compact", "user:status", "skill:model", "release"]);
    let advertised = catalog.advertised();
    assert_eq!(advertised.iter().filter(|c| c.name == "compact").count(), 1, "the built-in keeps its name");
}

#[test]
fn hostile_files_are_skipped_and_bounded() {
    let dirs = Dirs::new();
    let commands = dirs.project.join(".claude/commands");
    dirs.write(&commands.join("has space.md"), "x");
    dirs.write(&commands.join("bell\u{7}.md"), "x");
    dirs.write(&commands.join(".hidden.md"), "x");
    dirs.write(&commands.join("huge.md"), &"x".repeat(MAX_FILE as usize + 1));
    dirs.write(&commands.join("bad.toml"), "not markdown, ignored");
    let outside = dirs.home.join("secret.md");
    dirs.write(&outside, "-----BEGIN OPENSSH PRIVATE KEY-----");
    symlink(&outside, commands.join("key.md")).unwrap();
    symlink(&dirs.home, commands.join("linked")).unwrap();
    dirs.write(&dirs.home.join("leak.md"), "via a linked directory");
    dirs.write(&dirs.project.join(".gemini/commands/broken.toml"), "description = \"no prompt\"\n");
    dirs.write(&commands.join("ok.md"), "fine");
    assert_eq!(names(&dirs.catalog()), ["ok"]);
    assert_eq!(name_of(Path::new("../x.md")).unwrap_err(), "its path is not plain names");
}

#[test]
fn a_changed_directory_is_read_again() {
    let dirs = Dirs::new();
    let mut catalog = dirs.catalog();
    assert!(!catalog.refresh(&dirs.places()), "nothing changed");
    dirs.write(&dirs.project.join(".agents/commands/new.md"), "---\ndescription: first\n---\nx");
    assert!(catalog.refresh(&dirs.places()));
    assert_eq!(catalog.find("new").unwrap().description, "first");
    assert!(!catalog.refresh(&dirs.places()));
    dirs.write(&dirs.project.join(".agents/commands/new.md"), "---\ndescription: second, longer\n---\nx");
    assert!(catalog.refresh(&dirs.places()));
    assert_eq!(catalog.find("new").unwrap().description, "second, longer");
    std::fs::remove_file(dirs.project.join(".agents/commands/new.md")).unwrap();
    assert!(catalog.refresh(&dirs.places()));
    assert!(catalog.find("new").is_none());
}

#[test]
fn a_gemini_command_full_of_shell_lines_is_read_in_time() {
    // A 64 KiB file of `!{}` is about 21,000 of them: each is one note, read in one pass.
    let template = "!{}".repeat(MAX_FILE as usize / 3);
    let started = std::time::Instant::now();
    let text = gemini(&template, "");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(text.matches("was not run").count(), MAX_FILE as usize / 3);
    let nested = gemini("!{echo !{id}} !{", "");
    assert!(nested.starts_with("(the shell command `echo !{id}` was not run") && nested.ends_with(" !{"), "{nested}");
}

#[test]
fn arguments_go_where_the_template_says() {
    assert_eq!(markdown("Fix issue $ARGUMENTS now", " #12 fast "), "Fix issue #12 fast now");
    assert_eq!(markdown("$1 then $2, not $3.", "\"two words\" b"), "two words then b, not .");
    assert_eq!(markdown("Costs $5? no: $0 and $x", ""), "Costs ? no: $0 and $x");
    assert_eq!(markdown("No placeholder.", "extra words"), "No placeholder.\n\nextra words");
    assert_eq!(markdown("No placeholder.", "  "), "No placeholder.");
    assert_eq!(gemini("Commit: {{args}}", "msg"), "Commit: msg");
    assert_eq!(gemini("Explain", "this"), "Explain\n\nthis");
    let shell = gemini("Diff: !{git diff {a}} end", "");
    assert!(shell.contains("`git diff {a}` was not run") && shell.ends_with(" end"), "{shell}");
    assert_eq!(split_args("a 'b c' \"\" d"), ["a", "b c", "", "d"]);
    assert_eq!(tool_name("Bash(git add:*)"), "bash");
    assert_eq!(tool_name("mcp__GitHub__getIssue"), "mcp__GitHub__getIssue");
    assert_eq!(
        split_tools("Bash(git add:*, git commit:*), Read WebFetch"),
        ["Bash(git add:*, git commit:*)", "Read", "WebFetch"]
    );
}

fn command(template: &str) -> Custom {
    Custom {
        name: "c".into(),
        description: String::new(),
        hint: None,
        template: template.into(),
        flavor: Flavor::Markdown,
        tools: None,
        model: None,
        path: PathBuf::new(),
    }
}

#[test]
fn files_are_inlined_only_where_a_read_is_allowed_unasked() {
    let dirs = Dirs::new();
    let p = &dirs.project;
    dirs.write(&p.join("src/lib.rs"), "pub fn answer() -> u32 { 42 }");
    dirs.write(&p.join(".env"), "TOKEN=secret");
    dirs.write(&p.join("big.txt"), &"y".repeat(expand::MAX_INLINE as usize + 10));
    let outside = dirs.home.join("id_rsa");
    dirs.write(&outside, "PRIVATE KEY");
    symlink(&outside, p.join("innocent.txt")).unwrap();
    let workspace = Workspace::new(p, &[]);
    let judge = Judge { workspace: &workspace, mode: Mode::Ask, rules: &[], confined: false };
    let text = expand(&command("Explain @src/lib.rs and @.env, mail me@example.com"), "", &judge).unwrap();
    assert!(text.contains("<file path=\"src/lib.rs\">\npub fn answer() -> u32 { 42 }\n</file>"), "{text}");
    assert!(text.contains("(@.env was not inlined: reading it needs the user's permission"), "{text}");
    assert!(!text.contains("TOKEN=secret"), "{text}");
    assert!(!text.contains("example.com\">"), "an address is no file: {text}");
    let braced = Custom { flavor: Flavor::Gemini, ..command("Read @{src/lib.rs}: {{args}}") };
    let text = expand(&braced, "now", &judge).unwrap();
    assert!(text.starts_with("Read @{src/lib.rs}: now\n\n<file path=\"src/lib.rs\">"), "{text}");

    // What the user typed is judged the same way.
    let typed = format!("@{} @innocent.txt @big.txt", outside.display());
    let text = expand(&command("Look at $ARGUMENTS"), &typed, &judge).unwrap();
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    assert!(text.contains(&format!("(@{} was not inlined", outside.display())), "{text}");
    assert!(text.contains("(@innocent.txt was not inlined"), "a link out of the workspace: {text}");
    assert!(text.contains("(cut at 64 KiB of 64 KiB"), "{text}");
    assert!(text.len() < expand::MAX_INLINE as usize + 2_000);
}

#[test]
fn a_skill_as_a_command_is_loaded_when_reading_it_is_allowed() {
    let dirs = Dirs::new();
    dirs.write(
        &dirs.project.join(".claude/skills/release/SKILL.md"),
        "---\nname: release\ndescription: Ship\n---\nTag it.",
    );
    dirs.write(&dirs.home.join(".claude/skills/notes/SKILL.md"), "---\nname: notes\ndescription: Notes\n---\nWrite.");
    let catalog = dirs.catalog();
    let workspace = Workspace::new(&dirs.project, &[]);
    let judge = Judge { workspace: &workspace, mode: Mode::Ask, rules: &[], confined: false };
    let text = expand(catalog.find("release").unwrap(), "v1.2", &judge).unwrap();
    assert!(text.contains("Tag it.") && text.ends_with("\n\nv1.2"), "{text}");
    // Outside the workspace, reading it would ask: the model loads it with the tool, which asks.
    let text = expand(catalog.find("notes").unwrap(), "", &judge).unwrap();
    assert_eq!(text, "Load the skill `notes` with the skill tool and follow it for the task below.");
}

/// The scripted model answers from a file it names: a project's command naming it would choose
/// its own tool calls. Such a command is left out; another model stays the command's.
#[test]
fn a_command_naming_the_scripted_model_is_left_out() {
    let dirs = Dirs::new();
    let commands = dirs.project.join(".claude/commands");
    dirs.write(&commands.join("own.md"), "---\nmodel: scripted/.claude/r.json\n---\nGo.\n");
    dirs.write(&commands.join("other.md"), "---\nmodel: Scripted:r.json\n---\nGo.\n");
    dirs.write(&commands.join("fine.md"), "---\nmodel: openai/gpt-5-mini\n---\nGo.\n");
    let catalog = dirs.catalog();
    assert_eq!(names(&catalog), ["fine"]);
    assert_eq!(catalog.find("fine").unwrap().model.as_deref(), Some("openai/gpt-5-mini"));
}

/// A principal's session of `cairn serve --auth` inlines nothing beyond its workspace, in any
/// mode: its own files are inlined, another's key is not.
#[test]
fn a_confined_session_inlines_nothing_beyond_its_workspace_even_in_bypass() {
    let dirs = Dirs::new();
    dirs.write(&dirs.project.join("notes.md"), "own notes\n");
    dirs.write(&dirs.home.join(".ssh/id_ed25519"), "THE-KEY\n");
    let workspace = Workspace::new(&dirs.project, &[]);
    let judge = Judge { workspace: &workspace, mode: Mode::Bypass, rules: &[], confined: true };
    let key = dirs.home.join(".ssh/id_ed25519");
    let text = expand(&command(&format!("See @notes.md and @{}", key.display())), "", &judge).unwrap();
    assert!(text.contains("own notes"), "{text}");
    assert!(!text.contains("THE-KEY"), "{text}");
}

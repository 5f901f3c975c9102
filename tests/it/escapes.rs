//! What cairn prints to a terminal shows control characters instead of passing them on: a
//! session imported with an OSC sequence in its title (which would retitle the window) and CSI
//! sequences in its messages and tool call (which would clear the screen and move the cursor
//! over lines already printed), listed, shown and exported; and `cairn exec` printing a model's
//! answer and a tool's result that hold escapes.

use std::process::Stdio;

use cairn::history::{CallState, Part, ToolContent, ToolPart};
use serde_json::{Value, json};

use crate::support::{Reply, TestEnv};

/// Runs `cairn` with `args`; returns (status, stdout, stderr) as bytes.
async fn run(env: &TestEnv, args: &[&str]) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    let mut command = env.command();
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = command.spawn().unwrap().wait_with_output().await.unwrap();
    (output.status.code(), output.stdout, output.stderr)
}

/// The control characters a terminal would obey, found in `bytes` (ESC, BEL, CR, the C1 CSI
/// in UTF-8, a bidirectional override); newlines and tabs are text.
fn raw_controls(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    text.chars()
        .filter(|c| (c.is_control() && !matches!(c, '\n' | '\t')) || *c == '\u{202e}')
        .map(|c| format!("{c:?}"))
        .collect()
}

const TITLE: &str = "Fix it\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[1A\rforged line";

/// An export file whose title, prompt, answer and tool call hold escapes.
fn hostile_export(env: &TestEnv) -> std::path::PathBuf {
    let mut tool = ToolPart::new("c1".into(), "bash".into());
    tool.title = "Run `ls`\u{1b}[8mhidden".into();
    tool.state = CallState::Succeeded;
    tool.input = json!({"command": "ls"}).to_string();
    tool.output = Some("listing\u{1b}]52;c;cm0gLXJmIH4=\u{7}\n\u{9b}31mred".into());
    tool.content = vec![ToolContent::Text { text: "listing\u{1b}]52;c;cm0gLXJmIH4=\u{7}".into() }];
    let lines = [
        json!({"type": "session", "version": 1, "id": "ses_escapes", "title": TITLE, "cwd": env.cwd(),
            "model": "openai/mock-model", "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z"}),
        json!({"type": "message", "id": "msg_1", "role": "user", "meta": {},
            "parts": [Part::Text { text: "hi\u{1b}[2J\u{202e}txt.exe".into() }]}),
        json!({"type": "message", "id": "msg_2", "role": "assistant", "meta": {},
            "parts": [Part::Tool(tool), Part::Text { text: "done\u{1b}[1A\u{1b}[2K".into() }]}),
    ];
    let file = env.dir.path().join("hostile.jsonl");
    std::fs::write(&file, lines.iter().map(|line| format!("{line}\n")).collect::<String>()).unwrap();
    file
}

#[tokio::test]
async fn sessions_list_show_and_export_print_no_raw_escape() {
    let env = TestEnv::new().await;
    let file = hostile_export(&env);
    let (status, stdout, stderr) = run(&env, &["sessions", "import", file.to_str().unwrap()]).await;
    assert_eq!(status, Some(0), "{}", String::from_utf8_lossy(&stderr));
    assert!(raw_controls(&stdout).is_empty());

    let commands: [&[&str]; 6] = [
        &["sessions", "list"],
        &["sessions", "list", "--json"],
        &["sessions", "show", "ses_escapes"],
        &["sessions", "export", "ses_escapes"],
        &["sessions", "export", "ses_escapes", "--format", "jsonl"],
        &["sessions", "prune", "--older-than", "1h", "--dry-run"],
    ];
    let mut printed = Vec::new();
    for args in commands {
        let (status, stdout, stderr) = run(&env, args).await;
        assert_eq!(status, Some(0), "{args:?}: {}", String::from_utf8_lossy(&stderr));
        assert_eq!(raw_controls(&stdout), Vec::<String>::new(), "{args:?}: {}", String::from_utf8_lossy(&stdout));
        printed.push(String::from_utf8(stdout).unwrap());
    }
    let [list, list_json, show, markdown, jsonl, prune] = &printed[..] else { unreachable!() };
    // The escapes are shown for what they are, on the title's own line.
    let shown_title = r"Fix it\e]0;pwned\x07\e[2J\e[1A\rforged line";
    assert!(list.contains(&shown_title[..40]), "{list}");
    assert_eq!(list.lines().count(), 2, "the title forges no line: {list}");
    assert!(show.contains(&format!("title    {shown_title}\n")), "{show}");
    assert!(show.contains(r"hi\e[2J\u{202e}txt.exe"), "{show}");
    assert!(show.contains(r"[tool] Run `ls`\e[8mhidden (bash, "), "{show}");
    assert!(show.contains(r"listing\e]52;c;cm0gLXJmIH4=\x07"), "{show}");
    assert!(show.contains(r"done\e[1A\e[2K"), "{show}");
    assert!(markdown.starts_with(&format!("# {shown_title}\n")), "{markdown}");
    assert!(prune.contains(shown_title), "{prune}");
    // JSON output encodes the same values: read back, the title is the one imported.
    let listed: Value = serde_json::from_str(list_json.lines().next().unwrap()).unwrap();
    assert_eq!(listed["title"], TITLE);
    let session: Value = serde_json::from_str(jsonl.lines().next().unwrap()).unwrap();
    assert_eq!(session["title"], TITLE);
    let answer: Value = serde_json::from_str(jsonl.lines().nth(2).unwrap()).unwrap();
    assert_eq!(answer["parts"][0]["output"], "listing\u{1b}]52;c;cm0gLXJmIH4=\u{7}\n\u{9b}31mred");

    // Written to a file, the Markdown export shows them the same way.
    let out = env.dir.path().join("out.md");
    let (status, _, _) = run(&env, &["sessions", "export", "ses_escapes", "-o", out.to_str().unwrap()]).await;
    assert_eq!(status, Some(0));
    assert_eq!(raw_controls(&std::fs::read(&out).unwrap()), Vec::<String>::new());
}

#[tokio::test]
async fn exec_shows_the_escapes_of_an_answer_and_a_tool_result() {
    let env = TestEnv::new().await;
    let command = r"printf 'out\033]0;pwned\007\033[2J\n'";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["all \u{1b}[2Jclear", "\u{1b}]0;owned\u{7} done"]));
    let cwd = env.cwd();
    let (status, stdout, stderr) = run(&env, &["exec", "--cwd", &cwd, "--allow", "bash:printf", "go"]).await;
    let (out, err) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    assert_eq!(status, Some(0), "{err}");
    assert_eq!(raw_controls(&stdout), Vec::<String>::new(), "{out}");
    assert_eq!(raw_controls(&stderr), Vec::<String>::new(), "{err}");
    assert_eq!(out.trim_end(), r"all \e[2Jclear\e]0;owned\x07 done");
    assert!(err.contains(r"out\e]0;pwned\x07\e[2J"), "the tool's result as shown: {err}");
}

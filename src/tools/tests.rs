//! Unit tests of the tools on the local disk and in local processes (no editor).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

fn context(dir: &std::path::Path) -> ToolContext {
    ToolContext {
        workspace: Workspace::new(dir, &[]),
        host: Arc::new(NoEditor),
        cancel: CancellationToken::new(),
        progress: None,
        process: Arc::default(),
    }
}

async fn run(ctx: &ToolContext, name: &str, input: serde_json::Value) -> Result<ToolOutcome, ToolError> {
    Invocation::parse(name, &input.to_string())?.run(ctx).await
}

#[test]
fn bad_calls_say_what_to_fix() {
    let unknown = Invocation::parse("fly", "{}").unwrap_err();
    assert!(unknown.0.contains("Unknown tool `fly`") && unknown.0.contains("read, write, edit"), "{unknown}");
    let missing = Invocation::parse("read", "{}").unwrap_err();
    assert!(missing.0.contains("missing field `path`") && missing.0.contains("\"required\""), "{missing}");
    let extra = Invocation::parse("bash", r#"{"command":"ls","sudo":true}"#).unwrap_err();
    assert!(extra.0.contains("unknown field `sudo`"), "{extra}");
    let broken = Invocation::parse("edit", "{\"path\":").unwrap_err();
    assert!(broken.0.contains("not valid JSON"), "{broken}");
    for name in NAMES {
        assert!(spec(name).is_some(), "{name} has a schema");
    }
}

#[tokio::test]
async fn read_numbers_lines_and_pages() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (1..=5).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("f.txt"), text).unwrap();
    let ctx = context(dir.path());
    let all = run(&ctx, "read", json!({"path": "f.txt"})).await.unwrap();
    assert_eq!(all.output, "     1\tline 1\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\tline 5\n");
    let page = run(&ctx, "read", json!({"path": "f.txt", "offset": 2, "limit": 2})).await.unwrap();
    assert_eq!(page.output, "     2\tline 2\n     3\tline 3\n(lines 2–3 of 5; use offset and limit to read others)\n");
    let past = run(&ctx, "read", json!({"path": "f.txt", "offset": 9})).await.unwrap_err();
    assert!(past.0.contains("has 5 lines"), "{past}");
    let missing = run(&ctx, "read", json!({"path": "nope.txt"})).await.unwrap_err();
    assert!(missing.0.contains("nope.txt does not exist"), "{missing}");
    std::fs::write(dir.path().join("bin"), [0u8, 1, 2]).unwrap();
    assert!(run(&ctx, "read", json!({"path": "bin"})).await.unwrap_err().0.contains("binary"));
}

#[tokio::test]
async fn write_and_edit_show_whole_file_diffs() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let path = dir.path().join("src/new.rs").display().to_string();
    let created = run(&ctx, "write", json!({"path": "src/new.rs", "content": "fn a() {}\nfn a() {}\n"})).await.unwrap();
    assert_eq!(
        created.content,
        [ToolContent::Diff { path: path.clone(), old_text: None, new_text: "fn a() {}\nfn a() {}\n".into() }]
    );
    let twice =
        run(&ctx, "edit", json!({"path": "src/new.rs", "old_string": "fn a", "new_string": "fn b"})).await.unwrap_err();
    assert!(twice.0.contains("occurs 2 times"), "{twice}");
    let absent =
        run(&ctx, "edit", json!({"path": "src/new.rs", "old_string": "fn z", "new_string": "fn b"})).await.unwrap_err();
    assert!(absent.0.contains("was not found"), "{absent}");
    let all = run(
        &ctx,
        "edit",
        json!({"path": "src/new.rs", "old_string": "fn a", "new_string": "fn b", "replace_all": true}),
    )
    .await
    .unwrap();
    assert_eq!(all.output, "Edited src/new.rs: replaced 2 occurrences.");
    assert_eq!(
        all.content,
        [ToolContent::Diff {
            path,
            old_text: Some("fn a() {}\nfn a() {}\n".into()),
            new_text: "fn b() {}\nfn b() {}\n".into()
        }]
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("src/new.rs")).unwrap(), "fn b() {}\nfn b() {}\n");
}

#[tokio::test]
async fn glob_and_grep_skip_ignored_files_and_cap_results() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src")).unwrap();
    std::fs::create_dir_all(dir.path().join("target")).unwrap();
    std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
    std::fs::write(dir.path().join("src/a.rs"), "fn alpha() {}\n// TODO: more\n").unwrap();
    std::fs::write(dir.path().join("src/b.txt"), "todo later\n").unwrap();
    std::fs::write(dir.path().join("target/c.rs"), "fn ignored() {}\n").unwrap();
    let ctx = context(dir.path());
    let found = run(&ctx, "glob", json!({"pattern": "**/*.rs"})).await.unwrap();
    assert_eq!(found.output, "src/a.rs\n");
    let hits = run(&ctx, "grep", json!({"pattern": "todo", "case_insensitive": true})).await.unwrap();
    assert_eq!(hits.output, "src/a.rs:2:// TODO: more\nsrc/b.txt:1:todo later\n");
    let only_rs =
        run(&ctx, "grep", json!({"pattern": "todo", "case_insensitive": true, "glob": "*.rs"})).await.unwrap();
    assert_eq!(only_rs.output, "src/a.rs:2:// TODO: more\n");
    for i in 0..300 {
        std::fs::write(dir.path().join(format!("src/many{i}.txt")), "needle\n").unwrap();
    }
    let capped = run(&ctx, "grep", json!({"pattern": "needle"})).await.unwrap();
    assert_eq!(capped.output.lines().filter(|l| l.contains(":1:needle")).count(), 200);
    assert!(capped.output.contains("only the first 200 matches"));
    assert!(run(&ctx, "grep", json!({"pattern": "("})).await.unwrap_err().0.contains("not a valid regular expression"));
}

#[tokio::test]
async fn bash_reports_output_and_status_and_kills_its_group_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let ok = run(&ctx, "bash", json!({"command": "echo out; echo err >&2; pwd"})).await.unwrap();
    assert!(ok.output.contains("out\n") && ok.output.contains("err\n"), "{}", ok.output);
    assert!(ok.output.contains(&dir.path().canonicalize().unwrap().display().to_string()));
    assert!(ok.output.ends_with("[exit status 0]") && !ok.failed);
    let failed = run(&ctx, "bash", json!({"command": "exit 3"})).await.unwrap();
    assert!(failed.failed && failed.output.ends_with("[exit status 3]"));

    let marker = dir.path().join("pid");
    let command = format!("sleep 30 & echo $! > {}; wait", marker.display());
    let started = Instant::now();
    let timed_out = run(&ctx, "bash", json!({"command": command, "timeout_ms": 300})).await.unwrap_err();
    assert!(timed_out.0.contains("timed out"), "{timed_out}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid = std::fs::read_to_string(&marker).unwrap().trim().to_owned();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!alive(&pid), "the background sleep died with its group");
}

#[tokio::test]
async fn todo_sets_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let done = run(
        &ctx,
        "todo",
        json!({"items": [
            {"content": "read the code", "status": "completed"},
            {"content": "fix the bug", "status": "in_progress", "priority": "high"}
        ]}),
    )
    .await
    .unwrap();
    let plan = done.plan.unwrap();
    assert_eq!(plan.len(), 2);
    assert_eq!(plan[1].priority, PlanPriority::High);
    assert_eq!(done.output, "The plan now has 2 items, 1 completed.");
}

/// Whether a process runs (a zombie waiting for its reaper does not).
pub fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|status| !status.lines().any(|line| line.starts_with("State:") && line.contains('Z')))
}

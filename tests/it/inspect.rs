//! Inspecting sessions from the command line: `cairn sessions show`, `export` (Markdown and
//! lossless JSON lines, imported back), `rm`, `prune`, and `cairn doctor`, against sessions made
//! by real turns; and the config's `log_file`.

use std::process::Stdio;
use std::time::Duration;

use cairn::history::{Message, MessageMeta, Part, Role};
use cairn::ids::SessionId;
use serde_json::{Value, json};

use crate::support::{Reply, TestEnv, updates};

/// Runs `cairn` with `args`; returns (status, stdout, stderr).
async fn run(env: &TestEnv, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = env.command();
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let output = command.spawn().unwrap().wait_with_output().await.unwrap();
    (output.status.code(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

/// A session made by a real turn: reasoning, a bash call (`echo tool-said-hi`), and an answer.
async fn session_with_a_tool_call(env: &TestEnv, prompt: &str) -> String {
    env.mock.push(Reply::tool_calls(&[("call_1", "bash", json!({"command": "echo tool-said-hi"}))]));
    env.mock.push(Reply::thinking_then_text(&["pondering"], &["All done: ", "it said hi."]));
    let cwd = env.cwd();
    let (status, stdout, stderr) = run(env, &["exec", "--json", "--cwd", &cwd, "--allow", "bash:echo", prompt]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    last["sessionId"].as_str().unwrap().to_owned()
}

/// What `session/load` replays of a session: its conversation's updates, in order.
async fn replayed(env: &TestEnv, session: &str) -> Vec<Value> {
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (response, notifications) = agent.response(id).await;
    assert!(response.get("result").is_some(), "{response}");
    let kinds = ["user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call", "plan"];
    updates(&notifications, session)
        .into_iter()
        .filter(|update| kinds.contains(&update["sessionUpdate"].as_str().unwrap_or_default()))
        .cloned()
        .collect()
}

/// The visible messages the store holds, read through the library.
async fn stored(env: &TestEnv, session: &str) -> Vec<Message> {
    let store = cairn::store::Store::open(&env.database()).unwrap();
    let messages = store.messages(&SessionId::from_string(session)).await.unwrap();
    store.shutdown().await;
    messages
}

/// A message line of a JSON lines export, read as the domain types: id, role, meta, parts.
type Exported = (String, Role, MessageMeta, Vec<Part>);

/// A JSON lines export read back: the session line, and each message line.
fn read_export(text: &str) -> (Value, Vec<Exported>) {
    let mut lines = text.lines().map(|line| serde_json::from_str::<Value>(line).unwrap());
    let session = lines.next().unwrap();
    let messages = lines
        .map(|line| {
            assert_eq!(line["type"], "message", "{line}");
            (
                line["id"].as_str().unwrap().to_owned(),
                serde_json::from_value(line["role"].clone()).unwrap(),
                serde_json::from_value(line["meta"].clone()).unwrap(),
                serde_json::from_value(line["parts"].clone()).unwrap(),
            )
        })
        .collect();
    (session, messages)
}

fn without_ids(messages: &[Exported]) -> Vec<(Role, MessageMeta, Vec<Part>)> {
    messages.iter().map(|(_, role, meta, parts)| (*role, meta.clone(), parts.clone())).collect()
}

#[tokio::test]
async fn show_prints_the_conversation_in_order_with_the_tool_call_and_a_header() {
    let env = TestEnv::new().await;
    let session = session_with_a_tool_call(&env, "Say hi through the shell").await;
    let (status, stdout, stderr) = run(&env, &["sessions", "show", &session]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with(&format!("session  {session}\n")), "{stdout}");
    assert!(stdout.contains(&format!("cwd      {}\n", env.cwd())), "{stdout}");
    assert!(stdout.contains("model    openai/mock-model\n"), "{stdout}");
    let created = stdout.lines().find_map(|line| line.strip_prefix("created  ")).unwrap();
    assert!(created.len() == 24 && created.contains('T') && created.ends_with('Z'), "ISO 8601: {created}");
    assert!(stdout.contains("cost     $"), "{stdout}");
    let order = [
        "user:\n  Say hi through the shell",
        "[tool] Run `echo tool-said-hi` (bash, execute, succeeded)",
        "    | tool-said-hi",
        "[reasoning] pondering",
        "All done: it said hi.",
    ];
    let mut from = 0;
    for expected in order {
        let at = stdout[from..].find(expected).unwrap_or_else(|| panic!("`{expected}` after byte {from}:\n{stdout}"));
        from += at + expected.len();
    }
}

#[tokio::test]
async fn markdown_export_is_a_readable_transcript() {
    let env = TestEnv::new().await;
    let session = session_with_a_tool_call(&env, "Say hi through the shell").await;
    let (status, stdout, stderr) = run(&env, &["sessions", "export", &session]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with("# "), "{stdout}");
    for expected in [
        "## User\n\nSay hi through the shell\n",
        "**Tool call** `bash`: Run `echo tool-said-hi` (bash, execute, succeeded)",
        "\"command\": \"echo tool-said-hi\"",
        "```text\ntool-said-hi\n",
        "<details><summary>Reasoning</summary>\n\npondering\n\n</details>",
        "All done: it said hi.",
    ] {
        assert!(stdout.contains(expected), "`{expected}` missing:\n{stdout}");
    }
}

#[tokio::test]
async fn jsonl_export_holds_what_the_store_holds_and_imports_back_losslessly() {
    let env = TestEnv::new().await;
    let session = session_with_a_tool_call(&env, "Say hi through the shell").await;
    let (status, exported, stderr) = run(&env, &["sessions", "export", &session, "--format", "jsonl"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let (header, messages) = read_export(&exported);
    assert_eq!((header["type"].as_str(), header["id"].as_str()), (Some("session"), Some(session.as_str())));
    assert_eq!(header["cwd"], env.cwd());
    let in_store: Vec<_> =
        stored(&env, &session).await.into_iter().map(|m| (m.id.as_str().to_owned(), m.role, m.meta, m.parts)).collect();
    assert_eq!(messages, in_store, "every stored message, ids, parts and metadata as stored");
    assert!(messages.iter().any(|(.., parts)| parts.iter().any(|part| matches!(part, Part::Tool(_)))));
    let before = replayed(&env, &session).await;

    // Imported while the original is stored: a copy under new ids, holding the same messages.
    let file = env.dir.path().join("export.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let (status, stdout, stderr) = run(&env, &["sessions", "import", file.to_str().unwrap()]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let copy = stdout.split_whitespace().nth(3).unwrap().to_owned();
    assert!(copy.starts_with("ses_") && copy != session, "{stdout}");
    let (_, again, _) = run(&env, &["sessions", "export", &copy, "--format", "jsonl"]).await;
    assert_eq!(without_ids(&read_export(&again).1), without_ids(&messages));

    // Removed, then imported: the same session again, replayed as before.
    let (status, _, stderr) = run(&env, &["sessions", "rm", &session]).await;
    assert_eq!(status, Some(0), "{stderr}");
    let (status, stdout, stderr) = run(&env, &["sessions", "import", file.to_str().unwrap()]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with(&format!("imported {session} (")), "{stdout}");
    let (_, restored, _) = run(&env, &["sessions", "export", &session, "--format", "jsonl"]).await;
    assert_eq!(read_export(&restored).1, messages, "ids included");
    assert_eq!(replayed(&env, &session).await, before, "session/load shows what it showed before");
}

#[tokio::test]
async fn unknown_sessions_bad_formats_and_bad_files_are_refused_and_nothing_is_lost() {
    let env = TestEnv::new().await;
    let kept = env.dir.path().join("kept.md");
    std::fs::write(&kept, "precious").unwrap();
    let kept_path = kept.to_str().unwrap();
    for args in [
        &["sessions", "show", "ses_nope"][..],
        &["sessions", "export", "ses_nope", "--output", kept_path],
        &["sessions", "rm", "ses_nope"],
    ] {
        let (status, stdout, stderr) = run(&env, args).await;
        assert_eq!(status, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("session ses_nope not found") && stderr.contains("cairn sessions list"), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "precious", "the file an unknown export named is untouched");

    let (status, _, stderr) = run(&env, &["sessions", "export", "ses_x", "--format", "pdf"]).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("'pdf'") && stderr.contains("markdown") && stderr.contains("jsonl"), "{stderr}");

    let session = session_with_a_tool_call(&env, "hello").await;
    let (status, _, stderr) = run(&env, &["sessions", "export", &session, "-o", kept_path]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(std::fs::read_to_string(&kept).unwrap().contains("## User\n\nhello"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o600, "conversations are private");

    let (status, _, stderr) = run(&env, &["sessions", "import", kept_path]).await;
    assert_eq!(status, Some(2), "a Markdown export is not an import: {stderr}");
    assert!(stderr.contains("line 1") && stderr.contains("nothing was imported"), "{stderr}");
}

#[tokio::test]
async fn an_import_reads_a_bounded_line_and_an_endless_file_fails_at_once() {
    let env = TestEnv::new().await;
    let (status, stdout, stderr) = run(&env, &["sessions", "import", "/dev/zero"]).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("/dev/zero line 1: longer than 64 MiB, the longest line an import reads")
            && stderr.ends_with("nothing was imported\n"),
        "{stderr}"
    );
    let session = json!({"type": "session", "version": 1, "id": "ses_long", "title": "T", "cwd": "/w",
        "model": "openai/m", "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z"});
    let file = env.dir.path().join("long.jsonl");
    let mut text = format!("{session}\n").into_bytes();
    text.extend(std::iter::repeat_n(b'x', (64 << 20) + 1));
    text.push(b'\n');
    std::fs::write(&file, text).unwrap();
    let (status, _, stderr) = run(&env, &["sessions", "import", file.to_str().unwrap()]).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("long.jsonl line 2: longer than 64 MiB"), "{stderr}");
    let (_, listed, _) = run(&env, &["sessions", "list"]).await;
    assert!(!listed.contains("ses_long"), "nothing was imported: {listed}");
}

#[tokio::test]
async fn rm_removes_the_session_and_is_refused_while_another_process_runs_a_turn_in_it() {
    let env = TestEnv::new().await;
    let session = session_with_a_tool_call(&env, "to remove").await;
    let (status, stdout, stderr) = run(&env, &["sessions", "rm", &session]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stdout, format!("removed {session}\n"));
    let (_, listed, _) = run(&env, &["sessions", "list", "--json"]).await;
    assert!(!listed.contains(&session), "{listed}");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    assert!(error["message"].as_str().unwrap().contains("not found"), "{error}");

    // Another process streams a turn in a session: rm is refused, naming that process.
    env.mock.push(Reply::endless(Duration::from_millis(2)));
    let busy = agent.new_session(&env.cwd()).await;
    let turn = agent.prompt(&busy, "keep going").await;
    agent.next_chunk().await;
    let (status, _, stderr) = run(&env, &["sessions", "rm", &busy]).await;
    assert_eq!(status, Some(1), "{stderr}");
    let pid = agent.child.id().unwrap();
    assert!(stderr.contains("in use by another cairn process") && stderr.contains(&format!("pid {pid}")), "{stderr}");
    agent.notify("session/cancel", json!({"sessionId": busy})).await;
    agent.response(turn).await;
    let (_, listed, _) = run(&env, &["sessions", "list", "--json"]).await;
    assert!(listed.contains(&busy), "the refused rm removed nothing: {listed}");
}

#[tokio::test]
async fn prune_removes_the_sessions_not_updated_since_the_age_and_dry_run_only_lists_them() {
    let env = TestEnv::new().await;
    let old = session_with_a_tool_call(&env, "old one").await;
    let recent = session_with_a_tool_call(&env, "recent one").await;
    let forty_days_ago = cairn::ids::now_ms() - 40 * 86_400_000;
    let conn = rusqlite::Connection::open(env.database()).unwrap();
    conn.execute("UPDATE sessions SET updated_at = ?1 WHERE id = ?2", rusqlite::params![forty_days_ago, old]).unwrap();
    drop(conn);

    let (status, stdout, stderr) = run(&env, &["sessions", "prune", "--older-than", "30d", "--dry-run"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("would remove {old}")) && !stdout.contains(&recent), "{stdout}");
    assert!(stdout.contains("1 session not updated since"), "{stdout}");
    let (_, listed, _) = run(&env, &["sessions", "list", "--json"]).await;
    assert!(listed.contains(&old), "a dry run removes nothing");

    let (status, stdout, stderr) = run(&env, &["sessions", "prune", "--older-than", "4w"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with("removed 1 session not updated since "), "{stdout}");
    let (_, listed, _) = run(&env, &["sessions", "list", "--json"]).await;
    assert!(!listed.contains(&old) && listed.contains(&recent), "{listed}");

    for bad in ["30", "30m", "1.5d", "0d"] {
        let (status, _, stderr) = run(&env, &["sessions", "prune", "--older-than", bad]).await;
        assert_eq!(status, Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(&format!("`{bad}`")), "{stderr}");
    }
}

/// Doctor's line about `what`, e.g. `ok    integrity: ok (…)`.
fn finding<'a>(stdout: &'a str, what: &str) -> Vec<&'a str> {
    stdout.lines().filter(|line| line[6..].starts_with(&format!("{what}: "))).collect()
}

#[tokio::test]
async fn doctor_checks_config_keys_providers_database_mcp_servers_and_log_file() {
    let env = TestEnv::new().await;
    let log = env.dir.path().join("cairn.log");
    env.write_config(&format!(
        "log_file = \"{}\"\n\n[mcp_servers.local]\ncommand = \"{}\"\n",
        log.display(),
        crate::mcp::fixture_exe().display()
    ));
    session_with_a_tool_call(&env, "so there is a database").await;
    let (status, stdout, stderr) = run(&env, &["doctor"]).await;
    assert_eq!(status, Some(0), "{stdout}\n{stderr}");
    assert!(finding(&stdout, "config")[0].starts_with("ok    config: ") && stdout.contains("config.toml (valid)"));
    assert!(finding(&stdout, "model")[0].contains("openai/mock-model (provider openai, openai-chat API at"));
    assert!(stdout.contains("ok    key: openai: OPENAI_API_KEY is set"), "{stdout}");
    assert!(stdout.contains("warn  key: anthropic: ANTHROPIC_API_KEY is not set"), "{stdout}");
    assert!(!stdout.contains("sk-test"), "a key is never printed: {stdout}");
    let reach = finding(&stdout, "reachable");
    assert_eq!(reach.len(), 1, "one probe per endpoint in use (no key, no probe): {stdout}");
    assert!(
        reach[0]
            .starts_with(&format!("ok    reachable: openai, openai-responses: {} answered HTTP 200 in ", env.mock.url))
    );
    assert!(finding(&stdout, "database")[0].contains(&format!("{} (", env.database().display())), "{stdout}");
    assert!(stdout.contains("ok    schema: version ") && stdout.contains("(current)"), "{stdout}");
    assert!(stdout.contains("ok    integrity: ok"), "{stdout}");
    assert!(finding(&stdout, "mcp")[0].starts_with("ok    mcp: local: ready, "), "{stdout}");
    assert!(stdout.contains(&format!("ok    log file: {} (log_file in config.toml)", log.display())), "{stdout}");

    let mut env = env;
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    env.set_env("OPENAI_BASE_URL", &format!("http://{dead}/v1"));
    env.write_config(&format!("[mcp_servers.broken]\ncommand = \"{}\"\n", env.dir.path().join("absent").display()));
    let (status, stdout, _) = run(&env, &["doctor"]).await;
    assert_eq!(status, Some(1), "{stdout}");
    assert!(
        finding(&stdout, "reachable")[0]
            .starts_with(&format!("fail  reachable: openai, openai-responses: http://{dead}/v1: cannot connect")),
        "{stdout}"
    );
    assert!(finding(&stdout, "mcp")[0].starts_with("fail  mcp: broken: "), "{stdout}");
    assert!(stdout.contains("ok    integrity: ok"), "the rest is still checked: {stdout}");

    // A config file that does not parse fails, and what does not need it is still checked.
    env.write_config("model = \"openai/mock-model\"\n[limits]\nmax_rounds = \"many\"\n");
    let (status, stdout, _) = run(&env, &["doctor"]).await;
    assert_eq!(status, Some(1), "{stdout}");
    let config = finding(&stdout, "config");
    assert!(
        config.len() == 1 && config[0].starts_with("fail  config: ") && config[0].contains("max_rounds"),
        "{stdout}"
    );
    assert!(config[0].contains("the checks below leave the file out"), "{stdout}");
    assert!(stdout.contains("ok    key: openai: OPENAI_API_KEY is set"), "{stdout}");
    assert!(stdout.contains("ok    integrity: ok"), "{stdout}");
}

#[tokio::test]
async fn the_config_log_file_gets_the_logs_and_the_flag_wins_over_it() {
    let env = TestEnv::new().await;
    let (from_config, from_flag) = (env.dir.path().join("config.log"), env.dir.path().join("flag.log"));
    env.write_config(&format!("log_file = \"{}\"\n", from_config.display()));
    session_with_a_tool_call(&env, "log this").await;
    let logged = std::fs::read_to_string(&from_config).unwrap();
    assert!(!logged.is_empty() && !logged.contains('\u{1b}'), "plain lines: {logged}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&from_config).unwrap().permissions().mode() & 0o777, 0o600);

    let (status, stdout, stderr) = run(&env, &["--log-file", from_flag.to_str().unwrap(), "doctor"]).await;
    assert_eq!(status, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "ok    log file: {} (--log-file); log_file {} of config.toml is not used",
            from_flag.display(),
            from_config.display()
        )),
        "{stdout}"
    );
    env.mock.push(Reply::text(&["again"]));
    let (status, _, stderr) =
        run(&env, &["--log-file", from_flag.to_str().unwrap(), "exec", "--continue", "again"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(!std::fs::read_to_string(&from_flag).unwrap().is_empty());
    assert_eq!(std::fs::read_to_string(&from_config).unwrap(), logged, "the flag's file, not the config's");

    env.write_config("log_file = \"relative.log\"\n");
    let (status, _, stderr) = run(&env, &["sessions", "list"]).await;
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("log_file (config.toml): `relative.log` is relative"), "{stderr}");
}

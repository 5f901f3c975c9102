//! A stdio MCP server runs as local commands do: in the sandbox and namespace (guarded places
//! read-only, secrets hidden), supervised so that everything it starts, `setsid`'d or not, ends
//! with its session and with a killed cairn; `sandbox = false` in `config.toml` takes the
//! sandbox away for one server, not the supervision.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fixture_exe;
use crate::breaks::outside;
use crate::support::{Agent, Reply, TestEnv, alive, kernel_keeps_it, running_with};
use crate::tools::{set_mode, tool_results, turn};

/// A server the editor passes: `script` runs in bash, then the fixture takes its place.
fn scripted(name: &str, script: &str) -> Value {
    let script = format!("{script}\nexec {}", fixture_exe().display());
    json!({"name": name, "command": "bash", "args": ["-c", script], "env": []})
}

/// A session with `servers`, in bypass mode, once a call to `server`'s `echo` went through (so
/// the server started, its script done).
async fn session_with_ready(agent: &mut Agent, env: &TestEnv, servers: Value, server: &str) -> String {
    let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": servers})).await;
    let session = result["sessionId"].as_str().unwrap().to_owned();
    set_mode(agent, &session, "bypass").await;
    let tool = format!("mcp__{server}__echo");
    env.mock.push(Reply::tool_calls(&[("c1", tool.as_str(), json!({"text": "up"}))])).push(Reply::text(&["ok"]));
    let before = env.mock.requests().len();
    let (response, _) = turn(agent, &session, "start").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    if tool_results(env, before + 1).last().unwrap()["content"] != "echo: up" {
        let (_, notifications) = turn(agent, &session, "/mcp").await;
        panic!("the server did not start: {notifications:?}");
    }
    session
}

/// The pids (as this test sees them) of `sleep <seconds>`, waited for a little.
async fn sleeping(seconds: &str) -> Vec<String> {
    let started = Instant::now();
    loop {
        let found = running_with(&["sleep", seconds]);
        if !found.is_empty() || started.elapsed() > Duration::from_secs(10) {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn gone(pids: &[String]) -> bool {
    let started = Instant::now();
    while pids.iter().any(|pid| alive(pid)) {
        if started.elapsed() > Duration::from_secs(10) {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn a_server_cannot_write_hooks_or_read_secrets_unless_the_user_takes_its_sandbox_away() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let home = env.dir.path();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-BYTES").unwrap();
    std::fs::write(home.join("config/cairn/credentials.toml"), "[keys]\nopenai = \"sk-saved-secret\"\n").unwrap();
    let probe = |out: &str, hook: &str| {
        format!(
            "{{ cat .env ~/.ssh/id_ed25519 \"$XDG_CONFIG_HOME/cairn/credentials.toml\"; \
             echo x > .git/hooks/{hook} && echo hook-written; \
             echo '[alias]' >> .git/config && echo config-written; }} > {out} 2>&1"
        )
    };
    // The same probe from a server of config.toml that the user runs without the sandbox.
    let free = format!("{}; exec {}", probe("free.txt", "post-merge"), fixture_exe().display());
    env.write_config(&format!(
        "[mcp_servers.free]\ncommand = \"bash\"\nargs = [\"-c\", {}]\nsandbox = false\n",
        toml_string(&free)
    ));
    let mut agent = env.ready().await;
    let servers = json!([scripted("boxed", &probe("boxed.txt", "pre-commit"))]);
    session_with_ready(&mut agent, &env, servers, "boxed").await;

    let boxed = std::fs::read_to_string(ws.join("boxed.txt")).unwrap();
    for secret in ["hunter2", "PRIVATE-KEY", "sk-saved-secret", "hook-written", "config-written"] {
        assert!(!boxed.contains(secret), "the sandboxed server got {secret}: {boxed}");
    }
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(ws.join(".git/hooks/post-merge").exists(), "the server without the sandbox wrote its hook");
    let config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    assert_eq!(config, "[core]\n[alias]\n", "one line added, by the server without the sandbox");
    let free = std::fs::read_to_string(ws.join("free.txt")).unwrap();
    assert!(free.contains("hunter2") && free.contains("hook-written"), "sandbox = false: {free}");
}

#[tokio::test]
async fn what_a_server_starts_setsid_or_not_ends_with_its_session_and_with_a_killed_cairn() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    // Each server leaves a `setsid`'d sleep behind, which no process group reaches.
    let first = json!([scripted("fx", "setsid sleep 4331 >/dev/null 2>&1 < /dev/null &")]);
    let session = session_with_ready(&mut agent, &env, first, "fx").await;
    let second = json!([scripted("fx", "setsid sleep 4332 >/dev/null 2>&1 < /dev/null &")]);
    session_with_ready(&mut agent, &env, second, "fx").await;
    let (closed, killed) = (sleeping("4331").await, sleeping("4332").await);
    assert!(!closed.is_empty() && !killed.is_empty(), "the servers' sleeps run: {closed:?} {killed:?}");

    agent.call("session/close", json!({"sessionId": session})).await;
    assert!(gone(&closed).await, "closing the session ends what its server started");
    assert!(killed.iter().all(|pid| alive(pid)), "the other session's server and its sleep run on");

    agent.kill9().await;
    assert!(gone(&killed).await, "kill -9 of cairn ends what every server started");
}

/// `value` as a TOML basic string.
fn toml_string(value: &str) -> String {
    serde_json::to_string(value).unwrap()
}

#[tokio::test]
async fn a_server_that_fails_on_a_refused_write_is_told_where_to_allow_it() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    std::fs::create_dir_all(env.workspace().join(".git/hooks")).unwrap();
    let mut agent = env.ready().await;
    let servers = json!([scripted("cache", "echo x > .git/hooks/pre-push || exit 1")]);
    let result = agent.call("session/new", json!({"cwd": env.cwd(), "mcpServers": servers})).await;
    let session = result["sessionId"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let told = loop {
        let (_, notifications) = turn(&mut agent, &session, "/mcp").await;
        let text = notifications.iter().map(|n| n["content"]["text"].as_str().unwrap_or_default()).collect::<String>();
        if text.contains("failed") || started.elapsed() > Duration::from_secs(10) {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(told.contains("Read-only file system"), "{told}");
    assert!(told.contains("[sandbox] writable") && told.contains("sandbox = false in [mcp_servers.cache]"), "{told}");
}

/// A server lives all session while the user, the editor and the edit tools make guarded places
/// beside it (`.vscode/`, a new repository's hooks): none is taken away, during or after it.
#[tokio::test]
async fn what_others_make_beside_a_running_server_stays() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let mut agent = env.ready().await;
    let session = session_with_ready(&mut agent, &env, json!([scripted("fx", "true")]), "fx").await;
    std::fs::create_dir_all(ws.join(".vscode")).unwrap();
    std::fs::write(ws.join(".vscode/settings.json"), "{}").unwrap();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ws.join(".vscode/settings.json").exists(), "the user's .vscode was taken while the server ran");
    agent.call("session/close", json!({"sessionId": session})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(ws.join(".vscode/settings.json").exists() && ws.join(".git/hooks/pre-commit").exists());
}

/// A server the user runs without the sandbox, named by name, while the user's `PATH` starts
/// with a directory of the workspace (an activated virtualenv): a command planted a program of
/// that name there, which would run unconfined at the next session. It is passed over for the
/// one in a directory no command can write.
#[tokio::test]
async fn a_server_without_the_sandbox_is_never_taken_from_where_commands_write() {
    let mut env = TestEnv::new().await;
    // The user's own bin directory: outside every project and every place commands write (the
    // build's target directory may lie inside a checkout, which is a project).
    let safe = tempfile::Builder::new().prefix("cairn-test-bin-").tempdir_in("/var/tmp").unwrap();
    let (planted, marker) = (env.workspace().join(".venv/bin"), outside("mcp-ran"));
    let ran = marker.path().join("ran");
    let script = |first: &str| format!("#!/bin/sh\n{first}\nexec {} \"$@\"\n", fixture_exe().display());
    for (dir, body) in
        [(planted.clone(), script(&format!("echo ran > {}", ran.display()))), (safe.path().into(), script(""))]
    {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cairn-test-mcp"), body).unwrap();
        std::fs::set_permissions(dir.join("cairn-test-mcp"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let path = std::env::var("PATH").unwrap_or_default();
    env.set_env("PATH", &format!("{}:{}:{path}", planted.display(), safe.path().display()));
    env.write_config("[mcp_servers.free]\ncommand = \"cairn-test-mcp\"\nsandbox = false\n");
    let mut agent = env.ready().await;
    session_with_ready(&mut agent, &env, json!([]), "free").await;
    assert!(!ran.exists(), "the planted program ran outside the sandbox");
}

/// A server's `env` (here from the client, in `session/new`) is the server's alone: its
/// supervisor, cairn itself, runs unconfined until the sandbox is up, so a loader variable set on
/// it would run the client's code outside the sandbox. A library that notes which process loaded
/// it is preloaded through the server's `LD_PRELOAD`: the server's program loads it, its
/// supervisor never.
#[tokio::test]
async fn a_servers_variables_reach_the_server_and_never_its_supervisor() {
    let env = TestEnv::new().await;
    let dir = env.dir.path().canonicalize().unwrap();
    let (source, library, marks) = (dir.join("note.c"), dir.join("note.so"), dir.join("loaded-by.txt"));
    let code = format!(
        "#include <stdio.h>\n#include <string.h>\n\
         __attribute__((constructor)) static void note(void) {{\n\
           char line[4096] = {{0}}; FILE *cmd = fopen(\"/proc/self/cmdline\", \"r\");\n\
           if (!cmd) return; size_t n = fread(line, 1, sizeof line - 1, cmd); fclose(cmd);\n\
           for (size_t i = 0; i < n; i++) if (!line[i]) line[i] = ' ';\n\
           FILE *out = fopen(\"{}\", \"a\"); if (!out) return;\n\
           fprintf(out, \"%s\\n\", strstr(line, \"__supervise\") ? \"supervisor\" : \"program\"); fclose(out);\n\
         }}\n",
        marks.display()
    );
    std::fs::write(&source, code).unwrap();
    let built =
        std::process::Command::new("cc").arg("-shared").arg("-fPIC").arg("-o").arg(&library).arg(&source).status();
    if !built.is_ok_and(|status| status.success()) {
        println!("skipped: no C compiler to build the preloaded library");
        return;
    }
    let mut agent = env.ready().await;
    let mut server = scripted("noted", "true");
    server["env"] = json!([{"name": "LD_PRELOAD", "value": library.display().to_string()}]);
    session_with_ready(&mut agent, &env, json!([server]), "noted").await;
    let loaded = std::fs::read_to_string(&marks).unwrap_or_default();
    assert!(loaded.contains("program"), "the server's program did not get its LD_PRELOAD: {loaded:?}");
    assert!(!loaded.contains("supervisor"), "the unconfined supervisor loaded the client's library: {loaded:?}");
}

/// A server lives all session, and a program the user rejects meanwhile is refused to it too:
/// the server's own child waits, the user answers "Always reject" to an `rm` of the model's,
/// then the child's `rm` is refused at exec and what it would have removed stays.
#[tokio::test]
async fn a_program_the_user_rejects_while_a_server_runs_is_refused_to_the_server() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("victim"), "keep me").unwrap();
    std::fs::write(ws.join("decoy"), "keep me too").unwrap();
    let editor = crate::support::Editor::default();
    editor.answer(&["reject_always"]);
    let mut agent = env.ready_with(editor).await;
    let waits = "( while [ ! -e go ]; do sleep 0.05; done; rm victim > rm.out 2>&1; echo \"ended $?\" >> rm.out ) &";
    let session = session_with_ready(&mut agent, &env, json!([scripted("waiter", waits)]), "waiter").await;
    set_mode(&mut agent, &session, "ask").await;
    env.mock.push(Reply::tool_calls(&[("c2", "bash", json!({"command": "rm decoy"}))])).push(Reply::text(&["ok"]));
    let before = env.mock.requests().len();
    turn(&mut agent, &session, "remove it").await;
    let told = tool_results(&env, before + 1).last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(told.starts_with("The user denied this tool call."), "{told}");
    std::fs::write(ws.join("go"), "").unwrap();
    let started = Instant::now();
    let out = loop {
        let out = std::fs::read_to_string(ws.join("rm.out")).unwrap_or_default();
        if out.contains("ended") || started.elapsed() > Duration::from_secs(20) {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The gate's line goes to the server's stderr, its log; the child sees the refusal.
    assert!(out.contains("Operation not permitted") && out.contains("ended 126"), "{out}");
    assert!(ws.join("victim").exists(), "the server removed what the rule protects: {out}");
    assert!(ws.join("decoy").exists());
}

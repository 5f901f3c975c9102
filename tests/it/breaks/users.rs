//! The boundary for a user other than root, end to end: cairn decides once per process, by a
//! probe, whether commands get a namespace, and every other test drives the supervisor by hand
//! or runs as root, which takes another path (a mount namespace, no user mapping). Here root
//! drops to `nobody` with `setpriv` and runs `cairn exec` as an editor's user would.

use std::path::Path;
use std::process::Stdio;

use super::{committed, kernel_keeps_it, running_as_root, sh, sh_out};
use crate::support::{Reply, TestEnv};

/// `cairn exec ARGS` as `nobody`, with the test's environment; status and stderr. `None` where
/// root cannot drop to `nobody` here.
async fn exec_as_nobody(env: &TestEnv, args: &[&str]) -> Option<(Option<i32>, String)> {
    if !running_as_root() || sh_out(Path::new("/"), "command -v setpriv").is_empty() {
        println!("skipped: needs root and setpriv to drop to nobody; every other test runs as this user");
        return None;
    }
    sh(env.dir.path(), "chown -R 65534:65534 .");
    let mut command = env.with_env(tokio::process::Command::new("setpriv"));
    command.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_cairn"), "exec"]);
    let output = command.args(args).stdin(Stdio::null()).output().await.unwrap();
    Some((output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned()))
}

/// cairn makes itself undumpable, and an undumpable process's `/proc/self` files belong to
/// root: the probe's child could not write its own user mapping, so for every user but root
/// cairn said the kernel allowed no namespace and ran commands with `.env` readable and
/// `.git/hooks` writable.
#[tokio::test]
async fn a_user_other_than_root_gets_the_namespace_secrets_hidden_and_hooks_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    committed(&ws);
    std::fs::write(ws.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    let script = "cat .env; echo 'touch pwned' > .git/hooks/pre-commit; echo done";
    env.mock.push(Reply::tool_calls(&[("call_0", "bash", serde_json::json!({ "command": script }))]));
    env.mock.push(Reply::text(&["Done."]));
    let cwd = env.cwd();
    let Some((status, stderr)) = exec_as_nobody(&env, &["--cwd", &cwd, "--mode", "bypass", "go"]).await else {
        return;
    };
    assert_eq!(status, Some(0), "{stderr}");
    let result = crate::exec::tool_results(env.mock.requests().last().unwrap()).join("\n");
    assert!(result.contains("done"), "the command ran: {result}\n{stderr}");
    assert!(!result.contains("hunter2"), "the command read .env: {result}\n{stderr}");
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "the command wrote a hook: {result}");
    assert!(!stderr.contains("namespace"), "cairn said it has no namespace: {stderr}");
}

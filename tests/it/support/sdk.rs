//! The official Rust ACP client (`agent-client-protocol`, newest release) as a program the suite
//! builds itself: `tests/conformance/rust-sdk/` is a crate of its own with its own lock file,
//! because that SDK pins an older 1.x schema crate than cairn's and one lock file cannot hold
//! both. It is built once per version of its sources (`pinned`) into `<target>/conformance/`, and
//! driven by a JSON script ([`run`]); it parses every request and every update with the SDK's own
//! types, so an update the SDK rejects fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::TestEnv;
use super::pinned::{install_once, run as quiet, shown};

const SOURCES: [&str; 3] = [
    include_str!("../../conformance/rust-sdk/Cargo.toml"),
    include_str!("../../conformance/rust-sdk/Cargo.lock"),
    include_str!("../../conformance/rust-sdk/src/main.rs"),
];

/// The built client, building it first if needed. Panics, saying what to do, when it cannot.
pub fn client() -> PathBuf {
    let installed = install_once("rust-sdk", &SOURCES.concat(), |staging| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/rust-sdk");
        // Shared by every build of the client, so a change to its sources rebuilds only it.
        let target = staging.parent().ok_or("the staging directory has no parent")?.join("rust-sdk-target");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = quiet(Command::new(cargo).args(["build", "--locked", "--quiet", "--manifest-path"]))
            .arg(crate_dir.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .map_err(|err| format!("cannot run cargo: {err}"))?;
        if !output.status.success() {
            return Err(format!(
                "building the SDK client failed ({}); its first build needs crates.io (or a configured \
                 mirror).\n{}",
                output.status,
                shown(&output)
            ));
        }
        std::fs::copy(target.join("debug/acp-sdk-client"), staging.join("acp-sdk-client"))
            .map(drop)
            .map_err(|err| format!("cannot copy the built client: {err}"))
    });
    installed.join("acp-sdk-client")
}

/// Runs `script` (see the client's own documentation) against `cairn ARGS…` in `env`, and gives
/// back the client's transcript. Panics with the client's stderr when the client fails.
pub async fn run(env: &TestEnv, script: &Value, args: &[&str]) -> Value {
    let mut command = tokio::process::Command::new(client());
    command
        .env_clear()
        .envs(env.agent_env())
        .current_dir(env.workspace())
        .arg(script.to_string())
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(120), command.output())
        .await
        .expect("the SDK client finishes within two minutes")
        .expect("the SDK client starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK client failed ({}):\n{stderr}", output.status);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("the SDK client printed no transcript ({err}):\n{stderr}"))
}

/// The `sessionUpdate` payloads a transcript's step received, in order.
pub fn updates(step: &Value) -> Vec<Value> {
    step["updates"].as_array().into_iter().flatten().map(|n| n["update"].clone()).collect()
}

/// The text of the agent message chunks among `updates`.
pub fn agent_text(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

//! The official TypeScript ACP SDK for `cairn serve`'s tests, installed by the suite itself from
//! the npm registry: `tests/conformance/node/package.json` and its lock pin it and what it needs,
//! and `npm ci` installs exactly those (`pinned`) with the machine's Node.js (20 or later) and npm.
//! Anything missing (node, npm, the network to the registry) fails the test with what to install
//! or check.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::pinned::{install_once, run, shown};

const PACKAGE: &str = include_str!("../../conformance/node/package.json");
const LOCK: &str = include_str!("../../conformance/node/package-lock.json");

/// The directory holding `node_modules` with the pinned SDK, installing it first if needed.
pub fn ts_sdk() -> PathBuf {
    install_once("node", &format!("{PACKAGE}{LOCK}"), |staging| {
        let pins = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/node");
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(pins.join(file), staging.join(file)).map_err(|err| format!("cannot copy {file}: {err}"))?;
        }
        let output = run(Command::new("npm").args(["ci", "--ignore-scripts", "--no-audit", "--no-fund"]))
            .current_dir(staging)
            .output()
            .map_err(|err| {
                format!("cannot run npm ({err}): the TypeScript SDK's test needs Node.js 20 or later with npm on PATH")
            })?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "npm ci failed ({}): the test needs network access to the npm registry on its first run.\n{}",
            output.status,
            shown(&output)
        ))
    })
}

/// `node` with no environment but `PATH`.
pub fn node() -> tokio::process::Command {
    let mut command = tokio::process::Command::new("node");
    command.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

//! The Python ACP SDK for the conformance test, installed by the suite itself from PyPI.
//!
//! `tests/conformance/requirements.txt` pins the SDK and its dependencies. On first use they are
//! installed with `python3 -m pip install --target` (`pinned`), in a directory named after the
//! interpreter (`cpython-311`) and a hash of the pins. Anything
//! missing (python3, pip, the network to PyPI) fails the test with what to install or check: a
//! test that skips when it cannot run cannot fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::pinned::{install_once, run, shown};

/// The pins, as the install reads them.
const REQUIREMENTS: &str = include_str!("../../conformance/requirements.txt");

/// The Python interpreter the suite uses.
pub const PYTHON: &str = "python3";

/// The directory holding the pinned SDK (for `PYTHONPATH`), installing it first if needed.
/// Panics, saying what to do, when it cannot.
pub fn acp_sdk() -> PathBuf {
    let tag = interpreter_tag();
    install_once(&format!("python-{tag}"), REQUIREMENTS, |staging| {
        require_pip();
        let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/requirements.txt");
        let output = run(Command::new(PYTHON).args(["-m", "pip", "install"]).args([
            "--disable-pip-version-check",
            "--no-input",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
        ]))
        .arg(staging)
        .arg("-r")
        .arg(&requirements)
        .output()
        .map_err(|err| format!("cannot run `{PYTHON} -m pip`: {err}"))?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "pip failed ({}): the conformance test needs network access to PyPI (or pip configured for a \
             mirror) on its first run, to install {}.\n{}",
            output.status,
            requirements.display(),
            shown(&output)
        ))
    })
}

/// `python3` with the SDK first on its path, and only its own standard library besides.
pub fn python(sdk: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(PYTHON);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PYTHONPATH", sdk)
        .env("PYTHONNOUSERSITE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONIOENCODING", "utf-8");
    command
}

/// The interpreter's cache tag (`cpython-311`): compiled dependencies are built for one.
fn interpreter_tag() -> String {
    let check = "import sys; assert sys.version_info >= (3, 10), sys.version; print(sys.implementation.cache_tag)";
    let output = match run(Command::new(PYTHON).args(["-c", check])).output() {
        Ok(output) => output,
        Err(err) => panic!(
            "cannot run `{PYTHON}` ({err}): the conformance test drives cairn with the official Python ACP SDK, \
             which needs Python 3.10 or later with pip on PATH (Debian: apt-get install python3 python3-pip)"
        ),
    };
    let tag = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        output.status.success() && !tag.is_empty(),
        "the Python ACP SDK needs Python 3.10 or later as `{PYTHON}`:\n{}",
        shown(&output)
    );
    tag
}

fn require_pip() {
    let output = run(Command::new(PYTHON).args(["-m", "pip", "--version"])).output();
    let missing = match &output {
        Ok(output) if output.status.success() => return,
        Ok(output) => shown(output),
        Err(err) => err.to_string(),
    };
    panic!(
        "`{PYTHON} -m pip` does not run, and the conformance test installs the Python ACP SDK with it \
         (Debian: apt-get install python3-pip, or `{PYTHON} -m ensurepip`):\n{missing}"
    );
}

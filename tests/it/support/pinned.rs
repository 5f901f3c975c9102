//! Client libraries the suite installs itself, pinned, once per set of pins: into
//! `<target dir>/conformance/<name>`, where the name holds a hash of the pins, so later runs reuse
//! the install and a change of pins installs afresh. An install goes to a temporary directory
//! renamed into place when complete: a directory under its final name is whole, and of two
//! processes installing at once the first rename wins and the other drops its copy.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Written last into a complete install, holding the pins.
const STAMP: &str = "cairn-requirements.txt";

/// The install named `kind` plus a hash of `pins`, made by `install` (given an empty directory to
/// fill) when it is not there yet. `install` returns why it failed, which the panic says.
pub fn install_once(kind: &str, pins: &str, install: impl FnOnce(&Path) -> Result<(), String>) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("the target dir").join("conformance");
    let installed = root.join(format!("{kind}-{:016x}", fnv1a(pins)));
    if installed.join(STAMP).is_file() {
        return installed;
    }
    std::fs::create_dir_all(&root).unwrap_or_else(|err| panic!("cannot create {}: {err}", root.display()));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let staging = root.join(format!(".installing-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&staging).unwrap_or_else(|err| panic!("cannot create {}: {err}", staging.display()));
    if let Err(why) = install(&staging) {
        let _ = std::fs::remove_dir_all(&staging);
        panic!("installing into {} failed: {why}", installed.display());
    }
    std::fs::write(staging.join(STAMP), pins).expect("write the install's stamp");
    if installed.exists() && !installed.join(STAMP).is_file() {
        // A directory without the stamp is no complete install (one made by hand, say).
        let _ = std::fs::remove_dir_all(&installed);
    }
    if let Err(err) = std::fs::rename(&staging, &installed) {
        let _ = std::fs::remove_dir_all(&staging);
        // Another test process finished the same install first.
        assert!(installed.join(STAMP).is_file(), "cannot move the install into {}: {err}", installed.display());
    }
    installed
}

/// A command that inherits the environment (the installer's own settings, a mirror, a proxy)
/// but not stdin.
pub fn run(command: &mut Command) -> &mut Command {
    command.stdin(std::process::Stdio::null())
}

pub fn shown(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// FNV-1a: a hash that stays the same across Rust versions, for a directory name.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

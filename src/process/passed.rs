//! Variables meant for a supervised program alone (an MCP server's `env`, a checker's), passed
//! through its supervisor under other names.
//!
//! The supervisor is cairn itself, a dynamically linked program that runs unconfined until it
//! has set the sandbox up; a variable set on it is read by its loader and its C library before
//! any of cairn's code runs (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `GLIBC_TUNABLES`, `GCONV_PATH`, …).
//! A server's variables may come from a client (a server passed in `session/new`), so they never
//! reach the supervisor's own environment under their names: cairn sets each as
//! [`PREFIX`]`NAME`, which nothing reads, and the supervisor hands them to the program under
//! their own names once it starts it, inside the sandbox. A `PATH` among them is also the one the
//! program is looked up on, as it would be were it set directly.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

/// What a passed variable's name starts with in the supervisor's environment.
pub const PREFIX: &str = "CAIRN_PROGRAM_ENV_";

/// The name `name` is passed under.
pub fn wrapped(name: &str) -> String {
    format!("{PREFIX}{name}")
}

/// The passed variables in this process's environment: each under the name it is passed
/// under, its own name and its value.
pub fn passed() -> Vec<(OsString, OsString, OsString)> {
    std::env::vars_os()
        .filter_map(|(name, value)| {
            let own = name.as_bytes().strip_prefix(PREFIX.as_bytes())?;
            (!own.is_empty()).then(|| (name.clone(), OsStr::from_bytes(own).to_owned(), value))
        })
        .collect()
}

/// The `PATH` the program gets: a passed one, else this process's.
pub fn program_path() -> Option<OsString> {
    std::env::var_os(wrapped("PATH")).or_else(|| std::env::var_os("PATH"))
}

/// Gives `command` the passed variables under their own names, without the passed names.
pub fn apply(command: &mut std::process::Command) {
    for (passed, own, value) in passed() {
        command.env_remove(passed);
        command.env(own, value);
    }
}

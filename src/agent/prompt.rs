//! The system prompt: base instructions, then the environment the session runs in.
//!
//! Kept byte-stable for a session (no clock, no git status) so providers can cache the prefix.
//! Project instructions, skills and the tool catalog join it as later issues land, in the order
//! design.md §7 fixes.

use std::path::Path;

const BASE: &str = "You are cairn, a coding agent working inside the user's editor. \
Answer precisely and concisely. When you refer to code, name files by their paths relative to the \
working directory. Say so plainly when you are unsure.";

/// The system prompt for a session working in `cwd`.
pub fn system_prompt(cwd: &Path) -> String {
    format!(
        "{BASE}\n\n# Environment\n- Working directory: {}\n- Platform: {} ({})",
        cwd.display(),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

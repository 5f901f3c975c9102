//! What `glob` and `grep` share: the gitignore-aware walk (stopping when the call is cancelled),
//! glob patterns, and a plain text result.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use ignore::WalkBuilder;
use tokio_util::sync::CancellationToken;

use super::{ToolError, ToolOutcome};
use crate::history::ToolContent;

pub(super) fn text(output: String) -> ToolOutcome {
    ToolOutcome { content: vec![ToolContent::Text { text: output.clone() }], output, ..ToolOutcome::default() }
}

pub(super) fn compile_glob(pattern: &str) -> Result<GlobMatcher, ToolError> {
    Glob::new(pattern)
        .map(|glob| glob.compile_matcher())
        .map_err(|err| ToolError::Tell(format!("`{pattern}` is not a valid glob: {err}")))
}

/// Every file under `root` (or `root` itself if it is a file) that `.gitignore` does not exclude.
pub(super) fn walk(root: &Path, cancel: &CancellationToken) -> Result<Vec<PathBuf>, ToolError> {
    if !root.exists() {
        return Err(ToolError::Tell(format!("{} does not exist", root.display())));
    }
    let mut files = Vec::new();
    let walker = WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build();
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(ToolError::Tell("cancelled".into()));
        }
        let Ok(entry) = entry else { continue };
        if entry.file_type().is_some_and(|t| t.is_file()) {
            files.push(entry.into_path());
        }
    }
    files.sort();
    Ok(files)
}

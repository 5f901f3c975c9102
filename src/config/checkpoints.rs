//! `[checkpoints]`: the file checkpoints behind `/rewind` ([`CheckpointSettings`]): whether they
//! are taken (`enabled`), the largest file one keeps (`max_file_bytes`: a larger one is listed
//! as not covered), and how much stored content a session (`session_bytes`) and all sessions
//! (`total_bytes`) may keep, the oldest checkpoints dropped first. Every error names the setting.

use serde::Deserialize;

/// What bounds the checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointSettings {
    pub enabled: bool,
    /// Files larger than this are not captured: a restore lists them as not covered.
    pub max_file_bytes: u64,
    /// Content one session's checkpoints may keep before its oldest are dropped.
    pub session_bytes: u64,
    /// Content every session's checkpoints together may keep before the oldest are dropped.
    pub total_bytes: u64,
}

/// The default `max_file_bytes`: every source file; past it a file is data or a build product.
pub const DEFAULT_MAX_FILE: u64 = 4 << 20;
/// The default `session_bytes`.
pub const DEFAULT_SESSION_BYTES: u64 = 512 << 20;
/// The default `total_bytes`.
pub const DEFAULT_TOTAL_BYTES: u64 = 4 << 30;
/// The largest `max_file_bytes`: a file is held in memory whole while it is captured.
const MOST_MAX_FILE: u64 = 256 << 20;

impl Default for CheckpointSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            max_file_bytes: DEFAULT_MAX_FILE,
            session_bytes: DEFAULT_SESSION_BYTES,
            total_bytes: DEFAULT_TOTAL_BYTES,
        }
    }
}

/// `[checkpoints]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCheckpoints {
    enabled: Option<bool>,
    max_file_bytes: Option<u64>,
    session_bytes: Option<u64>,
    total_bytes: Option<u64>,
}

impl FileCheckpoints {
    /// The settings; a value out of its bounds is an error naming the setting.
    pub(super) fn resolve(&self) -> Result<CheckpointSettings, String> {
        let defaults = CheckpointSettings::default();
        let max_file_bytes = match self.max_file_bytes {
            None => defaults.max_file_bytes,
            Some(bytes) if bytes == 0 || bytes > MOST_MAX_FILE => {
                return Err(format!(
                    "[checkpoints] max_file_bytes = {bytes} is out of bounds; use from 1 to {MOST_MAX_FILE} \
                     (leave it out for {DEFAULT_MAX_FILE})"
                ));
            }
            Some(bytes) => bytes,
        };
        let session_bytes = self.session_bytes.unwrap_or(defaults.session_bytes);
        let total_bytes = self.total_bytes.unwrap_or(defaults.total_bytes);
        if session_bytes < max_file_bytes || total_bytes < session_bytes {
            return Err(format!(
                "[checkpoints] needs max_file_bytes ({max_file_bytes}) ≤ session_bytes ({session_bytes}) ≤ \
                 total_bytes ({total_bytes}); raise the larger ones or lower max_file_bytes"
            ));
        }
        Ok(CheckpointSettings { enabled: self.enabled.unwrap_or(true), max_file_bytes, session_bytes, total_bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<CheckpointSettings, String> {
        toml::from_str::<FileCheckpoints>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn defaults_keep_source_files_and_a_bounded_history() {
        assert_eq!(read("").unwrap(), CheckpointSettings::default());
        assert!(read("enabled = false").is_ok_and(|settings| !settings.enabled));
    }

    #[test]
    fn bounds_out_of_order_are_refused_by_name() {
        assert!(read("max_file_bytes = 0").unwrap_err().contains("max_file_bytes = 0"));
        let err = read("session_bytes = 10").unwrap_err();
        assert!(err.contains("session_bytes (10)"), "{err}");
        let err = read("session_bytes = 1073741824\ntotal_bytes = 1048576").unwrap_err();
        assert!(err.contains("total_bytes (1048576)"), "{err}");
    }
}

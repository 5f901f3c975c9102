//! `[jobs]`: a session's background processes ([`JobSettings`]): how many may run at once
//! (`max`) and how much of each one's output is kept (`output_bytes`, the oldest dropped
//! first), and the checks on those values. Every error names the setting.

use serde::Deserialize;

/// What bounds the background jobs of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobSettings {
    /// Jobs one session may have running at once.
    pub max: usize,
    /// Bytes of output kept per job (stdout and stderr together), the oldest dropped first; a
    /// read returns at most this much.
    pub output_bytes: usize,
}

/// The default `max`.
pub const DEFAULT_MAX_JOBS: usize = 8;
/// The most `max` may be: each job is a process tree and a supervisor.
pub const MOST_JOBS: usize = 64;
/// The default `output_bytes`.
pub const DEFAULT_JOB_OUTPUT: usize = 64 * 1024;
/// The bounds of `output_bytes`: a line or two at least, a few MiB at most (all of it may go
/// to the model in one read).
const LEAST_JOB_OUTPUT: usize = 1024;
const MOST_JOB_OUTPUT: usize = 4 * 1024 * 1024;

impl Default for JobSettings {
    fn default() -> Self {
        Self { max: DEFAULT_MAX_JOBS, output_bytes: DEFAULT_JOB_OUTPUT }
    }
}

/// `[jobs]` as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileJobs {
    max: Option<usize>,
    output_bytes: Option<usize>,
}

impl FileJobs {
    /// The settings; a value out of its bounds is an error naming the setting.
    pub(super) fn resolve(&self) -> Result<JobSettings, String> {
        let max = match self.max {
            None => DEFAULT_MAX_JOBS,
            Some(max) if max > MOST_JOBS => {
                return Err(format!("[jobs] max = {max} is more than {MOST_JOBS}; use at most that"));
            }
            // 0 turns background jobs off: `bash` refuses `background`.
            Some(max) => max,
        };
        let output_bytes = match self.output_bytes {
            None => DEFAULT_JOB_OUTPUT,
            Some(bytes) if !(LEAST_JOB_OUTPUT..=MOST_JOB_OUTPUT).contains(&bytes) => {
                return Err(format!(
                    "[jobs] output_bytes = {bytes} is out of bounds; use from {LEAST_JOB_OUTPUT} to {MOST_JOB_OUTPUT} \
                     (leave it out for {DEFAULT_JOB_OUTPUT})"
                ));
            }
            Some(bytes) => bytes,
        };
        Ok(JobSettings { max, output_bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(text: &str) -> Result<JobSettings, String> {
        toml::from_str::<FileJobs>(text).map_err(|err| err.to_string())?.resolve()
    }

    #[test]
    fn eight_jobs_of_64_kib_unless_the_file_says_otherwise() {
        assert_eq!(resolve("").unwrap(), JobSettings { max: 8, output_bytes: 65536 });
        assert_eq!(resolve("max = 2\noutput_bytes = 4096").unwrap(), JobSettings { max: 2, output_bytes: 4096 });
        assert_eq!(resolve("max = 0").unwrap().max, 0, "0 turns jobs off");
    }

    #[test]
    fn a_bad_value_names_the_setting() {
        assert!(resolve("max = 65").unwrap_err().starts_with("[jobs] max = 65"));
        assert!(resolve("output_bytes = 10").unwrap_err().starts_with("[jobs] output_bytes = 10"));
        assert!(resolve("output_bytes = 99999999").unwrap_err().contains("out of bounds"));
        assert!(resolve("maximum = 3").unwrap_err().contains("maximum"));
    }
}

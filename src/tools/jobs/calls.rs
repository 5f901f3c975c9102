//! The tools that reach a session's jobs by id: `job_output` (what a job printed since the last
//! read, its state, optionally waiting for output or a pattern), `job_input` (bytes to its
//! stdin) and `job_kill`. Each finds the job through its own session's [`super::Jobs`], so an
//! id of another session's job is not found.
//!
//! Permissions: reading and killing a job of one's own session ask nothing (the command was
//! allowed when it started, and ending it only stops it). What `job_input` writes is judged as a
//! tool cairn cannot see into, whatever it says: a job may be a shell, an interpreter or a
//! program waiting for a confirmation, so even an empty line may do anything (it asks, unless a
//! `tool:job_input` rule allows it; refused while planning and in read-only mode).

use std::time::Duration;

use grep_matcher::Matcher as _;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::ring::Unread;
use super::{Ask, Input, JobError, JobHandle, JobState};
use crate::history::{ToolContent, ToolKind};
use crate::permissions::PermissionRequest;
use crate::tools::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};

/// The longest `job_output` may wait.
const MAX_WAIT_SECS: u64 = 600;
/// How often a waiting read looks again when nothing told it of new output (an editor's
/// terminal tells nothing until asked).
const LOOK_EVERY: Duration = Duration::from_millis(200);
/// The least time between two looks at a job's unread output while waiting for more: a flood
/// of small pieces costs at most ten copies and scans of it a second (each at most `[jobs]
/// output_bytes`), not one per piece.
const RESCAN_AFTER: Duration = Duration::from_millis(100);
/// The most `job_input` writes at once.
const MAX_INPUT: usize = 64 * 1024;
/// How long `job_input` waits for the job to take its input.
const INPUT_WAIT: Duration = Duration::from_secs(5);

pub struct JobOutput;
pub struct JobInput;
pub struct JobKill;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobOutputArgs {
    /// The job's id, as `bash` with `background: true` gave it
    pub job: u32,
    /// Wait up to this many seconds for new output (or for `pattern`, or the job's end); default 0
    #[serde(default)]
    pub wait_secs: Option<u64>,
    /// With `wait_secs`: wait until the unread output matches this regular expression
    #[serde(default)]
    pub pattern: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInputArgs {
    pub job: u32,
    /// Written as it is: end a line with \n
    pub text: String,
    /// Close the job's stdin after the text
    #[serde(default)]
    pub eof: bool,
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobKillArgs {
    pub job: u32,
}

/// What a read tells the model: the note of dropped output, the text, and the job's state.
fn report(id: u32, (unread, state): (Unread, JobState), cap: usize) -> ToolOutcome {
    let mut output = String::new();
    if let Some(note) = unread.dropped.note(cap) {
        output.push_str(&note);
        output.push('\n');
    }
    if unread.text.is_empty() && unread.dropped.bytes == 0 {
        output.push_str("[no new output]\n");
    } else {
        output.push_str(&unread.text);
        if !unread.text.ends_with('\n') {
            output.push('\n');
        }
    }
    output.push_str(&format!("[job {id}: {state}]"));
    ToolOutcome { content: vec![ToolContent::Text { text: output.clone() }], output, ..ToolOutcome::default() }
}

#[async_trait::async_trait]
impl Tool for JobOutput {
    type Args = JobOutputArgs;

    fn name(&self) -> &str {
        "job_output"
    }

    fn description(&self) -> &str {
        "Read what a background job printed (stdout and stderr) since the last read, and whether it still runs or how it ended. With wait_secs, wait for new output first (or for output matching pattern, or the job's end)."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    fn parameters(&self) -> Value {
        crate::tools::schema_of::<JobOutputArgs>()
    }

    fn parse(&self, input: &str) -> Result<JobOutputArgs, ToolError> {
        let args: JobOutputArgs = crate::tools::registry::parse_args(self.name(), input, &|| self.parameters())?;
        if let Some(pattern) = &args.pattern {
            matcher(pattern)?;
        }
        Ok(args)
    }

    fn access(&self, _args: &JobOutputArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &JobOutputArgs, _workspace: &Workspace) -> String {
        match (args.wait_secs.filter(|secs| *secs > 0), &args.pattern) {
            (Some(secs), Some(pattern)) => format!("Wait up to {secs} s for `{pattern}` from job {}", args.job),
            (Some(secs), None) => format!("Wait up to {secs} s for output of job {}", args.job),
            (None, _) => format!("Read output of job {}", args.job),
        }
    }

    fn permission(&self, _args: &JobOutputArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }

    fn timeout(&self, args: &JobOutputArgs, default: Duration) -> Duration {
        default.max(wait_of(args) + Duration::from_secs(10))
    }

    async fn run(&self, args: &JobOutputArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let job = ctx.jobs.get(args.job).await?;
        let pattern = args.pattern.as_deref().map(matcher).transpose()?;
        let deadline = tokio::time::Instant::now() + wait_of(args);
        let mut progress = job.progress.clone();
        while tokio::time::Instant::now() < deadline {
            let (unread, state) = job.ask(Ask::Peek).await;
            let seen = match &pattern {
                Some(pattern) => pattern.is_match(unread.text.as_bytes()).unwrap_or(false),
                None => !unread.text.is_empty() || unread.dropped.bytes > 0,
            };
            if seen || state != JobState::Running {
                break;
            }
            progress.borrow_and_update();
            // Output arriving in many small pieces is looked at again at most every
            // `RESCAN_AFTER`: each look copies and scans all that is unread.
            let next_look = (tokio::time::Instant::now() + RESCAN_AFTER).min(deadline);
            let changed = async {
                let _ = progress.changed().await;
                tokio::time::sleep_until(next_look).await;
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(LOOK_EVERY) => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = ctx.cancel.cancelled() => return Err(ToolError::Tell("Cancelled while waiting for the job's output; it still runs.".into())),
            }
        }
        Ok(report(args.job, job.ask(Ask::Take).await, ctx.jobs.settings().output_bytes))
    }
}

fn wait_of(args: &JobOutputArgs) -> Duration {
    Duration::from_secs(args.wait_secs.unwrap_or(0).min(MAX_WAIT_SECS))
}

fn matcher(pattern: &str) -> Result<grep_regex::RegexMatcher, ToolError> {
    grep_regex::RegexMatcherBuilder::new()
        .multi_line(true)
        .build(pattern)
        .map_err(|err| ToolError::Tell(format!("`pattern` is not a valid regular expression: {err}")))
}

#[async_trait::async_trait]
impl Tool for JobInput {
    type Args = JobInputArgs;

    fn name(&self) -> &str {
        "job_input"
    }

    fn description(&self) -> &str {
        "Write text to a background job's stdin (include \\n to end a line); eof closes its stdin after the text. Each write is approved by the user unless a rule allows it."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }

    fn parameters(&self) -> Value {
        crate::tools::schema_of::<JobInputArgs>()
    }

    fn parse(&self, input: &str) -> Result<JobInputArgs, ToolError> {
        let args: JobInputArgs = crate::tools::registry::parse_args(self.name(), input, &|| self.parameters())?;
        if args.text.len() > MAX_INPUT {
            return Err(ToolError::Tell(format!(
                "`text` is {} bytes; write at most {MAX_INPUT} at once, in several calls",
                args.text.len()
            )));
        }
        Ok(args)
    }

    fn access(&self, _args: &JobInputArgs) -> Access {
        Access::Execute
    }

    fn title(&self, args: &JobInputArgs, _workspace: &Workspace) -> String {
        let eof = if args.eof { " and close its input" } else { "" };
        format!("Write `{}` to job {}{eof}", crate::tools::one_line(&args.text), args.job)
    }

    /// Judged as a tool cairn cannot see into, whatever the text: the job may be a shell, an
    /// interpreter or a program waiting for a confirmation, so even an empty line (an Enter
    /// answering `[Y/n]`) or a line a shell would read as harmless may do anything. It asks in
    /// ask and accept-edits mode unless a `tool:job_input` rule allows it, is refused in plan and
    /// read-only mode, and runs in bypass.
    fn permission(&self, _args: &JobInputArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_tool(self.name(), "the background job it writes to", false))
    }

    async fn preview(&self, args: &JobInputArgs, _ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        Ok(vec![ToolContent::Text { text: args.text.clone() }])
    }

    async fn run(&self, args: &JobInputArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let job: JobHandle = ctx.jobs.get(args.job).await?;
        let Some(input) = &job.input else { return Err(JobError::NoInput(args.job).into()) };
        if job.progress.borrow().state != JobState::Running {
            let state = job.progress.borrow().state.clone();
            return Err(JobError::InputClosed { id: args.job, why: format!("it {state}") }.into());
        }
        let (reply, written) = tokio::sync::oneshot::channel();
        let bytes = args.text.as_bytes().to_vec();
        input.try_send(Input { bytes, eof: args.eof, reply }).map_err(|err| match err {
            tokio::sync::mpsc::error::TrySendError::Full(_) => ToolError::Tell(format!(
                "job {} has not read the input written before yet; read its output, or end it with job_kill",
                args.job
            )),
            tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                JobError::InputClosed { id: args.job, why: "it was closed".into() }.into()
            }
        })?;
        let told = tokio::select! {
            written = written => match written {
                Ok(Ok(())) => format!("Wrote {} bytes to job {}.", args.text.len(), args.job),
                Ok(Err(why)) => return Err(JobError::InputClosed { id: args.job, why }.into()),
                Err(_) => return Err(JobError::InputClosed { id: args.job, why: "the job ended".into() }.into()),
            },
            () = tokio::time::sleep(INPUT_WAIT) => format!(
                "Job {} has not read all of the input within {} s; the rest is written as it reads.",
                args.job,
                INPUT_WAIT.as_secs()
            ),
            () = ctx.cancel.cancelled() => return Err(ToolError::Tell("Cancelled; the input may be written still.".into())),
        };
        let told = if args.eof { format!("{told} Its stdin is closed.") } else { told };
        Ok(ToolOutcome {
            output: told.clone(),
            content: vec![ToolContent::Text { text: told }],
            ..ToolOutcome::default()
        })
    }
}

#[async_trait::async_trait]
impl Tool for JobKill {
    type Args = JobKillArgs;

    fn name(&self) -> &str {
        "job_kill"
    }

    fn description(&self) -> &str {
        "End a background job and everything it started; returns its last output and how it ended. A job that already ended is left as it is."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }

    fn parameters(&self) -> Value {
        crate::tools::schema_of::<JobKillArgs>()
    }

    fn access(&self, _args: &JobKillArgs) -> Access {
        Access::Execute
    }

    fn title(&self, args: &JobKillArgs, _workspace: &Workspace) -> String {
        format!("End job {}", args.job)
    }

    /// Ending a job of one's own session only stops what was allowed to run.
    fn permission(&self, _args: &JobKillArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }

    async fn run(&self, args: &JobKillArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let job = ctx.jobs.get(args.job).await?;
        tokio::select! {
            () = job.kill() => {}
            () = ctx.cancel.cancelled() => return Err(ToolError::Tell("Cancelled while the job was being ended.".into())),
        }
        Ok(report(args.job, job.ask(Ask::Take).await, ctx.jobs.settings().output_bytes))
    }
}

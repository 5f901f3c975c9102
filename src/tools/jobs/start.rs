//! Starting a job for `bash` with `background: true`: a place is reserved first (refused while
//! `[jobs] max` run), then the command starts as a `bash` call's would, in an editor terminal
//! when the client offers them (confined the same way), else as a local process under cairn's
//! supervisor and sandbox with its stdin piped. The call answers at once with the job's id.

use std::ffi::OsStr;
use std::sync::Arc;

use super::{JobError, JobHandle, local, terminal};
use crate::history::ToolContent;
use crate::process::Confinement;
use crate::tools::shell;
use crate::tools::{ToolContext, ToolError, ToolOutcome};

impl From<JobError> for ToolError {
    fn from(err: JobError) -> Self {
        ToolError::Tell(err.to_string())
    }
}

/// Starts `line` as a job of the call's session.
pub async fn start(line: &str, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let slot = ctx.jobs.reserve(line).await?;
    let cap = ctx.jobs.settings().output_bytes;
    crate::process::running::prepare().await;
    let request = ctx.host.terminals().and_then(|_| shell::terminal_request(line, ctx, cap as u64, true));
    let (handle, terminal, pid): (JobHandle, Option<String>, Option<u32>) = match (ctx.host.terminals(), request) {
        (Some(terminals), Some(request)) => {
            let running = crate::process::running::admit(ctx.process.reach(ctx.workspace.roots())).await;
            let id = terminals
                .create_terminal(&request)
                .await
                .map_err(|err| ToolError::Tell(format!("cannot start the job: {err}")))?;
            // Its task kills and releases it, however it ends.
            let handle =
                terminal::spawn(Arc::clone(&ctx.host), id.clone(), running, cap, slot.cancel.clone(), slot.reporter());
            (handle, Some(id), None)
        }
        (_, _) => {
            let script = [OsStr::new("-c"), OsStr::new(line)];
            let confinement = Confinement {
                roots: ctx.workspace.roots(),
                rejected: &ctx.rejected,
                rules: ctx.rulebook.as_deref().map(crate::process::Rulebook::path),
            };
            let local = ctx
                .process
                .spawn_job(OsStr::new("bash"), &script, &[], ctx.workspace.cwd(), confinement)
                .await
                .map_err(|err| ToolError::Tell(format!("cannot start bash: {err}")))?;
            let pid = local.id();
            (local::spawn(local, cap, slot.cancel.clone(), slot.reporter()), None, pid)
        }
    };
    let id = slot.id;
    slot.adopt(handle, terminal.clone(), pid);
    let output = format!(
        "Started job {id}; it runs in the background until it ends, job_kill ends it, or the session closes. \
         Read what it prints with job_output (job {id}; `wait_secs` and `pattern` wait for output), write to its \
         stdin with job_input."
    );
    let content = match terminal {
        Some(terminal_id) => vec![ToolContent::Terminal { terminal_id }],
        None => vec![ToolContent::Text { text: format!("Job {id} started.") }],
    };
    Ok(ToolOutcome { output, content, ..ToolOutcome::default() })
}

//! The context a tool call runs (or is previewed) with: the turn's workspace, editor, rules and
//! limits as a [`ToolContext`], and how its local commands start (read-only while planning).

use tokio::sync::mpsc;

use super::Turn;
use crate::history::ToolContent;
use crate::permissions::{Action, Mode, Permission};
use crate::tools::ToolContext;

/// The context a tool runs (or is previewed) with.
pub(super) fn context(
    turn: &Turn<'_>,
    cancel: tokio_util::sync::CancellationToken,
    progress: Option<mpsc::UnboundedSender<Vec<ToolContent>>>,
    call_id: String,
) -> ToolContext {
    ToolContext {
        workspace: turn.tools.workspace.clone(),
        host: std::sync::Arc::clone(&turn.tools.host),
        cancel,
        progress,
        process: processes(turn),
        rejected: crate::permissions::rejected_programs(turn.tools.rules),
        rulebook: turn.tools.rulebook.clone(),
        caller: None,
        call_id,
        user_wait: turn.run.user_wait.clone(),
        trace: turn.run.trace.clone(),
        images: crate::tools::Images {
            accepted: turn.info.images,
            max_bytes: turn.limits.image_max_bytes,
            read: std::sync::Arc::clone(&turn.run.images_read),
        },
        read_rejections: turn
            .tools
            .rules
            .iter()
            .filter(|rule| rule.permission == Permission::Read && rule.action == Action::Deny)
            .cloned()
            .collect(),
        judged: None,
        jobs: turn.tools.jobs.clone(),
        checks: std::sync::Arc::clone(&turn.limits.checks),
        lsp: turn.tools.lsp.clone(),
        fetch: crate::tools::Fetching {
            settings: turn.limits.fetch.clone(),
            mode: *turn.tools.mode.borrow(),
            rules: turn.tools.rules.iter().filter(|rule| rule.permission == Permission::Fetch).cloned().collect(),
        },
    }
}

/// How the call's local commands start. While planning, a sandbox that lets the workspace be
/// written lets nothing be written instead: a line the parser took for a reader cannot write
/// either.
fn processes(turn: &Turn<'_>) -> std::sync::Arc<crate::process::ProcessPolicy> {
    let policy = &turn.tools.process;
    if *turn.tools.mode.borrow() == Mode::Plan && policy.sandbox == crate::process::SandboxMode::WorkspaceWrite {
        let read_only =
            crate::process::ProcessPolicy { sandbox: crate::process::SandboxMode::ReadOnly, ..(**policy).clone() };
        return std::sync::Arc::new(read_only);
    }
    std::sync::Arc::clone(policy)
}

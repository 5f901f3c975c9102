//! `exit_plan`: the model, in plan mode, presents its plan (Markdown) and asks to leave plan
//! mode to carry it out.
//!
//! The tool names the call, checks the plan and shows it; what happens then is not the tool's
//! to decide. Its permission request (`PermissionRequest::for_plan`) is judged by the mode
//! alone: refused outside plan mode, and in plan mode it is the plan review, which the turn
//! holds (`agent::review`): the plan shown as the session's plan document and on the card, the
//! user asked to implement it (in ask or accept-edits mode) or to keep planning, the mode
//! switched by the answer. So [`Tool::run`] is reached only if that review is bypassed, and then
//! refuses.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::{ToolContent, ToolKind};
use crate::permissions::PermissionRequest;

/// The name the model calls it by.
pub const NAME: &str = "exit_plan";
/// The longest plan taken, in bytes: a plan is read by a person.
const MAX_PLAN: usize = 64 * 1024;

pub struct ExitPlan;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExitPlanArgs {
    /// The whole plan in Markdown, as the user will review it: the goal, what changes in which files and how, the steps in order, and how the result will be checked.
    pub plan: String,
}

#[async_trait::async_trait]
impl Tool for ExitPlan {
    type Args = ExitPlanArgs;

    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Present your plan to the user and ask to leave plan mode. Only in plan mode, and only once the \
         plan is complete: the user reads it and either approves it (the session leaves plan mode, and \
         you implement the plan) or asks you to keep planning (you get what they want changed). Do not \
         ask whether the plan is fine in your reply instead; this tool is how the user approves it."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::SwitchMode
    }

    fn parameters(&self) -> Value {
        super::schema_of::<ExitPlanArgs>()
    }

    fn parse(&self, input: &str) -> Result<ExitPlanArgs, ToolError> {
        let args: ExitPlanArgs = super::registry::parse_args(self.name(), input, &|| self.parameters())?;
        if args.plan.trim().is_empty() {
            return Err(ToolError::Tell("`plan` is empty: write the whole plan in Markdown.".into()));
        }
        if args.plan.len() > MAX_PLAN {
            return Err(ToolError::Tell(format!(
                "The plan is {} KiB, more than a person reviews: keep it under {} KiB, naming files and steps \
                 rather than quoting code.",
                args.plan.len() / 1024,
                MAX_PLAN / 1024
            )));
        }
        Ok(args)
    }

    /// Runs alone: it waits for the user.
    fn access(&self, _args: &ExitPlanArgs) -> Access {
        Access::Other
    }

    /// `Plan: ` and the plan's first line, its heading marks left out.
    fn title(&self, args: &ExitPlanArgs, _workspace: &Workspace) -> String {
        let first = args.plan.lines().map(|line| line.trim_start_matches('#').trim()).find(|line| !line.is_empty());
        format!("Plan: {}", first.unwrap_or_default())
    }

    fn permission(&self, _args: &ExitPlanArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        Some(PermissionRequest::for_plan(NAME))
    }

    /// The plan, as the card shows it while the user reviews it.
    async fn preview(&self, args: &ExitPlanArgs, _ctx: &ToolContext) -> Result<Vec<ToolContent>, ToolError> {
        Ok(vec![ToolContent::Text { text: plan_text(args) }])
    }

    async fn run(&self, _args: &ExitPlanArgs, _ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        Err(ToolError::Tell(
            "exit_plan only runs as the user's review of a plan, in plan mode; nothing was changed.".into(),
        ))
    }
}

/// The plan as shown and stored: the model's Markdown, trimmed.
fn plan_text(args: &ExitPlanArgs) -> String {
    args.plan.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_must_say_something_a_person_can_read_through() {
        let empty = ExitPlan.parse(r#"{"plan": "  \n "}"#).unwrap_err();
        assert!(empty.to_string().contains("`plan` is empty"), "{empty}");
        let huge = serde_json::json!({ "plan": "x".repeat(MAX_PLAN + 1) }).to_string();
        let huge = ExitPlan.parse(&huge).unwrap_err();
        assert!(huge.to_string().contains("keep it under 64 KiB"), "{huge}");
        let unknown = ExitPlan.parse(r#"{"plan": "x", "mode": "bypass"}"#).unwrap_err();
        assert!(unknown.to_string().contains("mode"), "{unknown}");
        let args = ExitPlan.parse("{\"plan\": \"\\n## Add a cache\\n\\n1. Read\"}").unwrap();
        let workspace = Workspace::new(std::path::Path::new("/w"), &[]);
        assert_eq!(ExitPlan.title(&args, &workspace), "Plan: Add a cache");
        assert_eq!(plan_text(&args), "## Add a cache\n\n1. Read");
        assert_eq!(ExitPlan.permission(&args, &workspace).map(|request| request.target), Some(NAME.to_owned()));
    }
}

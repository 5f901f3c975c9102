//! `todo`: replaces the plan the editor shows (the todo list). It touches nothing and needs no
//! permission; more than one item in progress earns the model a reminder to finish one first.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::{PlanEntry, PlanPriority, PlanStatus, ToolKind};
use crate::permissions::PermissionRequest;

pub struct Todo;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoArgs {
    pub items: Vec<TodoItem>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    pub content: String,
    pub status: PlanStatus,
    #[serde(default)]
    pub priority: Option<PlanPriority>,
}

#[async_trait::async_trait]
impl Tool for Todo {
    type Args = TodoArgs;

    fn name(&self) -> &str {
        "todo"
    }

    fn description(&self) -> &str {
        "Replace the plan (the todo list shown to the user) with these items."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Think
    }

    fn parameters(&self) -> Value {
        super::schema_of::<TodoArgs>()
    }

    fn access(&self, _args: &TodoArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, _args: &TodoArgs, _workspace: &Workspace) -> String {
        "Update the plan".to_owned()
    }

    fn permission(&self, _args: &TodoArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }

    async fn run(&self, args: &TodoArgs, _ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        Ok(plan(args))
    }
}

fn plan(todo: &TodoArgs) -> ToolOutcome {
    let plan: Vec<PlanEntry> = todo
        .items
        .iter()
        .map(|item| PlanEntry {
            content: item.content.clone(),
            status: item.status,
            priority: item.priority.unwrap_or(PlanPriority::Medium),
        })
        .collect();
    let done = plan.iter().filter(|e| e.status == PlanStatus::Completed).count();
    let working = plan.iter().filter(|e| e.status == PlanStatus::InProgress).count();
    let reminder = (working > 1).then(|| {
        format!(
            "{working} todo items are in_progress at once. Work on one item at a time: finish it, mark it completed, then start the next."
        )
    });
    ToolOutcome {
        output: format!("The plan now has {} items, {done} completed.", plan.len()),
        plan: Some(plan),
        reminder,
        ..ToolOutcome::default()
    }
}

//! A tool call as stored: its input, its place in the call lifecycle, what the editor was shown
//! and what the model is told.
//!
//! [`CallState`] is a tool call's lifecycle (New → Running → Succeeded | Failed | Cancelled,
//! with Suspended → Resuming while a permission is pending); [`CallState::advance`] is the one place
//! that decides which moves are legal, and terminal states never change. A finished call's
//! images ([`ToolImage`], base64) go to the model beside its output and are shown on its card
//! after its content: each is stored once.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Output longer than this many characters reaches the model snipped.
pub const SNIP_OVER: usize = 20_000;
/// How much of the head and of the tail of a snipped output the model still sees.
pub const SNIP_KEEP: usize = 2_000;

/// A tool call the model made, with everything shown about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolPart {
    pub call_id: String,
    pub name: String,
    /// The arguments exactly as the model produced them (a JSON text, possibly malformed).
    pub input: String,
    pub state: CallState,
    /// What the editor shows, e.g. "Read src/lib.rs".
    #[serde(default)]
    pub title: String,
    #[serde(default = "ToolKind::other")]
    pub kind: ToolKind,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<Location>,
    /// What the editor shows as the call's content (text, diffs, terminals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolContent>,
    /// The full result for the model; snipped only when it is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Images the model is sent beside `output` (a `read` of a picture); the editor shows them
    /// too, after `content`, so each is stored once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ToolImage>,
    /// The todo list this call set, shown as the session's plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<PlanEntry>>,
    /// The plan this call presented for review (`exit_plan`, Markdown), shown as the session's
    /// plan document from the moment the user is asked about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// The model is still writing the arguments: the call is stored (so the message's parts keep
    /// their numbers) but not shown, live or replayed, until they are complete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
    /// Run by the model's provider, not here (its web search): shown and stored like any call,
    /// never run, never sent back to the model (the answer that follows carries what it found).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hosted: bool,
}

impl ToolPart {
    /// A call the model has just named; its arguments may still be streaming.
    pub fn new(call_id: String, name: String) -> Self {
        Self {
            title: name.clone(),
            call_id,
            name,
            input: String::new(),
            state: CallState::New,
            kind: ToolKind::Other,
            locations: Vec::new(),
            content: Vec::new(),
            output: None,
            images: Vec::new(),
            plan: None,
            document: None,
            streaming: false,
            hosted: false,
        }
    }

    /// What the model is told about this call: its output, snipped to head and tail when long.
    pub fn model_output(&self) -> Cow<'_, str> {
        let output = match (self.state, self.output.as_deref()) {
            (CallState::New | CallState::Suspended | CallState::Resuming | CallState::Running, _) => {
                return Cow::Borrowed("The tool call was interrupted before it produced a result.");
            }
            (_, Some(output)) => output,
            (_, None) => "",
        };
        snip(output)
    }

    /// The images the model is sent with its output: those of a finished call only.
    pub fn model_images(&self) -> &[ToolImage] {
        if self.state.is_terminal() { &self.images } else { &[] }
    }
}

/// An image a tool returned for the model to see, as base64 `data`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolImage {
    pub mime_type: String,
    pub data: String,
}

impl ToolImage {
    /// How many bytes `data` decodes to.
    pub fn size(&self) -> usize {
        decoded_size(&self.data)
    }
}

/// How many bytes the base64 `data` decodes to.
pub fn decoded_size(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// `text` as the model sees it: whole up to [`SNIP_OVER`] characters, else head and tail.
pub fn snip(text: &str) -> Cow<'_, str> {
    let total = text.chars().count();
    if total <= SNIP_OVER {
        return Cow::Borrowed(text);
    }
    let head: String = text.chars().take(SNIP_KEEP).collect();
    let tail: String = text.chars().skip(total - SNIP_KEEP).collect();
    let omitted = total - 2 * SNIP_KEEP;
    Cow::Owned(format!(
        "{head}\n[... {omitted} characters snipped; the full output was {total} characters. Narrow the request to see the middle ...]\n{tail}"
    ))
}

/// Where a tool call is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    /// Named by the model; not started.
    New,
    /// Waiting for the user's permission.
    Suspended,
    /// Permission granted; about to run.
    Resuming,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

/// A move the lifecycle does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a tool call cannot go from {from:?} to {to:?}")]
pub struct IllegalTransition {
    pub from: CallState,
    pub to: CallState,
}

impl CallState {
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::New => "new",
            CallState::Suspended => "suspended",
            CallState::Resuming => "resuming",
            CallState::Running => "running",
            CallState::Succeeded => "succeeded",
            CallState::Failed => "failed",
            CallState::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        match self {
            CallState::Succeeded | CallState::Failed | CallState::Cancelled => true,
            CallState::New | CallState::Suspended | CallState::Resuming | CallState::Running => false,
        }
    }

    /// Moves to `to` if the lifecycle allows it.
    pub fn advance(&mut self, to: CallState) -> Result<(), IllegalTransition> {
        use CallState::{Cancelled, Failed, New, Resuming, Running, Succeeded, Suspended};
        let legal = match (*self, to) {
            (New, Running | Suspended | Failed | Cancelled) => true,
            (Suspended, Resuming | Cancelled) => true,
            (Resuming, Running | Suspended | Failed | Cancelled) => true,
            (Running, Succeeded | Failed | Cancelled) => true,
            (New | Suspended | Resuming | Running | Succeeded | Failed | Cancelled, _) => false,
        };
        if legal {
            *self = to;
            Ok(())
        } else {
            Err(IllegalTransition { from: *self, to })
        }
    }
}

/// The editor's icon for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Search,
    Execute,
    Think,
    /// Reads a web page.
    Fetch,
    /// Changes the session's mode (`exit_plan`).
    SwitchMode,
    Other,
}

impl ToolKind {
    fn other() -> Self {
        ToolKind::Other
    }
}

/// A file a call touches, for "follow the agent".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    /// Absolute.
    pub path: String,
    /// 1-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// What a call shows in the editor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolContent {
    Text {
        text: String,
    },
    /// A whole-file change; `old_text` is `None` for a new file.
    Diff {
        path: String,
        old_text: Option<String>,
        new_text: String,
    },
    /// A terminal the editor runs and renders.
    Terminal {
        terminal_id: String,
    },
    /// An image a tool returned (an MCP server's), as base64 `data`.
    Image {
        mime_type: String,
        data: String,
    },
    /// The session a call works through: a `task` call's sub-agent.
    Session {
        session_id: String,
    },
}

/// One entry of the agent's plan (the todo list).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub content: String,
    pub status: PlanStatus,
    #[serde(default = "PlanPriority::medium")]
    pub priority: PlanPriority,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanPriority {
    High,
    Medium,
    Low,
}

impl PlanPriority {
    fn medium() -> Self {
        PlanPriority::Medium
    }
}

/// The steps of a Markdown plan as checklist entries, for a client that shows a plan only as a
/// checklist: its top-level list items, else its headings, else its first line; all pending.
pub fn plan_steps(markdown: &str) -> Vec<PlanEntry> {
    let lines = || markdown.lines().filter(|line| !line.trim().is_empty());
    let mut steps: Vec<&str> = lines().filter_map(list_item).filter(|step| !step.is_empty()).collect();
    if steps.is_empty() {
        steps = lines().filter_map(heading).filter(|step| !step.is_empty()).collect();
    }
    if steps.is_empty() {
        steps = lines().map(str::trim).take(1).collect();
    }
    let entry = |step: &str| PlanEntry {
        content: step.to_owned(),
        status: PlanStatus::Pending,
        priority: PlanPriority::Medium,
    };
    steps.into_iter().map(entry).collect()
}

/// The text of a top-level Markdown list item (`- `, `* `, `+ `, `1. `, `1) `, a checkbox left out).
fn list_item(line: &str) -> Option<&str> {
    let numbered = || {
        let digits = line.len() - line.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let rest = &line[digits..];
        (digits > 0).then(|| rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") "))).flatten()
    };
    let rest = ["- ", "* ", "+ "].iter().find_map(|mark| line.strip_prefix(mark)).or_else(numbered)?;
    let rest = ["[ ] ", "[x] ", "[X] "].iter().find_map(|check| rest.strip_prefix(check)).unwrap_or(rest);
    Some(rest.trim())
}

/// The text of a Markdown heading.
fn heading(line: &str) -> Option<&str> {
    line.starts_with('#').then(|| line.trim_start_matches('#').trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_never_change_and_suspension_only_resumes_or_cancels() {
        for terminal in [CallState::Succeeded, CallState::Failed, CallState::Cancelled] {
            for to in [CallState::New, CallState::Running, CallState::Succeeded, CallState::Cancelled] {
                assert!(terminal.clone().advance(to).is_err(), "{terminal:?} → {to:?}");
            }
        }
        let mut state = CallState::New;
        assert!(state.advance(CallState::Suspended).is_ok());
        assert!(state.clone().advance(CallState::Running).is_err());
        assert!(state.clone().advance(CallState::Failed).is_err());
        assert!(state.advance(CallState::Resuming).is_ok());
        assert!(state.advance(CallState::Running).is_ok());
        assert!(state.advance(CallState::Succeeded).is_ok());
        assert_eq!(state, CallState::Succeeded);
    }

    #[test]
    fn a_plan_shown_as_a_checklist_lists_its_steps() {
        let contents = |markdown: &str| plan_steps(markdown).into_iter().map(|e| e.content).collect::<Vec<_>>();
        let plan = "# Cache\n\nWhy.\n\n1. Read `a.rs`\n2) Add it\n   - detail\n- [ ] Test it\n* Ship\n";
        assert_eq!(contents(plan), ["Read `a.rs`", "Add it", "Test it", "Ship"]);
        assert_eq!(contents("# Cache\n\n## Read\ntext\n## Write\n"), ["Cache", "Read", "Write"]);
        assert_eq!(contents("\n  Just do it.\nThen stop."), ["Just do it."]);
        assert!(plan_steps("").is_empty());
        assert!(plan_steps(plan).iter().all(|entry| entry.status == PlanStatus::Pending));
    }

    #[test]
    fn long_output_reaches_the_model_as_head_and_tail() {
        let long: String = (0..30_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        let mut part = ToolPart::new("c".into(), "bash".into());
        part.state = CallState::Succeeded;
        part.output = Some(long.clone());
        let seen = part.model_output();
        assert!(seen.starts_with(&long[..2_000]) && seen.ends_with(&long[28_000..]));
        assert!(seen.contains("26000 characters snipped; the full output was 30000 characters"));
        part.output = Some("short".into());
        assert_eq!(part.model_output(), "short");
    }
}

//! The Executing and Confirming states as a table: the model's calls, the mode, the remembered
//! rules and what the user answers → each call's states as the editor saw them, what the model
//! is told, the rules remembered and what reached the disk.

use super::*;
use crate::history::CallState::{self, Cancelled, Failed, New, Resuming, Running, Succeeded, Suspended};
use crate::permissions::{Action, Permission, Scope};
use crate::tools::host::{HostError, PermissionAnswer, PermissionOption, Permissions};

/// An editor that only asks: each question gets the next scripted answer, and the options it
/// offered are kept. Files and commands stay local.
struct Asker {
    answers: Mutex<VecDeque<Result<PermissionAnswer, HostError>>>,
    offered: Mutex<Vec<Vec<String>>>,
    /// The user cancels the turn instead of answering.
    cancels: Option<CancellationToken>,
}

impl Asker {
    fn answering(answers: Vec<Result<PermissionAnswer, HostError>>) -> Arc<Self> {
        Arc::new(Self { answers: Mutex::new(answers.into()), offered: Mutex::default(), cancels: None })
    }
}

/// It only asks for permission: files, commands and questions are nobody's.
impl Host for Asker {
    fn permissions(&self) -> Option<&dyn Permissions> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl Permissions for Asker {
    async fn request_permission(
        &self,
        _call: &ToolPart,
        options: &[PermissionOption],
    ) -> Result<PermissionAnswer, HostError> {
        self.offered.lock().unwrap().push(options.iter().map(|option| option.id.to_string()).collect());
        if let Some(cancel) = &self.cancels {
            cancel.cancel();
            return Ok(PermissionAnswer::Cancelled);
        }
        self.answers.lock().unwrap().pop_front().unwrap_or(Ok(PermissionAnswer::Cancelled))
    }
}

const WRITE: &str = r#"{"path":"a.txt","content":"hi"}"#;
const GLOB: &str = r#"{"pattern":"*.txt"}"#;

fn chose(option: &str) -> Result<PermissionAnswer, HostError> {
    Ok(PermissionAnswer::Selected(option.to_owned()))
}

/// One row: what the model asked for under which permissions, and what must come of it.
struct Row {
    name: &'static str,
    calls: &'static [(&'static str, &'static str, &'static str)],
    mode: Mode,
    /// `None`: nobody to ask (a headless run).
    answers: Option<Vec<Result<PermissionAnswer, HostError>>>,
    rules: Vec<Rule>,
    /// Tools loop detection has taken away: (tool, requests left).
    cooling: &'static [(&'static str, u32)],
    /// Per call: the states the editor saw (from pending on), and a piece of what the model is told.
    expect: &'static [(&'static str, &'static [CallState], &'static str)],
    /// The rules remembered by the turn: (permission, action).
    remembered: &'static [(Permission, Action)],
    /// Whether the write reached the disk.
    written: bool,
}

fn rows() -> Vec<Row> {
    let deny_writes = Rule::new(Permission::Edit, "a.txt", Action::Deny, Scope::Session);
    let base = || Row {
        name: "",
        calls: &[("w", "write", WRITE)],
        mode: Mode::Ask,
        answers: Some(Vec::new()),
        rules: Vec::new(),
        cooling: &[],
        expect: &[],
        remembered: &[],
        written: false,
    };
    vec![
        Row {
            name: "an allowed write runs at once",
            mode: Mode::Bypass,
            expect: &[("w", &[New, Running, Succeeded], "")],
            written: true,
            ..base()
        },
        Row {
            name: "a write the mode refuses fails without a question",
            mode: Mode::ReadOnly,
            expect: &[("w", &[New, Failed], "Permission denied")],
            ..base()
        },
        Row {
            name: "a question with nobody to ask is a refusal that says how to allow it",
            answers: None,
            expect: &[("w", &[New, Failed], "--mode accept-edits")],
            ..base()
        },
        Row {
            name: "allowed once: suspended, resumed, run; nothing remembered",
            answers: Some(vec![chose("allow_once")]),
            expect: &[("w", &[New, Suspended, Resuming, Running, Succeeded], "")],
            written: true,
            ..base()
        },
        Row {
            name: "allowed for the session: the rule is remembered",
            answers: Some(vec![chose("allow_session")]),
            expect: &[("w", &[New, Suspended, Resuming, Running, Succeeded], "")],
            remembered: &[(Permission::Edit, Action::Allow)],
            written: true,
            ..base()
        },
        Row {
            name: "rejected once: the model is told not to retry",
            answers: Some(vec![chose("reject_once")]),
            expect: &[("w", &[New, Suspended, Resuming, Failed], "The user denied this tool call")],
            ..base()
        },
        Row {
            name: "rejected always: the rejection is remembered",
            answers: Some(vec![chose("reject_always")]),
            expect: &[("w", &[New, Suspended, Resuming, Failed], "The user denied this tool call")],
            remembered: &[(Permission::Edit, Action::Deny)],
            ..base()
        },
        Row {
            name: "an option cairn did not offer is a rejection",
            answers: Some(vec![chose("allow_forever")]),
            expect: &[("w", &[New, Suspended, Resuming, Failed], "The user denied this tool call")],
            ..base()
        },
        Row {
            name: "a question the editor withdrew, or could not ask, is a rejection",
            answers: Some(vec![Ok(PermissionAnswer::Cancelled)]),
            expect: &[("w", &[New, Suspended, Resuming, Failed], "The user denied this tool call")],
            ..base()
        },
        Row {
            name: "a remembered rejection applies even in bypass mode",
            mode: Mode::Bypass,
            rules: vec![deny_writes],
            expect: &[("w", &[New, Failed], "a remembered rule rejects")],
            ..base()
        },
        Row {
            name: "an unknown tool fails and names it",
            calls: &[("x", "teleport", "{}")],
            expect: &[("x", &[New, Failed], "teleport")],
            ..base()
        },
        Row {
            name: "arguments that do not fit the tool fail with what is wrong",
            calls: &[("w", "write", r#"{"path":"a.txt"}"#)],
            expect: &[("w", &[New, Failed], "content")],
            ..base()
        },
        Row {
            name: "a tool on cooldown is left out of the request, and refused if called anyway",
            mode: Mode::Bypass,
            cooling: &[("write", 2)],
            // The request it sat out counted: one more to go.
            expect: &[("w", &[New, Failed], "paused for 1 more requests")],
            ..base()
        },
        Row {
            name: "reads before a write run together, then the write is asked about alone",
            calls: &[("r1", "glob", GLOB), ("r2", "glob", GLOB), ("w", "write", WRITE)],
            answers: Some(vec![chose("allow_once")]),
            expect: &[
                ("r1", &[New, Running, Succeeded], ""),
                ("r2", &[New, Running, Succeeded], ""),
                ("w", &[New, Suspended, Resuming, Running, Succeeded], ""),
            ],
            written: true,
            ..base()
        },
        Row {
            name: "a rejection fails its call only: the calls after it still run",
            calls: &[("w", "write", WRITE), ("r", "glob", GLOB)],
            answers: Some(vec![chose("reject_once")]),
            expect: &[
                ("w", &[New, Suspended, Resuming, Failed], "The user denied this tool call"),
                ("r", &[New, Running, Succeeded], ""),
            ],
            ..base()
        },
    ]
}

#[tokio::test]
async fn executing_and_confirming_follow_the_table() {
    for row in rows() {
        let host: Arc<dyn Host> = match row.answers {
            Some(answers) => Asker::answering(answers),
            None => Arc::new(NoEditor),
        };
        let run = Run {
            cooldowns: row.cooling.iter().map(|(tool, left)| ((*tool).to_owned(), *left)).collect(),
            ..Run::default()
        };
        let script = vec![ok(calls(row.calls)), ok(text("done"))];
        let setup = Setup { script, mode: row.mode, host, rules: row.rules.clone(), run, ..Setup::default() };
        let outcome = drive(setup).await;
        let name = row.name;
        assert_eq!(outcome.result, Ok(StopReason::EndTurn), "{name}");
        for (call, states, told) in row.expect {
            assert_eq!(outcome.states_of(call), *states, "{name}: states of {call}");
            let tool = outcome.call(call).unwrap_or_else(|| panic!("{name}: {call} is in the history"));
            let output = tool.model_output();
            assert!(output.contains(told), "{name}: {call} tells the model {output:?}, not {told:?}");
        }
        let remembered: Vec<(Permission, Action)> =
            outcome.rules[row.rules.len()..].iter().map(|rule| (rule.permission, rule.action)).collect();
        assert_eq!(remembered, row.remembered, "{name}: rules remembered");
        let added = outcome.events.iter().filter(|event| matches!(event, AgentEvent::RuleAdded(_))).count();
        assert_eq!(added, row.remembered.len(), "{name}: a remembered rule is recorded");
        assert_eq!(outcome.dir.path().join("a.txt").exists(), row.written, "{name}: the write reached the disk");
        assert_eq!(outcome.sent.len(), 2, "{name}: the results went back to the model in one more request");
        for (tool, _) in row.cooling {
            assert!(!outcome.sent[0].tools.iter().any(|sent| sent == tool), "{name}: {tool} was not offered");
        }
    }
}

#[tokio::test]
async fn a_question_offers_always_only_for_a_rule_that_could_be_remembered() {
    let asker = Asker::answering(vec![chose("reject_once")]);
    let script = vec![ok(calls(&[("w", "write", WRITE)])), ok(text("done"))];
    drive(Setup { script, host: Arc::clone(&asker) as Arc<dyn Host>, ..Setup::default() }).await;
    let offered = asker.offered.lock().unwrap().clone();
    assert_eq!(offered, [vec!["allow_once", "allow_session", "reject_once", "reject_always"]], "one always allow");
}

#[tokio::test]
async fn the_results_reach_the_model_in_call_order_whatever_finished_first() {
    let script = vec![ok(calls(&[("r1", "glob", GLOB), ("w", "write", WRITE), ("r2", "glob", GLOB)])), ok(text("ok"))];
    let outcome = drive(Setup { script, mode: Mode::Bypass, ..Setup::default() }).await;
    let message = outcome.history.iter().find(|m| m.parts.iter().any(|p| matches!(p, Part::Tool(_)))).unwrap();
    let order: Vec<&str> = message
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Tool(tool) => Some(tool.call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["r1", "w", "r2"]);
    assert!(["r1", "w", "r2"].iter().all(|call| outcome.call(call).is_some_and(|t| t.state == Succeeded)));
}

#[tokio::test]
async fn a_cancel_during_a_question_cancels_the_call_and_the_calls_queued_after_it() {
    let cancel = CancellationToken::new();
    let asker = Arc::new(Asker { answers: Mutex::default(), offered: Mutex::default(), cancels: Some(cancel.clone()) });
    let script = vec![ok(calls(&[("w", "write", WRITE), ("r", "glob", GLOB)])), ok(text("never sent"))];
    let outcome = drive(Setup { script, host: asker, cancel, ..Setup::default() }).await;
    assert_eq!(outcome.result, Ok(StopReason::Cancelled));
    assert_eq!(outcome.states_of("w"), [New, Suspended, Cancelled]);
    assert_eq!(outcome.states_of("r"), [New, Cancelled]);
    assert_eq!(outcome.sent.len(), 1, "nothing more is sent after a cancel");
    assert!(!outcome.dir.path().join("a.txt").exists());
}

/// A tool whose failure ends the turn: it cannot save what it did (`save`), or it only tells
/// the model it could not (`note`).
struct Saver;

#[async_trait::async_trait]
impl crate::tools::Tool for Saver {
    type Args = serde_json::Value;
    fn name(&self) -> &str {
        "save"
    }
    fn description(&self) -> &str {
        "Saves."
    }
    fn kind(&self) -> crate::history::ToolKind {
        crate::history::ToolKind::Edit
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn access(&self, _args: &Self::Args) -> crate::tools::Access {
        crate::tools::Access::Write
    }
    fn title(&self, _args: &Self::Args, _workspace: &Workspace) -> String {
        "Save".into()
    }
    fn permission(&self, _args: &Self::Args, _workspace: &Workspace) -> Option<crate::permissions::PermissionRequest> {
        None
    }
    async fn run(
        &self,
        args: &Self::Args,
        _ctx: &crate::tools::ToolContext,
    ) -> Result<crate::tools::ToolOutcome, crate::tools::ToolError> {
        let refused = RecordError::Failed("another process holds the session".into());
        match args["fatal"].as_bool() {
            Some(true) => Err(crate::tools::ToolError::fatal(refused)),
            _ => Err(crate::tools::ToolError::Tell(refused.to_string())),
        }
    }
}

fn with_saver() -> crate::tools::Registry {
    let mut registry = crate::tools::Registry::builtin();
    registry.add(Saver).unwrap();
    registry
}

#[tokio::test]
async fn a_failure_the_model_is_told_of_is_its_result_and_the_turn_goes_on() {
    let script = vec![ok(calls(&[("s", "save", r#"{"fatal":false}"#), ("r", "glob", GLOB)])), ok(text("ok"))];
    let outcome = drive(Setup { script, registry: with_saver(), ..Setup::default() }).await;
    assert_eq!(outcome.result, Ok(StopReason::EndTurn));
    assert_eq!(outcome.states_of("s"), [New, Running, Failed]);
    assert_eq!(outcome.call("s").unwrap().output.as_deref(), Some("another process holds the session"));
    assert_eq!(outcome.states_of("r"), [New, Running, Succeeded]);
    assert_eq!(outcome.sent.len(), 2, "the model is told, and answers");
}

#[tokio::test]
async fn a_fatal_failure_ends_the_turn_with_its_own_error_and_the_calls_after_it_do_not_run() {
    let script = vec![ok(calls(&[("s", "save", r#"{"fatal":true}"#), ("r", "glob", GLOB)])), ok(text("never sent"))];
    let outcome = drive(Setup { script, registry: with_saver(), ..Setup::default() }).await;
    let refused = RecordError::Failed("another process holds the session".into());
    assert_eq!(outcome.result, Err(TurnError::Record(refused)), "the recorder's error, as it was");
    assert_eq!(outcome.states_of("s"), [New, Running, Failed]);
    assert_eq!(outcome.call("s").unwrap().output.as_deref(), Some("another process holds the session"));
    assert_eq!(outcome.states_of("r"), [New, Cancelled]);
    assert!(outcome.call("r").unwrap().output.as_deref().is_some_and(|why| why.starts_with("Not run")));
    assert_eq!(outcome.sent.len(), 1, "nothing more is sent");
    let phases = outcome.phases();
    assert_eq!(phases[phases.len() - 2..], [Phase::StepEnd, Phase::RunEnd], "the step ends, then the run");
}

/// A tool that reports the sandbox its commands would start under (`sandbox`).
struct SandboxProbe;

#[async_trait::async_trait]
impl crate::tools::Tool for SandboxProbe {
    type Args = serde_json::Value;
    fn name(&self) -> &str {
        "sandbox"
    }
    fn description(&self) -> &str {
        "Says the sandbox."
    }
    fn kind(&self) -> crate::history::ToolKind {
        crate::history::ToolKind::Read
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn access(&self, _args: &Self::Args) -> crate::tools::Access {
        crate::tools::Access::ReadOnly
    }
    fn title(&self, _args: &Self::Args, _workspace: &Workspace) -> String {
        "Sandbox".into()
    }
    fn permission(&self, _args: &Self::Args, _workspace: &Workspace) -> Option<crate::permissions::PermissionRequest> {
        None
    }
    async fn run(
        &self,
        _args: &Self::Args,
        ctx: &crate::tools::ToolContext,
    ) -> Result<crate::tools::ToolOutcome, crate::tools::ToolError> {
        Ok(crate::tools::ToolOutcome { output: ctx.process.sandbox.id().to_owned(), ..Default::default() })
    }
}

#[tokio::test]
async fn while_planning_commands_start_in_the_read_only_sandbox_whatever_the_parser_let_through() {
    for (mode, sandbox) in
        [(Mode::Plan, "read-only"), (Mode::Ask, "workspace-write"), (Mode::Bypass, "workspace-write")]
    {
        let script = vec![ok(calls(&[("p", "sandbox", "{}")])), ok(text("ok"))];
        let mut registry = crate::tools::Registry::builtin();
        registry.add(SandboxProbe).unwrap();
        let outcome = drive(Setup { script, mode, registry, ..Setup::default() }).await;
        assert_eq!(outcome.call("p").unwrap().output.as_deref(), Some(sandbox), "{mode:?}");
    }
}

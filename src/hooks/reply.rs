//! What a hook's run says, read by Claude Code's contract, and what every hook of an event said
//! together ([`Fired`]).
//!
//! Exit 0: stdout is JSON (`continue`, `stopReason`, `decision`/`reason`,
//! `hookSpecificOutput.permissionDecision`/`permissionDecisionReason`/`additionalContext`), or,
//! for `UserPromptSubmit` and `SessionStart`, plain text added for the model; other text is
//! reported and ignored. Exit 2 blocks, stderr being the reason (a `PreToolUse` deny; for events
//! that cannot block it is reported). Any other ending (another code, a signal, the time limit,
//! not starting) is reported and changes nothing: a broken hook never blocks by accident
//! anything but what exit 2 blocks.

use serde_json::Value;

use super::run::Ran;
use crate::config::HookEvent;

/// A `PreToolUse` hook's answer about a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask(String),
    Deny(String),
}

impl Verdict {
    fn weight(&self) -> u8 {
        match self {
            Verdict::Allow => 0,
            Verdict::Ask(_) => 1,
            Verdict::Deny(_) => 2,
        }
    }
}

/// What the hooks of one event said, together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// `PreToolUse`: the strongest answer (deny over ask over allow).
    pub verdict: Option<Verdict>,
    /// Exit 2 or `"decision": "block"`, with their reasons.
    pub blocks: Vec<String>,
    /// Text for the model (`additionalContext`, or plain stdout where that counts).
    pub context: Vec<String>,
    /// `"continue": false`: the turn stops, saying this.
    pub stop: Option<String>,
    /// Hooks that failed, hung or printed what cannot be read, each said in a line.
    pub problems: Vec<String>,
    /// How many hooks ran.
    pub ran: usize,
}

impl Fired {
    /// The reasons of the blocks, as one text.
    pub fn block_reason(&self) -> Option<String> {
        (!self.blocks.is_empty()).then(|| self.blocks.join("\n"))
    }

    fn verdict(&mut self, verdict: Verdict) {
        if self.verdict.as_ref().is_none_or(|held| held.weight() < verdict.weight()) {
            self.verdict = Some(verdict);
        }
    }

    /// Takes in one hook's run; `label` names the hook in what is reported.
    pub fn take(&mut self, event: HookEvent, label: &str, ran: Ran) {
        self.ran += 1;
        match ran {
            Ran::Cancelled => {}
            Ran::NotStarted(why) => self.problems.push(format!("{label} could not start: {why}")),
            Ran::TimedOut(limit) => self.problems.push(format!(
                "{label} did not finish within {} s and was killed (a hook's `timeout`, or [hooks] timeout_secs)",
                limit.as_secs()
            )),
            Ran::Exited { code: None, .. } => self.problems.push(format!("{label} was killed by a signal")),
            Ran::Exited { code: Some(2), stderr, .. } => self.blocked(event, label, short(&stderr)),
            Ran::Exited { code: Some(0), stdout, .. } => self.answered(event, label, &stdout),
            Ran::Exited { code: Some(code), stderr, .. } => {
                let said = short(&stderr);
                let said = if said.is_empty() { String::new() } else { format!(": {said}") };
                self.problems.push(format!("{label} failed with exit status {code}{said}"));
            }
        }
    }

    fn blocked(&mut self, event: HookEvent, label: &str, reason: String) {
        let reason =
            if reason.is_empty() { format!("{label} exited with status 2 and gave no reason") } else { reason };
        match event {
            HookEvent::PreToolUse => self.verdict(Verdict::Deny(reason)),
            HookEvent::PostToolUse | HookEvent::UserPromptSubmit | HookEvent::Stop | HookEvent::PreCompact => {
                self.blocks.push(reason);
            }
            HookEvent::SessionStart | HookEvent::Notification => {
                self.problems.push(format!("{label} exited with status 2: {reason}"));
            }
        }
    }

    fn answered(&mut self, event: HookEvent, label: &str, stdout: &str) {
        let text = stdout.trim();
        if text.is_empty() {
            return;
        }
        let plain_is_context = matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart);
        let json: Option<Value> = text.starts_with('{').then(|| serde_json::from_str(text).ok()).flatten();
        let Some(Value::Object(answer)) = json else {
            if plain_is_context {
                self.context.push(text.to_owned());
            } else {
                self.problems.push(format!("{label} printed what is not a JSON object; ignored: {}", short(text)));
            }
            return;
        };
        let said = |key: &str| answer.get(key).and_then(Value::as_str).map(str::to_owned);
        if answer.get("continue") == Some(&Value::Bool(false)) {
            self.stop = Some(said("stopReason").unwrap_or_else(|| format!("{label} stopped the turn")));
        }
        let specific = answer.get("hookSpecificOutput").and_then(Value::as_object);
        let specific_said = |key: &str| specific.and_then(|s| s.get(key)).and_then(Value::as_str).map(str::to_owned);
        if let Some(context) = specific_said("additionalContext").filter(|c| !c.trim().is_empty()) {
            self.context.push(context);
        }
        let reason = said("reason");
        // A decision that is there but no string (`["deny"]`, `true`) is reported like an
        // unknown word: a hook that meant to deny is never silently taken for one that allowed.
        let given = |value: Option<&Value>| match value {
            None | Some(Value::Null) => None,
            Some(Value::String(text)) => Some(text.clone()),
            Some(other) => Some(other.to_string()),
        };
        if event == HookEvent::PreToolUse {
            let why = specific_said("permissionDecisionReason").or(reason);
            let why = |default: &str| why.clone().unwrap_or_else(|| format!("{label} {default}"));
            let decision = specific.and_then(|s| s.get("permissionDecision")).or_else(|| answer.get("decision"));
            match given(decision).as_deref() {
                Some("allow" | "approve") => self.verdict(Verdict::Allow),
                Some("ask") => self.verdict(Verdict::Ask(why("asks for the user's permission"))),
                Some("deny" | "block") => self.verdict(Verdict::Deny(why("denied this call"))),
                None => {}
                Some(other) => self.problems.push(format!("{label} gave an unknown permissionDecision `{other}`")),
            }
            return;
        }
        match given(answer.get("decision")).as_deref() {
            Some("block") => self.blocked(event, label, reason.unwrap_or_default()),
            Some("approve") | None => {}
            Some(other) => self.problems.push(format!("{label} gave an unknown decision `{other}`")),
        }
    }
}

/// A hook's text as it is shown: trimmed, at most 2,000 characters.
fn short(text: &str) -> String {
    let text = text.trim();
    let mut shown: String = text.chars().take(2000).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran::Exited { code: Some(code), stdout: stdout.into(), stderr: stderr.into() }
    }

    fn fired(event: HookEvent, runs: Vec<Ran>) -> Fired {
        let mut fired = Fired::default();
        for ran in runs {
            fired.take(event, "hook `x`", ran);
        }
        fired
    }

    #[test]
    fn pre_tool_use_answers_and_the_strongest_wins() {
        let allow = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}"#;
        let ask = r#"{"hookSpecificOutput": {"permissionDecision": "ask", "permissionDecisionReason": "why"}}"#;
        assert_eq!(fired(HookEvent::PreToolUse, vec![exited(0, allow, "")]).verdict, Some(Verdict::Allow));
        let both = fired(HookEvent::PreToolUse, vec![exited(0, allow, ""), exited(0, ask, "")]);
        assert_eq!(both.verdict, Some(Verdict::Ask("why".into())));
        let denied = fired(HookEvent::PreToolUse, vec![exited(0, ask, ""), exited(2, "", "no rm\n")]);
        assert_eq!(denied.verdict, Some(Verdict::Deny("no rm".into())));
        let legacy = fired(HookEvent::PreToolUse, vec![exited(0, r#"{"decision": "block", "reason": "r"}"#, "")]);
        assert_eq!(legacy.verdict, Some(Verdict::Deny("r".into())));
    }

    #[test]
    fn failures_are_reported_and_decide_nothing() {
        let runs = vec![
            exited(1, "", "boom"),
            exited(0, "garbage", ""),
            Ran::TimedOut(Duration::from_secs(1)),
            Ran::NotStarted("no bash".into()),
        ];
        let fired = fired(HookEvent::PreToolUse, runs);
        assert_eq!(fired.verdict, None);
        assert_eq!(fired.problems.len(), 4, "{:?}", fired.problems);
        assert!(fired.problems[0].contains("exit status 1: boom"));
        assert!(fired.problems[2].contains("within 1 s"));
    }

    #[test]
    fn a_decision_in_another_casing_or_type_is_reported_never_silently_dropped() {
        for said in [
            r#"{"hookSpecificOutput": {"permissionDecision": "DENY"}}"#,
            r#"{"hookSpecificOutput": {"permissionDecision": ["deny"]}}"#,
            r#"{"hookSpecificOutput": {"permissionDecision": true}}"#,
            r#"{"decision": 2}"#,
        ] {
            let fired = fired(HookEvent::PreToolUse, vec![exited(0, said, "")]);
            assert_eq!(fired.verdict, None, "{said}");
            assert_eq!(fired.problems.len(), 1, "{said}: {:?}", fired.problems);
        }
        let wrong = fired(HookEvent::Stop, vec![exited(0, r#"{"decision": {"block": true}}"#, "")]);
        assert_eq!((wrong.blocks.len(), wrong.problems.len()), (0, 1), "{wrong:?}");
    }

    #[test]
    fn context_blocks_and_stops() {
        let plain = fired(HookEvent::UserPromptSubmit, vec![exited(0, "today is Tuesday\n", "")]);
        assert_eq!(plain.context, vec!["today is Tuesday".to_owned()]);
        let json = r#"{"decision": "block", "reason": "not yet", "hookSpecificOutput": {"additionalContext": "c"}}"#;
        let stop = fired(HookEvent::Stop, vec![exited(0, json, "")]);
        assert_eq!((stop.block_reason(), stop.context), (Some("not yet".into()), vec!["c".to_owned()]));
        let halted = fired(HookEvent::PostToolUse, vec![exited(0, r#"{"continue": false, "stopReason": "s"}"#, "")]);
        assert_eq!(halted.stop.as_deref(), Some("s"));
        let start = fired(HookEvent::SessionStart, vec![exited(2, "", "e")]);
        assert!(start.blocks.is_empty() && start.problems.len() == 1);
    }
}

//! `cairn exec --json`: the updates of a headless turn as ACP shapes them, one JSON object per
//! line on stdout (each `session/update`'s params: `{"sessionId", "update"}`), then one line
//! saying how the turn ended: `{"stopReason", "sessionId", "usage"}`, or `{"error", "sessionId"}`
//! when the run failed. A script reads what an editor would have shown, with no JSON-RPC around
//! it. The checklist is the legacy `plan` line; a plan presented for review (`--mode plan`) is
//! a `plan_update` line with its Markdown.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::convert::{Shown, notification_json, stop_reason, update_to_wire};
use crate::agent::StopReason;
use crate::ids::SessionId;
use crate::session::{Update, UpdateSink};
use crate::tools::{Host, NoEditor};

/// Prints each update as a JSON line, keeping the latest usage for the last line.
#[derive(Default)]
pub struct JsonLines {
    usage: Mutex<Option<Value>>,
}

/// Every kind of update is shown as its own kind: a script wants notices and compaction as
/// such, not folded into agent text. The checklist stays the `plan` line scripts already read.
const SHOWN: Shown = Shown { notices: true, compaction: true, booleans: true, plans: false, subagents: false };

impl JsonLines {
    /// The last line: how the turn ended, and the session's context and cost after it.
    pub fn finish(&self, session: &SessionId, stop: StopReason) {
        let usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let line = json!({ "stopReason": stop_reason(stop), "sessionId": session.as_str(), "usage": usage });
        print_line(&line);
    }

    /// The last line when the run failed: what went wrong, and the session if there is one.
    pub fn fail(&self, session: Option<&SessionId>, why: &str) {
        print_line(&json!({ "error": why, "sessionId": session.map(SessionId::as_str) }));
    }
}

impl UpdateSink for JsonLines {
    fn send(&self, session: &SessionId, update: Update) {
        // A plan presented for review is its Markdown, whole, as ACP 1.20 shows it.
        let shown = if matches!(update, Update::PlanDocument(_)) { Shown { plans: true, ..SHOWN } } else { SHOWN };
        let Some(update) = update_to_wire(update, shown) else { return };
        let Some(value) = notification_json(session.as_str(), update) else { return };
        if let Some(usage) = value.get("update").filter(|update| update["sessionUpdate"] == "usage_update") {
            let mut usage = usage.clone();
            if let Some(fields) = usage.as_object_mut() {
                fields.remove("sessionUpdate");
            }
            *self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(usage);
        }
        print_line(&value);
    }

    fn host(&self, _session: &SessionId) -> Arc<dyn Host> {
        Arc::new(NoEditor)
    }
}

fn print_line(value: &Value) {
    let mut line = value.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
}

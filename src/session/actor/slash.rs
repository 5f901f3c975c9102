//! The session actor's slash commands: `/status`, `/mcp`, `/jobs`, `/permissions`, `/model` answer
//! at once; `/rewind` and `/checkpoints` (in `rewind`), `/fork`, `/compact` and changes to the
//! rules (revoking one, keeping a session's rule for the project) wait their turn in the queue,
//! so they never change a history or rules a turn is using; `/rewind` and `/compact` run like
//! turns, holding the session's lease, so no other process's turn is using it either. Answers
//! are short agent messages that are not stored and never reach the model.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Actor, Reply};
use crate::agent::StopReason;
use crate::ids::{SessionId, now_ms};
use crate::llm::catalog;
use crate::permissions::{self, Action, Rule, Scope};
use crate::session::commands::{RuleChange, Slash};
use crate::session::{SessionError, Status, TurnEnd, Update};
use crate::settings::Setting;
use crate::store::{SessionRow, Write};
use crate::tools::jobs::JobState;
use crate::trace::TraceContext;

/// A project rule this session revoked, and whether its removal is written (failed too).
pub(super) struct Revoked {
    pub rule: Rule,
    pub written: Arc<AtomicBool>,
}

impl Revoked {
    /// Whether a read of the store may still give the rule back for having been written late.
    pub fn pending(&self) -> bool {
        !self.written.load(Ordering::Acquire)
    }
}

impl Actor {
    /// A short agent message for the user alone: shown, not stored (so without a message id),
    /// never sent to the model.
    pub(super) fn say(&self, text: String) {
        self.services.sink.send(&self.row.id, Update::EphemeralText { text });
    }

    /// A note outside the conversation (a `notice` where the client takes them), not stored.
    /// In a store shared by replicas it goes through the session's event log (logged while
    /// this replica holds the lease, as while a turn runs here), so the clients of every
    /// replica see it (a prompt another replica handed here is told where it stands there),
    /// each with its `seq` and in order with the turn's updates around it.
    pub(super) fn tell(&self, text: String) {
        let notice = Update::EphemeralNotice { text, warning: false };
        let logged = match (self.services.store.logs_events(), notice.to_event()) {
            (true, Some(body)) => body,
            (false, _) | (_, None) => return self.services.sink.send(&self.row.id, notice),
        };
        let (sink, session) = (std::sync::Arc::clone(&self.services.sink), self.row.id.clone());
        let show = move |result: Result<Option<i64>, crate::store::StoreError>| match result {
            Ok(Some(seq)) => sink.send_logged(&session, seq, notice),
            Ok(None) => sink.send(&session, notice),
            Err(err) => {
                tracing::debug!(%session, %err, "a note could not be logged; shown here only");
                sink.send(&session, notice);
            }
        };
        self.services.store.submit_logged(
            Write::Show { session_id: self.row.id.clone() },
            vec![logged],
            Box::new(show),
        );
    }

    pub(super) fn run_immediate(&mut self, slash: Slash) -> String {
        match slash {
            Slash::Status => self.status_text(),
            Slash::Mcp => self.mcp_text(),
            Slash::Jobs => self.jobs_text(),
            Slash::Hooks => self.hooks_text(),
            Slash::Permissions(None) => self.rules_text(),
            Slash::Model(None) => {
                let view = self.view();
                let mut text = format!("Model: {}. Switch with /model <name>; available:", view.model);
                for model in view.models {
                    let _ = write!(text, "\n- {model}");
                }
                text
            }
            Slash::Model(Some(model)) => match self.set(Setting::Model(model)) {
                Ok(view) => {
                    let text = format!("Model: {} from the next turn.", view.model);
                    let usage = Update::from(view.usage);
                    // Replicas sharing the store: the options are shown as the change commits.
                    if self.remote.is_none() {
                        self.services.sink.send(&self.row.id, Update::Options(Box::new(view)));
                    }
                    self.services.sink.send(&self.row.id, usage);
                    text
                }
                Err(err) => format!("The model was not changed: {err}."),
            },
            Slash::Permissions(Some(_)) | Slash::Rewind(_) | Slash::Checkpoints | Slash::Fork | Slash::Compact(_) => {
                "This command waits for the running turn.".to_owned()
            }
        }
    }

    /// Runs a command that waited in the queue; the session is idle now.
    pub(super) fn run_queued(&mut self, ticket: u64, trace: Option<TraceContext>, slash: Slash, reply: Reply<TurnEnd>) {
        let text = match slash {
            Slash::Rewind(rewinding) => return self.spawn_rewind(ticket, rewinding, reply),
            Slash::Checkpoints => return self.list_checkpoints(reply),
            Slash::Permissions(Some(change)) => self.change_rules(change),
            Slash::Fork => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.fork(self.row.cwd.clone(), tx);
                let sink = std::sync::Arc::clone(&self.services.sink);
                let id = self.row.id.clone();
                tokio::spawn(async move {
                    let text = match rx.await {
                        Ok(Ok(fork)) => format!(
                            "Forked into session {fork}: a copy of this conversation with its own history. Open it from the session list."
                        ),
                        Ok(Err(err)) => format!("The session was not forked: {err}."),
                        Err(_) => "The session was not forked: it closed.".to_owned(),
                    };
                    sink.send(&id, Update::EphemeralText { text });
                    let _ = reply.send(Ok(StopReason::EndTurn.into()));
                });
                return;
            }
            Slash::Compact(instructions) => return self.spawn_compaction(ticket, trace, instructions, reply),
            Slash::Status | Slash::Mcp | Slash::Jobs | Slash::Hooks | Slash::Permissions(None) | Slash::Model(_) => {
                self.run_immediate(slash)
            }
        };
        self.say(text);
        let _ = reply.send(Ok(StopReason::EndTurn.into()));
    }

    fn status_text(&self) -> String {
        let status = self.services.status.borrow().clone();
        let state = match &status {
            Status::Idle => "idle".to_owned(),
            Status::Busy => "busy (a turn is running)".to_owned(),
            Status::Retrying { attempt, message } => format!("retrying a model request (retry {attempt}: {message})"),
            Status::Error(err) => format!("error: the last turn failed ({err})"),
        };
        let usage = self.usage();
        let info = catalog::info(&self.services.config, &self.row.model);
        let reserve = self.services.config.compaction.reserve_tokens;
        let threshold = crate::agent::compact::usable(info.context_window, info.max_output, reserve);
        let percent = (usage.used * 100).checked_div(usage.size).unwrap_or(0);
        let limits = &self.services.config.limits;
        let off = |n: u64| if n == 0 { "off".to_owned() } else { n.to_string() };
        let l = limits.loop_detection;
        let mut text = format!(
            "Status: {state}; {} queued.\nModel: {}; context {} of {} tokens ({percent}%), compaction at {threshold}.\nMode: {}. Prompts sent while a turn runs: {}.",
            self.queue.len(),
            self.row.model,
            usage.used,
            usage.size,
            self.mode.borrow().id(),
            if self.steers() { "steer (they join it)" } else { "queue" },
        );
        if let Some(cost) = usage.cost {
            let _ = write!(text, " Cost so far: ${cost:.4}.");
        }
        let _ = write!(
            text,
            "\nLimits per turn: {} model requests, {} s, {} tool errors in a row, token budget {}, loop detection {}/{}/{}.",
            off(u64::from(limits.max_rounds)),
            limits.timeout.map_or_else(|| "no limit on".to_owned(), |t| t.as_secs().to_string()),
            off(u64::from(limits.consecutive_errors)),
            limits.token_budget.map_or_else(|| "off".to_owned(), |b| b.to_string()),
            l.warn,
            l.cooldown,
            l.stop,
        );
        let system = self.row.system_prompt.as_ref().map_or_else(|| "cairn's own".to_owned(), |own| own.describe());
        let _ = write!(text, "\nSystem prompt: {system}.");
        if let Some(mcp) = self.mcp_status_line() {
            text.push('\n');
            text.push_str(&mcp);
        }
        let jobs = self.jobs.list();
        let running = jobs.iter().filter(|job| job.state == JobState::Running).count();
        let max = self.jobs.settings().max;
        let _ = write!(
            text,
            "\nJobs: {running} running of at most {max}, {} ended (/jobs lists them).",
            jobs.len() - running
        );
        text
    }

    /// `/jobs`: the session's background jobs, oldest first.
    fn jobs_text(&self) -> String {
        let jobs = self.jobs.list();
        if jobs.is_empty() {
            return "No background jobs. The model starts one with bash and `background: true`.".to_owned();
        }
        let mut text = "Background jobs (they end when the session closes):".to_owned();
        for job in jobs {
            let place = match (&job.terminal, job.pid) {
                (Some(terminal), _) => format!(", in editor terminal {terminal}"),
                (None, Some(pid)) => format!(", pid {pid}"),
                (None, None) => String::new(),
            };
            let command = crate::tools::one_line(&job.command);
            let _ = write!(text, "\n{}. {}{place}: `{command}`", job.id, job.state);
        }
        text
    }

    /// The session's rules, numbered as a change after the running turn will find them: while
    /// a model turn runs, its own as they grow (an answer's, the project's read again).
    fn rules_text(&self) -> String {
        let live = self.running.as_ref().and_then(|running| running.rules.as_ref());
        let rules = match live {
            Some(turned) => super::turn::with_attached(turned.borrow().clone(), &self.rules),
            None => self.rules.clone(),
        };
        if rules.is_empty() {
            return "No remembered permission rules. Answering \"always\" to a permission question adds one."
                .to_owned();
        }
        let mut text = "Remembered permission rules (revoke with /permissions revoke <n> or revoke all; keep one for \
                        every session in this project with /permissions project <n>):"
            .to_owned();
        for (n, rule) in rules.iter().enumerate() {
            let action = match rule.action {
                Action::Allow => "allow",
                Action::Deny => "reject",
            };
            let scope = match rule.source {
                Scope::Session => "this session",
                Scope::Project => "this project",
                Scope::Run => "this run",
            };
            let _ = write!(text, "\n{}. {action} {} ({scope})", n + 1, permissions::describe_rule(rule));
        }
        text
    }

    fn change_rules(&mut self, change: RuleChange) -> String {
        let all = matches!(change, RuleChange::RevokeAll);
        let gone = match change {
            RuleChange::RevokeAll => std::mem::take(&mut self.rules),
            RuleChange::Revoke(n) if n <= self.rules.len() => vec![self.rules.remove(n - 1)],
            RuleChange::Revoke(n) => {
                return format!("There is no rule {n}; /permissions lists {} rules.", self.rules.len());
            }
            RuleChange::Project(n) => return self.keep_for_project(n),
        };
        // Gone from the rules file too, where an answer in a turn added it: all of them for
        // `revoke all`, a sub-agent's (which the session's rules never list) among them; and
        // the project's revoked here, which another session may have kept.
        if let Some(book) = &self.rulebook {
            if all {
                book.revoke_all();
            } else {
                book.revoke(&permissions::rejected_programs(&gone));
            }
            let project: Vec<Rule> = gone.iter().filter(|r| r.source == Scope::Project).cloned().collect();
            book.revoke_project(&permissions::rejected_programs(&project));
        }
        if gone.iter().any(|r| r.source == Scope::Session) {
            self.store_session_rules();
        } else {
            self.publish_rules();
        }
        for rule in gone.iter().filter(|r| r.source == Scope::Project) {
            let written = Arc::new(AtomicBool::new(false));
            self.revoked.push(Revoked { rule: rule.clone(), written: Arc::clone(&written) });
            let write = Write::RemoveProjectRule { project: self.row.cwd.clone(), rule: rule.clone() };
            // Failed too: the store's rule then stands, and a turn may read it again.
            self.services.store.submit(write, Some(Box::new(move |_| written.store(true, Ordering::Release))));
        }
        let rules = if gone.len() == 1 { "rule" } else { "rules" };
        format!("Revoked {} {rules}; cairn will ask again.", gone.len())
    }

    /// Keeps the session's rule `n` (as `/permissions` numbers it) for every session in the
    /// project instead: the one way to a project rule when "always" answers are kept in the
    /// session (`[permissions] remember`).
    fn keep_for_project(&mut self, n: usize) -> String {
        let Some(rule) = n.checked_sub(1).and_then(|at| self.rules.get(at)) else {
            return format!("There is no rule {n}; /permissions lists {} rules.", self.rules.len());
        };
        match rule.source {
            Scope::Session => {}
            Scope::Project => return format!("Rule {n} already holds in every session in this project."),
            Scope::Run => return format!("Rule {n} was given for this run only; it cannot be kept."),
        }
        if rule.stands_for().is_some() {
            return format!("Rule {n} cannot be read, so it cannot be kept; revoke it with /permissions revoke {n}.");
        }
        let kept = Rule::new(rule.permission, &rule.pattern, rule.action, Scope::Project);
        let action = match kept.action {
            Action::Allow => "allow",
            Action::Deny => "reject",
        };
        let what = permissions::describe_rule(&kept);
        self.rules.remove(n - 1);
        self.revoked.retain(|revoked| revoked.rule != kept);
        if !self.rules.contains(&kept) {
            self.rules.push(kept.clone());
        }
        self.store_session_rules();
        // The other sessions of the project open here: their jobs and servers at once, their
        // turns from the next one on (`turn.rs`, which reads the project's rules again).
        crate::process::Rulebook::add_to_project(
            &self.row.cwd,
            &permissions::rejected_programs(std::slice::from_ref(&kept)),
        );
        self.services.store.submit(Write::AddProjectRule { project: self.row.cwd.clone(), rule: kept }, None);
        format!(
            "Kept rule {n} ({action} {what}) for every session in this project; /permissions revoke removes it for all \
             of them."
        )
    }

    /// Stores the session's own rules as they are now.
    fn store_session_rules(&mut self) {
        let session: Vec<_> = self.rules.iter().filter(|r| r.source == Scope::Session).cloned().collect();
        self.row.rules.clone_from(&session);
        self.services.store.submit(Write::SetSessionRules { id: self.row.id.clone(), rules: session }, None);
        self.publish_rules();
    }

    /// Gives the session's running jobs and servers its rules as they are now.
    pub(super) fn publish_rules(&self) {
        if let Some(book) = &self.rulebook {
            book.publish(&permissions::rejected_programs(&self.rules));
        }
    }

    /// Copies the session into a new one (see `Write::ForkSession`), answering its id once the
    /// rows are committed.
    pub(super) fn fork(&mut self, cwd: String, reply: Reply<SessionId>) {
        let mut row = SessionRow::new(SessionId::generate(), cwd, self.row.model.clone(), now_ms());
        row.title = self.row.title.as_ref().map(|title| format!("{title} (copy)"));
        row.mode.clone_from(&self.row.mode);
        let id = row.id.clone();
        let write = Write::ForkSession { row: Box::new(row), parent: self.row.id.clone() };
        self.services.store.submit(
            write,
            Some(Box::new(move |result| {
                let _ = reply.send(result.map(|()| id).map_err(SessionError::from));
            })),
        );
    }
}

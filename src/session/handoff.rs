//! Commands handed between the replicas of a shared store (`cairn serve --store postgres://…`).
//!
//! A prompt sent to a replica whose session's lease another replica holds (a turn runs there)
//! is handed to that holder through the store's inbox ([`crate::store::Store::send_command`]),
//! as a [`Handed`] in JSON; so are a `session/cancel`, a settings change (mode, model,
//! reasoning level, steering), a title, a `_session/steering` prompt and the withdrawal of a
//! handed prompt (`$/cancel_request`). The holder carries it out with today's semantics (a
//! prompt is queued or steered into the running turn, as the session's settings say; a mode
//! reaches the running turn's next decision), and answers it with an [`Outcome`] once
//! everything it caused is committed. The sending replica's actor answers its client's request
//! from that outcome once it has forwarded the session's events up to where the answer was
//! written (`actor/remote.rs`). [`serve`] is the task that carries out what the inbox hands
//! this replica and delivers the answers to its own.

use std::collections::HashMap;

use tokio::sync::oneshot;

use crate::agent::StopReason;
use crate::history::{Part, Usage};
use crate::ids::SessionId;
use crate::settings::{Setting, SettingError, Value};
use crate::store::pg::inbox::Inbound;

use super::actor::Steering;
use super::registry::{Registry, WeakRegistry};
use super::{SessionError, SessionView, TurnEnd};

/// A command another replica's client sent.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handed {
    /// `session/prompt`: run it as this replica would have (queued behind the running turn,
    /// or steered into it).
    Prompt { parts: Vec<Part> },
    /// `session/cancel`: stop the running turn and the queued prompts.
    Cancel {},
    /// A client's answer to question `question` a turn here asked (`asked`).
    Answer { question: String, answer: super::asked::Answer },
    /// `session/set_mode`, `session/set_config_option`: config option `option` set to
    /// `value` (as [`Setting::parse`] reads an id).
    Set { option: String, value: String },
    /// `session/set_title`.
    Title { title: String },
    /// `_session/steering`: into the running turn, or a turn of its own if `start_if_idle`.
    Steer { parts: Vec<Part>, start_if_idle: bool },
    /// `$/cancel_request` of the prompt handed as command `command`: withdraw it (from the
    /// queue, or cancel its turn if it runs).
    Withdraw { command: i64 },
}

impl Handed {
    /// A settings change as handed.
    pub fn set(setting: &Setting) -> Self {
        Self::Set { option: setting.option().to_owned(), value: value_of(setting) }
    }

    /// The command's JSON, as the inbox carries it.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The setting a [`Handed::Set`] names.
fn setting(option: &str, value: &str) -> Result<Setting, SettingError> {
    Setting::parse(option, Value::Id(value))
}

/// `setting`'s value as an id [`setting`] reads back.
fn value_of(setting: &Setting) -> String {
    match setting {
        Setting::Model(model) => model.clone(),
        Setting::Mode(mode) => mode.id().to_owned(),
        Setting::Thought(level) => level.id().to_owned(),
        Setting::Steer(steer) => steer.to_string(),
    }
}

/// A setting a replica changed, as the session's event log carries it (written with the change,
/// `{"setting": {"option": …, "value": …}}`) for the replicas following the session to put in
/// effect and show their clients (`actor/remote.rs`).
#[derive(serde::Serialize, serde::Deserialize)]
struct LoggedSetting {
    setting: OptionValue,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct OptionValue {
    option: String,
    value: String,
}

/// `setting` as the session's event log carries it.
pub fn setting_event(setting: &Setting) -> String {
    let logged =
        LoggedSetting { setting: OptionValue { option: setting.option().to_owned(), value: value_of(setting) } };
    serde_json::to_string(&logged).unwrap_or_default()
}

/// The setting a row of the event log carries; `None` for any other row.
pub fn setting_of_event(body: &str) -> Option<Setting> {
    // Updates are `{"update": …}`, signals `{"asked": …}`, `{"closed": …}`.
    if !body.starts_with("{\"setting\"") {
        return None;
    }
    let logged: LoggedSetting = serde_json::from_str(body).ok()?;
    setting(&logged.setting.option, &logged.setting.value).ok()
}

/// What came of a handed command.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The prompt's turn ended.
    End {
        stop: StopReason,
        #[serde(default)]
        usage: Usage,
    },
    /// It failed; what the holder's error said.
    /// `invalid`: the holder refused it as the client's mistake (a value not offered, a busy
    /// session), which the sender's client is told as it would be on one replica.
    Error {
        message: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        invalid: bool,
    },
    /// Done; nothing to tell (a cancel, a setting, a title).
    Done {},
    /// What became of a steered prompt.
    Steered { steering: Steering },
}

impl Outcome {
    pub fn of(result: &Result<TurnEnd, SessionError>) -> Self {
        match result {
            Ok(end) => Self::End { stop: end.stop, usage: end.usage },
            Err(err) => Self::failed(err),
        }
    }

    /// A command that failed with `err`.
    pub fn failed(err: &SessionError) -> Self {
        Self::Error { message: err.to_string(), invalid: err.is_clients_mistake() }
    }

    /// The error a failed command's client is given.
    fn error(session: &SessionId, message: String, invalid: bool) -> SessionError {
        match invalid {
            true => SessionError::RefusedElsewhere { session: session.clone(), message },
            false => SessionError::Elsewhere { session: session.clone(), message },
        }
    }

    /// The answer to give the client whose prompt was handed.
    pub fn answer(self, session: &SessionId) -> Result<TurnEnd, SessionError> {
        match self {
            Self::End { stop, usage } => Ok(TurnEnd { stop, usage }),
            Self::Done {} | Self::Steered { .. } => Ok(StopReason::EndTurn.into()),
            Self::Error { message, invalid } => Err(Self::error(session, message, invalid)),
        }
    }

    /// Whether a handed setting or title was carried out. A turn's end is what the sweeper
    /// answers for a holder that died before it took the command: not carried out.
    pub fn done(self, session: &SessionId) -> Result<(), SessionError> {
        match self {
            Self::Done {} | Self::Steered { .. } => Ok(()),
            Self::End { .. } => Err(not_carried_out(session)),
            Self::Error { message, invalid } => Err(Self::error(session, message, invalid)),
        }
    }

    /// What became of a handed `_session/steering` prompt.
    pub fn steering(self, session: &SessionId) -> Result<Steering, SessionError> {
        match self {
            Self::Steered { steering } => Ok(steering),
            Self::End { .. } | Self::Done {} => Err(not_carried_out(session)),
            Self::Error { message, invalid } => Err(Self::error(session, message, invalid)),
        }
    }

    /// An answer's JSON as stored; one this build cannot read (a replica of another version
    /// wrote it) is an error naming that.
    pub fn read(body: &str) -> Self {
        serde_json::from_str(body).unwrap_or_else(|err| Self::Error {
            message: format!("its answer could not be read ({err}); are all replicas the same cairn version?"),
            invalid: false,
        })
    }

    fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn not_carried_out(session: &SessionId) -> SessionError {
    SessionError::Elsewhere {
        session: session.clone(),
        message: "the replica running the session's turn stopped before carrying it out; send it again".into(),
    }
}

/// Carries out what the store's inbox hands this replica and delivers the answers to the
/// commands it handed others, until the store stops (or the registry is gone).
pub async fn serve(registry: WeakRegistry, mut inbound: tokio::sync::mpsc::UnboundedReceiver<Inbound>) {
    // The prompts handed here still running or queued, by command: a withdrawal drops them.
    let mut prompts: HashMap<i64, oneshot::Sender<()>> = HashMap::new();
    while let Some(inbound) = inbound.recv().await {
        let Some(registry) = registry.upgrade() else { return };
        match inbound {
            Inbound::Command { id, session, body, returned } => {
                tracing::debug!(%session, command = id, "a command handed by another replica");
                match serde_json::from_str::<Handed>(&body) {
                    Ok(handed) => carry_out(&registry, &mut prompts, id, session, handed, returned),
                    Err(err) => {
                        let message = format!(
                            "the replica holding the session could not read the command ({err}); are all replicas the same cairn version?"
                        );
                        let store = registry.store().clone();
                        registry.background().spawn(async move {
                            answer(&store, id, &Outcome::Error { message, invalid: false }).await
                        });
                    }
                }
            }
            Inbound::Answer { id, session, seq, body } => registry.answered(&session, id, seq, body),
        }
    }
}

/// Carries out command `id`, and answers it once what it caused is committed.
fn carry_out(
    registry: &Registry,
    prompts: &mut HashMap<i64, oneshot::Sender<()>>,
    id: i64,
    session: SessionId,
    handed: Handed,
    returned: bool,
) {
    let store = registry.store().clone();
    // Tracked, so that a replica shutting down writes the answers of the commands it took
    // before its store stops: otherwise their senders wait for its heart to lapse.
    let tasks = registry.background().clone();
    match handed {
        Handed::Prompt { parts } => {
            // Queued now, in the order the commands were sent.
            let prompt = registry.prompt_handed(&session, parts, Some(id));
            let (withdraw, withdrawn) = oneshot::channel();
            prompts.retain(|_, waiting| !waiting.is_closed());
            prompts.insert(id, withdraw);
            tasks.spawn(async move {
                let outcome = tokio::select! {
                    result = prompt => Outcome::of(&result),
                    // Dropping the prompt's future withdraws it, as `$/cancel_request` does here.
                    Ok(()) = withdrawn => Outcome::End { stop: StopReason::Cancelled, usage: Usage::default() },
                };
                answer(&store, id, &outcome).await;
            });
        }
        Handed::Withdraw { command } => {
            if let Some(withdraw) = prompts.remove(&command) {
                tracing::info!(%session, command, "a handed prompt was withdrawn by its client");
                let _ = withdraw.send(());
            }
            tasks.spawn(async move { answer(&store, id, &Outcome::Done {}).await });
        }
        Handed::Answer { question, answer: given } => {
            registry.elsewhere(&session, super::asked::Elsewhere::Answered { id: question, answer: given });
            tasks.spawn(async move { answer(&store, id, &Outcome::Done {}).await });
        }
        Handed::Cancel {} => {
            // Taken back by this replica, which sent it: the turn it was meant to stop ended
            // before its holder took it, and one running here now is another, started after
            // the cancel.
            if !returned {
                registry.cancel_here(&session);
            }
            tasks.spawn(async move { answer(&store, id, &Outcome::Done {}).await });
        }
        Handed::Set { option, value } => {
            // The session's actor shows this replica's clients the change once it commits.
            let changed = setting(&option, &value).map(|setting| registry.set(&session, setting));
            tasks.spawn(async move {
                let outcome = match changed {
                    Ok(changed) => done(changed.await),
                    Err(err) => Outcome::failed(&SessionError::from(err)),
                };
                answer(&store, id, &outcome).await;
            });
        }
        Handed::Title { title } => {
            let changed = registry.set_title(&session, title);
            tasks.spawn(async move { answer(&store, id, &done(changed.await)).await });
        }
        Handed::Steer { parts, start_if_idle } => {
            let steered = registry.steer(&session, parts, start_if_idle);
            tasks.spawn(async move {
                let outcome = match steered.await {
                    Ok(steering) => Outcome::Steered { steering },
                    Err(err) => Outcome::failed(&err),
                };
                answer(&store, id, &outcome).await;
            });
        }
    }
}

fn done(result: Result<SessionView, SessionError>) -> Outcome {
    match result {
        Ok(_) => Outcome::Done {},
        Err(err) => Outcome::failed(&err),
    }
}

/// Answers command `id`; the store writes it again until it goes in, so this fails only when
/// the store stops (then the sweeper of another replica answers it once this one's heart stops).
async fn answer(store: &crate::store::Store, id: i64, outcome: &Outcome) {
    if let Err(err) = store.answer_command(id, outcome.json()).await {
        tracing::warn!(command = id, %err, "a command another replica handed could not be answered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MessageId;
    use crate::session::Update;

    #[test]
    fn the_sweepers_answer_reads_as_a_cancelled_turn() {
        let session = SessionId::generate();
        let answer = Outcome::read(crate::store::pg::sweeper::CANCELLED).answer(&session);
        assert_eq!(answer, Ok(StopReason::Cancelled.into()));
    }

    #[test]
    fn a_refusal_that_was_the_clients_mistake_is_one_for_the_sender_too_and_an_older_replicas_error_is_not() {
        let session = SessionId::generate();
        let unknown = SessionError::UnknownModel { value: "x/y".into(), choices: vec!["a/b".into()] };
        let answered = Outcome::read(&Outcome::failed(&unknown).json()).done(&session);
        assert_eq!(
            answered,
            Err(SessionError::RefusedElsewhere { session: session.clone(), message: unknown.to_string() })
        );
        let older = Outcome::read(r#"{"error":{"message":"no"}}"#).done(&session);
        assert_eq!(older, Err(SessionError::Elsewhere { session, message: "no".into() }));
    }

    #[test]
    fn an_answer_this_build_cannot_read_fails_the_prompt_saying_so() {
        let session = SessionId::generate();
        let Err(SessionError::Elsewhere { message, .. }) = Outcome::read(r#"{"later":1}"#).answer(&session) else {
            panic!("an error")
        };
        assert!(message.contains("same cairn version"), "{message}");
    }

    #[test]
    fn a_handed_prompt_and_its_outcome_read_back_as_they_were() {
        let handed = Handed::Prompt { parts: vec![Part::Text { text: "hi".into() }] };
        let json = serde_json::to_string(&handed).unwrap();
        assert_eq!(serde_json::from_str::<Handed>(&json).unwrap(), handed);
        let end = Outcome::of(&Ok(TurnEnd { stop: StopReason::MaxTokens, usage: Usage::default() }));
        assert_eq!(Outcome::read(&end.json()), end);
    }

    #[test]
    fn every_setting_handed_reads_back_as_itself_and_a_steer_as_what_became_of_it() {
        use crate::llm::catalog::ThoughtLevel;
        use crate::permissions::Mode;
        let settings = [
            Setting::Model("openai/gpt-5".into()),
            Setting::Mode(Mode::Bypass),
            Setting::Thought(ThoughtLevel::Low),
            Setting::Steer(true),
            Setting::Steer(false),
        ];
        for sent in settings {
            let json = Handed::set(&sent).json();
            let Ok(Handed::Set { option, value }) = serde_json::from_str::<Handed>(&json) else { panic!("{json}") };
            assert_eq!(setting(&option, &value), Ok(sent));
        }
        for logged in [Setting::Mode(Mode::Bypass), Setting::Steer(true), Setting::Model("openai/gpt-5".into())] {
            assert_eq!(setting_of_event(&setting_event(&logged)), Some(logged), "a setting the log carries");
        }
        let update = Update::Title("t".into()).to_event().unwrap();
        assert_eq!(setting_of_event(&update), None, "an update is no setting");
        let session = SessionId::generate();
        let steered = Outcome::Steered { steering: Steering::Injected };
        assert_eq!(Outcome::read(&steered.json()).steering(&session), Ok(Steering::Injected));
        // The sweeper's answer for a holder that died before taking it: not carried out.
        let swept = Outcome::read(crate::store::pg::sweeper::CANCELLED);
        assert!(matches!(swept.clone().steering(&session), Err(SessionError::Elsewhere { .. })));
        assert!(matches!(swept.done(&session), Err(SessionError::Elsewhere { .. })));
    }

    #[test]
    fn what_the_sweeper_logs_reads_as_the_updates_it_shows() {
        // The sweeper writes these without the session layer's types (the store is below it).
        let message = MessageId::generate();
        let notice = serde_json::json!({ "update": "notice", "data": { "message": message, "text": "cut off" } });
        assert_eq!(Update::from_event(&notice.to_string()), Some(Update::Notice { message, text: "cut off".into() }));
        let tool = crate::history::ToolPart::new("c1".into(), "bash".into());
        let update = serde_json::json!({ "update": "tool_call_update", "data": tool });
        assert_eq!(Update::from_event(&update.to_string()), Some(Update::ToolCallUpdate(tool)));
    }
}

//! The methods ACP marks unstable, and the extensions, answered instead of "method not found":
//! `session/set_title`, `session/status`, `session/archive` and `session/unarchive` (with
//! `session/list`'s `archived` filter), `_session/steering` (which clients of other agents'
//! adapters already call; advertised as `_meta.steering.supported` on `initialize`), and
//! cairn's own `_cairn/stream/resume` for a server's dropped connections; and the turn's usage
//! on `session/prompt`'s answer.
//!
//! Archiving closes the session as `session/close` does, its running turn cancelled (ACP asks
//! for that), then hides it from every listing (`session/list`, `cairn sessions list`, `exec
//! --continue`) until it is unarchived; its history stays, and it can still be loaded,
//! resumed or prompted by id, which leaves it archived. Unarchiving loads nothing.
//!
//! On a store shared by replicas, `_cairn/stream/resume` answers from the session's event log,
//! whose numbers the client saw on whichever replica it was on: the connection views the
//! session from the request on, its logged updates held back; the session is made live here
//! (its actor following the log from where it read the history), then the log is read after
//! the client's number, and what was missed is sent before what was held back, each once.
//!
//! `session/status` says `open` for a session this process holds in memory and `saved` for one
//! only stored; what the session is doing (idle, busy, retrying with the attempt, or the error
//! of its last turn) goes under `_meta.cairn`, where the schema leaves room for it. It has no
//! side effect: the session is neither loaded nor attached.

use agent_client_protocol_schema::v1 as acp;
use futures::FutureExt;
use serde_json::{Value, json};

use super::{Agent, Answer, parse, to_value};
use crate::acp::convert::{block_to_part, invalid_params, session_error};
use crate::acp::served::Served;
use crate::history::Usage;
use crate::ids::SessionId;
use crate::session::{SessionError, Status, Steering};
use crate::store::Archived;

pub(super) const SESSION_SET_TITLE: &str = acp::AGENT_METHOD_NAMES.session_set_title;
pub(super) const SESSION_STATUS: &str = acp::AGENT_METHOD_NAMES.session_status;
pub(super) const SESSION_ARCHIVE: &str = acp::AGENT_METHOD_NAMES.session_archive;
pub(super) const SESSION_UNARCHIVE: &str = acp::AGENT_METHOD_NAMES.session_unarchive;
pub(super) const STEERING: &str = "_session/steering";
/// Resuming a served session's stream after a dropped connection.
pub(super) const STREAM_RESUME: &str = "_cairn/stream/resume";

/// A prompt's usage as `PromptResponse.usage` (unstable, `unstable_end_turn_token_usage`):
/// `inputTokens` without the cached tokens, which are given apart, `outputTokens` with the
/// reasoning, which is also given apart, `totalTokens` everything sent and written (the sum the
/// session's own total keeps); the optional counts only when not zero.
pub(super) fn turn_usage(usage: Usage) -> acp::Usage {
    let some = |count: u64| (count > 0).then_some(count);
    acp::Usage::new(usage.context(), usage.input, usage.output)
        .thought_tokens(some(usage.reasoning))
        .cached_read_tokens(some(usage.cache_read))
        .cached_write_tokens(some(usage.cache_write))
}

/// `session/list`'s `archived` filter: `exclude` when absent; a value cairn does not know is
/// refused, as ACP asks, rather than taken for `exclude`.
pub(super) fn archive_filter(filter: Option<acp::SessionArchiveFilter>) -> Result<Archived, acp::Error> {
    let unknown = match filter {
        None | Some(acp::SessionArchiveFilter::Exclude) => return Ok(Archived::Exclude),
        Some(acp::SessionArchiveFilter::Include) => return Ok(Archived::Include),
        Some(acp::SessionArchiveFilter::Only) => return Ok(Archived::Only),
        Some(acp::SessionArchiveFilter::Other(value)) => value,
        Some(other) => format!("{other:?}"),
    };
    Err(invalid_params(format!(
        "session/list: `archived` is `{unknown}`, which cairn does not know; send `exclude`, `include` or `only`"
    )))
}

/// The longest title kept, in characters.
const MAX_TITLE: usize = 200;

/// `_session/steering`'s params: the prompt, and what to do when no turn runs.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SteeringRequest {
    session_id: acp::SessionId,
    prompt: Vec<acp::ContentBlock>,
    /// `promptRequired`: with no turn running, answer so and use nothing; otherwise start one.
    #[serde(default)]
    idle_behavior: Option<String>,
}

/// `_meta.steering.supported` of `initialize`: `_session/steering` is answered.
pub(super) fn steering_supported() -> acp::Meta {
    let mut meta = acp::Meta::new();
    meta.insert("steering".to_owned(), json!({ "supported": true }));
    meta
}

impl Agent {
    pub(super) fn set_title(&self, params: Value) -> Answer {
        let request: acp::SetSessionTitleRequest = parse(SESSION_SET_TITLE, params)?;
        let title = request.title.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or_default();
        if title.is_empty() {
            return Err(invalid_params(format!("{SESSION_SET_TITLE}: `title` is empty; send the text to show")));
        }
        let title: String = title.chars().take(MAX_TITLE).collect();
        let sessions = self.sessions()?;
        let id = self.session(&request.session_id)?;
        let changed = sessions.set_title(&id, title.clone());
        let served = self.served.clone();
        Ok(async move {
            Served::after_change(served.as_deref(), &id, changed.await)?;
            to_value(&acp::SetSessionTitleResponse::new(title))
        }
        .boxed())
    }

    /// `session/archive` (`archived`) and `session/unarchive`.
    pub(super) fn archive(&self, params: Value, archived: bool) -> Answer {
        let session_id = if archived {
            parse::<acp::ArchiveSessionRequest>(SESSION_ARCHIVE, params)?.session_id
        } else {
            parse::<acp::UnarchiveSessionRequest>(SESSION_UNARCHIVE, params)?.session_id
        };
        let (sessions, id) = (self.sessions()?, self.session(&session_id)?);
        let served = self.served.clone();
        Ok(async move {
            sessions.archive(&id, archived).await.map_err(|err| session_error(&err))?;
            // Closed, as `session/close` leaves it.
            if let Some(served) = served.filter(|_| archived) {
                served.hub.forget(&id);
            }
            if archived {
                to_value(&acp::ArchiveSessionResponse::new())
            } else {
                to_value(&acp::UnarchiveSessionResponse::new())
            }
        }
        .boxed())
    }

    pub(super) fn session_status(&self, params: Value) -> Answer {
        let request: acp::SessionStatusRequest = parse(SESSION_STATUS, params)?;
        let sessions = self.sessions()?;
        let id = self.session(&request.session_id)?;
        Ok(async move {
            let live = sessions.is_live(&id);
            if !live {
                let stored = sessions.store().session(&id).await.map_err(|err| session_error(&err.into()))?;
                if stored.is_none() {
                    return Err(session_error(&SessionError::NotFound(id)));
                }
            }
            let state = match sessions.status(&id) {
                Status::Idle => json!({"state": "idle"}),
                Status::Busy => json!({"state": "busy"}),
                Status::Retrying { attempt, message } => {
                    json!({"state": "retrying", "attempt": attempt, "message": message})
                }
                Status::Error(message) => json!({"state": "error", "message": message}),
            };
            let mut meta = acp::Meta::new();
            meta.insert("cairn".to_owned(), state);
            let status = if live { acp::SessionStatus::Open } else { acp::SessionStatus::Saved };
            to_value(&acp::SessionStatusResponse::new(status).meta(meta))
        }
        .boxed())
    }

    pub(super) fn steering(&self, params: Value) -> Answer {
        let request: SteeringRequest = parse(STEERING, params)?;
        if request.prompt.is_empty() {
            return Err(invalid_params(format!("{STEERING}: `prompt` must hold at least one content block")));
        }
        let parts = request.prompt.into_iter().map(block_to_part).collect::<Result<Vec<_>, _>>()?;
        let start_if_idle = request.idle_behavior.as_deref() != Some("promptRequired");
        let (sessions, id) = (self.sessions()?, self.session(&request.session_id)?);
        if let Some(served) = &self.served {
            served.drive(&id);
        }
        // Sent now, in wire order: a prompt that follows this line is not overtaken.
        let steered = sessions.steer(&id, parts, start_if_idle);
        let served = self.served.clone();
        Ok(async move {
            let answer = match Served::found(served.as_deref(), &id, steered.await)? {
                Steering::Injected => json!({"outcome": "injected"}),
                Steering::PromptRequired => json!({"outcome": "promptRequired", "reason": "noRunningTurn"}),
                Steering::StartedNewTurn => json!({"outcome": "startedNewTurn"}),
            };
            Ok(answer)
        }
        .boxed())
    }

    /// `_cairn/stream/resume {sessionId, afterSeq}` (on a server): the session's updates
    /// numbered after `afterSeq`, then the live stream, each once; or an error saying to load
    /// the session when they are no longer kept.
    pub(super) fn stream_resume(&self, params: Value) -> Answer {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Resume {
            session_id: String,
            after_seq: u64,
        }
        let Some(served) = self.served.clone() else {
            return Err(crate::acp::rpc::error(
                acp::ErrorCode::MethodNotFound,
                format!("{STREAM_RESUME} is served by `cairn serve` only; on stdio, call session/load"),
            ));
        };
        let request: Resume = parse(STREAM_RESUME, params)?;
        let sessions = self.sessions()?;
        let id = SessionId::from_string(request.session_id);
        if sessions.store().logs_events() && self.sees(&id) {
            // In wire order: what is sent from here on is cut by the log's numbers.
            let resuming = served.hub.resume_from_log(&id, &served.viewer);
            return Ok(async move {
                let after = request.after_seq;
                let missed = async {
                    let stored = sessions.store().session(&id).await.map_err(|err| session_error(&err.into()))?;
                    if stored.is_none() && after > 0 {
                        let ahead = crate::session::ResumeError::Ahead { session: id.clone(), after, last: 0 };
                        return Err(resume_error(&ahead));
                    }
                    Served::found(Some(&served), &id, stored.ok_or_else(|| SessionError::NotFound(id.clone())))?;
                    // Following the log from its history's `seq` before the log is read: no row
                    // falls between what is read and what is forwarded.
                    let (_, forwarded) = Served::found(Some(&served), &id, sessions.follow(&id).await)?;
                    let after_row = i64::try_from(after).unwrap_or(i64::MAX);
                    match sessions.store().missed(&id, after_row).await {
                        Ok(Some(missed)) => Ok((missed, forwarded)),
                        Ok(None) => Err(crate::acp::rpc::error(acp::ErrorCode::InternalError, "no event log")),
                        Err(err) => Err(session_error(&err.into())),
                    }
                }
                .await;
                let (missed, forwarded) = match missed {
                    Ok(missed) => missed,
                    Err(err) => {
                        resuming.fail();
                        return Err(err);
                    }
                };
                // A setting's row shows as the session's options, which the log does not hold:
                // a client that missed one is shown them as they are once this replica has
                // shown every row it missed (its view may not have the row yet: it was read
                // from the log just now), or it keeps the old.
                let settings_missed = crate::session::LogResume::misses_settings(&missed);
                let last = resuming.send(after, missed).map_err(|err| resume_error(&err))?;
                if settings_missed {
                    if let Some(mut forwarded) = forwarded {
                        let shown = forwarded.wait_for(|seq| *seq >= i64::try_from(last).unwrap_or(i64::MAX));
                        if tokio::time::timeout(crate::session::CATCH_UP, shown).await.is_err() {
                            tracing::warn!(session = %id, "the session's log was not forwarded in time for a resume");
                        }
                    }
                    let (view, _) = Served::found(Some(&served), &id, sessions.follow(&id).await)?;
                    let options = crate::session::Update::Options(Box::new(view));
                    crate::session::UpdateSink::send(&*served.viewer.sink, &id, options);
                }
                Ok(serde_json::json!({ "lastSeq": last }))
            }
            .boxed());
        }
        // In wire order: what is sent from here on follows what is resent. A session this
        // connection may not see is answered as one that does not exist, whose stream is empty.
        let resumed = match self.sees(&id) {
            true => served.hub.resume(&id, &served.viewer, request.after_seq),
            false if request.after_seq > 0 => {
                Err(crate::session::ResumeError::Ahead { session: id.clone(), after: request.after_seq, last: 0 })
            }
            false => return Err(session_error(&SessionError::NotFound(id))),
        };
        let last = resumed.map_err(|err| resume_error(&err))?;
        Ok(async move {
            let stored = sessions.store().session(&id).await.map_err(|err| session_error(&err.into()))?;
            Served::found(Some(&served), &id, stored.ok_or_else(|| SessionError::NotFound(id.clone())))?;
            Ok(serde_json::json!({ "lastSeq": last }))
        }
        .boxed())
    }
}

/// A resume that cannot give exactly what was missed, as the client is told: `too_old` (load
/// the session instead) or `ahead`.
fn resume_error(err: &crate::session::ResumeError) -> acp::Error {
    let reason = match err {
        crate::session::ResumeError::TooOld { .. } => "too_old",
        crate::session::ResumeError::Ahead { .. } => "ahead",
    };
    crate::acp::rpc::error(acp::ErrorCode::InvalidParams, err.to_string()).data(serde_json::json!({ "reason": reason }))
}

//! Closing the turns of replicas that died: every replica sweeps, on a connection of its own,
//! for leases that lapsed without being released (`lease::sweep`), takes each over with the
//! next epoch (so the dead holder, should it wake, is fenced) and, in the same transaction, ends
//! the turn it left open: its unfinished tool calls are stored as interrupted,
//! and a notice naming the dead replica closes the turn. What that shows (the calls' new states,
//! the notice) goes into the session's event log in the same transaction, for the clients
//! following the session from other replicas, and every command handed to the dead replica
//! that it left unanswered is answered as cancelled ([`CANCELLED`]). Then the lease is released
//! and the followers and senders woken. The turn is never run again: its tools' side effects may
//! be half done; the user decides.
//!
//! A replica's lease lives `[store] lease_ttl_secs` (15 s by default) unrenewed and the sweep
//! runs every quarter of that, so a dead replica's turn is closed within 1.25 lease lifetimes
//! (about 19 s by default).

use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::lease::{self, Swept};
use super::{PgError, PgTarget, events, inbox, rows};
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};

/// Sweeps every `every` until `stop`, reconnecting when the connection is lost.
pub async fn run(target: PgTarget, me: String, ttl: Duration, every: Duration, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if client.as_ref().is_none_or(Client::is_closed) {
            match target.connect().await {
                Ok(connected) => client = Some(connected),
                Err(err) => {
                    tracing::warn!("cannot sweep for dead replicas' turns: {err}");
                    continue;
                }
            }
        }
        if let Some(connected) = client.as_mut()
            && let Err(err) = sweep_once(connected, &target, &me, ttl).await
        {
            tracing::warn!("sweeping for dead replicas' turns failed: {err}");
        }
    }
}

/// One sweep: the sessions whose turns it closed.
pub async fn sweep_once(
    client: &mut Client,
    target: &PgTarget,
    me: &str,
    ttl: Duration,
) -> Result<Vec<SessionId>, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    // One transaction takes the lapsed leases and closes their turns: no replica ever sees a
    // lease this one took and has not closed yet, which its own inbox would take for a session
    // it runs (and carry out the dead turn's pending prompts instead of answering them).
    let tx = client.transaction().await.map_err(failed)?;
    let swept = lease::sweep(&tx, target, me, Duration::ZERO, ttl).await?;
    let mut closed = Vec::with_capacity(swept.len());
    for Swept { lease, dead } in swept {
        tracing::warn!(session = %lease.session, "replica {dead} stopped renewing its lease mid-turn; closing the turn");
        if !lease::fence(&tx, target, &lease).await? {
            // Another sweeper's, or a holder that came back and took it again: not ours to close.
            continue;
        }
        let now = now_ms();
        let ended = rows::finalize_orphans(&tx, &lease.session, now).await.map_err(failed)?;
        let notice = notice(&dead);
        rows::insert_message(&tx, &lease.session, &notice, now).await.map_err(failed)?;
        events::append_unshown(&tx, &lease, &shown(&ended, &notice)).await.map_err(failed)?;
        inbox::answer_all(&tx, &lease.session, me, CANCELLED).await.map_err(failed)?;
        lease::release(&tx, target, &lease).await?;
        closed.push(lease.session);
    }
    tx.commit().await.map_err(failed)?;
    if !closed.is_empty() {
        events::notify(&*client, target, &closed).await?;
        inbox::wake(&*client).await.map_err(|err| target.failed(&err))?;
    }
    Ok(closed)
}

/// The answer of a command the dead replica left unanswered, as the session layer reads
/// answers: its prompt ended cancelled.
pub const CANCELLED: &str = r#"{"end":{"stop":"cancelled"}}"#;

/// What closing the turn shows, as the event log keeps the session layer's updates: each call
/// ended (`tool_call_update`), then the notice.
fn shown(ended: &[Part], notice: &Message) -> Vec<String> {
    let mut shown: Vec<String> = ended
        .iter()
        .filter_map(|part| match part {
            Part::Tool(tool) => Some(serde_json::json!({ "update": "tool_call_update", "data": tool }).to_string()),
            _ => None,
        })
        .collect();
    for part in &notice.parts {
        if let Part::Notice { text } = part {
            shown.push(
                serde_json::json!({ "update": "notice", "data": { "message": notice.id, "text": text } }).to_string(),
            );
        }
    }
    shown
}

/// The notice that ends a dead replica's turn, naming it (`host:pid:…` shows as host and pid).
fn notice(dead: &str) -> Message {
    let mut fields = dead.splitn(3, ':');
    let host = fields.next().unwrap_or(dead);
    let replica = match fields.next() {
        Some(pid) => format!("the cairn serve replica on {host} (pid {pid})"),
        None => format!("the cairn serve replica {host}"),
    };
    let text = format!(
        "This turn was cut off: {replica} that ran it stopped answering. Its unfinished tool calls \
         were ended as interrupted and nothing was run again; send a prompt to go on."
    );
    Message::new(Role::Assistant, vec![Part::Notice { text }], MessageMeta::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{CallState, ToolPart};
    use crate::store::SessionRow;
    use crate::store::pg::tests::{fresh, took};

    /// A session whose turn a replica that then died left open: its lease lapsed, a tool call
    /// running.
    async fn left_open(client: &Client, target: &PgTarget) -> SessionId {
        let id = SessionId::generate();
        rows::insert_session(client, &SessionRow::new(id.clone(), "/w".into(), "openai/m".into(), now_ms()))
            .await
            .unwrap();
        took(lease::take(client, target, &id, "deadhost:4242:x", Duration::from_secs(60)).await.unwrap());
        let mut tool = ToolPart::new("c1".into(), "bash".into());
        tool.state.advance(CallState::Running).unwrap();
        let running = Message::new(Role::Assistant, vec![Part::Tool(tool)], MessageMeta::default());
        rows::insert_message(client, &id, &running, now_ms()).await.unwrap();
        client.execute("UPDATE session_leases SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
        id
    }

    #[tokio::test]
    async fn a_dead_replicas_turn_is_closed_once_with_its_calls_interrupted_and_a_notice_naming_it() {
        let (target, mut client) = fresh().await;
        let id = left_open(&client, &target).await;
        let ttl = Duration::from_secs(60);
        assert_eq!(sweep_once(&mut client, &target, "alive:1:y", ttl).await.unwrap(), std::slice::from_ref(&id));
        assert!(sweep_once(&mut client, &target, "alive:1:y", ttl).await.unwrap().is_empty(), "closed once");

        let messages = rows::messages(&client, &id).await.unwrap();
        let Part::Tool(tool) = &messages[0].parts[0] else { panic!("{messages:?}") };
        assert_eq!(tool.state, CallState::Failed);
        assert!(tool.output.as_deref().is_some_and(|output| output.contains("Interrupted")), "{tool:?}");
        let Part::Notice { text } = &messages[1].parts[0] else { panic!("{messages:?}") };
        assert!(text.contains("deadhost") && text.contains("4242") && text.contains("cut off"), "{text}");
        let released: bool = client
            .query_one("SELECT released_at IS NOT NULL FROM session_leases WHERE session_id = $1", &[&id.as_str()])
            .await
            .unwrap()
            .get(0);
        assert!(released, "the sweeper let the lease go");
        let dead = lease::Lease { session: id.clone(), holder: "deadhost:4242:x".into(), epoch: 1 };
        assert!(!lease::renew(&client, &target, &dead, ttl).await.unwrap(), "the dead replica, waking, is fenced");
        let next = took(lease::take(&client, &target, &id, "other:2:z", ttl).await.unwrap());
        assert_eq!(next.epoch, 3, "the sweep's take was epoch 2");
    }

    #[tokio::test]
    async fn a_postgres_store_sweeps_by_itself() {
        let url = crate::store::pg::fixture::database().await;
        let target = PgTarget::parse(&url).unwrap();
        let mut client = target.connect().await.unwrap();
        crate::store::pg::migrate::to_latest(&mut client, &target).await.unwrap();
        let id = left_open(&client, &target).await;
        let store = crate::store::Store::open_postgres_as(&url, "alive:1:y", Duration::from_millis(400)).await.unwrap();
        let mut notice = None;
        for _ in 0..600 {
            let messages = store.messages(&id).await.unwrap();
            notice = messages.iter().flat_map(|message| &message.parts).find_map(|part| match part {
                Part::Notice { text } => Some(text.clone()),
                _ => None,
            });
            if notice.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(notice.is_some_and(|text| text.contains("deadhost")), "the store's sweeper closed the turn");
        store.shutdown().await;
    }
}

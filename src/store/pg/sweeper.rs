//! Closing the turns of replicas that died: every replica sweeps, on a connection of its own,
//! for leases that lapsed without being released (`lease::sweep`), takes each over with the
//! next epoch (so the dead holder, should it wake, is fenced), under a name of its own
//! ([`closer`]), and, in the same transaction, ends the turn it left open: its unfinished tool
//! calls are stored as interrupted, the text it streamed that only the event log holds goes
//! into its parts' pieces (`rows::fold_streams`), and a notice naming the dead replica closes the turn. What that shows (the calls' new states,
//! the notice) goes into the session's event log in the same transaction, for the clients
//! following the session from other replicas, and every command handed to the dead replica
//! that it left unanswered is answered as cancelled ([`CANCELLED`]). Then the lease is released
//! and the followers and senders woken. The turn is never run again: its tools' side effects may
//! be half done; the user decides.
//!
//! A replica that dies between turns holds no lease, so no lease lapses for the commands it
//! took and had not answered yet (a prompt whose turn it had just ended, say). Every replica's
//! heart beats in `cairn_replicas` at each of its sweeps ([`beat`]); a sweeper that finds a
//! replica's beat lapsed answers the commands it took and left unanswered as cancelled
//! ([`answer_dead_takers`]), never handing them to another taker: a prompt may have run its
//! turn already. A sweeper judges only while it saw the database itself since its previous
//! sweep: right after an outage of its own, the others had no chance to beat either.
//!
//! A replica's lease lives `[store] lease_ttl_secs` (15 s by default) unrenewed and the sweep
//! runs every quarter of that, so a dead replica's turn is closed within 1.25 lease lifetimes
//! (about 19 s by default), and the commands it took between turns are answered as soon.

use std::time::Duration;

use tokio_postgres::{Client, GenericClient};
use tokio_util::sync::CancellationToken;

use super::lease::{self, Swept};
use super::{PgError, PgTarget, events, inbox, rows};
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{SessionId, now_ms};

/// Sweeps every `every` until `stop`, reconnecting when the connection is lost. Each sweep
/// first beats this replica's heart ([`beat`]).
pub async fn run(target: PgTarget, me: String, ttl: Duration, every: Duration, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    // When this replica's last beat went in: it judges others dead only while it saw the
    // database the whole time (after an outage of its own, the others had no chance to beat).
    let mut beaten: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(connected) = target.connected(&mut client, "sweep for dead replicas' turns").await else { continue };
        let seen_throughout = match beat(&*connected, &target, &me, ttl).await {
            Ok(()) => beaten.replace(std::time::Instant::now()).is_some_and(|last| last.elapsed() < ttl),
            Err(err) => {
                tracing::warn!("cannot beat this replica's heart in PostgreSQL: {err}");
                beaten = None;
                false
            }
        };
        if let Err(err) = sweep_once(connected, &target, &me, ttl).await {
            tracing::warn!("sweeping for dead replicas' turns failed: {err}");
        }
        if seen_throughout && let Err(err) = answer_dead_takers(connected, &target).await {
            tracing::warn!("answering the commands of dead replicas failed: {err}");
        }
    }
}

/// Marks replica `me` alive for `ttl` more (from the database's clock).
pub async fn beat(client: &impl GenericClient, target: &PgTarget, me: &str, ttl: Duration) -> Result<(), PgError> {
    client
        .execute(
            "INSERT INTO cairn_replicas (replica, expires_at) VALUES ($1, now() + make_interval(secs => $2))
             ON CONFLICT (replica) DO UPDATE SET expires_at = excluded.expires_at",
            &[&me, &ttl.as_secs_f64()],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(())
}

/// Answers as cancelled ([`CANCELLED`]) every command a replica took and left unanswered when
/// its heart stopped, unless it holds the command's session's lease still (then the lease
/// sweep closes that turn and answers them): a replica that died between turns, holding no
/// lease, whose senders would otherwise wait for ever. Cancelled, never handed to another
/// taker: a prompt it took may have run its turn already, and must not run twice. Wakes the
/// senders; how many it answered.
///
/// A stalled replica may wake and start the turn of a command it took: the take of that turn's
/// lease locks the command's row and checks it unanswered (`inbox::still_taken`). So the
/// commands are locked first (skipping those a take holds: their turn is starting), and the
/// leases read by a second statement, whose snapshot sees every take committed before those
/// locks were granted: nothing answered here can run, and nothing that runs is answered here.
pub async fn answer_dead_takers(client: &mut Client, target: &PgTarget) -> Result<u64, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let tx = client.transaction().await.map_err(failed)?;
    let locked: Vec<i64> = tx
        .query(
            "SELECT command.id FROM session_commands AS command
             WHERE command.answered_at IS NULL AND command.taken_by IS NOT NULL
               AND EXISTS (SELECT 1 FROM cairn_replicas AS taker
                           WHERE taker.replica = command.taken_by AND taker.expires_at < now())
             ORDER BY command.id
             FOR UPDATE OF command SKIP LOCKED",
            &[],
        )
        .await
        .map_err(failed)?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if locked.is_empty() {
        return Ok(0);
    }
    let answered = tx
        .execute(
            "UPDATE session_commands AS command
             SET answer = $1, answered_at = now(),
                 answered_seq = (SELECT coalesce(max(seq), 0) FROM session_events
                                 WHERE session_id = command.session_id)
             WHERE command.id = ANY($2) AND command.answered_at IS NULL
               AND EXISTS (SELECT 1 FROM cairn_replicas AS taker
                           WHERE taker.replica = command.taken_by AND taker.expires_at < now())
               AND NOT EXISTS (SELECT 1 FROM session_leases AS lease
                               WHERE lease.session_id = command.session_id
                                 AND lease.holder = command.taken_by AND lease.released_at IS NULL)",
            &[&CANCELLED, &locked],
        )
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    if answered > 0 {
        tracing::warn!(answered, "commands taken by replicas that stopped were answered as cancelled");
        inbox::wake(&*client).await.map_err(failed)?;
    }
    Ok(answered)
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
    // it runs (and carry out the dead turn's pending prompts instead of answering them). The
    // name of its own ([`closer`]) says the same again, should a take ever be seen.
    let tx = client.transaction().await.map_err(failed)?;
    let swept = lease::sweep(&tx, target, &closer(me), Duration::ZERO, ttl).await?;
    let mut closed = Vec::with_capacity(swept.len());
    for Swept { lease, dead } in swept {
        tracing::warn!(session = %lease.session, "replica {dead} stopped renewing its lease mid-turn; closing the turn");
        if !lease::fence(&tx, target, &lease).await? {
            // Another sweeper's, or a holder that came back and took it again: not ours to close.
            continue;
        }
        let now = now_ms();
        let ended = rows::finalize_orphans(&tx, &lease.session, now).await.map_err(failed)?;
        // The text the dead writer left only in the log goes into pieces, its parts stop
        // streaming: it cannot write them again, its lease now being this one's.
        rows::fold_streams(&tx, &[&lease.session]).await.map_err(failed)?;
        let notice = notice(&dead);
        rows::insert_message(&tx, &super::Prepared::default(), &lease.session, &notice, now).await.map_err(failed)?;
        events::append_unshown(&tx, &lease, &shown(&ended, &notice)).await.map_err(failed)?;
        inbox::answer_all(&tx, &lease.session, me, CANCELLED).await.map_err(failed)?;
        lease::release(&tx, target, &lease).await?;
        closed.push(lease.session);
    }
    tx.commit().await.map_err(failed)?;
    if !closed.is_empty() {
        events::notify(&*client, &super::Prepared::default(), target, &closed).await?;
        inbox::wake(&*client).await.map_err(|err| target.failed(&err))?;
    }
    Ok(closed)
}

/// The holder a sweeper takes a dead replica's lease as, between the takeover and the close
/// that releases it: never the sweeping replica's own name, or its inbox would take the dead
/// holder's waiting commands as their holder's and run them (a prompt handed to the dead turn
/// run here, instead of answered cancelled by the close), and its writer could start a turn
/// under the lease the close is about to release.
pub fn closer(me: &str) -> String {
    format!("{me}/closing")
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
        rows::insert_message(client, &crate::store::pg::Prepared::default(), &id, &running, now_ms()).await.unwrap();
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

    /// A command of `session` sent by `sender`, taken by `taker` and not answered.
    async fn taken(client: &Client, session: &SessionId, sender: &str, taker: &str) -> i64 {
        client
            .query_one(
                "INSERT INTO session_commands (session_id, sender, body, taken_by, taken_at)
                 VALUES ($1, $2, '{\"prompt\":{\"parts\":[]}}', $3, now()) RETURNING id",
                &[&session.as_str(), &sender, &taker],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn answer_of(client: &Client, command: i64) -> Option<String> {
        client.query_one("SELECT answer FROM session_commands WHERE id = $1", &[&command]).await.unwrap().get(0)
    }

    #[tokio::test]
    async fn a_command_taken_by_a_replica_that_died_between_turns_is_answered_cancelled_and_a_live_ones_is_not() {
        let (target, mut client) = fresh().await;
        let ttl = Duration::from_secs(60);
        beat(&client, &target, "dead:1:x", ttl).await.unwrap();
        beat(&client, &target, "alive:2:y", ttl).await.unwrap();
        client
            .execute(
                "UPDATE cairn_replicas SET expires_at = now() - interval '1 second' WHERE replica = 'dead:1:x'",
                &[],
            )
            .await
            .unwrap();
        // The dead one ended its turn (its lease let go) and died before answering the prompt
        // it had run; the live one is between turns too, its prompt queued.
        let (idle, other) = (SessionId::generate(), SessionId::generate());
        let lease = took(lease::take(&client, &target, &idle, "dead:1:x", ttl).await.unwrap());
        lease::release(&client, &target, &lease).await.unwrap();
        let orphan = taken(&client, &idle, "sender:3:z", "dead:1:x").await;
        let queued = taken(&client, &other, "sender:3:z", "alive:2:y").await;

        assert_eq!(answer_dead_takers(&mut client, &target).await.unwrap(), 1);
        assert_eq!(answer_of(&client, orphan).await.as_deref(), Some(CANCELLED), "the sender is answered");
        assert_eq!(answer_of(&client, queued).await, None, "a live replica answers its own");
        assert_eq!(answer_dead_takers(&mut client, &target).await.unwrap(), 0, "answered once");
    }

    #[tokio::test]
    async fn a_dead_replicas_command_in_a_session_whose_lease_it_still_holds_is_left_to_the_lease_sweep() {
        let (target, mut client) = fresh().await;
        let id = left_open(&client, &target).await;
        let ttl = Duration::from_secs(60);
        beat(&client, &target, "deadhost:4242:x", ttl).await.unwrap();
        client.execute("UPDATE cairn_replicas SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
        let command = taken(&client, &id, "sender:3:z", "deadhost:4242:x").await;
        assert_eq!(
            answer_dead_takers(&mut client, &target).await.unwrap(),
            0,
            "its turn is the lease sweep's to close"
        );
        sweep_once(&mut client, &target, "alive:1:y", ttl).await.unwrap();
        assert_eq!(answer_of(&client, command).await.as_deref(), Some(CANCELLED));
    }

    #[tokio::test]
    async fn a_stalled_replica_that_wakes_and_starts_its_commands_turn_first_keeps_it_from_the_sweeper() {
        let (target, mut client) = fresh().await;
        let ttl = Duration::from_secs(60);
        beat(&client, &target, "stalled:1:x", ttl).await.unwrap();
        client.execute("UPDATE cairn_replicas SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
        let session = SessionId::generate();
        let command = taken(&client, &session, "sender:3:z", "stalled:1:x").await;
        // It wakes before the sweeper judges it: its turn's take locks the command, checks it
        // unanswered, and takes the lease, in one transaction.
        let mut waking = target.connect().await.unwrap();
        let take = waking.transaction().await.unwrap();
        let prepared = crate::store::pg::Prepared::default();
        assert!(inbox::still_taken(&take, &prepared, command, "stalled:1:x").await.unwrap());
        took(lease::take(&take, &target, &session, "stalled:1:x", ttl).await.unwrap());
        assert_eq!(answer_dead_takers(&mut client, &target).await.unwrap(), 0, "a turn is starting on it");
        take.commit().await.unwrap();
        assert_eq!(answer_dead_takers(&mut client, &target).await.unwrap(), 0, "its turn holds the lease");
        assert_eq!(answer_of(&client, command).await, None, "the turn that runs it answers it");
    }

    #[tokio::test]
    async fn the_commands_of_a_turn_being_closed_are_not_taken_by_the_closing_replicas_inbox() {
        use crate::store::pg::inbox::{Inbound, Inbox};
        let (target, client) = fresh().await;
        let ttl = Duration::from_secs(60);
        let (closing, mine) = (SessionId::generate(), SessionId::generate());
        // This replica's sweeper has taken a dead replica's lease over and not yet closed its
        // turn; it also runs a turn of its own.
        took(lease::take(&client, &target, &closing, &closer("alive:1:y"), ttl).await.unwrap());
        took(lease::take(&client, &target, &mine, "alive:1:y", ttl).await.unwrap());
        let poll = Duration::from_millis(50);
        let (_inbox, mut taken) = Inbox::start(target.clone(), "alive:1:y".into(), poll).await.unwrap();
        let (other, _its) = Inbox::start(target.clone(), "other:2:z".into(), poll).await.unwrap();
        other.send(&closing, "{\"prompt\":{\"parts\":[]}}".into()).await.unwrap();
        other.send(&mine, "{\"prompt\":{\"parts\":[]}}".into()).await.unwrap();
        // Commands are taken in the order they were sent: the first one taken is the second.
        let first = tokio::time::timeout(Duration::from_secs(30), taken.recv()).await.unwrap().unwrap();
        let Inbound::Command { session, .. } = first else { panic!("{first:?}") };
        assert_eq!(session, mine, "the command to the turn being closed is left for the close to answer");
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

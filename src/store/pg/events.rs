//! Each session's event log in PostgreSQL, and following it from another replica.
//!
//! The lease holder [`append`]s a batch's updates, as they will be shown, in the batch's own
//! transaction, for all its sessions in two statements: fenced first, so a replica whose lease
//! was taken over writes nothing, and given each session's next `seq` numbers, so per session
//! `seq` order is commit order. After the
//! commit, and outside it (NOTIFY takes a lock every commit would otherwise wait for), it wakes
//! the other replicas with one [`notify`] naming the batch's sessions.
//!
//! Each row names the replica that showed it to its own clients as it committed (`origin`: the
//! holder whose recorder wrote it): that replica's sessions skip it, as their clients have it.
//!
//! A replica's [`Follower`] has one LISTEN connection and follows any number of sessions, each
//! from the last `seq` its client has, handing a new follow first the questions still open
//! before that `seq` ([`open_questions`], rows older than where it starts). On a wake-up naming a session, on a new follow, and on
//! every poll (so a wake-up lost with a connection loses nothing), it reads each session's rows
//! after the last one forwarded, in one statement for all of them, and forwards them in order,
//! each exactly once: a row is forwarded only when it is the next `seq`. Wake-ups that come in a
//! burst are read as one. A subscriber that does not keep up is not waited for: its session is
//! read again at the next round, from where it stopped. A replica that loses its listening
//! connection connects again and reads everything. Rows pruned before a follow read them (it fell
//! behind by more than `[store] events_kept_secs`) are gone for good, as the holder commits in
//! `seq` order: the follow goes on from the first row left, with a warning, instead of waiting.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{Client, GenericClient, Notification, Transaction};
use tokio_util::sync::CancellationToken;

use super::lease::{Lease, fence_all};
use super::{PgError, PgTarget};
use crate::ids::SessionId;

/// The channel wake-ups go on.
const CHANNEL: &str = "cairn_events";
/// At most this many rows of one session per read; the rest come at the next round.
const ROWS_PER_READ: i64 = 512;
/// How many events wait for a slow subscriber before its session is left for the next round.
const QUEUED: usize = 1024;
/// A wake-up's payload names sessions up to this many bytes (PostgreSQL takes 8000); a batch
/// of more names every session.
const PAYLOAD: usize = 7000;

/// One row of a session's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub seq: i64,
    pub epoch: i64,
    /// The replica that showed it as it committed; empty for rows nobody showed then (the
    /// sweeper's).
    pub origin: String,
    /// The update as shown.
    pub body: String,
}

/// The session's last `seq` (0 for none): what its next holder continues from.
pub async fn last_seq(client: &impl GenericClient, target: &PgTarget, session: &SessionId) -> Result<i64, PgError> {
    let row = client
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&session.as_str()])
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(row.get(0))
}

/// What a client that saw a session's log up to some `seq` missed ([`missed`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Missed {
    /// Every row after it, in order (none: it saw them all).
    Rows(Vec<Event>),
    /// Rows after it were pruned: the oldest row left.
    Pruned { oldest: i64 },
    /// It is beyond the log's last row, which this is (0 for none).
    Ahead { last: i64 },
}

/// The rows of `session`'s log after `after`, in one statement on the primary key. Every row
/// after `after` must be there: the log is numbered without a hole (each holder, and the
/// sweeper, numbers on from its last row), so a hole is a row pruned (pruning may keep some
/// rows older than others it deletes), and only the rows after the last hole can be given.
/// `after`'s own row is read too: with no row after it, it tells a client that saw everything
/// from one beyond the end (the newest row is never pruned).
pub async fn missed(
    client: &impl GenericClient,
    target: &PgTarget,
    session: &SessionId,
    after: i64,
) -> Result<Missed, PgError> {
    let rows = client
        .query(
            "SELECT seq, epoch, body, origin FROM session_events
             WHERE session_id = $1 AND seq >= $2 ORDER BY seq",
            &[&session.as_str(), &after],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    let mut seen_after = after <= 0;
    let mut missed: Vec<Event> = Vec::with_capacity(rows.len());
    for row in rows {
        let event = Event { seq: row.get(0), epoch: row.get(1), body: row.get(2), origin: row.get(3) };
        if event.seq == after {
            seen_after = true;
        } else {
            missed.push(event);
        }
    }
    if missed.is_empty() && !seen_after {
        return Ok(Missed::Ahead { last: last_seq(client, target, session).await? });
    }
    let mut expected = after + 1;
    let mut hole = None;
    for event in &missed {
        if event.seq != expected {
            hole = Some(event.seq);
        }
        expected = event.seq + 1;
    }
    Ok(match hole {
        Some(oldest) => Missed::Pruned { oldest },
        None => Missed::Rows(missed),
    })
}

/// One session's part of a batch: `bodies` become its events `first_seq..`.
pub struct Append<'a> {
    pub lease: &'a Lease,
    pub first_seq: i64,
    pub bodies: &'a [String],
}

/// Appends a writer batch's events, for any number of sessions, in `tx`: one statement checks
/// every session's lease (the fence, `FOR SHARE`) and one inserts every event. If a session's
/// lease is another replica's now, nothing is inserted and the error names it
/// ([`PgError::Fenced`]): roll `tx` back, and write the batch again without that session.
pub async fn append(tx: &Transaction<'_>, target: &PgTarget, batch: &[Append<'_>]) -> Result<(), PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let leases: Vec<&Lease> = batch.iter().map(|part| part.lease).collect();
    if let Some(lease) = fence_all(tx, target, &leases).await? {
        return Err(PgError::Fenced { session: lease.session.to_string(), epoch: lease.epoch });
    }
    let mut rows_sessions = Vec::new();
    let mut rows_seqs = Vec::new();
    let mut rows_epochs = Vec::new();
    let mut rows_bodies = Vec::new();
    let mut rows_origins = Vec::new();
    for part in batch {
        for (seq, body) in (part.first_seq..).zip(part.bodies) {
            rows_sessions.push(part.lease.session.as_str());
            rows_seqs.push(seq);
            rows_epochs.push(part.lease.epoch);
            rows_bodies.push(body.as_str());
            rows_origins.push(part.lease.holder.as_str());
        }
    }
    insert(tx, &rows_sessions, &rows_seqs, &rows_epochs, &rows_bodies, &rows_origins).await.map_err(failed)
}

/// Appends `bodies` to `session`'s log after its last row, as no replica's (`origin` empty: no
/// client was shown them as they committed), in the caller's transaction, which must hold the
/// session's lease: the sweeper closing a dead replica's turn.
pub async fn append_unshown(
    tx: &Transaction<'_>,
    lease: &Lease,
    bodies: &[String],
) -> Result<(), tokio_postgres::Error> {
    if bodies.is_empty() {
        return Ok(());
    }
    let last: i64 = tx
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&lease.session.as_str()])
        .await?
        .get(0);
    let count = bodies.len();
    let sessions = vec![lease.session.as_str(); count];
    let seqs: Vec<i64> = (last + 1..).take(count).collect();
    let epochs = vec![lease.epoch; count];
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    insert(tx, &sessions, &seqs, &epochs, &bodies, &vec![""; count]).await
}

async fn insert(
    client: &impl GenericClient,
    sessions: &[&str],
    seqs: &[i64],
    epochs: &[i64],
    bodies: &[&str],
    origins: &[&str],
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO session_events (session_id, seq, epoch, body, origin)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])",
            &[&sessions, &seqs, &epochs, &bodies, &origins],
        )
        .await?;
    Ok(())
}

/// Wakes the followers of `sessions`: once per committed batch, outside its transaction.
pub async fn notify(client: &impl GenericClient, target: &PgTarget, sessions: &[SessionId]) -> Result<(), PgError> {
    let mut payload = String::new();
    for session in sessions {
        if payload.len() + session.as_str().len() + 1 > PAYLOAD {
            // Too many to name: an empty payload wakes every session.
            payload.clear();
            break;
        }
        if !payload.is_empty() {
            payload.push(',');
        }
        payload.push_str(session.as_str());
    }
    client.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload]).await.map_err(|err| target.failed(&err))?;
    Ok(())
}

/// A follow asked of the [`Follower`]'s task.
struct Follow {
    session: SessionId,
    after: i64,
    sink: mpsc::Sender<Event>,
}

/// One follow of a session: its subscriber and the last `seq` forwarded to it.
struct Followed {
    session: SessionId,
    last: i64,
    sink: mpsc::Sender<Event>,
}

/// Follows sessions written by other replicas (see the module's paragraph). Dropping it stops
/// its task and closes its connection.
pub struct Follower {
    follows: mpsc::UnboundedSender<Follow>,
    _stop: tokio_util::sync::DropGuard,
}

impl Follower {
    /// Connects and listens; a round of reads runs every `poll` besides wake-ups.
    pub async fn start(target: PgTarget, poll: Duration) -> Result<Self, PgError> {
        let (client, heard) = target.listen(CHANNEL).await?;
        let (follows, asked) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = Task { target, poll, followed: HashMap::new(), numbered: 0, cancel: cancel.clone() };
        tokio::spawn(task.run(client, heard, asked));
        Ok(Self { follows, _stop: cancel.drop_guard() })
    }

    /// The session's events after `after`, as they commit, after the questions still open up to
    /// `after` ([`open_questions`]: the only rows whose `seq` is not above it). The stream ends
    /// when the follower stops. A session may be followed any number of times, each from its
    /// own `seq`.
    pub fn follow(&self, session: &SessionId, after: i64) -> mpsc::Receiver<Event> {
        let (sink, events) = mpsc::channel(QUEUED);
        let _ = self.follows.send(Follow { session: session.clone(), after, sink });
        events
    }
}

struct Task {
    target: PgTarget,
    poll: Duration,
    /// Every follow, by a number of its own.
    followed: HashMap<i64, Followed>,
    numbered: i64,
    cancel: CancellationToken,
}

impl Task {
    async fn run(
        mut self,
        mut client: Client,
        mut heard: mpsc::UnboundedReceiver<Notification>,
        mut asked: mpsc::UnboundedReceiver<Follow>,
    ) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // `None`: every followed session.
            let due: Option<HashSet<SessionId>> = tokio::select! {
                () = self.cancel.cancelled() => return,
                follow = asked.recv() => {
                    let Some(follow) = follow else { return };
                    let mut due = HashSet::new();
                    due.insert(self.add(&client, follow).await);
                    while let Ok(more) = asked.try_recv() {
                        due.insert(self.add(&client, more).await);
                    }
                    Some(due)
                }
                note = heard.recv() => match note {
                    Some(note) => {
                        let mut due = named(note.payload());
                        // A burst of wake-ups is one round.
                        while let Ok(more) = heard.try_recv() {
                            due = match (due, named(more.payload())) {
                                (Some(mut some), Some(more)) => { some.extend(more); Some(some) }
                                _ => None,
                            };
                        }
                        due
                    }
                    None => match self.reconnect().await {
                        Some(pair) => {
                            (client, heard) = pair;
                            None
                        }
                        None => return,
                    },
                },
                _ = tick.tick() => None,
            };
            self.followed.retain(|_, followed| !followed.sink.is_closed());
            if let Err(err) = self.round(&client, due).await {
                tracing::warn!("following sessions in PostgreSQL: {err}; reading again at the next round");
            }
        }
    }

    /// Starts a follow, first handing it the questions still open before where it starts.
    async fn add(&mut self, client: &Client, follow: Follow) -> SessionId {
        self.numbered += 1;
        match open_questions(client, &follow.session, follow.after).await {
            Ok(open) => {
                for event in open {
                    // A new follow's queue is empty: these fit.
                    let _ = follow.sink.try_send(event);
                }
            }
            Err(err) => tracing::warn!(
                session = %follow.session,
                "reading the questions open in the session: {}; its clients here are not asked them",
                self.target.failed(&err)
            ),
        }
        let session = follow.session.clone();
        self.followed
            .insert(self.numbered, Followed { session: follow.session, last: follow.after, sink: follow.sink });
        session
    }

    /// Connects and listens again, until it can (`None`: the follower stopped first).
    async fn reconnect(&self) -> Option<(Client, mpsc::UnboundedReceiver<Notification>)> {
        self.target.listen_again(CHANNEL, self.poll, &self.cancel, "following sessions").await
    }

    /// Reads the `due` sessions' new rows and forwards each next one in order.
    async fn round(&mut self, client: &Client, due: Option<HashSet<SessionId>>) -> Result<(), PgError> {
        let mut numbers = Vec::new();
        let mut sessions = Vec::new();
        let mut lasts = Vec::new();
        for (number, followed) in &self.followed {
            if due.as_ref().is_none_or(|due| due.contains(&followed.session)) {
                numbers.push(*number);
                sessions.push(followed.session.as_str());
                lasts.push(followed.last);
            }
        }
        if numbers.is_empty() {
            return Ok(());
        }
        let rows = client
            .query(
                "SELECT following.number, event.seq, event.epoch, event.body, event.origin
                 FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS following(number, session_id, last)
                 CROSS JOIN LATERAL (
                    SELECT seq, epoch, body, origin FROM session_events
                    WHERE session_id = following.session_id AND seq > following.last
                    ORDER BY seq LIMIT $4
                 ) AS event
                 ORDER BY following.number, event.seq",
                &[&numbers, &sessions, &lasts, &ROWS_PER_READ],
            )
            .await
            .map_err(|err| self.target.failed(&err))?;
        // The follows whose first row of this round was seen: only that one may pass a gap.
        let mut started = HashSet::new();
        for row in rows {
            let number = row.get::<_, i64>(0);
            let Some(followed) = self.followed.get_mut(&number) else { continue };
            let event = Event { seq: row.get(1), epoch: row.get(2), body: row.get(3), origin: row.get(4) };
            let first = started.insert(number);
            if first && event.seq > followed.last + 1 {
                // The holder commits its rows in `seq` order, so rows missing before the first
                // one read are gone for good (pruned before this follow read them): waiting
                // for them would stall the follow forever.
                tracing::warn!(
                    session = %followed.session,
                    missed = event.seq - followed.last - 1,
                    "rows of the session's event log were pruned before this replica read them; its clients miss those updates"
                );
            } else if event.seq != followed.last + 1 {
                // Not the next one: never forwarded out of order; the next round reads again.
                continue;
            }
            let seq = event.seq;
            if followed.sink.try_send(event).is_err() {
                // Full or gone: left for the next round.
                continue;
            }
            followed.last = seq;
        }
        Ok(())
    }
}

/// How the session layer's question rows begin (`session::asked::Signal`): a question asked,
/// whose `asked.id` names it, and its close, whose `closed.id` does. Only these rows' shape is
/// known here: the store carries every other body as it is.
pub const ASKED: &str = "{\"asked\":";
pub const CLOSED: &str = "{\"closed\":";

/// The questions asked in `session` up to `upto` and still open then: logged by the turn that
/// holds the session's lease now (its holder and epoch, unreleased) and not closed by a row up
/// to `upto`. A follow starting at `upto` gets them first, so a replica whose clients open the
/// session while a question waits asks them too; a close after `upto` follows in the log.
pub async fn open_questions(
    client: &impl GenericClient,
    session: &SessionId,
    upto: i64,
) -> Result<Vec<Event>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT asked.seq, asked.epoch, asked.body, asked.origin FROM session_events AS asked
             JOIN session_leases AS lease ON lease.session_id = asked.session_id
                 AND lease.epoch = asked.epoch AND lease.holder = asked.origin AND lease.released_at IS NULL
             WHERE asked.session_id = $1 AND asked.seq <= $2 AND asked.body LIKE $3 || '%'
               AND NOT EXISTS (
                   SELECT 1 FROM session_events AS closed
                   WHERE closed.session_id = asked.session_id AND closed.seq > asked.seq AND closed.seq <= $2
                     AND closed.body LIKE $4 || '%'
                     AND (CASE WHEN closed.body LIKE $4 || '%' THEN closed.body::jsonb #>> '{closed,id}' END)
                         = (CASE WHEN asked.body LIKE $3 || '%' THEN asked.body::jsonb #>> '{asked,id}' END))
             ORDER BY asked.seq",
            &[&session.as_str(), &upto, &ASKED, &CLOSED],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Event { seq: row.get(0), epoch: row.get(1), body: row.get(2), origin: row.get(3) })
        .collect())
}

/// The sessions a wake-up names; `None` for all.
fn named(payload: &str) -> Option<HashSet<SessionId>> {
    (!payload.is_empty()).then(|| payload.split(',').map(SessionId::from_string).collect())
}

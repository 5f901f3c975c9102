//! Each session's event log in PostgreSQL, and following it from another replica.
//!
//! The lease holder [`append`]s a batch's updates, as they will be shown, in the batch's own
//! transaction, for all its sessions in two statements: fenced first, so a replica whose lease
//! was taken over writes nothing, and given each session's next `seq` numbers, so per session
//! `seq` order is commit order (the writer's batch, whose transaction fenced its leases first,
//! appends with [`append_fenced`], the insert alone). After the
//! commit, and outside it (NOTIFY takes a lock every commit would otherwise wait for), it wakes
//! the other replicas with one [`notify`] naming the batch's sessions.
//!
//! Each row names the replica that showed it to its own clients as it committed (`origin`: the
//! holder whose recorder wrote it): that replica's sessions skip it, as their clients have it.
//!
//! A replica's [`Follower`] has one LISTEN connection and follows any number of sessions, each
//! from the last `seq` its client has, handing a new follow first the questions still open
//! before that `seq` ([`open_questions`], rows older than where it starts). The rows this
//! replica's own writer appends it does not read back: the writer tells it of them once
//! committed ([`OwnRows`]), and a follow that has forwarded every row before them moves past
//! them at once, one row of this replica's standing for them all (its sessions skip this
//! replica's rows anyway); its writer's wake-ups name it, and wake nothing here. On a wake-up
//! naming a session, on a new follow, and on
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

pub use super::late::{ASKED, CLOSED, Missed, missed, open_questions};
use super::lease::{Lease, fence_all};
use super::{PgError, PgTarget, Prepared};
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
/// A wake-up that names the replica whose writer sent it starts with this, the name and a
/// newline, before the sessions.
const ORIGIN: char = '@';

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

/// [`last_seq`], the statement prepared once in `prepared`, `client`'s connection's.
pub async fn last_seq_prepared(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    session: &SessionId,
) -> Result<i64, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared
        .get(client, "SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1")
        .await
        .map_err(failed)?;
    Ok(client.query_one(&statement, &[&session.as_str()]).await.map_err(failed)?.get(0))
}

/// The last `seq` (0 for none) of each of `sessions`, in one statement prepared once in
/// `prepared`, `client`'s connection's.
pub async fn last_seqs(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    sessions: &[&str],
) -> Result<HashMap<String, i64>, PgError> {
    if sessions.is_empty() {
        return Ok(HashMap::new());
    }
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared
        .get(
            client,
            "SELECT log.session_id, coalesce((SELECT max(seq) FROM session_events WHERE session_id = log.session_id), 0)
             FROM unnest($1::text[]) AS log(session_id)",
        )
        .await
        .map_err(failed)?;
    let rows = client.query(&statement, &[&sessions]).await.map_err(failed)?;
    Ok(rows.iter().map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1))).collect())
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
    let prepared = Prepared::default();
    let leases: Vec<&Lease> = batch.iter().map(|part| part.lease).collect();
    if let Some(lease) = fence_all(tx, &prepared, target, &leases).await? {
        return Err(PgError::Fenced { session: lease.session.to_string(), epoch: lease.epoch });
    }
    append_fenced(tx, &prepared, target, batch).await
}

/// [`append`] in a transaction that has already fenced every lease of `batch` (the writer's
/// batch fences the leases it held at its start and holds those it took in it): one statement,
/// prepared once in `prepared`, the connection's.
pub async fn append_fenced(
    tx: &Transaction<'_>,
    prepared: &Prepared,
    target: &PgTarget,
    batch: &[Append<'_>],
) -> Result<(), PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
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
    let rows = (&rows_sessions[..], &rows_seqs[..], &rows_epochs[..], &rows_bodies[..], &rows_origins[..]);
    insert(tx, prepared, rows).await.map_err(failed)
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
    let origins = vec![""; count];
    insert(tx, &Prepared::default(), (&sessions, &seqs, &epochs, &bodies, &origins)).await
}

/// Appends `bodies` to `session`'s log after its last row, as `me`'s, in the writer's batch
/// that changed the session's settings while this replica holds no lease of it, unless a
/// replica holds it (then nothing, `None`: the holder alone numbers the log while it runs a
/// turn, and the change is handed on to it). The batch's update of the session's row orders
/// this against a turn starting: every lease take locks that row too (a prompt's insert updates
/// it), so either the take waits for this commit and its writer numbers on after these rows,
/// or this waits for the take and finds the lease held. A lease whose holder stopped unreleased is held
/// until a sweeper closes it. A lease `me` took again later in the same batch (the next turn's
/// claim right after the release) is no other replica's: the change is logged after the new
/// turn's rows, as its holder's, since nobody else would log it or be handed it.
pub async fn append_unheld(
    tx: &Transaction<'_>,
    target: &PgTarget,
    session: &SessionId,
    me: &str,
    bodies: &[String],
) -> Result<Option<Appended>, PgError> {
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let id = session.as_str();
    let lease = tx
        .query_opt(
            "SELECT epoch, released_at IS NULL AND holder <> $2 FROM session_leases WHERE session_id = $1",
            &[&id, &me],
        )
        .await
        .map_err(failed)?;
    let epoch = match lease {
        Some(lease) if lease.get::<_, bool>(1) => return Ok(None),
        Some(lease) => lease.get::<_, i64>(0),
        None => 0,
    };
    if bodies.is_empty() {
        return Ok(None);
    }
    let last: i64 = tx
        .query_one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1", &[&id])
        .await
        .map_err(failed)?
        .get(0);
    let count = i64::try_from(bodies.len()).unwrap_or(i64::MAX);
    let seqs: Vec<i64> = (last + 1..last + 1 + count).collect();
    let sessions = vec![id; bodies.len()];
    let epochs = vec![epoch; bodies.len()];
    let texts: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let origins = vec![me; bodies.len()];
    insert(tx, &Prepared::default(), (&sessions, &seqs, &epochs, &texts, &origins)).await.map_err(failed)?;
    Ok(Some(Appended { session: session.clone(), seqs: last + 1..last + 1 + count, epoch }))
}

/// Rows of the log: sessions, seqs, epochs, bodies and origins, one each per row.
type Rows<'a> = (&'a [&'a str], &'a [i64], &'a [i64], &'a [&'a str], &'a [&'a str]);

const INSERT: &str = "INSERT INTO session_events (session_id, seq, epoch, body, origin)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])";

async fn insert(
    client: &impl GenericClient,
    prepared: &Prepared,
    (sessions, seqs, epochs, bodies, origins): Rows<'_>,
) -> Result<(), tokio_postgres::Error> {
    let statement = prepared.get(client, INSERT).await?;
    client.execute(&statement, &[&sessions, &seqs, &epochs, &bodies, &origins]).await?;
    Ok(())
}

/// Wakes the followers of `sessions`: once per committed batch, outside its transaction. The
/// statement is prepared once in `prepared`, `client`'s connection's.
pub async fn notify(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    sessions: &[SessionId],
) -> Result<(), PgError> {
    notify_from(client, prepared, target, None, sessions).await
}

/// [`notify`] naming the replica whose writer appended the rows (`origin`): that replica's own
/// follower has been told of them already ([`OwnRows`]) and skips the wake-up.
pub async fn notify_from(
    client: &impl GenericClient,
    prepared: &Prepared,
    target: &PgTarget,
    origin: Option<&str>,
    sessions: &[SessionId],
) -> Result<(), PgError> {
    let mut payload = String::new();
    if let Some(origin) = origin {
        payload.push(ORIGIN);
        payload.push_str(origin);
        payload.push('\n');
    }
    let named_from = payload.len();
    for session in sessions {
        if payload.len() + session.as_str().len() + 1 > PAYLOAD {
            // Too many to name: naming none wakes every session.
            payload.truncate(named_from);
            break;
        }
        if payload.len() > named_from {
            payload.push(',');
        }
        payload.push_str(session.as_str());
    }
    let failed = |err: tokio_postgres::Error| target.failed(&err);
    let statement = prepared.get(client, "SELECT pg_notify($1, $2)").await.map_err(failed)?;
    client.execute(&statement, &[&CHANNEL, &payload]).await.map_err(failed)?;
    Ok(())
}

/// A follow asked of the [`Follower`]'s task.
struct Follow {
    session: SessionId,
    after: i64,
    sink: mpsc::Sender<Event>,
}

/// What the [`Follower`]'s task is asked: a new follow, or rows this replica's writer appended.
enum Asked {
    Follow(Follow),
    Own(Vec<Appended>),
}

/// Rows `seqs` of `session`'s log, which this replica's writer appended under `epoch` and
/// committed: its own, which its sessions skip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appended {
    pub session: SessionId,
    pub seqs: std::ops::Range<i64>,
    pub epoch: i64,
}

/// Tells this replica's [`Follower`] of the rows its writer commits, so the follower need not
/// read them back: a follow that has forwarded every row before them moves past them at once,
/// with one row standing for them all (this replica's, so nothing is shown of it). A follow
/// behind them reads them as any other rows.
#[derive(Clone)]
pub struct OwnRows {
    asked: mpsc::UnboundedSender<Asked>,
}

impl OwnRows {
    /// `appended` committed (after its COMMIT went in).
    pub fn committed(&self, appended: Vec<Appended>) {
        if !appended.is_empty() {
            let _ = self.asked.send(Asked::Own(appended));
        }
    }
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
    follows: mpsc::UnboundedSender<Asked>,
    _stop: tokio_util::sync::DropGuard,
}

impl Follower {
    /// Connects and listens as replica `me` (its own wake-ups are skipped: its writer tells
    /// the follower of its rows through [`Self::own_rows`]); a round of reads runs every `poll`
    /// besides wake-ups.
    pub async fn start(target: PgTarget, me: String, poll: Duration) -> Result<Self, PgError> {
        let (client, heard) = target.listen(CHANNEL).await?;
        let (follows, asked) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = Task {
            target,
            me,
            poll,
            followed: HashMap::new(),
            by_session: HashMap::new(),
            numbered: 0,
            cancel: cancel.clone(),
        };
        tokio::spawn(task.run(client, heard, asked));
        Ok(Self { follows, _stop: cancel.drop_guard() })
    }

    /// Where this replica's writer tells the follower of the rows it commits.
    pub fn own_rows(&self) -> OwnRows {
        OwnRows { asked: self.follows.clone() }
    }

    /// The session's events after `after`, as they commit, after the questions still open up to
    /// `after` ([`open_questions`]: the only rows whose `seq` is not above it). The stream ends
    /// when the follower stops. A session may be followed any number of times, each from its
    /// own `seq`.
    pub fn follow(&self, session: &SessionId, after: i64) -> mpsc::Receiver<Event> {
        let (sink, events) = mpsc::channel(QUEUED);
        let _ = self.follows.send(Asked::Follow(Follow { session: session.clone(), after, sink }));
        events
    }
}

struct Task {
    target: PgTarget,
    /// This replica, whose writer's wake-ups are skipped.
    me: String,
    poll: Duration,
    /// Every follow, by a number of its own.
    followed: HashMap<i64, Followed>,
    /// The numbers of each session's follows: a batch of own rows or a wake-up names a few
    /// sessions among hundreds followed.
    by_session: HashMap<SessionId, Vec<i64>>,
    numbered: i64,
    cancel: CancellationToken,
}

impl Task {
    async fn run(
        mut self,
        mut client: Client,
        mut heard: mpsc::UnboundedReceiver<Notification>,
        mut asked: mpsc::UnboundedReceiver<Asked>,
    ) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The round's read, prepared once per connection.
        let mut prepared = Prepared::default();
        loop {
            // `None`: every followed session.
            let due: Option<HashSet<SessionId>> = tokio::select! {
                () = self.cancel.cancelled() => return,
                asked_now = asked.recv() => {
                    let Some(asked_now) = asked_now else { return };
                    let mut due = HashSet::new();
                    self.take(&client, asked_now, &mut due).await;
                    while let Ok(more) = asked.try_recv() {
                        self.take(&client, more, &mut due).await;
                    }
                    if due.is_empty() {
                        continue;
                    }
                    Some(due)
                }
                note = heard.recv() => match note {
                    Some(note) => {
                        let mut due = self.named(note.payload());
                        // A burst of wake-ups is one round.
                        while let Ok(more) = heard.try_recv() {
                            due = match (due, self.named(more.payload())) {
                                (Some(mut some), Some(more)) => { some.extend(more); Some(some) }
                                _ => None,
                            };
                        }
                        if due.as_ref().is_some_and(HashSet::is_empty) {
                            continue;
                        }
                        due
                    }
                    None => match self.reconnect().await {
                        Some(pair) => {
                            (client, heard) = pair;
                            prepared = Prepared::default();
                            None
                        }
                        None => return,
                    },
                },
                _ = tick.tick() => None,
            };
            self.drop_closed();
            if let Err(err) = self.round(&client, &prepared, due).await {
                tracing::warn!("following sessions in PostgreSQL: {err}; reading again at the next round");
            }
        }
    }

    /// Takes what was asked; the sessions to read now go into `due`.
    async fn take(&mut self, client: &Client, asked: Asked, due: &mut HashSet<SessionId>) {
        match asked {
            Asked::Follow(follow) => {
                due.insert(self.add(client, follow).await);
            }
            Asked::Own(appended) => {
                for rows in appended {
                    self.skip_own(rows, due);
                }
            }
        }
    }

    /// Moves the follows of `rows.session` past `rows`, this replica's own rows, when they have
    /// forwarded every row before them: one row, the last, stands for them all. A follow behind
    /// them (rows of another replica not read yet), or whose subscriber is full, reads them.
    fn skip_own(&mut self, rows: Appended, due: &mut HashSet<SessionId>) {
        let last = rows.seqs.end - 1;
        let Self { by_session, followed: follows, me, .. } = self;
        for number in by_session.get(&rows.session).into_iter().flatten() {
            let Some(followed) = follows.get_mut(number) else { continue };
            if followed.last >= last {
                continue;
            }
            if followed.last + 1 < rows.seqs.start {
                due.insert(rows.session.clone());
                continue;
            }
            let mine = Event { seq: last, epoch: rows.epoch, origin: me.clone(), body: String::new() };
            if followed.sink.try_send(mine).is_ok() {
                followed.last = last;
            } else {
                due.insert(rows.session.clone());
            }
        }
    }

    /// The sessions a wake-up names; `None` for all. A wake-up from this replica's writer
    /// names none: its rows came through [`OwnRows`].
    fn named(&self, payload: &str) -> Option<HashSet<SessionId>> {
        let names = match payload.strip_prefix(ORIGIN).and_then(|rest| rest.split_once('\n')) {
            Some((origin, _)) if origin == self.me => return Some(HashSet::new()),
            Some((_, names)) => names,
            None => payload,
        };
        (!names.is_empty()).then(|| names.split(',').map(SessionId::from_string).collect())
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
        self.by_session.entry(session.clone()).or_default().push(self.numbered);
        self.followed
            .insert(self.numbered, Followed { session: follow.session, last: follow.after, sink: follow.sink });
        session
    }

    /// Forgets the follows whose subscriber is gone.
    fn drop_closed(&mut self) {
        let by_session = &mut self.by_session;
        self.followed.retain(|number, followed| {
            let open = !followed.sink.is_closed();
            if !open && let Some(numbers) = by_session.get_mut(&followed.session) {
                numbers.retain(|other| other != number);
                if numbers.is_empty() {
                    by_session.remove(&followed.session);
                }
            }
            open
        });
    }

    /// Connects and listens again, until it can (`None`: the follower stopped first).
    async fn reconnect(&self) -> Option<(Client, mpsc::UnboundedReceiver<Notification>)> {
        self.target.listen_again(CHANNEL, self.poll, &self.cancel, "following sessions").await
    }

    /// Reads the `due` sessions' new rows and forwards each next one in order.
    async fn round(
        &mut self,
        client: &Client,
        prepared: &Prepared,
        due: Option<HashSet<SessionId>>,
    ) -> Result<(), PgError> {
        let chosen: Vec<(i64, &Followed)> = match &due {
            None => self.followed.iter().map(|(number, followed)| (*number, followed)).collect(),
            Some(due) => due
                .iter()
                .filter_map(|session| self.by_session.get(session))
                .flatten()
                .filter_map(|number| self.followed.get(number).map(|followed| (*number, followed)))
                .collect(),
        };
        let numbers: Vec<i64> = chosen.iter().map(|(number, _)| *number).collect();
        let sessions: Vec<&str> = chosen.iter().map(|(_, followed)| followed.session.as_str()).collect();
        let lasts: Vec<i64> = chosen.iter().map(|(_, followed)| followed.last).collect();
        if numbers.is_empty() {
            return Ok(());
        }
        let failed = |err: tokio_postgres::Error| self.target.failed(&err);
        let statement = prepared
            .get(
                client,
                "SELECT following.number, event.seq, event.epoch, event.body, event.origin
                 FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS following(number, session_id, last)
                 CROSS JOIN LATERAL (
                    SELECT seq, epoch, body, origin FROM session_events
                    WHERE session_id = following.session_id AND seq > following.last
                    ORDER BY seq LIMIT $4
                 ) AS event
                 ORDER BY following.number, event.seq",
            )
            .await
            .map_err(failed)?;
        let rows = client.query(&statement, &[&numbers, &sessions, &lasts, &ROWS_PER_READ]).await.map_err(failed)?;
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

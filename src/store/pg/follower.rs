//! Following sessions' event logs from another replica.
//!
//! A replica's [`Follower`] has one LISTEN connection and follows any number of sessions, each
//! from the last `seq` its client has, handing a new follow first the questions still open
//! before that `seq` ([`open_questions`], rows older than where it starts). The rows this
//! replica's own writer appends it does not read back: the writer tells it of them once
//! committed ([`OwnRows`]), and a follow that has forwarded every row before them moves past
//! them at once, one row of this replica's standing for them all (its sessions skip this
//! replica's rows anyway); its writer's wake-ups name it, and wake nothing here. On a wake-up
//! naming a session, on a new follow, and on every poll (so a wake-up lost with a connection
//! loses nothing), it reads each session's rows after the last one forwarded, in one statement
//! for all of them, and forwards them in order, each exactly once: a row is forwarded only when
//! it is the next `seq`. Wake-ups that come in a burst are read as one. A session's follows are
//! found through an index by session, as a batch or a wake-up names a few sessions among the
//! hundreds followed. A subscriber that does not keep up is not waited for: its session is
//! read again at the next round, from where it stopped. A replica that loses its listening
//! connection connects again and reads everything. Rows pruned before a follow read them (it
//! fell behind by more than `[store] events_kept_secs`) are gone for good, as the holder
//! commits in `seq` order: the follow goes on from the first row left, with a warning, instead
//! of waiting.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::{Client, Notification};
use tokio_util::sync::CancellationToken;

use super::events::{CHANNEL, Event, ORIGIN, open_questions};
use super::{PgError, PgTarget, Prepared};
use crate::ids::SessionId;

/// At most this many rows of one session per read; the rest come at the next round.
const ROWS_PER_READ: i64 = 512;
/// How many events wait for a slow subscriber before its session is left for the next round.
const QUEUED: usize = 1024;

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

//! The command inbox: how a replica whose client sent a session a command (a prompt, a cancel,
//! a steer) while another replica holds the session's lease hands it to that holder, and reads
//! back what came of it.
//!
//! A command is a row of `session_commands`, inserted by the replica that received it (the
//! sender) with a NOTIFY on [`CHANNEL`]. Every replica's [`Inbox`] task listens there and polls:
//! it takes the commands of the sessions whose lease it holds, and its own commands of sessions
//! nobody holds any more (a turn that ended before the holder took them: a prompt to an idle
//! session is run by the replica that received it). Taking is one `UPDATE … FOR UPDATE SKIP
//! LOCKED`, so each command is taken once. The taker writes the command's answer with the
//! session's last event `seq` then ([`Inbox::answer`]), and wakes the sender, which reads its
//! answers once each; an answer whose write fails is written again at every round until it goes
//! in. The sweeper answers the commands of a dead holder's sessions ([`answer_all`]), and those a
//! replica that died between turns took and left unanswered (`sweeper::answer_dead_takers`).
//!
//! The bodies are the session layer's JSON: the store only carries them.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{Client, GenericClient, Notification};
use tokio_util::sync::CancellationToken;

use super::{PgError, PgTarget};
use crate::ids::SessionId;

/// The channel the inbox's wake-ups go on.
const CHANNEL: &str = "cairn_commands";
/// At most this many commands, or answers, per read; the rest come at the next round.
const PER_READ: i64 = 256;

/// What the inbox hands this replica's session layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// A command to carry out: this replica holds its session's lease, or sent it itself and
    /// nobody holds the session now (`returned`: the turn it was sent to is over).
    Command { id: i64, session: SessionId, body: String, returned: bool },
    /// What came of a command this replica sent: answer its client once the session's events up
    /// to `seq` are forwarded.
    Answer { id: i64, session: SessionId, seq: i64, body: String },
}

enum Job {
    Send { session: SessionId, body: String, sent: oneshot::Sender<Result<i64, PgError>> },
    Answer { id: i64, body: String, done: oneshot::Sender<Result<(), PgError>> },
}

/// This replica's side of the inbox (see the module's paragraph). Dropping it stops its task.
pub struct Inbox {
    jobs: mpsc::UnboundedSender<Job>,
    _stop: tokio_util::sync::DropGuard,
}

impl Inbox {
    /// Connects and listens as replica `me`; what it takes and reads goes to the receiver, which
    /// the session layer drains. A round of reads runs every `poll` besides wake-ups.
    pub async fn start(
        target: PgTarget,
        me: String,
        poll: Duration,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Inbound>), PgError> {
        let (client, heard) = target.listen(CHANNEL).await?;
        let (jobs, asked) = mpsc::unbounded_channel();
        let (inbound, received) = mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = Task { target, me, poll, inbound, cancel: cancel.clone() };
        tokio::spawn(task.run(client, heard, asked));
        Ok((Self { jobs, _stop: cancel.drop_guard() }, received))
    }

    /// Puts a command for `session`'s lease holder in the inbox; its id.
    pub async fn send(&self, session: &SessionId, body: String) -> Result<i64, PgError> {
        let (sent, id) = oneshot::channel();
        self.jobs.send(Job::Send { session: session.clone(), body, sent }).map_err(|_| PgError::Stopped)?;
        id.await.map_err(|_| PgError::Stopped)?
    }

    /// Answers command `id`: stored with its session's last event `seq` now, so call it once
    /// everything the command caused is committed. A command answered already keeps its answer.
    /// A write that fails (the database lost a while) is made again at every round of the inbox
    /// until it goes in, so this returns once it has, or when the inbox stops.
    pub async fn answer(&self, id: i64, body: String) -> Result<(), PgError> {
        let (done, answered) = oneshot::channel();
        self.jobs.send(Job::Answer { id, body, done }).map_err(|_| PgError::Stopped)?;
        answered.await.map_err(|_| PgError::Stopped)?
    }
}

/// Answers every unanswered command of `session` with `body`, in the caller's transaction: the
/// sweeper closing a dead holder's turn. The senders are woken after the commit
/// ([`wake`]).
pub async fn answer_all(
    client: &impl GenericClient,
    session: &SessionId,
    me: &str,
    body: &str,
) -> Result<u64, tokio_postgres::Error> {
    client
        .execute(
            "UPDATE session_commands
             SET answer = $2, answered_at = now(), taken_by = coalesce(taken_by, $3),
                 taken_at = coalesce(taken_at, now()),
                 answered_seq = (SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = $1)
             WHERE session_id = $1 AND answered_at IS NULL",
            &[&session.as_str(), &body, &me],
        )
        .await
}

/// Whether command `id` is still taken by `me` and unanswered, its row locked `FOR UPDATE` until
/// the caller's transaction ends: the take of the lease for the turn that runs it. The
/// sweeper answers a stalled taker's commands only under the same lock
/// (`sweeper::answer_dead_takers`), and from a read made after it, so either it answers first
/// and the turn is refused here, or the turn's lease is taken first and the sweeper sees it
/// held, leaving the command to the lease's own close.
pub async fn still_taken(
    client: &impl GenericClient,
    prepared: &super::Prepared,
    id: i64,
    me: &str,
) -> Result<bool, tokio_postgres::Error> {
    let statement = prepared
        .get(
            client,
            "SELECT 1 FROM session_commands WHERE id = $1 AND taken_by = $2 AND answered_at IS NULL FOR UPDATE",
        )
        .await?;
    Ok(client.query_opt(&statement, &[&id, &me]).await?.is_some())
}

/// Wakes every replica's inbox.
pub async fn wake(client: &impl GenericClient) -> Result<(), tokio_postgres::Error> {
    client.execute("SELECT pg_notify($1, '')", &[&CHANNEL]).await.map(|_| ())
}

/// An answer whose write failed, waiting to be written again.
struct Unwritten {
    id: i64,
    body: String,
    done: oneshot::Sender<Result<(), PgError>>,
}

struct Task {
    target: PgTarget,
    me: String,
    poll: Duration,
    inbound: mpsc::UnboundedSender<Inbound>,
    cancel: CancellationToken,
}

impl Task {
    async fn run(
        self,
        mut client: Client,
        mut heard: mpsc::UnboundedReceiver<Notification>,
        mut asked: mpsc::UnboundedReceiver<Job>,
    ) {
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Answers whose write failed, oldest first: written again at every round.
        let mut unwritten: Vec<Unwritten> = Vec::new();
        loop {
            tokio::select! {
                () = self.cancel.cancelled() => return,
                job = asked.recv() => {
                    let Some(job) = job else { return };
                    if let Some(failed) = self.serve(&client, job).await {
                        unwritten.push(failed);
                    }
                    continue;
                }
                note = heard.recv() => {
                    if note.is_none() {
                        match self.reconnect().await {
                            Some(pair) => (client, heard) = pair,
                            None => return,
                        }
                    }
                    // A burst of wake-ups is one round.
                    while heard.try_recv().is_ok() {}
                }
                _ = tick.tick() => {}
            }
            self.write_again(&client, &mut unwritten).await;
            if let Err(err) = self.round(&client).await {
                tracing::warn!("reading the command inbox in PostgreSQL: {err}; reading again at the next round");
            }
            if self.inbound.is_closed() {
                return;
            }
        }
    }

    /// Carries out `job`; an answer it could not write is handed back, to be written again.
    async fn serve(&self, client: &Client, job: Job) -> Option<Unwritten> {
        let failed = |err: tokio_postgres::Error| self.target.failed(&err);
        match job {
            Job::Send { session, body, sent } => {
                let id = async {
                    let row = client
                        .query_one(
                            "INSERT INTO session_commands (session_id, sender, body) VALUES ($1, $2, $3) RETURNING id",
                            &[&session.as_str(), &self.me, &body],
                        )
                        .await
                        .map_err(failed)?;
                    wake(client).await.map_err(failed)?;
                    Ok(row.get(0))
                }
                .await;
                let _ = sent.send(id);
            }
            Job::Answer { id, body, done } => match self.write(client, id, &body).await {
                Ok(()) => {
                    let _ = done.send(Ok(()));
                }
                Err(err) => {
                    tracing::warn!(
                        command = id,
                        "the answer to a command another replica sent could not be written: {err}; writing it again at every round until it goes in"
                    );
                    return Some(Unwritten { id, body, done });
                }
            },
        }
        None
    }

    /// Writes command `id`'s answer (one answered already keeps its own) and wakes its sender.
    async fn write(&self, client: &Client, id: i64, body: &str) -> Result<(), PgError> {
        let failed = |err: tokio_postgres::Error| self.target.failed(&err);
        client
            .execute(
                "UPDATE session_commands
                 SET answer = $2, answered_at = now(),
                     answered_seq = (SELECT coalesce(max(seq), 0) FROM session_events
                                     WHERE session_id = session_commands.session_id)
                 WHERE id = $1 AND answered_at IS NULL",
                &[&id, &body],
            )
            .await
            .map_err(failed)?;
        wake(client).await.map_err(failed)
    }

    /// Writes again the answers that failed, in order, keeping those that fail again. Never
    /// given up while this replica runs: nobody else could answer a live replica's command, and
    /// its sender waits for it; a replica that dies with some unwritten has its commands
    /// answered by another's sweeper (`sweeper::answer_dead_takers`).
    async fn write_again(&self, client: &Client, unwritten: &mut Vec<Unwritten>) {
        let mut left = Vec::new();
        for answer in unwritten.drain(..) {
            match self.write(client, answer.id, &answer.body).await {
                Ok(()) => {
                    tracing::info!(command = answer.id, "the answer to a command was written at last");
                    let _ = answer.done.send(Ok(()));
                }
                Err(_) => left.push(answer),
            }
        }
        *unwritten = left;
    }

    /// Connects and listens again, until it can (`None`: the inbox stopped first).
    async fn reconnect(&self) -> Option<(Client, mpsc::UnboundedReceiver<Notification>)> {
        self.target.listen_again(CHANNEL, self.poll, &self.cancel, "reading the command inbox").await
    }

    /// Takes the commands this replica is to carry out and reads the answers to its own, in
    /// the order they were sent.
    async fn round(&self, client: &Client) -> Result<(), PgError> {
        let failed = |err: tokio_postgres::Error| self.target.failed(&err);
        let mut taken = client
            .query(
                "UPDATE session_commands AS command SET taken_by = $1, taken_at = now()
                 WHERE command.id IN (
                    SELECT waiting.id FROM session_commands AS waiting
                    LEFT JOIN session_leases AS lease ON lease.session_id = waiting.session_id
                    WHERE waiting.taken_at IS NULL AND (
                        (lease.holder = $1 AND lease.released_at IS NULL AND lease.expires_at > now())
                        OR (waiting.sender = $1 AND (lease.session_id IS NULL OR lease.released_at IS NOT NULL)))
                    ORDER BY waiting.id LIMIT $2
                    FOR UPDATE OF waiting SKIP LOCKED)
                 RETURNING command.id, command.session_id, command.body, command.sender = $1",
                &[&self.me, &PER_READ],
            )
            .await
            .map_err(failed)?;
        taken.sort_by_key(|row| row.get::<_, i64>(0));
        for row in taken {
            let session = SessionId::from_string(row.get::<_, String>(1));
            let _ =
                self.inbound.send(Inbound::Command { id: row.get(0), session, body: row.get(2), returned: row.get(3) });
        }
        let mut answered = client
            .query(
                "UPDATE session_commands SET delivered_at = now()
                 WHERE id IN (
                    SELECT id FROM session_commands
                    WHERE sender = $1 AND answered_at IS NOT NULL AND delivered_at IS NULL
                    ORDER BY id LIMIT $2
                    FOR UPDATE SKIP LOCKED)
                 RETURNING id, session_id, answered_seq, answer",
                &[&self.me, &PER_READ],
            )
            .await
            .map_err(failed)?;
        answered.sort_by_key(|row| row.get::<_, i64>(0));
        for row in answered {
            let session = SessionId::from_string(row.get::<_, String>(1));
            let body: Option<String> = row.get(3);
            let _ = self.inbound.send(Inbound::Answer {
                id: row.get(0),
                session,
                seq: row.get::<_, Option<i64>>(2).unwrap_or(0),
                body: body.unwrap_or_default(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pg::lease;
    use crate::store::pg::tests::{fresh, took};

    const POLL: Duration = Duration::from_millis(50);

    async fn next(inbound: &mut mpsc::UnboundedReceiver<Inbound>) -> Inbound {
        tokio::time::timeout(Duration::from_secs(30), inbound.recv()).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn the_holder_takes_a_command_and_its_sender_takes_back_one_nobody_holds_saying_so() {
        let (target, client) = fresh().await;
        let (held, idle) = (SessionId::generate(), SessionId::generate());
        took(lease::take(&client, &target, &held, "host-a:1:a", Duration::from_secs(60)).await.unwrap());
        let (_a, mut to_a) = Inbox::start(target.clone(), "host-a:1:a".into(), POLL).await.unwrap();
        let (b, mut to_b) = Inbox::start(target.clone(), "host-b:2:b".into(), POLL).await.unwrap();

        let sent = b.send(&held, "{\"cancel\":{}}".into()).await.unwrap();
        let Inbound::Command { id, session, returned, .. } = next(&mut to_a).await else { panic!("a command") };
        assert_eq!((id, session, returned), (sent, held.clone(), false), "the holder carries it out");

        let sent = b.send(&idle, "{\"cancel\":{}}".into()).await.unwrap();
        let Inbound::Command { id, session, returned, .. } = next(&mut to_b).await else { panic!("a command") };
        assert_eq!((id, session, returned), (sent, idle, true), "nobody holds it: back to its sender, marked");
    }

    #[tokio::test]
    async fn an_answer_whose_write_fails_is_written_again_until_it_goes_in_and_its_sender_reads_it() {
        let (target, client) = fresh().await;
        let held = SessionId::generate();
        took(lease::take(&client, &target, &held, "host-a:1:a", Duration::from_secs(60)).await.unwrap());
        let (a, mut to_a) = Inbox::start(target.clone(), "host-a:1:a".into(), POLL).await.unwrap();
        let (b, mut to_b) = Inbox::start(target.clone(), "host-b:2:b".into(), POLL).await.unwrap();
        let sent = b.send(&held, "{\"prompt\":{}}".into()).await.unwrap();
        let Inbound::Command { id, .. } = next(&mut to_a).await else { panic!("a command") };

        // Every write to the inbox fails for a while.
        client.batch_execute("ALTER TABLE session_commands RENAME TO session_commands_away").await.unwrap();
        let answering = a.answer(id, "{\"done\":{}}".into());
        tokio::pin!(answering);
        // The inbox serves its jobs in order: the answer is tried (and fails) before this send.
        let refused = tokio::select! {
            biased;
            answered = &mut answering => panic!("the answer came back before it could be written: {answered:?}"),
            refused = a.send(&held, "{}".into()) => refused,
        };
        assert!(refused.is_err(), "the inbox could not write then");
        client.batch_execute("ALTER TABLE session_commands_away RENAME TO session_commands").await.unwrap();

        answering.await.unwrap();
        let Inbound::Answer { id, body, .. } = next(&mut to_b).await else { panic!("an answer") };
        assert_eq!((id, body.as_str()), (sent, "{\"done\":{}}"), "the sender is answered");
    }
}

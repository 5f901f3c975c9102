//! Pruning the event log: every update a turn shows is a row of `session_events`, one per chunk
//! streamed, so the log grows with every answer and must be cut. Only recent rows are read: a
//! follower keeping up reads the rows just written, and a replica that starts following reads
//! the session's messages with the `seq` they reach (`load_at_seq`) and follows from there. So
//! rows older than `[store] events_kept_secs` (15 minutes by default) are deleted, by every
//! replica, about once a minute, on a connection of its own.
//!
//! The newest row of every session is never deleted, however old: the next lease holder
//! continues the session's `seq` from `max(seq)` (`events::last_seq`), and a log emptied would
//! number from 1 again under followers that are past it. Rows go in batches of [`BATCH`], each
//! its own statement and transaction, until a batch comes back short, so no lock is held long
//! and writers are never kept waiting on a backlog of millions. Replicas pruning at once skip the
//! rows another is deleting (`SKIP LOCKED`) instead of waiting on, or deadlocking with, it.
//!
//! The command inbox (`session_commands`) is pruned with it, in batches the same way: a command
//! whose answer its sender read longer ago than that is deleted, and so is every command whose
//! sender's heart (`cairn_replicas`, beaten by its sweeper) stopped longer ago than that, taken
//! or not, answered or not: its client is gone with it, and one nobody took would otherwise
//! wait for a holder for ever. A live sender's command not answered or not read yet is kept.
//! The heart rows of replicas gone that long go once no command names them as its sender.
//!
//! A question a running turn asked is kept in the log however old (its `asked` and `closed`
//! rows, while the lease that logged them is held): a replica that starts following the session
//! reads the questions still open from them (`events::open_questions`). So is a streamed chunk's
//! row while its part streams and its pieces do not hold its text yet (`streams.rs`): the
//! rows a reader of the part would read.

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::{PgError, PgTarget, events};

/// Rows deleted per statement.
pub const BATCH: i64 = 10_000;
/// How often a replica prunes.
pub const EVERY: Duration = Duration::from_secs(60);

/// Prunes every `every` until `stop`, rows older than `kept`, reconnecting when the connection
/// is lost. The first pass comes one `every` after start.
pub async fn run(target: PgTarget, kept: Duration, every: Duration, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(connected) = target.connected(&mut client, "prune the event log").await else { continue };
        let started = Instant::now();
        match prune_once(connected, &target, kept, BATCH, &stop).await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, took_ms = started.elapsed().as_millis(), "pruned the event log"),
            Err(err) => tracing::warn!("pruning the event log failed: {err}"),
        }
    }
}

/// Deletes the rows older than `kept` but the newest of each session, `batch` rows a statement
/// until fewer are left or `stop`; how many it deleted.
pub async fn prune_once(
    client: &Client,
    target: &PgTarget,
    kept: Duration,
    batch: i64,
    stop: &CancellationToken,
) -> Result<u64, PgError> {
    // The age is the database's (`created_at` is its `now()` at insert), not this machine's.
    // The question rows of a turn still running are kept (`events::open_questions`), and the
    // chunks of a part still streaming.
    let statement = client
        .prepare(&format!(
            "DELETE FROM session_events
             WHERE (session_id, seq) IN (
                 SELECT old.session_id, old.seq FROM session_events old
                 WHERE old.created_at < now() - make_interval(secs => $1)
                   AND EXISTS (SELECT 1 FROM session_events newer
                               WHERE newer.session_id = old.session_id AND newer.seq > old.seq)
                   AND NOT ((old.body LIKE '{asked}%' OR old.body LIKE '{closed}%')
                            AND EXISTS (SELECT 1 FROM session_leases AS lease
                                        WHERE lease.session_id = old.session_id AND lease.epoch = old.epoch
                                          AND lease.released_at IS NULL))
                   AND NOT (old.part_chunk IS NOT NULL
                            AND EXISTS (SELECT 1 FROM parts
                                        WHERE parts.message_id = old.part_message AND parts.idx = old.part_idx
                                          AND parts.streaming_from IS NOT NULL AND old.seq > parts.streaming_from
                                          AND old.part_chunk > (SELECT coalesce(max(t.upto), 0) FROM part_pieces t
                                                                WHERE t.message_id = parts.message_id
                                                                  AND t.idx = parts.idx)))
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
            asked = events::ASKED,
            closed = events::CLOSED,
        ))
        .await
        .map_err(|err| target.failed(&err))?;
    let secs = kept.as_secs_f64();
    let deleted = in_batches(client, target, &statement, secs, batch, stop).await?;
    // A command whose answer its sender read is done with; so is every command of a sender whose
    // heart stopped longer ago than that (nobody will ever read its answer, and one nobody took
    // would otherwise wait for a holder for ever). A live sender's waiting command is never
    // touched, nor one of a sender this schema never saw beat.
    let commands = client
        .prepare(
            "DELETE FROM session_commands
             WHERE id IN (
                 SELECT command.id FROM session_commands AS command
                 WHERE command.delivered_at < now() - make_interval(secs => $1)
                    OR (command.delivered_at IS NULL
                        AND EXISTS (SELECT 1 FROM cairn_replicas AS sender
                                    WHERE sender.replica = command.sender
                                      AND sender.expires_at < now() - make_interval(secs => $1)))
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED)",
        )
        .await
        .map_err(|err| target.failed(&err))?;
    in_batches(client, target, &commands, secs, batch, stop).await?;
    // Then the hearts of replicas gone that long that no command names as its sender any more.
    client
        .execute(
            "DELETE FROM cairn_replicas AS replica
             WHERE replica.expires_at < now() - make_interval(secs => $1)
               AND NOT EXISTS (SELECT 1 FROM session_commands WHERE sender = replica.replica)",
            &[&secs],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    Ok(deleted)
}

/// Runs a `DELETE … LIMIT $2` of rows older than `$1` seconds until a batch comes back short,
/// or `stop`; how many rows it deleted.
async fn in_batches(
    client: &Client,
    target: &PgTarget,
    statement: &tokio_postgres::Statement,
    secs: f64,
    batch: i64,
    stop: &CancellationToken,
) -> Result<u64, PgError> {
    let mut deleted = 0;
    loop {
        let count = client.execute(statement, &[&secs, &batch]).await.map_err(|err| target.failed(&err))?;
        deleted += count;
        if count < u64::try_from(batch).unwrap_or(0) || stop.is_cancelled() {
            return Ok(deleted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::pg::tests::fresh;

    /// `count` rows of `session` from `first` on, written `age_secs` ago.
    async fn rows(client: &Client, session: &str, first: i64, count: i64, age_secs: f64) {
        client
            .execute(
                "INSERT INTO session_events (session_id, seq, epoch, body, created_at)
                 SELECT $1, seq, 1, 'update', now() - make_interval(secs => $4)
                 FROM generate_series($2::bigint, $2 + $3 - 1) AS seq",
                &[&session, &first, &count, &age_secs],
            )
            .await
            .unwrap();
    }

    async fn seqs(client: &Client, session: &str) -> Vec<i64> {
        client
            .query("SELECT seq FROM session_events WHERE session_id = $1 ORDER BY seq", &[&session])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    const KEPT: Duration = Duration::from_secs(900);
    const HOUR: f64 = 3600.0;

    #[tokio::test]
    async fn rows_older_than_the_time_kept_are_pruned_and_recent_ones_kept() {
        let (target, client) = fresh().await;
        rows(&client, "s1", 1, 5, HOUR).await;
        rows(&client, "s1", 6, 3, 10.0).await;
        let deleted = prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        assert_eq!(deleted, 5);
        assert_eq!(seqs(&client, "s1").await, [6, 7, 8]);
    }

    #[tokio::test]
    async fn the_newest_row_of_every_session_is_kept_however_old() {
        let (target, client) = fresh().await;
        rows(&client, "old", 1, 4, HOUR).await;
        rows(&client, "single", 1, 1, HOUR).await;
        rows(&client, "fresh", 1, 2, 1.0).await;
        prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        assert_eq!(seqs(&client, "old").await, [4], "its seq goes on from 4");
        assert_eq!(seqs(&client, "single").await, [1]);
        assert_eq!(seqs(&client, "fresh").await, [1, 2]);
        let me = crate::ids::SessionId::from_string("old");
        assert_eq!(crate::store::pg::events::last_seq(&client, &target, &me).await.unwrap(), 4);
        let again = prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        assert_eq!(again, 0, "nothing more to prune");
    }

    #[tokio::test]
    async fn a_backlog_larger_than_a_batch_is_pruned_in_batches_to_the_end() {
        let (target, client) = fresh().await;
        rows(&client, "busy", 1, 25_000, HOUR).await;
        rows(&client, "other", 1, 700, HOUR).await;
        rows(&client, "busy", 25_001, 10, 1.0).await;
        let deleted = prune_once(&client, &target, KEPT, 1000, &CancellationToken::new()).await.unwrap();
        assert_eq!(deleted, 25_000 + 699);
        assert_eq!(seqs(&client, "busy").await, (25_001..=25_010).collect::<Vec<_>>());
        assert_eq!(seqs(&client, "other").await, [700]);
    }

    #[tokio::test]
    async fn replicas_pruning_at_once_share_the_work_and_keep_every_sessions_newest_row() {
        let (target, client) = fresh().await;
        let other = target.connect().await.unwrap();
        for session in 0..50 {
            rows(&client, &format!("s{session}"), 1, 200, HOUR).await;
        }
        let stop = CancellationToken::new();
        let (a, b) =
            tokio::join!(prune_once(&client, &target, KEPT, 500, &stop), prune_once(&other, &target, KEPT, 500, &stop));
        let left: i64 = client.query_one("SELECT count(*) FROM session_events", &[]).await.unwrap().get(0);
        let newest: i64 =
            client.query_one("SELECT count(*) FROM session_events WHERE seq = 200", &[]).await.unwrap().get(0);
        assert_eq!((left, newest), (50, 50), "pruned {} and {}", a.unwrap(), b.unwrap());
    }

    #[tokio::test]
    async fn commands_whose_answers_were_delivered_long_ago_are_pruned_and_pending_ones_kept() {
        let (target, client) = fresh().await;
        let command = |answered: bool, delivered: bool| {
            format!(
                "INSERT INTO session_commands (session_id, sender, body, created_at, taken_at, answer, answered_at, delivered_at)
                 VALUES ('s1', 'a', '{{}}', now() - interval '1 hour', now() - interval '1 hour', {}, {}, {})",
                if answered { "'{}'" } else { "NULL" },
                if answered { "now() - interval '1 hour'" } else { "NULL" },
                if delivered { "now() - interval '1 hour'" } else { "NULL" },
            )
        };
        for (answered, delivered) in [(true, true), (true, false), (false, false)] {
            client.execute(&command(answered, delivered), &[]).await.unwrap();
        }
        client
            .execute(
                "INSERT INTO session_commands (session_id, sender, body, answer, answered_at, delivered_at)
                 VALUES ('s1', 'a', '{}', '{}', now(), now())",
                &[],
            )
            .await
            .unwrap();
        prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        let left: Vec<(bool, bool)> = client
            .query("SELECT answered_at IS NOT NULL, delivered_at IS NOT NULL FROM session_commands ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(left, [(true, false), (false, false), (true, true)], "only the old delivered one goes");
    }

    /// A command of `sender`, sent an hour ago, in the state given: taken, answered, read.
    async fn sent(client: &Client, sender: &str, taken: bool, answered: bool, delivered: bool) {
        let at = |set: bool| if set { "now() - interval '1 hour'" } else { "NULL" };
        client
            .execute(
                &format!(
                    "INSERT INTO session_commands (session_id, sender, body, created_at, taken_by, taken_at, answer, answered_at, delivered_at)
                     VALUES ('s1', '{sender}', '{{}}', now() - interval '1 hour', {}, {}, {}, {}, {})",
                    if taken { "'holder'" } else { "NULL" },
                    at(taken),
                    if answered { "'{}'" } else { "NULL" },
                    at(answered),
                    at(delivered),
                ),
                &[],
            )
            .await
            .unwrap();
    }

    /// Marks `replica` as last alive `ago_secs` ago.
    async fn heart(client: &Client, replica: &str, ago_secs: f64) {
        client
            .execute(
                "INSERT INTO cairn_replicas (replica, expires_at) VALUES ($1, now() - make_interval(secs => $2))",
                &[&replica, &ago_secs],
            )
            .await
            .unwrap();
    }

    async fn senders(client: &Client) -> Vec<String> {
        let rows = client.query("SELECT sender FROM session_commands ORDER BY id", &[]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    #[tokio::test]
    async fn commands_of_a_sender_dead_longer_than_the_time_kept_are_pruned_in_batches_whatever_their_state() {
        let (target, client) = fresh().await;
        heart(&client, "gone", HOUR).await;
        heart(&client, "just-gone", 10.0).await;
        heart(&client, "alive", -60.0).await;
        for sender in ["gone", "just-gone", "alive", "never-beat"] {
            // Never taken (no holder came), taken and never answered, answered and never read.
            sent(&client, sender, false, false, false).await;
            sent(&client, sender, true, false, false).await;
            sent(&client, sender, true, true, false).await;
        }
        prune_once(&client, &target, KEPT, 2, &CancellationToken::new()).await.unwrap();
        let left = senders(&client).await;
        assert!(!left.iter().any(|sender| sender == "gone"), "all three of the dead sender's went: {left:?}");
        assert_eq!(left.len(), 9, "the others wait on: {left:?}");
        let hearts: Vec<String> = client
            .query("SELECT replica FROM cairn_replicas ORDER BY replica", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(hearts, ["alive", "just-gone"], "the long-dead heart goes with its commands");
    }

    #[tokio::test]
    async fn the_questions_of_a_turn_still_running_are_kept_however_old_and_go_once_it_ends() {
        let (target, client) = fresh().await;
        let session = crate::ids::SessionId::generate();
        let ttl = Duration::from_secs(60);
        let lease = crate::store::pg::tests::took(
            crate::store::pg::lease::take(&client, &target, &session, "a:1:x", ttl).await.unwrap(),
        );
        let asked = format!("{}{{\"id\":\"q1\"}}}}", events::ASKED);
        client
            .execute(
                "INSERT INTO session_events (session_id, seq, epoch, body, created_at)
                 VALUES ($1, 1, $2, $3, now() - interval '1 hour'), ($1, 2, $2, 'update', now() - interval '1 hour'),
                        ($1, 3, $2, 'update', now())",
                &[&session.as_str(), &lease.epoch, &asked],
            )
            .await
            .unwrap();
        prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        assert_eq!(seqs(&client, session.as_str()).await, [1, 3], "the open question stays");
        crate::store::pg::lease::release(&client, &target, &lease).await.unwrap();
        prune_once(&client, &target, KEPT, BATCH, &CancellationToken::new()).await.unwrap();
        assert_eq!(seqs(&client, session.as_str()).await, [3], "its turn over, it goes");
    }

    #[tokio::test]
    async fn a_prune_that_is_stopped_ends_after_its_current_batch() {
        let (target, client) = fresh().await;
        rows(&client, "busy", 1, 3000, HOUR).await;
        let stop = CancellationToken::new();
        stop.cancel();
        assert_eq!(prune_once(&client, &target, KEPT, 1000, &stop).await.unwrap(), 1000);
    }
}

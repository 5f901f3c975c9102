//! Reads of a session's event log for a client that comes late: what a client resuming after
//! some `seq` missed ([`missed`], on any replica: the log is numbered the same everywhere), and
//! the questions the running turn asked and has not closed, which a replica that starts
//! following the session puts to its clients ([`open_questions`]). The log's rows and their
//! numbering are `events.rs`'s.

use tokio_postgres::GenericClient;

use super::PgError;
use super::PgTarget;
use super::events::{Event, last_seq};
use crate::ids::SessionId;

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

/// The most rows a resume is given from the log: a client further behind is told to load the
/// session, which costs one read of its messages instead of a row per streamed chunk.
pub const RESUME_MOST: i64 = 10_000;

/// The rows of `session`'s log after `after`, in one statement on the primary key, reading at
/// most `most` of them (and one more). Every row after `after` must be there: the log is
/// numbered without a hole (each holder, and the sweeper, numbers on from its last row), so a
/// hole is a row pruned (pruning may keep some rows older than others it deletes), and only the
/// rows after the last hole can be given. More than `most` rows after `after` count as pruned
/// too: the oldest row said is then the one a resume could start from. `after`'s own row is read
/// too: with no row after it, it tells a client that saw everything from one beyond the end (the
/// newest row is never pruned).
pub async fn missed(
    client: &impl GenericClient,
    target: &PgTarget,
    session: &SessionId,
    after: i64,
    most: i64,
) -> Result<Missed, PgError> {
    let rows = client
        .query(
            "SELECT seq, epoch, body, origin FROM session_events
             WHERE session_id = $1 AND seq >= $2 ORDER BY seq DESC LIMIT $3",
            &[&session.as_str(), &after, &(most.max(0) + 1)],
        )
        .await
        .map_err(|err| target.failed(&err))?;
    let mut seen_after = after <= 0;
    let mut missed: Vec<Event> = Vec::with_capacity(rows.len());
    for row in rows.iter().rev() {
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
    if i64::try_from(missed.len()).unwrap_or(i64::MAX) > most {
        // The newest `most` rows are what a resume could be given: from the second read on.
        let oldest = missed.get(1).map_or(after + 1, |event| event.seq);
        return Ok(Missed::Pruned { oldest });
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

/// How the session layer's question rows begin (`session::asked::Signal`): a question asked,
/// whose `asked.id` names it, and its close, whose `closed.id` does. Only these rows' shape is
/// known here: the store carries every other body as it is.
pub const ASKED: &str = "{\"asked\":";
pub const CLOSED: &str = "{\"closed\":";

/// [`open_questions`]'s statement. Its patterns are [`ASKED`]'s and [`CLOSED`]'s written out:
/// only a literal pattern lets the planner use the questions' partial indexes (schema 9).
pub(super) const OPEN: &str = "SELECT asked.seq, asked.epoch, asked.body, asked.origin FROM session_events AS asked
     JOIN session_leases AS lease ON lease.session_id = asked.session_id
         AND lease.epoch = asked.epoch AND lease.holder = asked.origin AND lease.released_at IS NULL
     WHERE asked.session_id = $1 AND asked.seq <= $2 AND asked.body LIKE '{\"asked\":%'
       AND NOT EXISTS (
           SELECT 1 FROM session_events AS closed
           WHERE closed.session_id = asked.session_id AND closed.seq > asked.seq AND closed.seq <= $2
             AND closed.body LIKE '{\"closed\":%'
             AND (CASE WHEN closed.body LIKE '{\"closed\":%' THEN closed.body::jsonb #>> '{closed,id}' END)
                 = (CASE WHEN asked.body LIKE '{\"asked\":%' THEN asked.body::jsonb #>> '{asked,id}' END))
     ORDER BY asked.seq";

/// The questions asked in `session` up to `upto` and still open then: logged by the turn that
/// holds the session's lease now (its holder and epoch, unreleased) and not closed by a row up
/// to `upto`. A follow starting at `upto` gets them first, so a replica whose clients open the
/// session while a question waits asks them too; a close after `upto` follows in the log.
pub async fn open_questions(
    client: &impl GenericClient,
    session: &SessionId,
    upto: i64,
) -> Result<Vec<Event>, tokio_postgres::Error> {
    let rows = client.query(OPEN, &[&session.as_str(), &upto]).await?;
    Ok(rows
        .iter()
        .map(|row| Event { seq: row.get(0), epoch: row.get(1), body: row.get(2), origin: row.get(3) })
        .collect())
}

//! Streamed text kept as pieces a second behind the event log. Every chunk a turn streams is
//! shown through a row of its session's event log, and that row also carries the chunk's part,
//! number and text (`events::Chunk`). So the PostgreSQL writer need not write a piece per chunk
//! as well: it adds the streaming parts' text to `part_pieces` about once a second ([`LAG`]),
//! every part's in one statement (a sweep), and a part's when it ends, when its turn gives back its lease, at shutdown, and at once for a chunk that
//! logs no row (nothing shown, a lease this replica does not hold) or holds a NUL. Readers join
//! a streaming part's pieces with the log's rows of it numbered past them
//! (`rows::VISIBLE_MESSAGES`), so every replica reads the whole text that was shown, whichever
//! replica streams it; a replica that dies leaves its last second in the log, where the
//! sweeper that closes its turn folds it into pieces (`rows::fold_streams`; so does a take of
//! the lapsed lease that comes before any sweep, `lease::try_take`, `claims.rs`), and the prune keeps
//! the rows of parts still streaming that their pieces lack. At ten chunks a second a part gains a piece per ten
//! chunks, where each chunk was a piece, and a writer streaming a thousand parts sends one piece
//! statement a second, where most of its batches sent one.
//!
//! [`Streams`] is what committed; [`Streams::batch`] works out what one batch does to it: the
//! pieces it writes, the parts whose streaming it ends, the chunks its log rows carry, and the
//! streams as they stand once it commits ([`Streams::commit`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::events::Chunk;
use super::lease::Lease;
use super::logged::Plan;
use super::writer::{Done, PartKey, Writer};
use crate::ids::SessionId;
use crate::store::{StoreError, Write};

/// How far a streaming part's pieces may fall behind its log: once some text is this old, the
/// next batch writes every part's text that only the log holds as pieces (a sweep).
pub(super) const LAG: Duration = Duration::from_secs(1);

/// A streaming part between batches, as committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Stream {
    pub session: SessionId,
    /// The number of its last chunk (its chunks count from 1).
    pub chunks: i32,
    /// Its text that only the log's rows hold so far.
    pub behind: String,
    /// When the oldest of `behind` committed.
    pub since: Option<Instant>,
}

/// The streaming parts the writer's committed batches left.
#[derive(Default)]
pub(super) struct Streams {
    parts: HashMap<PartKey, Stream>,
}

/// A piece a batch writes: its part's session, message and index, its text, and the number of
/// the last chunk it holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub session: SessionId,
    pub part: PartKey,
    pub text: String,
    pub upto: i32,
}

impl Piece {
    /// A piece of `text`, a NUL in it kept as U+FFFD (PostgreSQL's text cannot hold one: it
    /// would fail the batch, every session's writes in it).
    fn new(session: SessionId, part: PartKey, text: &str, upto: i32) -> Self {
        Piece { session, part, text: text.replace('\0', "\u{fffd}"), upto }
    }
}

/// Whether this replica holds a session's lease, as a batch finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holding {
    /// Held before the batch and not lost, or taken in it.
    Held,
    /// Another replica took it over.
    Lost,
    /// Neither: given back, or never taken.
    Not,
}

impl Holding {
    /// What a batch that did `done` finds of `session`'s lease, `held` and `lost` as the writer
    /// kept them before it.
    pub fn of(session: &SessionId, held: &HashMap<SessionId, Lease>, lost: &HashSet<SessionId>, done: &Done) -> Self {
        if done.taken.iter().any(|lease| lease.session == *session) {
            Holding::Held
        } else if done.lost.contains(session) || lost.contains(session) {
            Holding::Lost
        } else if held.contains_key(session) && !done.released.contains(session) {
            Holding::Held
        } else {
            Holding::Not
        }
    }
}

/// What one batch does to the streams.
#[derive(Default, Debug)]
pub(super) struct Batch {
    /// The pieces to write.
    pub pieces: Vec<Piece>,
    /// The parts whose streaming ends: no reader looks for their text in the log any more.
    pub ended: Vec<PartKey>,
    /// The streams the batch changed, as they stand once it commits (`None`: gone).
    after: HashMap<PartKey, Option<Stream>>,
}

/// Where a batch finds a part's session: the parts open before it, those open in it.
type Sessions<'a> = (&'a HashMap<PartKey, SessionId>, &'a HashMap<PartKey, SessionId>);

/// A part as a batch leaves it, worked out write by write.
struct Work<'w> {
    session: SessionId,
    /// Whether the part streams after the batch's writes so far (one written whole does not).
    streaming: bool,
    chunks: i32,
    /// Its text not in pieces: what was behind, then the batch's chunks.
    text: String,
    since: Option<Instant>,
    /// A chunk that logs no row: the text goes into a piece with this batch.
    now: bool,
    ended: bool,
    /// The batch's chunks that log a row: their write, number and text.
    carried: Vec<(usize, i32, &'w str)>,
}

impl Work<'_> {
    fn of(stream: &Stream) -> Self {
        Work {
            session: stream.session.clone(),
            streaming: true,
            chunks: stream.chunks,
            text: stream.behind.clone(),
            since: stream.since,
            now: false,
            ended: false,
            carried: Vec::new(),
        }
    }

    fn fresh(session: SessionId, streaming: bool) -> Self {
        Work {
            session,
            streaming,
            chunks: 0,
            text: String::new(),
            since: None,
            now: false,
            ended: false,
            carried: Vec::new(),
        }
    }
}

impl Streams {
    /// The sessions whose parts' text a batch at `now` of `writes` writes as pieces though no
    /// write of theirs names them (in a sweep, [`Self::sweeps`], every part's that has text only
    /// in the log; with `all` every part's, ended; or their turn's release, which names no
    /// session to fence): the batch must fence their leases.
    pub fn due_at<'a>(&'a self, now: Instant, all: bool, writes: &'a [Write]) -> impl Iterator<Item = &'a SessionId> {
        let sweep = self.sweeps(now, all);
        let due = self
            .parts
            .values()
            .filter(move |stream| all || (sweep && stream.since.is_some()))
            .map(|stream| &stream.session);
        let released = writes.iter().filter_map(|write| match write {
            Write::ReleaseLease { session_id } => Some(session_id),
            _ => None,
        });
        due.chain(released)
    }

    /// Whether a batch at `now` sweeps: once the oldest text only in the log is due (or with
    /// `all`), every part's such text goes into pieces together. A statement's own cost is most
    /// of a small one's, so one statement about once a second for every part, rather than one
    /// in most batches for the few parts due in it.
    fn sweeps(&self, now: Instant, all: bool) -> bool {
        all || self.due().is_some_and(|due| now >= due)
    }

    /// When the oldest text only in the log is due as a piece.
    pub fn due(&self) -> Option<Instant> {
        self.parts.values().filter_map(|stream| stream.since).min().map(|since| since + LAG)
    }

    /// What the batch of `writes` (with their `results`) does to the streams, and the chunks
    /// its log rows carry (put into `plan`). `sessions` name the session of every part the
    /// batch may stream to; `holding` tells whether this replica holds a session's lease (taken
    /// in the batch or before it), lost it to another replica (whose take folds the text it
    /// left: none is written here) or holds none. With `all` (at shutdown) every part's text goes
    /// into pieces and its streaming ends.
    #[allow(clippy::too_many_arguments)]
    pub fn batch<'w>(
        &self,
        writes: &'w [Write],
        results: &[Result<(), StoreError>],
        plan: &mut Plan<'w>,
        sessions: Sessions<'_>,
        holding: &dyn Fn(&SessionId) -> Holding,
        all: bool,
        now: Instant,
    ) -> Batch {
        let sweep = self.sweeps(now, all);
        let mut work: HashMap<PartKey, Work<'w>> = HashMap::new();
        let reset = |work: &mut HashMap<PartKey, Work<'w>>, key: PartKey, session: &SessionId, streaming: bool| {
            work.insert(key, Work::fresh(session.clone(), streaming));
        };
        for (job, (write, result)) in writes.iter().zip(results).enumerate() {
            // The turn is over, even if its release failed (it is tried again outside any
            // batch): the parts streaming so far end, fenced as the release's session is (not
            // those a turn claimed later in the batch opens).
            if let Write::ReleaseLease { session_id } = write {
                for (key, stream) in &self.parts {
                    if stream.session == *session_id && !work.contains_key(key) {
                        work.insert(key.clone(), Work::of(stream));
                    }
                }
                for part in work.values_mut().filter(|part| part.session == *session_id) {
                    part.ended = true;
                }
                continue;
            }
            if result.is_err() {
                continue;
            }
            match write {
                Write::InsertMessage { session_id, message } => {
                    for index in 0..message.parts.len() {
                        let index = u32::try_from(index).unwrap_or(u32::MAX);
                        if work.contains_key(&(message.id.clone(), index))
                            || self.parts.contains_key(&(message.id.clone(), index))
                        {
                            reset(&mut work, (message.id.clone(), index), session_id, false);
                        }
                    }
                }
                Write::OpenPart { session_id, message_id, index, .. } => {
                    reset(&mut work, (message_id.clone(), *index), session_id, true);
                }
                Write::PutPart { session_id, message_id, index, .. } => {
                    reset(&mut work, (message_id.clone(), *index), session_id, false);
                }
                Write::AppendPart { message_id, index, delta } => {
                    let key = (message_id.clone(), *index);
                    let Some(part) = self.entry(&mut work, &key, sessions) else { continue };
                    part.chunks = part.chunks.saturating_add(1);
                    part.text.push_str(delta);
                    // A part written whole is read without the log: its chunks go in as pieces.
                    if part.streaming && plan.logs(job) && !delta.contains('\0') {
                        part.carried.push((job, part.chunks, delta.as_str()));
                    } else {
                        part.now = true;
                    }
                }
                Write::ClosePart { message_id, index } => {
                    let key = (message_id.clone(), *index);
                    if let Some(part) = self.entry(&mut work, &key, sessions) {
                        part.ended = true;
                    }
                }
                _ => {}
            }
        }
        // Parts the batch did not write to whose text a sweep writes, or whose session is not
        // this replica's any more.
        for (key, stream) in &self.parts {
            let due = sweep && stream.since.is_some();
            if !work.contains_key(key) && (all || due || holding(&stream.session) != Holding::Held) {
                work.insert(key.clone(), Work::of(stream));
            }
        }
        let mut batch = Batch::default();
        for (key, part) in work {
            let held = holding(&part.session);
            if held == Holding::Lost {
                batch.after.insert(key, None);
                continue;
            }
            if !part.streaming {
                // Written whole in the batch: its pieces went with its row's write.
                if part.now && !part.text.is_empty() {
                    batch.pieces.push(Piece::new(part.session, key.clone(), &part.text, part.chunks));
                }
                batch.after.insert(key, None);
                continue;
            }
            // A session this replica holds no lease of streams no more here: a chunk of it
            // logged no row, and its lease was given back (a release tried again later).
            let ends = part.ended || all || held == Holding::Not;
            let due = sweep && part.since.is_some();
            if ends || part.now || due {
                if !part.text.is_empty() {
                    batch.pieces.push(Piece::new(part.session.clone(), key.clone(), &part.text, part.chunks));
                }
                let after = Stream { session: part.session, chunks: part.chunks, behind: String::new(), since: None };
                if ends {
                    batch.ended.push(key.clone());
                }
                batch.after.insert(key, (!ends).then_some(after));
                continue;
            }
            for (job, number, text) in &part.carried {
                let message = match &writes[*job] {
                    Write::AppendPart { message_id, .. } => message_id.as_str(),
                    _ => continue,
                };
                let idx = i32::try_from(key.1).unwrap_or(i32::MAX);
                plan.carry(*job, Chunk { message, idx, number: *number, text });
            }
            let since = part.since.or_else(|| (!part.text.is_empty()).then_some(now));
            let after = Stream { session: part.session, chunks: part.chunks, behind: part.text, since };
            batch.after.insert(key, Some(after));
        }
        batch
    }

    /// The part `key` as the batch has it so far, from what committed or, for a part opened
    /// before any chunk (or before this writer kept streams), fresh; `None` for a part the
    /// batch does not know the session of.
    fn entry<'a, 'w>(
        &self,
        work: &'a mut HashMap<PartKey, Work<'w>>,
        key: &PartKey,
        sessions: Sessions<'_>,
    ) -> Option<&'a mut Work<'w>> {
        if !work.contains_key(key) {
            let part = match (self.parts.get(key), sessions.0.get(key).or_else(|| sessions.1.get(key))) {
                (Some(stream), _) => Work::of(stream),
                // Open before this writer numbered its chunks: its row says it does not stream.
                (None, Some(session)) => Work::fresh(session.clone(), false),
                (None, None) => return None,
            };
            work.insert(key.clone(), part);
        }
        work.get_mut(key)
    }

    /// Keeps what a committed batch left.
    pub fn commit(&mut self, batch: Batch) {
        for (key, after) in batch.after {
            match after {
                Some(stream) => self.parts.insert(key, stream),
                None => self.parts.remove(&key),
            };
        }
    }

    /// Forgets the parts of `session`, whose lease another replica took.
    pub fn forget(&mut self, session: &SessionId) {
        self.parts.retain(|_, stream| stream.session != *session);
    }
}

impl Writer {
    /// Runs a batch of no writes: the streamed text that is due (or, with `all`, every part's)
    /// goes into pieces.
    /// Skipped while the connection is known lost: the log keeps the text readable meanwhile,
    /// and a batch would wait for the connection, holding up the writes queued behind it.
    pub(super) async fn catch_up(&mut self, all: bool) {
        let nothing = if all { self.streams.parts.is_empty() } else { self.streams.due().is_none() };
        if nothing || self.down {
            return;
        }
        self.catch_up = all;
        let _ = self.apply(&[], &[]).await;
        self.catch_up = false;
    }
}

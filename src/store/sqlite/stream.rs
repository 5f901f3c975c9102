//! The part coalescer: text and reasoning parts still streaming, between `OpenPart` and
//! `ClosePart`, and the SQL of their pieces (`part_pieces`).
//!
//! A chunk costs an append to its part's pending text in memory. Once per batch, the pending text
//! goes to the database as one append: to the part's last piece while that is under [`PIECE`]
//! bytes, else as a new piece. What is stored is never written again, so a long answer costs
//! what it adds, not the sum of its lengths, and the writer keeps only what is not committed yet.
//! The pieces are committed with the chunks' batch, before the chunks' callbacks run, so whatever
//! a client was shown is on disk, and a part a kill cut short reads back with its text so far.
//!
//! A part that ends with at most [`FOLD`] bytes of pieces is folded back into its row, so a
//! finished conversation reads as one row per part; a longer one keeps its pieces, which readers
//! join ([`super::rows::VISIBLE_MESSAGES`]): folding it would hold several copies of it at once.
//! A batch that does not commit leaves its parts as they were stored: their pending text is kept
//! and written with the next batch.

use std::collections::HashMap;

use rusqlite::{Connection, params};

use crate::ids::{MessageId, SessionId};

/// A part's last piece grows in place up to this many bytes; then the next batch starts another.
const PIECE: usize = 4096;

/// A closing part with at most this many bytes in pieces is folded into its row.
const FOLD: usize = 1024 * 1024;

type PartKey = (MessageId, u32);

/// A part's pieces as stored.
#[derive(Clone, Copy, Default)]
struct Stored {
    /// The last piece: its row id and length in bytes.
    last: Option<(i64, usize)>,
    /// The length of all its pieces, in bytes.
    bytes: usize,
}

struct Stream {
    session_id: SessionId,
    /// Text appended and not committed yet.
    pending: String,
    /// The writes of this batch whose result is this part's next write.
    answers: Vec<usize>,
    /// Its pieces as committed.
    stored: Stored,
    /// Once this batch commits: its pieces, and how much of `pending` they took.
    written: Option<(Stored, usize)>,
}

/// The parts still streaming.
#[derive(Default)]
pub(super) struct Streams {
    open: HashMap<PartKey, Stream>,
}

impl Streams {
    /// Starts `message_id`'s part `index` (its row is written by the caller).
    pub fn open(&mut self, session_id: &SessionId, message_id: &MessageId, index: u32) {
        let stream = Stream {
            session_id: session_id.clone(),
            pending: String::new(),
            answers: Vec::new(),
            stored: Stored::default(),
            written: None,
        };
        self.open.insert((message_id.clone(), index), stream);
    }

    /// Adds `delta` to the open part; the `job`'s result will be its next write. False if the
    /// part is not open.
    pub fn append(&mut self, message_id: &MessageId, index: u32, delta: &str, job: usize) -> bool {
        let Some(stream) = self.open.get_mut(&(message_id.clone(), index)) else { return false };
        stream.pending.push_str(delta);
        stream.answers.push(job);
        true
    }

    /// Ends the part: writes what it has pending and folds it into its row if it is short, with
    /// `write` (a savepoint). Answers the writes its result is for (none if it was not open).
    pub fn close<E>(
        &mut self,
        message_id: &MessageId,
        index: u32,
        write: impl FnOnce(&mut dyn FnMut(&Connection) -> rusqlite::Result<()>) -> Result<(), E>,
    ) -> Option<(Vec<usize>, Result<(), E>)> {
        let key = (message_id.clone(), index);
        let mut stream = self.open.remove(&key)?;
        let result = write(&mut |conn| {
            let stored = stream.write(conn, &key)?;
            if stored.bytes > 0 && stored.bytes <= FOLD {
                fold(conn, &key)?;
            }
            Ok(())
        });
        Some((std::mem::take(&mut stream.answers), result))
    }

    /// Writes each open part's pending text, each with `write` (a savepoint); answers which
    /// writes each result is for.
    pub fn write_pending<E>(
        &mut self,
        mut write: impl FnMut(&mut dyn FnMut(&Connection) -> rusqlite::Result<()>) -> Result<(), E>,
    ) -> Vec<(Vec<usize>, Result<(), E>)> {
        let mut answered = Vec::new();
        for (key, stream) in &mut self.open {
            if stream.answers.is_empty() && stream.pending.is_empty() {
                continue;
            }
            let result = write(&mut |conn| stream.write(conn, key).map(|_| ()));
            if result.is_err() {
                stream.written = None;
            }
            answered.push((std::mem::take(&mut stream.answers), result));
        }
        answered
    }

    /// Forgets the parts of a deleted session.
    pub fn forget_session(&mut self, session: &SessionId) {
        self.open.retain(|_, stream| stream.session_id != *session);
    }

    /// The batch committed: what was written is stored.
    pub fn committed(&mut self) {
        for stream in self.open.values_mut() {
            if let Some((stored, taken)) = stream.written.take() {
                stream.stored = stored;
                stream.pending.drain(..taken);
            }
        }
    }

    /// The batch did not commit: every part is as stored before it, its text still pending.
    pub fn rolled_back(&mut self) {
        for stream in self.open.values_mut() {
            stream.written = None;
            stream.answers.clear();
        }
    }
}

/// Adds text to a part's last piece.
pub(super) const GROW_PIECE: &str = "UPDATE part_pieces SET text = text || ?2 WHERE id = ?1";
/// Starts a part's next piece.
pub(super) const ADD_PIECE: &str =
    "INSERT INTO part_pieces (message_id, idx, session_id, text) VALUES (?1, ?2, ?3, ?4)";
/// Moves a part's pieces into its row's text.
pub(super) const FOLD_PIECES: &str =
    "UPDATE parts SET data_json = json_set(data_json, '$.text', coalesce(data_json ->> '$.text', '') ||
   (SELECT coalesce(group_concat(text, '' ORDER BY id), '') FROM part_pieces WHERE message_id = ?1 AND idx = ?2))
 WHERE message_id = ?1 AND idx = ?2";
/// Deletes a part's pieces.
pub(super) const FORGET_PIECES: &str = "DELETE FROM part_pieces WHERE message_id = ?1 AND idx = ?2";

impl Stream {
    /// Appends the pending text to the part's pieces; they stand as returned once the batch
    /// commits.
    fn write(&mut self, conn: &Connection, (message_id, index): &PartKey) -> rusqlite::Result<Stored> {
        let mut stored = self.stored;
        if !self.pending.is_empty() {
            let grown = match stored.last {
                Some((id, len)) if len < PIECE => {
                    let changed = conn.prepare_cached(GROW_PIECE)?.execute(params![id, self.pending])?;
                    // None if the piece is gone (the part was written whole meanwhile).
                    (changed == 1).then_some((id, len + self.pending.len()))
                }
                Some(_) | None => None,
            };
            match grown {
                Some(last) => stored.last = Some(last),
                None => {
                    conn.prepare_cached(ADD_PIECE)?.execute(params![
                        message_id.as_str(),
                        index,
                        self.session_id.as_str(),
                        self.pending
                    ])?;
                    stored.last = Some((conn.last_insert_rowid(), self.pending.len()));
                }
            }
            stored.bytes += self.pending.len();
        }
        self.written = Some((stored, self.pending.len()));
        Ok(stored)
    }
}

/// Moves a part's pieces into its row's text.
fn fold(conn: &Connection, (message_id, index): &PartKey) -> rusqlite::Result<()> {
    conn.prepare_cached(FOLD_PIECES)?.execute(params![message_id.as_str(), index])?;
    forget_pieces(conn, message_id, *index)
}

/// Deletes a part's pieces (its row is being written whole).
pub(super) fn forget_pieces(conn: &Connection, message_id: &MessageId, index: u32) -> rusqlite::Result<()> {
    conn.prepare_cached(FORGET_PIECES)?.execute(params![message_id.as_str(), index])?;
    Ok(())
}

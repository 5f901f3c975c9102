//! A batch's inserts of messages and parts, grouped: a run of `InsertMessage`, `OpenPart` and
//! `PutPart` writes (and the chunks and part ends among them, which write nothing before the
//! batch's end) goes as two set-based statements sent together, every message then every part,
//! instead of a round trip each.
//!
//! Each step of a turn starts with its answer's message and its first part, so when many turns
//! start together, a batch carried two round trips per turn, one after another, and every turn's
//! first text waited for them. Grouping keeps what each write does: a part's message always
//! goes before it (the messages' statement is sent first, and the server runs them in the order
//! sent); a part written whole loses the pieces it had and streams no more, and a part opened
//! to stream notes the log's `seq` its chunks' rows come after (`streams.rs`); and what a write
//! does besides its statement (the parts it opens) is done as it is taken, in the batch's
//! order. One statement cannot write one row twice, so a write of a part the group writes
//! already sends the group first. Only a batch's first run groups: a run again with a savepoint
//! per write writes each alone (a part's write as a group of one, `writes::one`), so a failing
//! write fails alone.

use std::collections::{HashMap, HashSet};

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::Prepared;
use super::writer::PartKey;
use crate::history::{Message, Part};
use crate::ids::{MessageId, SessionId, now_ms};
use crate::store::Write;
use crate::store::codec::{self, to_json};

const MESSAGES: &str = "WITH touched AS (UPDATE sessions SET updated_at = $5 WHERE id = ANY($2::text[]))
     INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at)
     SELECT m.id, m.session_id, m.role, m.meta, $5, $5
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS m(id, session_id, role, meta)";

const PARTS: &str = "WITH forgotten AS (
       DELETE FROM part_pieces AS piece USING unnest($1::text[], $3::int4[]) AS gone(message_id, idx)
        WHERE piece.message_id = gone.message_id AND piece.idx = gone.idx
     )
     INSERT INTO parts (message_id, session_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at,
                        streaming_from)
     SELECT p.message_id, p.session_id, p.idx, p.type, p.data, p.call, p.state, $8, $8,
            CASE WHEN p.streaming
                 THEN (SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = p.session_id) END
       FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[], $9::bool[])
         AS p(message_id, session_id, idx, type, data, call, state, streaming)
     ON CONFLICT (message_id, idx) DO UPDATE SET
       type = excluded.type, data_json = excluded.data_json, tool_call_id = excluded.tool_call_id,
       tool_state = excluded.tool_state, updated_at = excluded.updated_at, streaming_from = excluded.streaming_from";

/// The messages and parts of a run of a batch's writes, not sent yet.
#[derive(Default)]
pub(super) struct Group<'w> {
    messages: Vec<(&'w SessionId, &'w Message)>,
    /// Each part, and whether it is opened to stream.
    parts: Vec<(&'w SessionId, &'w MessageId, u32, &'w Part, bool)>,
    keys: HashSet<PartKey>,
}

impl<'w> Group<'w> {
    /// Whether a group sends `write`'s statement.
    pub fn fits(write: &Write) -> bool {
        matches!(write, Write::InsertMessage { .. } | Write::OpenPart { .. } | Write::PutPart { .. })
    }

    /// Whether `write` needs no statement before the batch's end (a chunk, a part's end): the
    /// group need not be sent before it.
    pub fn passes(write: &Write) -> bool {
        matches!(write, Write::AppendPart { .. } | Write::ClosePart { .. })
    }

    /// Whether `write` writes a part this group writes already: the group goes first.
    pub fn clashes(&self, write: &Write) -> bool {
        match write {
            Write::InsertMessage { message, .. } => {
                (0..message.parts.len()).any(|index| self.keys.contains(&(message.id.clone(), to_index(index))))
            }
            Write::OpenPart { message_id, index, .. } | Write::PutPart { message_id, index, .. } => {
                self.keys.contains(&(message_id.clone(), *index))
            }
            _ => false,
        }
    }

    /// Takes `write` (one that [`Self::fits`] and does not clash), doing now what it does
    /// besides its statement.
    pub fn take(&mut self, write: &'w Write, opened: &mut HashMap<PartKey, SessionId>) {
        match write {
            Write::InsertMessage { session_id, message } => {
                self.messages.push((session_id, message));
                for (index, part) in message.parts.iter().enumerate() {
                    self.part(session_id, &message.id, to_index(index), part);
                }
            }
            Write::OpenPart { session_id, message_id, index, part } => {
                opened.insert((message_id.clone(), *index), session_id.clone());
                self.streaming(session_id, message_id, *index, part);
            }
            Write::PutPart { session_id, message_id, index, part } => {
                self.part(session_id, message_id, *index, part);
            }
            _ => {}
        }
    }

    fn part(&mut self, session: &'w SessionId, message: &'w MessageId, index: u32, part: &'w Part) {
        self.keys.insert((message.clone(), index));
        self.parts.push((session, message, index, part, false));
    }

    /// A part opened to stream: its row says from which `seq` of the log its text is read.
    fn streaming(&mut self, session: &'w SessionId, message: &'w MessageId, index: u32, part: &'w Part) {
        self.keys.insert((message.clone(), index));
        self.parts.push((session, message, index, part, true));
    }

    /// Sends what the group holds, the messages' statement first, and empties it.
    pub async fn send(&mut self, tx: &impl GenericClient, prepared: &Prepared) -> Result<(), tokio_postgres::Error> {
        if self.messages.is_empty() && self.parts.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let mut rows = Columns::default();
        let mut streaming = Vec::with_capacity(self.parts.len());
        for (session, message) in self.messages.drain(..) {
            rows.message(session, message);
        }
        for (session, message, index, part, opened) in self.parts.drain(..) {
            rows.part(session, message, index, part);
            streaming.push(opened);
        }
        self.keys.clear();
        // Prepared before either is sent, so they go out in this order.
        let (insert, put) = (prepared.get(tx, MESSAGES).await?, prepared.get(tx, PARTS).await?);
        let messages = async {
            if rows.ids.is_empty() {
                return Ok(0);
            }
            tx.execute(&insert, &rows.messages(&now)).await
        };
        let parts = async {
            if rows.owners.is_empty() {
                return Ok(0);
            }
            let mut params = rows.parts(&now);
            params.push(&streaming);
            tx.execute(&put, &params).await
        };
        let (messages, parts) = futures::future::join(messages, parts).await;
        messages?;
        parts?;
        Ok(())
    }
}

/// Messages and parts column by column, as the set-based statements take them.
#[derive(Default)]
pub(super) struct Columns<'a> {
    pub ids: Vec<&'a str>,
    pub sessions: Vec<&'a str>,
    pub roles: Vec<&'static str>,
    pub metas: Vec<String>,
    pub owners: Vec<&'a str>,
    pub owner_sessions: Vec<&'a str>,
    pub indexes: Vec<i32>,
    pub kinds: Vec<&'static str>,
    pub data: Vec<String>,
    pub calls: Vec<Option<&'a str>>,
    pub states: Vec<Option<&'static str>>,
}

impl<'a> Columns<'a> {
    /// A message's row (not its parts).
    pub fn message(&mut self, session: &'a SessionId, message: &'a Message) {
        self.ids.push(message.id.as_str());
        self.sessions.push(session.as_str());
        self.roles.push(message.role.as_str());
        self.metas.push(to_json(&message.meta));
    }

    /// The messages' parameters, `now` their time: `$1` to `$5`.
    pub fn messages<'p>(&'p self, now: &'p i64) -> Vec<&'p (dyn ToSql + Sync)> {
        vec![&self.ids, &self.sessions, &self.roles, &self.metas, now]
    }

    /// The parts' parameters, `now` their time: `$1` to `$8`.
    pub fn parts<'p>(&'p self, now: &'p i64) -> Vec<&'p (dyn ToSql + Sync)> {
        vec![&self.owners, &self.owner_sessions, &self.indexes, &self.kinds, &self.data, &self.calls, &self.states, now]
    }

    /// A part's row.
    pub fn part(&mut self, session: &'a SessionId, message: &'a MessageId, index: u32, part: &'a Part) {
        let (call, state) = codec::tool_columns(part);
        self.owners.push(message.as_str());
        self.owner_sessions.push(session.as_str());
        self.indexes.push(i32::try_from(index).unwrap_or(i32::MAX));
        self.kinds.push(part.kind());
        self.data.push(to_json(part));
        self.calls.push(call);
        self.states.push(state);
    }
}

fn to_index(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

//! The PostgreSQL store's statements on sessions, messages and parts, one function each, run
//! inside the writer's transaction or on the read connection. The values are kept as the
//! SQLite store keeps them (`store::codec`), so a session reads back the same from either.
//!
//! A batch's streaming text goes in with one statement for all its parts (`add_pieces`, an
//! `unnest` of the batch's pieces), never a statement per chunk, and most chunks not as pieces
//! at all: their text is read from the event log's rows until the writer catches up
//! (`streams.rs`).

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::Prepared;
use super::streams::Piece;
use super::writer::PartKey;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId};
use crate::permissions::Rule;
use crate::settings::Kept;
use crate::store::SessionRow;
use crate::store::codec::{self, client_prompt, metadata, read_part, session_rules, to_json};

type Result<T> = std::result::Result<T, tokio_postgres::Error>;

macro_rules! session_columns {
    () => {
        "id, cwd, title, model, created_at, updated_at, mode, permissions_json, cost_usd,
         metadata->>'thought_level', parent_id, subagent, metadata->>'busy_prompt', owner,
         metadata->>'system_prompt', archived_at, metadata->>'title_by'"
    };
}

pub(super) const SESSION_COLUMNS: &str = session_columns!();
const SESSION: &str = concat!("SELECT ", session_columns!(), " FROM sessions WHERE id = $1");

pub(super) fn session_from_row(row: &tokio_postgres::Row) -> SessionRow {
    SessionRow {
        id: SessionId::from_string(row.get::<_, String>(0)),
        cwd: row.get(1),
        title: row.get(2),
        title_by_client: row.get::<_, Option<&str>>(16) == Some("client"),
        model: row.get(3),
        created_at: row.get(4),
        updated_at: row.get(5),
        mode: row.get(6),
        rules: session_rules(row.get(7)),
        cost_usd: row.get(8),
        thought_level: row.get(9),
        parent_id: row.get::<_, Option<String>>(10).map(SessionId::from_string),
        subagent: row.get(11),
        busy_prompt: row.get(12),
        owner: row.get(13),
        system_prompt: row.get::<_, Option<&str>>(14).and_then(client_prompt),
        archived_at: row.get(15),
    }
}

/// A session's row; the statement prepared once in `prepared`, `client`'s connection's (every
/// turn's start on a replica reads it).
pub async fn session(client: &impl GenericClient, prepared: &Prepared, id: &SessionId) -> Result<Option<SessionRow>> {
    let statement = prepared.get(client, SESSION).await?;
    Ok(client.query_opt(&statement, &[&id.as_str()]).await?.as_ref().map(session_from_row))
}

/// A session's visible messages, oldest first, one row per part (a message without parts has
/// one row with a NULL part): `id, role, metadata_json, data_json, pieces, type`, where `pieces`
/// is the text a streamed part has beyond its row's: its pieces, then, while it streams, the
/// text of the log's rows of it numbered past them (the writer keeps pieces up to a second
/// behind the log, `streams.rs`).
pub(super) const VISIBLE_MESSAGES: &str = "SELECT m.id, m.role, m.metadata_json, p.data_json,
        nullif(concat(
          (SELECT string_agg(t.text, '' ORDER BY t.id) FROM part_pieces t
            WHERE t.message_id = p.message_id AND t.idx = p.idx),
          CASE WHEN p.streaming_from IS NOT NULL THEN
            (SELECT string_agg(e.piece, '' ORDER BY e.seq) FROM session_events e
              WHERE e.session_id = p.session_id AND e.seq > p.streaming_from
                AND e.part_message = p.message_id AND e.part_idx = p.idx
                AND e.part_chunk > (SELECT coalesce(max(t.upto), 0) FROM part_pieces t
                                     WHERE t.message_id = p.message_id AND t.idx = p.idx))
          END), ''),
        p.type
     FROM messages m LEFT JOIN parts p ON p.message_id = m.id
     WHERE m.session_id = $1 AND m.hidden_at IS NULL
     ORDER BY m.id, p.idx";

/// A session's visible messages with their parts, oldest first (the pieces of a streaming
/// part joined onto its text).
pub async fn messages(client: &impl GenericClient, id: &SessionId) -> Result<Vec<Message>> {
    let rows = client.query(VISIBLE_MESSAGES, &[&id.as_str()]).await?;
    let mut messages: Vec<Message> = Vec::new();
    for row in &rows {
        let message_id: &str = row.get(0);
        if messages.last().is_none_or(|last| last.id.as_str() != message_id) {
            let role = match row.get::<_, &str>(1) {
                "assistant" => Role::Assistant,
                _ => Role::User,
            };
            let meta = match row.get::<_, &str>(2) {
                "{}" => MessageMeta::default(),
                json => serde_json::from_str(json).unwrap_or_else(|err| {
                    tracing::warn!(message = %message_id, %err, "unreadable message metadata; using defaults");
                    MessageMeta::default()
                }),
            };
            messages.push(Message { id: MessageId::from_string(message_id.to_owned()), role, parts: Vec::new(), meta });
        }
        let Some(data) = row.get::<_, Option<&str>>(3) else { continue };
        match read_part(row.get(5), data) {
            Ok(mut part) => {
                if let Some(pieces) = row.get::<_, Option<&str>>(4) {
                    codec::append(&mut part, pieces);
                }
                if let Some(message) = messages.last_mut() {
                    message.parts.push(part);
                }
            }
            Err(err) => tracing::warn!(session = %id, %err, "skipping a part this version cannot read"),
        }
    }
    Ok(messages)
}

pub async fn insert_session(client: &impl GenericClient, row: &SessionRow) -> Result<()> {
    let parent = row.parent_id.as_ref().map(SessionId::as_str);
    client
        .execute(
            "INSERT INTO sessions (id, cwd, title, model, mode, permissions_json, created_at, updated_at, parent_id,
                                   subagent, owner, metadata, archived_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                     coalesce($11, (SELECT owner FROM sessions WHERE id = $9)), $12::text::jsonb, $13)",
            &[
                &row.id.as_str(),
                &row.cwd,
                &row.title,
                &row.model,
                &row.mode,
                &to_json(&row.rules),
                &row.created_at,
                &row.updated_at,
                &parent,
                &row.subagent,
                &row.owner,
                &metadata(row),
                &row.archived_at,
            ],
        )
        .await?;
    Ok(())
}

/// A client's title (noted as the client's), or a model's while no client titled the session;
/// answers whether the row changed.
pub async fn set_title(
    client: &impl GenericClient,
    id: &SessionId,
    title: &str,
    by_client: bool,
    at: i64,
) -> Result<bool> {
    let changed = client
        .execute(
            "UPDATE sessions SET title = $2, updated_at = $3,
               metadata = CASE WHEN $4 THEN metadata || '{\"title_by\": \"client\"}'::jsonb ELSE metadata END
             WHERE id = $1 AND ($4 OR NOT metadata ? 'title_by')",
            &[&id.as_str(), &title, &at, &by_client],
        )
        .await?;
    Ok(changed > 0)
}

pub async fn set_first_title(
    client: &impl GenericClient,
    prepared: &Prepared,
    id: &SessionId,
    title: &str,
    at: i64,
) -> Result<()> {
    let statement =
        prepared.get(client, "UPDATE sessions SET title = $2, updated_at = $3 WHERE id = $1 AND title IS NULL").await?;
    client.execute(&statement, &[&id.as_str(), &title, &at]).await?;
    Ok(())
}

pub async fn set_setting(client: &impl GenericClient, id: &SessionId, kept: Kept, value: &str, at: i64) -> Result<()> {
    match kept {
        // A `&'static str` of `crate::settings`: never a client's text.
        Kept::Column(column) => {
            let sql = format!("UPDATE sessions SET {column} = $2, updated_at = $3 WHERE id = $1");
            client.execute(&sql, &[&id.as_str(), &value, &at]).await?
        }
        Kept::Metadata(key) => {
            client
                .execute(
                    "UPDATE sessions SET metadata = jsonb_set(metadata, ARRAY[$4::text], to_jsonb($2::text)), updated_at = $3
                     WHERE id = $1",
                    &[&id.as_str(), &value, &at, &key],
                )
                .await?
        }
    };
    Ok(())
}

pub async fn add_session_rule(client: &impl GenericClient, id: &SessionId, rule: &Rule) -> Result<()> {
    client
        .execute(
            "UPDATE sessions SET permissions_json = (permissions_json::jsonb || jsonb_build_array($2::text::jsonb))::text
             WHERE id = $1",
            &[&id.as_str(), &to_json(rule)],
        )
        .await?;
    Ok(())
}

pub async fn set_session_rules(client: &impl GenericClient, id: &SessionId, rules: &[Rule], at: i64) -> Result<()> {
    client
        .execute(
            "UPDATE sessions SET permissions_json = $2, updated_at = $3 WHERE id = $1",
            &[&id.as_str(), &to_json(&rules), &at],
        )
        .await?;
    Ok(())
}

pub async fn set_archived(client: &impl GenericClient, id: &SessionId, archived: bool, at: i64) -> Result<()> {
    client
        .execute(
            "UPDATE sessions SET archived_at = CASE WHEN $2 THEN coalesce(archived_at, $3) END WHERE id = $1",
            &[&id.as_str(), &archived, &at],
        )
        .await?;
    Ok(())
}

/// A message with the parts it has, and the session's last change: two statements, sent
/// together (the server runs them in order; the parts' fail if the message's did).
pub async fn insert_message(
    client: &impl GenericClient,
    prepared: &Prepared,
    session: &SessionId,
    message: &Message,
    at: i64,
) -> Result<()> {
    let parts: Vec<(u32, &Part)> = message
        .parts
        .iter()
        .enumerate()
        .map(|(index, part)| (u32::try_from(index).unwrap_or(u32::MAX), part))
        .collect();
    let meta = to_json(&message.meta);
    let statement = prepared
        .get(
            client,
            "WITH touched AS (UPDATE sessions SET updated_at = $5 WHERE id = $2)
             INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)",
        )
        .await?;
    let parts_statement = prepared.get(client, PUT_PARTS).await?;
    // Each is sent at its first poll, and `join` polls the message's first: the parts always
    // follow the message they belong to.
    let (id, session_id, role) = (message.id.as_str(), session.as_str(), message.role.as_str());
    let params: [&(dyn ToSql + Sync); 5] = [&id, &session_id, &role, &meta, &at];
    let inserted = client.execute(&statement, &params);
    let put = put_prepared_parts(client, &parts_statement, session, &message.id, &parts, at);
    let (inserted, put) = futures::future::join(inserted, put).await;
    inserted?;
    put
}

const PUT_PARTS: &str = "WITH forgotten AS (
       DELETE FROM part_pieces WHERE message_id = $1 AND idx = ANY($3::int4[])
     )
     INSERT INTO parts (message_id, session_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at)
     SELECT $1, $2, p.idx, p.type, p.data, p.call, p.state, $8, $8
       FROM unnest($3::int4[], $4::text[], $5::text[], $6::text[], $7::text[]) AS p(idx, type, data, call, state)
     ON CONFLICT (message_id, idx) DO UPDATE SET
       type = excluded.type, data_json = excluded.data_json, tool_call_id = excluded.tool_call_id,
       tool_state = excluded.tool_state, updated_at = excluded.updated_at, streaming_from = NULL";

/// Inserts or replaces parts of one message, in one statement; a part written whole loses
/// its pieces and streams no longer.
pub async fn put_parts(
    client: &impl GenericClient,
    prepared: &Prepared,
    session: &SessionId,
    message: &MessageId,
    parts: &[(u32, &Part)],
    at: i64,
) -> Result<()> {
    if parts.is_empty() {
        return Ok(());
    }
    let statement = prepared.get(client, PUT_PARTS).await?;
    put_prepared_parts(client, &statement, session, message, parts, at).await
}

/// [`put_parts`] with its statement prepared; sent at its first poll.
async fn put_prepared_parts(
    client: &impl GenericClient,
    statement: &tokio_postgres::Statement,
    session: &SessionId,
    message: &MessageId,
    parts: &[(u32, &Part)],
    at: i64,
) -> Result<()> {
    if parts.is_empty() {
        return Ok(());
    }
    let mut indexes = Vec::with_capacity(parts.len());
    let (mut kinds, mut data, mut calls, mut states) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (index, part) in parts {
        let (call, state) = codec::tool_columns(part);
        indexes.push(i32::try_from(*index).unwrap_or(i32::MAX));
        kinds.push(part.kind());
        data.push(to_json(part));
        calls.push(call);
        states.push(state);
    }
    let params: [&(dyn ToSql + Sync); 8] =
        [&message.as_str(), &session.as_str(), &indexes, &kinds, &data, &calls, &states, &at];
    client.execute(statement, &params).await?;
    Ok(())
}

/// The pieces a batch writes (`streams.rs`), in one statement (a NUL in them stored as U+FFFD
/// already), and the parts whose streaming ended, in another sent with it. A part gone
/// already (its session deleted) gets none, and never fails the batch. The parts are not
/// locked: a session is deleted only under its lease's row lock (`lease::held_below`), which the
/// batch's fence holds shared, and never while another replica's lease runs; a lock on every
/// part a batch streams to was a heap write and a WAL record per chunk. (Only a writer whose
/// lease ran out while it was paused, streaming into a sub-agent's session, could race the
/// deletion and leave pieces of a part that is gone: rows nothing reads.)
pub async fn add_pieces(
    client: &impl GenericClient,
    prepared: &Prepared,
    pieces: &[Piece],
    ended: &[PartKey],
) -> Result<()> {
    let added = async {
        if pieces.is_empty() {
            return Ok(0);
        }
        let sessions: Vec<&str> = pieces.iter().map(|piece| piece.session.as_str()).collect();
        let messages: Vec<&str> = pieces.iter().map(|piece| piece.part.0.as_str()).collect();
        let indexes: Vec<i32> = pieces.iter().map(|piece| index_of(piece.part.1)).collect();
        let texts: Vec<&str> = pieces.iter().map(|piece| piece.text.as_str()).collect();
        let upto: Vec<i32> = pieces.iter().map(|piece| piece.upto).collect();
        let statement = prepared
            .get(
                client,
                "INSERT INTO part_pieces (session_id, message_id, idx, text, upto)
                 SELECT piece.session_id, piece.message_id, piece.idx, piece.text, piece.upto
                 FROM unnest($1::text[], $2::text[], $3::int4[], $4::text[], $5::int4[])
                   AS piece(session_id, message_id, idx, text, upto)
                 JOIN parts ON parts.message_id = piece.message_id AND parts.idx = piece.idx",
            )
            .await?;
        client.execute(&statement, &[&sessions, &messages, &indexes, &texts, &upto]).await
    };
    let stopped = async {
        if ended.is_empty() {
            return Ok(0);
        }
        let messages: Vec<&str> = ended.iter().map(|part| part.0.as_str()).collect();
        let indexes: Vec<i32> = ended.iter().map(|part| index_of(part.1)).collect();
        let statement = prepared
            .get(
                client,
                "UPDATE parts SET streaming_from = NULL
                 FROM unnest($1::text[], $2::int4[]) AS ended(message_id, idx)
                 WHERE parts.message_id = ended.message_id AND parts.idx = ended.idx
                   AND parts.streaming_from IS NOT NULL",
            )
            .await?;
        client.execute(&statement, &[&messages, &indexes]).await
    };
    // Each is sent at its first poll, the pieces first: a reader sees both or neither.
    let (added, stopped) = futures::future::join(added, stopped).await;
    added?;
    stopped?;
    Ok(())
}

/// Writes as pieces the text of `sessions`' streaming parts that only the log's rows hold, and
/// ends their streaming: a writer that stopped (a replica that died) left up to a second of
/// text there. Run under the sessions' leases by whoever takes them over from that writer (the
/// sweeper closing its turn, or a prompt's take of the lapsed lease), so the writer (fenced
/// from then on) cannot write the same text again.
pub async fn fold_streams(client: &impl GenericClient, sessions: &[&SessionId]) -> Result<()> {
    let sessions: Vec<&str> = sessions.iter().map(|session| session.as_str()).collect();
    client
        .execute(
            "WITH folded AS (
               INSERT INTO part_pieces (session_id, message_id, idx, text, upto)
               SELECT p.session_id, p.message_id, p.idx, string_agg(e.piece, '' ORDER BY e.seq), max(e.part_chunk)
                 FROM parts p
                 CROSS JOIN LATERAL (SELECT coalesce(max(t.upto), 0) AS upto FROM part_pieces t
                                      WHERE t.message_id = p.message_id AND t.idx = p.idx) AS had
                 JOIN session_events e
                   ON e.session_id = p.session_id AND e.seq > p.streaming_from
                  AND e.part_message = p.message_id AND e.part_idx = p.idx AND e.part_chunk > had.upto
                WHERE p.session_id = ANY($1::text[]) AND p.streaming_from IS NOT NULL
                GROUP BY p.session_id, p.message_id, p.idx
             )
             UPDATE parts SET streaming_from = NULL WHERE session_id = ANY($1::text[]) AND streaming_from IS NOT NULL",
            &[&sessions],
        )
        .await?;
    Ok(())
}

fn index_of(index: u32) -> i32 {
    i32::try_from(index).unwrap_or(i32::MAX)
}

pub async fn set_message_meta(client: &impl GenericClient, id: &MessageId, meta: &MessageMeta, at: i64) -> Result<()> {
    client
        .execute(
            "UPDATE messages SET metadata_json = $2, updated_at = $3 WHERE id = $1",
            &[&id.as_str(), &to_json(meta), &at],
        )
        .await?;
    Ok(())
}

/// A finished message's metadata, and its usage and cost added to the session and, for a
/// sub-agent, every session above it up to the one a user opened.
pub async fn finish_message(
    client: &impl GenericClient,
    session: &SessionId,
    id: &MessageId,
    meta: &MessageMeta,
    at: i64,
) -> Result<()> {
    set_message_meta(client, id, meta, at).await?;
    let Some(usage) = meta.usage else { return Ok(()) };
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let params: [&(dyn ToSql + Sync); 8] = [
        &session.as_str(),
        &tokens(usage.input),
        &tokens(usage.output),
        &tokens(usage.reasoning),
        &tokens(usage.cache_read),
        &tokens(usage.cache_write),
        &meta.cost.unwrap_or(0.0),
        &at,
    ];
    client
        .execute(
            "WITH RECURSIVE up(id, subagent, parent_id) AS (
               SELECT id, subagent, parent_id FROM sessions WHERE id = $1
               UNION SELECT s.id, s.subagent, s.parent_id FROM sessions s JOIN up ON s.id = up.parent_id
                 WHERE up.subagent IS NOT NULL
             )
             UPDATE sessions SET prompt_tokens = prompt_tokens + $2, completion_tokens = completion_tokens + $3,
               reasoning_tokens = reasoning_tokens + $4, cache_read = cache_read + $5, cache_write = cache_write + $6,
               cost_usd = cost_usd + $7, updated_at = $8
             WHERE id IN (SELECT id FROM up)",
            &params,
        )
        .await?;
    Ok(())
}

/// Ends the session's tool calls that are unfinished as stored (see
/// `history::finalize_orphan`), read inside the caller's transaction; answers the parts it ended.
pub async fn finalize_orphans(client: &impl GenericClient, session: &SessionId, at: i64) -> Result<Vec<Part>> {
    let rows = client
        .query(
            "SELECT p.message_id, p.idx, p.data_json FROM parts p JOIN messages m ON m.id = p.message_id
             WHERE p.session_id = $1 AND p.tool_state IS NOT NULL AND m.hidden_at IS NULL",
            &[&session.as_str()],
        )
        .await?;
    let mut finished = Vec::new();
    for row in &rows {
        // A part this version cannot read is left as it is, as `messages` skips it.
        let Ok(mut part) = serde_json::from_str::<Part>(row.get(2)) else { continue };
        if crate::history::finalize_orphan(&mut part) {
            let message = MessageId::from_string(row.get::<_, String>(0));
            let index = u32::try_from(row.get::<_, i32>(1)).unwrap_or(0);
            put_parts(client, &Prepared::default(), session, &message, &[(index, &part)], at).await?;
            finished.push(part);
        }
    }
    Ok(finished)
}

/// Hides `from` and every later message of the session.
pub async fn hide_from(client: &impl GenericClient, session: &SessionId, from: &MessageId, at: i64) -> Result<()> {
    client
        .execute(
            "WITH touched AS (UPDATE sessions SET updated_at = $3 WHERE id = $1)
             UPDATE messages SET hidden_at = $3 WHERE session_id = $1 AND id >= $2 AND hidden_at IS NULL",
            &[&session.as_str(), &from.as_str(), &at],
        )
        .await?;
    Ok(())
}

/// Deletes a session with the sub-agents it started (and theirs); forks stay. With
/// `only_unprompted`, only a session that holds no message at all; answers the sessions it
/// deleted.
pub async fn delete_session(
    client: &impl GenericClient,
    id: &SessionId,
    only_unprompted: bool,
) -> Result<Vec<SessionId>> {
    if only_unprompted {
        let prompted: bool = client
            .query_one(
                "SELECT NOT EXISTS (SELECT 1 FROM sessions WHERE id = $1) OR EXISTS (SELECT 1 FROM messages WHERE session_id = $1)",
                &[&id.as_str()],
            )
            .await?
            .get(0);
        if prompted {
            return Ok(Vec::new());
        }
    }
    let deleted = client
        .query(
            "WITH RECURSIVE down(id) AS (
               SELECT $1::text UNION SELECT s.id FROM sessions s JOIN down ON s.parent_id = down.id WHERE s.subagent IS NOT NULL
             ),
             gone AS (DELETE FROM session_leases WHERE session_id IN (SELECT id FROM down))
             DELETE FROM sessions WHERE id IN (SELECT id FROM down) RETURNING id",
            &[&id.as_str()],
        )
        .await?;
    Ok(deleted.iter().map(|row| SessionId::from_string(row.get::<_, String>(0))).collect())
}

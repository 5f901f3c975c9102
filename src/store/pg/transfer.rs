//! Sessions out of and into PostgreSQL whole, as `sqlite::transfer` does: a session's messages
//! as stored (`cairn sessions export`), a session written with all its messages, checkpoints and
//! contents (`cairn sessions import`), and a fork: a new session holding a copy of its parent's
//! visible messages under new ids. Many messages and parts go in with one statement each
//! (`insert_messages`), never one per row; the writer's savepoint makes each all or nothing.

use tokio_postgres::GenericClient;
use tokio_postgres::types::ToSql;

use super::checkpoints;
use super::rows;
use crate::history::Message;
use crate::ids::SessionId;
use crate::store::codec::{self, StoredMessage, raw, to_json, with_pieces};
use crate::store::{Carried, SessionRow};
use crate::tools::checkpoint::Blob;

type Result<T> = std::result::Result<T, tokio_postgres::Error>;

/// Every visible message of a session, oldest first, with its parts, as stored (a streaming
/// part's pieces joined onto its text).
pub async fn stored_messages(client: &impl GenericClient, id: &SessionId) -> Result<Vec<StoredMessage>> {
    let rows = client.query(rows::VISIBLE_MESSAGES, &[&id.as_str()]).await?;
    let mut messages: Vec<StoredMessage> = Vec::new();
    for row in &rows {
        let message_id: String = row.get(0);
        if messages.last().is_none_or(|last| last.id != message_id) {
            messages.push(StoredMessage { id: message_id, role: row.get(1), meta: raw(row.get(2)), parts: Vec::new() });
        }
        if let (Some(data), Some(message)) = (row.get::<_, Option<String>>(3), messages.last_mut()) {
            let data = match row.get::<_, Option<&str>>(4) {
                Some(pieces) => with_pieces(&data, pieces).unwrap_or(data),
                None => data,
            };
            message.parts.push(raw(data));
        }
    }
    Ok(messages)
}

/// Inserts messages with their parts into `session`: one statement for the messages, one for
/// all their parts.
pub async fn insert_messages(
    client: &impl GenericClient,
    session: &SessionId,
    messages: &[Message],
    at: i64,
) -> Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = messages.iter().map(|message| message.id.as_str()).collect();
    let roles: Vec<&str> = messages.iter().map(|message| message.role.as_str()).collect();
    let metas: Vec<String> = messages.iter().map(|message| to_json(&message.meta)).collect();
    client
        .execute(
            "INSERT INTO messages (id, session_id, role, metadata_json, created_at, updated_at)
             SELECT m.id, $1, m.role, m.meta, $5, $5 FROM unnest($2::text[], $3::text[], $4::text[]) AS m(id, role, meta)",
            &[&session.as_str(), &ids, &roles, &metas, &at],
        )
        .await?;
    let (mut owners, mut indexes, mut kinds, mut data, mut calls, mut states) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for message in messages {
        for (index, part) in message.parts.iter().enumerate() {
            let (call, state) = codec::tool_columns(part);
            owners.push(message.id.as_str());
            indexes.push(i32::try_from(index).unwrap_or(i32::MAX));
            kinds.push(part.kind());
            data.push(to_json(part));
            calls.push(call);
            states.push(state);
        }
    }
    if owners.is_empty() {
        return Ok(());
    }
    let params: [&(dyn ToSql + Sync); 8] = [&session.as_str(), &owners, &indexes, &kinds, &data, &calls, &states, &at];
    client
        .execute(
            "INSERT INTO parts (session_id, message_id, idx, type, data_json, tool_call_id, tool_state, created_at, updated_at)
             SELECT $1, p.message_id, p.idx, p.type, p.data, p.call, p.state, $8, $8
               FROM unnest($2::text[], $3::int4[], $4::text[], $5::text[], $6::text[], $7::text[])
                 AS p(message_id, idx, type, data, call, state)",
            &params,
        )
        .await?;
    Ok(())
}

/// Sets a session's token and cost totals from its visible messages.
pub async fn recompute_rollups(client: &impl GenericClient, id: &SessionId) -> Result<()> {
    client
        .execute(
            "UPDATE sessions SET
               prompt_tokens = t.input, completion_tokens = t.output, reasoning_tokens = t.reasoning,
               cache_read = t.cache_read, cache_write = t.cache_write, cost_usd = t.cost
             FROM (SELECT
                     coalesce(sum((m.meta #>> '{usage,input}')::bigint), 0)::bigint AS input,
                     coalesce(sum((m.meta #>> '{usage,output}')::bigint), 0)::bigint AS output,
                     coalesce(sum((m.meta #>> '{usage,reasoning}')::bigint), 0)::bigint AS reasoning,
                     coalesce(sum((m.meta #>> '{usage,cache_read}')::bigint), 0)::bigint AS cache_read,
                     coalesce(sum((m.meta #>> '{usage,cache_write}')::bigint), 0)::bigint AS cache_write,
                     coalesce(sum((m.meta ->> 'cost')::float8), 0) AS cost
                   FROM (SELECT metadata_json::jsonb AS meta FROM messages
                         WHERE session_id = $1 AND hidden_at IS NULL) AS m) AS t
             WHERE sessions.id = $1",
            &[&id.as_str()],
        )
        .await?;
    Ok(())
}

/// Creates `row` with `messages` (ids and parts as given), its rollups computed from them (its
/// cost the row's when that is more) and its times kept, then its checkpoints and the contents
/// they name (none pending).
pub async fn import_session(
    client: &impl GenericClient,
    row: &SessionRow,
    messages: &[Message],
    carried: &[Carried],
    blobs: &[Blob],
) -> Result<()> {
    rows::insert_session(client, row).await?;
    insert_messages(client, &row.id, messages, row.updated_at).await?;
    recompute_rollups(client, &row.id).await?;
    // What it cost, when the row says more than its messages (a copied session whose rewound
    // ones stayed behind).
    client
        .execute(
            "UPDATE sessions SET cost_usd = GREATEST(cost_usd, $2) WHERE id = $1",
            &[&row.id.as_str(), &row.cost_usd],
        )
        .await?;
    checkpoints::put_blobs(client, blobs).await?;
    checkpoints::put_captures(client, &row.id, &checkpoints::of_import(carried)).await
}

/// See `Write::ForkSession`: `row` made a copy of `parent`'s visible messages under new ids,
/// with the parent, the fork point, its metadata and (when `row` has none) its owner.
pub async fn fork_session(client: &impl GenericClient, row: &SessionRow, parent: &SessionId, at: i64) -> Result<()> {
    let copied = rows::messages(client, parent).await?;
    rows::insert_session(client, row).await?;
    let point = copied.last().map(|message| message.id.as_str().to_owned());
    client
        .execute(
            "UPDATE sessions SET parent_id = $2, parent_message_id = $3,
               metadata = coalesce((SELECT metadata FROM sessions WHERE id = $2), metadata),
               owner = coalesce(owner, (SELECT owner FROM sessions WHERE id = $2)),
               updated_at = CASE WHEN $3::text IS NULL THEN updated_at ELSE $4 END
             WHERE id = $1",
            &[&row.id.as_str(), &parent.as_str(), &point, &at],
        )
        .await?;
    let renamed = crate::history::with_new_ids(copied);
    insert_messages(client, &row.id, &renamed, at).await?;
    recompute_rollups(client, &row.id).await
}

-- cairn schema v1: sessions hold messages, messages hold parts.
-- Timestamps are Unix milliseconds. Ids sort by creation time (see src/ids.rs).
-- Only picker, filter and rollup fields are columns; the rest is JSON kept verbatim.

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY NOT NULL,
    cwd               TEXT NOT NULL,
    title             TEXT,
    model             TEXT NOT NULL,
    mode              TEXT,
    parent_id         TEXT,
    parent_message_id TEXT,
    permissions_json  TEXT NOT NULL DEFAULT '[]',
    metadata_json     TEXT NOT NULL DEFAULT '{}',
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_read        INTEGER NOT NULL DEFAULT 0,
    cache_write       INTEGER NOT NULL DEFAULT 0,
    total_tokens      INTEGER NOT NULL DEFAULT 0,
    cost_usd          REAL NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    archived_at       INTEGER
);
CREATE INDEX sessions_by_updated ON sessions (updated_at, id);
CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at, id);
CREATE INDEX sessions_by_parent ON sessions (parent_id);

CREATE TABLE messages (
    id            TEXT PRIMARY KEY NOT NULL,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role          TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    metadata_json TEXT NOT NULL DEFAULT '{}',
    hidden_at     INTEGER,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, id);

CREATE TABLE parts (
    id           TEXT PRIMARY KEY NOT NULL,
    message_id   TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    session_id   TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    type         TEXT NOT NULL,
    data_json    TEXT NOT NULL,
    tool_call_id TEXT,
    tool_state   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (message_id, idx)
);
CREATE INDEX parts_by_session ON parts (session_id);
CREATE INDEX parts_by_tool_call ON parts (tool_call_id) WHERE tool_call_id IS NOT NULL;

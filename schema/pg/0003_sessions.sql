-- Sessions hold messages, messages hold parts: the same rows as the SQLite store keeps, so the
-- same values read back from either. Timestamps are Unix milliseconds, written by the replica
-- (the lease alone runs on the database's clock). Only picker, filter and rollup fields are
-- columns; the rest is JSON kept verbatim as text.
CREATE TABLE sessions (
    id                text PRIMARY KEY,
    cwd               text NOT NULL,
    title             text,
    model             text NOT NULL,
    mode              text,
    parent_id         text,
    parent_message_id text,
    subagent          text,
    owner             text,
    permissions_json  text NOT NULL DEFAULT '[]',
    metadata          jsonb NOT NULL DEFAULT '{}',
    prompt_tokens     bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    reasoning_tokens  bigint NOT NULL DEFAULT 0,
    cache_read        bigint NOT NULL DEFAULT 0,
    cache_write       bigint NOT NULL DEFAULT 0,
    cost_usd          double precision NOT NULL DEFAULT 0,
    created_at        bigint NOT NULL,
    updated_at        bigint NOT NULL,
    archived_at       bigint
);
CREATE INDEX sessions_by_updated ON sessions (updated_at, id);
CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at, id);
CREATE INDEX sessions_by_parent ON sessions (parent_id);

CREATE TABLE messages (
    id            text PRIMARY KEY,
    session_id    text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role          text NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    metadata_json text NOT NULL DEFAULT '{}',
    hidden_at     bigint,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL
);
CREATE INDEX messages_by_session ON messages (session_id, id);

CREATE TABLE parts (
    message_id   text NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    idx          integer NOT NULL,
    session_id   text NOT NULL,
    type         text NOT NULL,
    data_json    text NOT NULL,
    tool_call_id text,
    tool_state   text,
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL,
    PRIMARY KEY (message_id, idx)
);
CREATE INDEX parts_by_session ON parts (session_id);

-- A streaming part's text beyond its row's, one piece per writer batch that added to it, in
-- `id` order. Writing the whole part again removes its pieces.
CREATE TABLE part_pieces (
    id         bigserial PRIMARY KEY,
    message_id text NOT NULL,
    idx        integer NOT NULL,
    session_id text NOT NULL,
    text       text NOT NULL,
    FOREIGN KEY (message_id, idx) REFERENCES parts (message_id, idx) ON DELETE CASCADE
);
CREATE INDEX part_pieces_by_part ON part_pieces (message_id, idx, id);

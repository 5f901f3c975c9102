-- The rest of what the SQLite store keeps, with the same columns and meanings: project rules,
-- `cairn serve --auth`'s bearer tokens, and file checkpoints.

-- Rules remembered for every session in a project (a working directory).
CREATE TABLE permission_rules (
    id         bigserial PRIMARY KEY,
    project    text NOT NULL,
    permission text NOT NULL CHECK (permission IN ('read', 'edit', 'bash', 'tool', 'fetch')),
    pattern    text NOT NULL,
    action     text NOT NULL CHECK (action IN ('allow', 'deny')),
    created_at bigint NOT NULL,
    UNIQUE (project, permission, pattern, action)
);

-- One row per bearer token: only the SHA-256 of its secret. A revoked token keeps its row.
CREATE TABLE serve_tokens (
    id         text PRIMARY KEY,
    principal  text NOT NULL,
    hash       bytea NOT NULL UNIQUE,
    created_at bigint NOT NULL,
    revoked_at bigint
);
CREATE INDEX sessions_by_owner ON sessions (owner, updated_at) WHERE owner IS NOT NULL;

-- File checkpoints: contents once by SHA-256; a session's captures, in `id` order across all
-- sessions (the oldest are dropped first); the files each lists. A file row names stored
-- content (the foreign key), so a replica dropping contents nobody names cannot remove one
-- another replica's capture is being written with.
CREATE TABLE file_blobs (
    hash bytea PRIMARY KEY,
    size bigint NOT NULL,
    data bytea NOT NULL
);

CREATE TABLE checkpoints (
    id         bigserial PRIMARY KEY,
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    prompt_id  text,
    call_id    text,
    kind       text NOT NULL CHECK (kind IN ('seen', 'made')),
    restore    text,
    pending    boolean NOT NULL DEFAULT false,
    bytes      bigint NOT NULL DEFAULT 0,
    created_at bigint NOT NULL
);
CREATE INDEX checkpoints_by_session ON checkpoints (session_id, id);

CREATE TABLE checkpoint_files (
    checkpoint_id bigint NOT NULL REFERENCES checkpoints (id) ON DELETE CASCADE,
    path          bytea NOT NULL,
    state         text NOT NULL CHECK (state IN ('file', 'link', 'missing', 'uncovered')),
    hash          bytea REFERENCES file_blobs (hash),
    size          bigint NOT NULL DEFAULT 0,
    executable    boolean NOT NULL DEFAULT false,
    stamp         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (checkpoint_id, path)
);
CREATE INDEX checkpoint_files_by_hash ON checkpoint_files (hash) WHERE hash IS NOT NULL;

-- `cairn serve --auth`: who may connect, and whose each session is.
--
-- serve_tokens: one row per bearer token `cairn serve token create` made. Only the SHA-256 of
-- the secret is kept (the secret is printed once and never stored); `id` is the short public
-- name `list` shows and `revoke` takes. A revoked token keeps its row, with the time it was
-- revoked, and is refused from the next request on.
-- sessions.owner: the principal of the token whose connection created the session (a fork or a
-- sub-agent's session takes its parent's); NULL for sessions made on stdio, by `exec`, or by a
-- server without --auth. A principal sees only the sessions it owns.

CREATE TABLE serve_tokens (
    id         TEXT PRIMARY KEY NOT NULL,
    principal  TEXT NOT NULL,
    hash       BLOB NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE INDEX sessions_by_owner ON sessions (owner, updated_at) WHERE owner IS NOT NULL;

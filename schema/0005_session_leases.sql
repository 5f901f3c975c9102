-- Session leases: which cairn process may write a session's history right now. A process takes
-- the lease in the same transaction as its turn's first write (the prompt), refreshes
-- heartbeat_at while the turn runs and sets released_at when it ends. The row stays after the
-- release: its token says whose turn came last, so a process whose copy of the history is older
-- reads it again. A lease whose process died lapses (see src/store/lease.rs). Rows go with
-- their session.

CREATE TABLE session_leases (
    session_id   TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    token        TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    host         TEXT NOT NULL,
    started      TEXT,
    taken_at     INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    released_at  INTEGER
);
CREATE INDEX session_leases_by_token ON session_leases (token) WHERE released_at IS NULL;

-- cairn schema v11: file checkpoints, kept with the sessions that made them.
--
-- A checkpoint is one capture of some of a session's workspace files, as paths relative to the
-- session's directory: `seen` (their state before a tool call changed them, or as a restore found
-- them) or `made` (their state after a tool call, or what a restore puts back). Only files whose
-- state differs from the session's previous capture are listed, so a session's captures folded in
-- order give every file's state at any checkpoint. Contents live once in `file_blobs`, by SHA-256.

CREATE TABLE file_blobs (
    hash BLOB PRIMARY KEY NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL
);

CREATE TABLE checkpoints (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- The prompt (user message) whose turn took it; NULL for a restore.
    prompt_id  TEXT,
    call_id    TEXT,
    kind       TEXT NOT NULL CHECK (kind IN ('seen', 'made')),
    -- For a restore: what it went back to, shown by /checkpoints.
    restore    TEXT,
    -- A restore recorded and not yet applied to the end (a crash came between).
    pending    INTEGER NOT NULL DEFAULT 0,
    -- Bytes of contents this checkpoint stored first.
    bytes      INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);
CREATE INDEX checkpoints_by_session ON checkpoints (session_id, id);

CREATE TABLE checkpoint_files (
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints (id) ON DELETE CASCADE,
    path          BLOB NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('file', 'link', 'missing', 'uncovered')),
    hash          BLOB,
    size          INTEGER NOT NULL DEFAULT 0,
    executable    INTEGER NOT NULL DEFAULT 0,
    -- What the file's metadata said when it was read (0: read it again next time).
    stamp         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (checkpoint_id, path)
) WITHOUT ROWID;
CREATE INDEX checkpoint_files_by_hash ON checkpoint_files (hash) WHERE hash IS NOT NULL;

-- Remembered permission answers for a whole project (every session whose cwd is `project`).
-- Session-scope rules live in sessions.permissions_json; the session's mode in sessions.mode.

CREATE TABLE permission_rules (
    id         INTEGER PRIMARY KEY,
    project    TEXT NOT NULL,
    permission TEXT NOT NULL CHECK (permission IN ('read', 'edit', 'bash')),
    pattern    TEXT NOT NULL,
    action     TEXT NOT NULL CHECK (action IN ('allow', 'deny')),
    created_at INTEGER NOT NULL,
    UNIQUE (project, permission, pattern, action)
);

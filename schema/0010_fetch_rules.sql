-- Rules may be about the hosts the `fetch` tool reads web pages from: permission 'fetch'.
-- SQLite cannot change a CHECK in place, so the table is rebuilt with its rows.

CREATE TABLE permission_rules_new (
    id         INTEGER PRIMARY KEY,
    project    TEXT NOT NULL,
    permission TEXT NOT NULL CHECK (permission IN ('read', 'edit', 'bash', 'tool', 'fetch')),
    pattern    TEXT NOT NULL,
    action     TEXT NOT NULL CHECK (action IN ('allow', 'deny')),
    created_at INTEGER NOT NULL,
    UNIQUE (project, permission, pattern, action)
);
INSERT INTO permission_rules_new (id, project, permission, pattern, action, created_at)
    SELECT id, project, permission, pattern, action, created_at FROM permission_rules;
DROP TABLE permission_rules;
ALTER TABLE permission_rules_new RENAME TO permission_rules;

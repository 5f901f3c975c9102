-- Who runs each session's turn, across replicas. `epoch` grows by one at every take: it is the
-- fencing token every write of the session checks. Times are the database's clock, so the
-- replicas' clocks never matter. `released_at` is set when the holder let it go at its turn's
-- end: a lease past `expires_at` without it was held by a replica that died or stalled, and its
-- turn is left open for a sweeper to close.
CREATE TABLE session_leases (
    session_id text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    taken_at timestamptz NOT NULL,
    released_at timestamptz
);

-- For the sweeper of lapsed leases.
CREATE INDEX session_leases_expiry ON session_leases (expires_at);

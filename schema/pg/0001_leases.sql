-- Who runs each session's turn, across replicas. `epoch` grows by one at every take: it is the
-- fencing token every write of the session checks. Times are the database's clock, so the
-- replicas' clocks never matter.
CREATE TABLE session_leases (
    session_id text PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    taken_at timestamptz NOT NULL
);

-- For the sweeper of lapsed leases.
CREATE INDEX session_leases_expiry ON session_leases (expires_at);

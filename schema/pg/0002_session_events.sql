-- Each session's updates as they were shown, in order: `seq` counts from 1 per session and is
-- given by the lease holder, the session's only writer, so it is also commit order. `epoch` is
-- the lease's fencing token the row was written under. Another replica follows a live turn by
-- reading the rows after the last `seq` it forwarded.
CREATE TABLE session_events (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    epoch bigint NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);

-- Each running replica's heartbeat: its sweeper sets `expires_at` (the database's clock) a
-- lease's time to live ahead at every sweep, from the replica's start. A replica past it has
-- died, or lost the database: the commands it took and never answered are answered for it (it
-- may hold no lease, between turns, so no lease sweep would), and once it has been gone as
-- long as the event log is kept, what it sent and nobody will read goes.
CREATE TABLE cairn_replicas (
    replica text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
-- For the sweep of commands taken by replicas that died.
CREATE INDEX session_commands_taken_unanswered ON session_commands (taken_by)
    WHERE answered_at IS NULL AND taken_by IS NOT NULL;

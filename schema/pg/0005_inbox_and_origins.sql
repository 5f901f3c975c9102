-- Which replica showed an event to its own clients as it committed (the lease holder's
-- recorder does): that replica's followers skip it, every other replica forwards it. Empty for
-- rows no replica showed as they were written (a dead replica's turn closed by the sweeper).
ALTER TABLE session_events ADD COLUMN origin text NOT NULL DEFAULT '';
-- For pruning the log by age.
CREATE INDEX session_events_created ON session_events (created_at);
-- Commands a client sent to a replica that does not hold the session's lease (a prompt, a
-- cancel, a steer, a setting, a permission answer), for the holder to carry out. `body` is the
-- command as JSON; the holder marks it taken, and what came of it appears in the session's event
-- log, where the sending replica reads it back to answer its client.
CREATE TABLE session_commands (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    sender text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    taken_by text,
    taken_at timestamptz
);
CREATE INDEX session_commands_open ON session_commands (session_id, id) WHERE taken_at IS NULL;

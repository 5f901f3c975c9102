-- Which replica showed an event to its own clients as it committed (the lease holder's
-- recorder does): that replica's followers skip it, every other replica forwards it. Empty for
-- rows no replica showed as they were written (a dead replica's turn closed by the sweeper).
ALTER TABLE session_events ADD COLUMN origin text NOT NULL DEFAULT '';
-- For pruning the log by age.
CREATE INDEX session_events_created ON session_events (created_at);
-- Commands a client sent to a replica that does not hold the session's lease (a prompt, a
-- cancel, a steer), for the holder to carry out. `body` is the command as JSON; the holder marks
-- it taken, and writes what came of it in `answer`, with the session's last event `seq` then
-- (`answered_seq`): the sending replica answers its client once it has forwarded the events up
-- to there, so the answer comes after everything the command caused.
CREATE TABLE session_commands (
    id bigserial PRIMARY KEY,
    session_id text NOT NULL,
    sender text NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    taken_by text,
    taken_at timestamptz,
    answer text,
    answered_seq bigint,
    answered_at timestamptz,
    -- The sender read the answer.
    delivered_at timestamptz
);
CREATE INDEX session_commands_untaken ON session_commands (session_id, id) WHERE taken_at IS NULL;
CREATE INDEX session_commands_unanswered ON session_commands (session_id, id) WHERE answered_at IS NULL;
CREATE INDEX session_commands_undelivered ON session_commands (sender, id)
    WHERE answered_at IS NOT NULL AND delivered_at IS NULL;

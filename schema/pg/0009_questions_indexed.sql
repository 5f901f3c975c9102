-- The questions a turn asks and their closes are a few rows among a session's thousands of
-- streamed chunks. A replica that starts following a session reads the open ones
-- (`late::open_questions`): through these indexes it reads those few rows, not every row the
-- session's log holds. The patterns must stay the ones that query names (`late::ASKED`,
-- `late::CLOSED`), or the planner cannot use the indexes.
CREATE INDEX session_events_asked ON session_events (session_id, seq) WHERE body LIKE '{"asked":%';
CREATE INDEX session_events_closed ON session_events (session_id, seq) WHERE body LIKE '{"closed":%';

-- Sub-agent sessions: the child turns a `task` call runs are sessions whose parent_id is the
-- caller and whose `subagent` names the agent (the named agent, or 'task' for a plain one).
-- Sessions a user opened (forks included) have NULL here and are the ones session/list shows
-- by default. A sub-agent's usage and cost also count toward each ancestor's totals.

ALTER TABLE sessions ADD COLUMN subagent TEXT;
CREATE INDEX sessions_by_subagent ON sessions (subagent) WHERE subagent IS NOT NULL;

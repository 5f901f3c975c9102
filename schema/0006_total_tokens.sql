-- A session's total tokens are the sum of its token columns, computed by SQLite instead of
-- being added up beside them: the sum has one definition, and no write can make it disagree.
-- Every token a request sent (new input, cache reads and writes) and every token it wrote.

ALTER TABLE sessions DROP COLUMN total_tokens;
ALTER TABLE sessions ADD COLUMN total_tokens INTEGER NOT NULL
    GENERATED ALWAYS AS (prompt_tokens + completion_tokens + cache_read + cache_write) VIRTUAL;

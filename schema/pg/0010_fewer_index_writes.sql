-- Every streamed chunk is a row of `part_pieces` and a row of `session_events`, so each index on
-- them is a btree insert and a WAL record per chunk. Two go:
--
-- A piece is only ever found by its part, in order (`message_id, idx, id`); its own key on `id`
-- alone was a second index nobody reads. The part's index becomes the primary key.
--
-- The event log is pruned by age about once a minute, and rows arrive in time order: a BRIN
-- index (a few pages, a summary per range of heap pages, nothing written while a range fills)
-- finds the old ranges as well as the btree did, which was written for every row.
ALTER TABLE part_pieces DROP CONSTRAINT part_pieces_pkey;
DROP INDEX part_pieces_by_part;
ALTER TABLE part_pieces ADD CONSTRAINT part_pieces_pkey PRIMARY KEY (message_id, idx, id);

DROP INDEX session_events_created;
CREATE INDEX session_events_created ON session_events USING brin (created_at) WITH (autosummarize = on);

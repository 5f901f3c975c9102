-- A streamed chunk was two rows: a piece of its part and a row of the session's event log, both
-- carrying its text. The log's row now carries the chunk's part and text too, and the writer
-- keeps a streaming part's text as pieces only about once a second (and when the part ends):
-- what its pieces lack is read from the log's rows after them, so any replica reads the whole
-- text that was shown.
--
-- `part_chunk` numbers a part's chunks from 1 as its writer streamed them; a piece says the last
-- chunk it holds (`upto`), so the log's rows of the part past the highest `upto` are the text
-- still to add. `streaming_from` is set while a part streams: the log's last `seq` when it was
-- opened, so only the rows after it are looked at, and a part whose pieces are whole is not
-- looked up in the log at all. Rows written before this version have none of these columns set,
-- and their pieces hold all their text, as before.
ALTER TABLE session_events
    ADD COLUMN part_message text,
    ADD COLUMN part_idx integer,
    ADD COLUMN part_chunk integer,
    ADD COLUMN piece text;
ALTER TABLE part_pieces ADD COLUMN upto integer;
ALTER TABLE parts ADD COLUMN streaming_from bigint;
-- The prune asks of every old chunk row whether its part still streams: a few parts do at a
-- time, so an index of those alone answers from a few pages.
CREATE INDEX parts_streaming ON parts (message_id, idx) WHERE streaming_from IS NOT NULL;

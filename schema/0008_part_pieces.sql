-- A streaming text or reasoning part's text, appended as it arrives instead of rewriting the
-- part: each batch of chunks adds to the part's last piece while that is small, or starts a new
-- one. The part's text is its row's `data_json` text followed by its pieces in `id` order. A
-- part that ends small is folded back into its row; a long one (or one a crash cut off) keeps
-- its pieces. Writing the whole part again (an upsert) deletes them.

CREATE TABLE part_pieces (
    id         INTEGER PRIMARY KEY,
    message_id TEXT NOT NULL,
    idx        INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    text       TEXT NOT NULL,
    FOREIGN KEY (message_id, idx) REFERENCES parts (message_id, idx) ON DELETE CASCADE
);
CREATE INDEX part_pieces_by_part ON part_pieces (message_id, idx, id);
CREATE INDEX part_pieces_by_session ON part_pieces (session_id);

-- A streamed piece's part is no longer checked by a foreign key: every piece is inserted by one
-- statement that joins its part and locks it (`FOR KEY SHARE`), so a piece never outlives its
-- part's insert, and the key's check, a trigger run for every row, was a third of the cost of the
-- busiest statement the replicas send. What the key's `ON DELETE CASCADE` did is done once per
-- statement deleting parts instead: their pieces go with them, in the same transaction.
ALTER TABLE part_pieces DROP CONSTRAINT part_pieces_message_id_idx_fkey;

CREATE FUNCTION cairn_parts_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM part_pieces AS piece USING gone
     WHERE piece.message_id = gone.message_id AND piece.idx = gone.idx;
    RETURN NULL;
END
$$;

CREATE TRIGGER parts_take_their_pieces AFTER DELETE ON parts
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION cairn_parts_gone();

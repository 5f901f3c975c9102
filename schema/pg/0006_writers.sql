-- Each replica's writer: the number of the last batch it committed. A batch sets it in its own
-- transaction, so after a connection lost while a COMMIT was on its way, the writer reads it
-- on a new connection to learn whether that batch went in (then it is not run again: streamed
-- text would be appended twice) or not (then it is). A replica is `host:pid:random`, new at
-- every start; a dead replica's row is a few bytes and harmless.
CREATE TABLE cairn_writers (
    replica text PRIMARY KEY,
    batch bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now()
);

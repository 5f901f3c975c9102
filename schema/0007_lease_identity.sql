-- What a lease's holder needs to be judged by, and an id per take.
--
-- boot and pid_ns: the holder's boot id and pid namespace (`readlink /proc/self/ns/pid`). Its
-- pid means a process here only when its host, boot and pid namespace are ours; otherwise
-- (a container, `unshare --pid`, a flatpak) it is judged by its heartbeat alone.
-- take_id: fresh for every take, so a process that read the history after one turn tells it
-- from a later turn by the same holder.
-- take_token: the token of the holder that wrote the three columns above. An older cairn's take
-- leaves them as they were; a row whose token differs from its take_token is judged as if they
-- were missing.

ALTER TABLE session_leases ADD COLUMN boot TEXT;
ALTER TABLE session_leases ADD COLUMN pid_ns TEXT;
ALTER TABLE session_leases ADD COLUMN take_id TEXT;
ALTER TABLE session_leases ADD COLUMN take_token TEXT;

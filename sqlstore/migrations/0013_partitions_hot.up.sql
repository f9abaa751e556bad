-- Regina schema, version 13: partition row updates can be HOT.
--
-- Every push updates its partition row (next_offset, push_xid,
-- last_push_at). Migration 0007 indexed (queue_id, push_xid) for
-- pop_prepare's catch-up, so no such update was HOT: each push added an entry
-- to every index of partitions (4 btree inserts per push, measured with
-- pg_waldump) and left a dead version that every later lookup of the row
-- walks until a vacuum. An update is HOT when no indexed value changes, so
-- the index now holds a coarse stamp instead: push_epoch, push_xid shifted
-- right by 8 (256 transaction ids), a generated column that every writer of
-- push_xid keeps right without knowing it. A partition pushed often keeps
-- its push_epoch across most pushes (the update is then HOT); a partition
-- pushed rarely moves its entry, as before.
--
-- pop_prepare's catch-up asks for push_xid >= horizon. Since the shift is
-- monotonic, push_xid >= h implies push_epoch >= h >> 8, so it asks the
-- index for push_epoch >= h >> 8 and keeps the rows with push_xid >= h: the
-- same rows as before, plus at most the partitions pushed by the < 256
-- transaction ids just below the horizon, read and filtered out.
ALTER TABLE queen.partitions
    ADD COLUMN push_epoch bigint GENERATED ALWAYS AS ((push_xid::text::bigint) >> 8) STORED;
CREATE INDEX partitions_push_epoch ON queen.partitions (queue_id, push_epoch);
DROP INDEX queen.partitions_push_xid;

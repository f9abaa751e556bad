-- Regina schema, version 17: a catch-up horizon that no foreign transaction
-- holds back.
--
-- Until now a group's horizon was the oldest transaction running anywhere in
-- the cluster when it last caught up (pg_snapshot_xmin): one session idle in
-- transaction, in any database, kept it where it was, and every catch-up
-- after that reread every partition pushed since (7 msgs/s instead of ~720
-- in a 5,000-partition drain beside a 9-minute-old transaction). Now the
-- horizon is the catch-up's snapshot: horizon is its xmax, running the ids it
-- saw running (pg_snapshot_xip). A partition needs a look when its push_xid
-- is at or above horizon or one of running; a stranger's transaction costs
-- one index probe of its id per catch-up, not a reread. Rows written before
-- keep their meaning: horizon was an xmin, below which nothing ran, so an
-- empty running list is exact for them. See sqlstore/functions/pop_prepare.sql.
ALTER TABLE queen.group_scan ADD COLUMN running xid8[] NOT NULL DEFAULT '{}';

-- pop_prepare gains an OUT column (scanned: partitions the catch-up looked
-- at), which CREATE OR REPLACE cannot add.
DROP FUNCTION IF EXISTS queen.pop_prepare(text, text, boolean, timestamptz, boolean);

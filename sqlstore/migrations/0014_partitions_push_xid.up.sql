-- Regina schema, version 14: back to the (queue_id, push_xid) index.
--
-- Migration 0013 indexed a coarse stamp (push_epoch = push_xid >> 8) so that
-- partition row updates could be HOT. pop_prepare then read every partition
-- stamped in the horizon's epoch and filtered out those below the horizon:
-- after a burst of pushes to many partitions, every catch-up re-read all of
-- them until 256 more transaction ids had passed (10,000 partitions pushed
-- in one transaction: 469 buffers per catch-up instead of a handful,
-- TestPopCatchUpCostIsFlat). A catch-up must cost what was pushed since the
-- horizon, so the exact index comes back and push_epoch goes.
CREATE INDEX partitions_push_xid ON queen.partitions (queue_id, push_xid);
DROP INDEX queen.partitions_push_epoch;
ALTER TABLE queen.partitions DROP COLUMN push_epoch;

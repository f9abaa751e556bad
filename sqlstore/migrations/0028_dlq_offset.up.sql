-- Regina schema, version 28: dead letters by (partition, offset).
--
-- The messages list (GET /api/v1/messages) reports a message some group
-- dead-lettered as dead_letter and filters on it: it looks up the dead
-- letters of each listed segment's offset range, whatever the group, and
-- the message detail looks up one offset's. The primary key puts the group
-- between the two.
CREATE INDEX dlq_partition_offset ON queen.dlq (partition_id, msg_offset);

-- Regina schema, version 23: partition ids derived from (queue, name).
--
-- The distribution rule (sqlstore/citus.go, TestDistributionRule): every
-- primary key and unique index of a table distributed on Citus includes its
-- distribution column, because Citus can enforce uniqueness only inside a
-- shard. queen.partitions is distributed by id, and its UNIQUE (queue_id,
-- name) broke the rule. A new partition's id is now
-- queen.partition_id_of(queue_id, name) (md5 of the two, as a uuid), so two
-- brokers creating the same partition at once insert the same id and the
-- primary key keeps (queue_id, name) unique; the lookup by name keeps a plain
-- index. Partitions created before keep their random ids (queen.ensure_partition
-- finds them by name first, so no second row is ever made for them).
ALTER TABLE queen.partitions DROP CONSTRAINT partitions_queue_id_name_key;
CREATE INDEX partitions_queue_name ON queen.partitions (queue_id, name);

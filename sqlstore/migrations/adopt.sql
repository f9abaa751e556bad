-- Adoption of a schema migrated before checksums were recorded: versions 1
-- and 2 in schema_migrations without a checksum. Run once, in the migration
-- transaction, before their checksums are recorded; afterwards the schema is
-- exactly what the current 0001 and 0002 (and sqlstore/functions/) create.
-- "queen." is replaced by the configured schema.
--
-- Such a schema differs from a new one in three ways, depending on the
-- version of 0001 that created it:
--   * 0001 created the SQL functions, some with other arguments or OUT
--     columns than today's (CREATE OR REPLACE cannot change those): they are
--     dropped here and created again from sqlstore/functions/ right after;
--   * early versions of 0001 created (partition_id, created_at) indexes, which
--     a generic plan of the probe would pick to scan a partition's whole
--     window: dropped;
--   * the queue options had SQL DEFAULTs; partition.DefaultQueueOptions is now
--     the only place they are written down: dropped.

DROP FUNCTION IF EXISTS queen.push_segment;
DROP FUNCTION IF EXISTS queen.ensure_partition;

DROP INDEX IF EXISTS queen.segments_created_at;
DROP INDEX IF EXISTS queen.log_txns_created_at;

ALTER TABLE queen.queues
    ALTER COLUMN lease_time DROP DEFAULT,
    ALTER COLUMN retry_limit DROP DEFAULT,
    ALTER COLUMN retry_delay DROP DEFAULT,
    ALTER COLUMN max_size DROP DEFAULT,
    ALTER COLUMN ttl DROP DEFAULT,
    ALTER COLUMN priority DROP DEFAULT,
    ALTER COLUMN delayed_processing DROP DEFAULT,
    ALTER COLUMN window_buffer DROP DEFAULT,
    ALTER COLUMN dead_letter_queue DROP DEFAULT,
    ALTER COLUMN dlq_after_max_retries DROP DEFAULT,
    ALTER COLUMN retention_enabled DROP DEFAULT,
    ALTER COLUMN retention_seconds DROP DEFAULT,
    ALTER COLUMN completed_retention_seconds DROP DEFAULT,
    ALTER COLUMN max_wait_time_seconds DROP DEFAULT,
    ALTER COLUMN encryption_enabled DROP DEFAULT,
    ALTER COLUMN dedup_window_seconds DROP DEFAULT;

-- Regina schema, version 11: the hash sidecar partitioned by time.
--
-- queen.log_txns becomes a table partitioned by RANGE (created_at), with the
-- same columns (INSERT ... SELECT generators keep working, as long as a child
-- covers the created_at they write: see queen.sidecar_ensure in
-- sqlstore/functions/sidecar.sql). Each child holds the segments pushed in
-- one time slice (an hour by default); the retention loop creates children
-- ahead of need and detaches and drops a child whole once every window it
-- could serve has passed, so retention is a constant-time DROP instead of
-- millions of DELETEs, the index being written stays small, and the
-- full-window probe reads only the children inside the window.
--
-- A partitioned table's unique keys must contain the partition key, and an
-- index containing created_at would be a candidate for the probes' time
-- bound (a whole-child scan the planner picks on a child without
-- statistics, as on the current one): the primary key becomes a plain index
-- on (partition_id, first_offset), which serves the watermark probe,
-- hydration and the checks in offset order. Offsets stay unique per
-- partition because only the allocator, under the partition row lock, hands
-- them out.
--
-- The existing table is kept, not copied: it becomes the child
-- log_txns_legacy for [MINVALUE, the next full hour after its newest row or
-- now), its GIN index is attached as that child's part of the partitioned
-- one (no rebuild), and retention drops it whole once its rows have left
-- every window. An empty one is dropped at once. The migration therefore
-- costs one btree build over the old table's rows (one row per segment) and
-- one scan of it (ATTACH checks the bound).
ALTER TABLE queen.log_txns RENAME TO log_txns_legacy;
ALTER INDEX queen.log_txns_hashes RENAME TO log_txns_legacy_hashes;
ALTER TABLE queen.log_txns_legacy RENAME CONSTRAINT log_txns_pkey TO log_txns_legacy_pkey;

CREATE TABLE queen.log_txns (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    hashes       bytea[]     NOT NULL,
    fingerprints bigint[]
) PARTITION BY RANGE (created_at);
CREATE INDEX log_txns_offsets ON queen.log_txns (partition_id, first_offset);
-- The full-window probe is driven by this index (one per child).
-- fastupdate = off matters: the default pending list makes every probe scan
-- it (9x slower, see PERF.md).
CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off);

DO $$
DECLARE
    v_max timestamptz;
    v_n   bigint;
BEGIN
    SELECT max(created_at), count(*) INTO v_max, v_n FROM queen.log_txns_legacy;
    IF v_n = 0 THEN
        DROP TABLE queen.log_txns_legacy;
        RETURN;
    END IF;
    -- The old primary key goes: the attached child gets the new index.
    ALTER TABLE queen.log_txns_legacy DROP CONSTRAINT log_txns_legacy_pkey;
    EXECUTE format('ALTER TABLE queen.log_txns ATTACH PARTITION queen.log_txns_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                   date_trunc('hour', greatest(v_max, now())) + interval '1 hour');
END $$;

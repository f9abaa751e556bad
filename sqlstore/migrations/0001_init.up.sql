-- Regina schema, version 1: queues, partitions, segments and the hash sidecar.
--
-- Every name written "queen." below is replaced by the configured schema
-- (QUEEN_SCHEMA, default queen) when the migration runs. An applied migration
-- never changes (the broker records its checksum and refuses to start on a
-- mismatch): a schema change is a new numbered file. The SQL functions live in
-- sqlstore/functions/ and are applied at every start.
--
-- The queue options have no DEFAULT: their defaults are
-- partition.DefaultQueueOptions, passed by the broker whenever it creates a
-- queue (configure or queen.ensure_partition).
--
-- Citus-ready rules: every table that grows carries partition_id as the first
-- column of its primary key, queues stays small, there are no foreign keys and
-- no statement joins two partitions' rows.

CREATE TABLE queen.queues (
    id                          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name                        text        NOT NULL UNIQUE,
    namespace                   text        NOT NULL DEFAULT '',
    task                        text        NOT NULL DEFAULT '',
    lease_time                  integer     NOT NULL,
    retry_limit                 integer     NOT NULL,
    retry_delay                 integer     NOT NULL,
    max_size                    integer     NOT NULL,
    ttl                         integer     NOT NULL,
    priority                    integer     NOT NULL,
    delayed_processing          integer     NOT NULL,
    window_buffer               integer     NOT NULL,
    dead_letter_queue           boolean     NOT NULL,
    dlq_after_max_retries       boolean     NOT NULL,
    retention_enabled           boolean     NOT NULL,
    retention_seconds           integer     NOT NULL,
    completed_retention_seconds integer     NOT NULL,
    max_wait_time_seconds       integer     NOT NULL,
    encryption_enabled          boolean     NOT NULL,
    dedup_window_seconds        integer     NOT NULL CHECK (dedup_window_seconds >= 0),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- One row per partition. next_offset is the offset allocator, and the row is
-- the per-partition write serializer: every push locks it.
CREATE TABLE queen.partitions (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id    uuid        NOT NULL,
    name        text        NOT NULL,
    next_offset bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);

-- One row per pushed batch of one partition. frames holds frame_count message
-- ids (16 bytes each) followed by the frame bodies (see partition.EncodeSegment).
CREATE TABLE queen.segments (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    frame_count  integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    frames       bytea       NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
-- Uncompressed out-of-line storage: substring() of the id block then reads one
-- TOAST chunk instead of decompressing the whole segment, and pglz does not
-- burn CPU on payloads that rarely compress.
ALTER TABLE queen.segments ALTER COLUMN frames SET STORAGE EXTERNAL;

-- The hash sidecar: one row per pushed segment, written on every push whether
-- deduplication is on or off. hashes[k] is the xxh3-128 of frame k's
-- transaction id.
CREATE TABLE queen.log_txns (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    hashes       bytea[]     NOT NULL,
    PRIMARY KEY (partition_id, first_offset)
);
-- The full-window probe is driven by this index. fastupdate = off matters: the
-- default pending list makes every probe scan it (9x slower, see PERF.md).
CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off);
-- Deliberately no (partition_id, created_at) index: under a generic plan the
-- planner would pick it for the probe's time bound and scan a partition's
-- whole window. Retention walks the primary key from the oldest offset
-- instead (created_at grows with the offset).

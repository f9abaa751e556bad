-- Regina schema, version 1.
--
-- Every name written "queen." below is replaced by the configured schema
-- (QUEEN_SCHEMA, default queen) when the migration runs.
--
-- Citus-ready rules: every table that grows carries partition_id as the first
-- column of its primary key, queues stays small, there are no foreign keys and
-- no statement joins two partitions' rows.

CREATE TABLE queen.queues (
    id                          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name                        text        NOT NULL UNIQUE,
    namespace                   text        NOT NULL DEFAULT '',
    task                        text        NOT NULL DEFAULT '',
    lease_time                  integer     NOT NULL DEFAULT 300,
    retry_limit                 integer     NOT NULL DEFAULT 3,
    retry_delay                 integer     NOT NULL DEFAULT 1000,
    max_size                    integer     NOT NULL DEFAULT 0,
    ttl                         integer     NOT NULL DEFAULT 3600,
    priority                    integer     NOT NULL DEFAULT 0,
    delayed_processing          integer     NOT NULL DEFAULT 0,
    window_buffer               integer     NOT NULL DEFAULT 0,
    dead_letter_queue           boolean     NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean     NOT NULL DEFAULT false,
    retention_enabled           boolean     NOT NULL DEFAULT false,
    retention_seconds           integer     NOT NULL DEFAULT 0,
    completed_retention_seconds integer     NOT NULL DEFAULT 0,
    max_wait_time_seconds       integer     NOT NULL DEFAULT 0,
    encryption_enabled          boolean     NOT NULL DEFAULT false,
    dedup_window_seconds        integer     NOT NULL DEFAULT 3600 CHECK (dedup_window_seconds >= 0),
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
CREATE INDEX segments_created_at ON queen.segments (partition_id, created_at);

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
CREATE INDEX log_txns_created_at ON queen.log_txns (partition_id, created_at);

-- ensure_partition returns the partition (creating the queue and the partition
-- when missing) and the queue's deduplication window.
CREATE FUNCTION queen.ensure_partition(p_queue text, p_partition text, p_namespace text, p_task text,
    OUT partition_id uuid, OUT queue_id uuid, OUT window_seconds integer)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT q.id, q.dedup_window_seconds INTO queue_id, window_seconds
      FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        INSERT INTO queen.queues (name, namespace, task) VALUES (p_queue, p_namespace, p_task)
            ON CONFLICT (name) DO NOTHING;
        SELECT q.id, q.dedup_window_seconds INTO queue_id, window_seconds
          FROM queen.queues q WHERE q.name = p_queue;
    END IF;
    SELECT p.id INTO partition_id FROM queen.partitions p
     WHERE p.queue_id = ensure_partition.queue_id AND p.name = p_partition;
    IF NOT FOUND THEN
        INSERT INTO queen.partitions (queue_id, name) VALUES (ensure_partition.queue_id, p_partition)
            ON CONFLICT ON CONSTRAINT partitions_queue_id_name_key DO NOTHING;
        SELECT p.id INTO partition_id FROM queen.partitions p
         WHERE p.queue_id = ensure_partition.queue_id AND p.name = p_partition;
    END IF;
END $$;

-- push_segment is the push transaction of one batch of one partition, in one
-- round trip. The caller runs it outside an explicit transaction, so the
-- statement is the transaction.
--
--   p_window_hint  the caller's belief about the queue's window, 0 or not. The
--                  batch was collapsed in-broker (distinct transaction ids)
--                  exactly when it is non-zero. If the stored window disagrees
--                  the function writes nothing and answers 'window_changed'.
--   p_watermark    the cache's promise that no hash of the batch occurs at or
--                  below this offset; -1 (the sentinel) probes the whole window.
--   p_hashes       one hash per item, in item order.
--   p_ids          16 bytes of message id per item, concatenated.
--   p_bodies       the frame bodies, concatenated; p_ends[k] is where body k ends.
--
-- Result: status ('ok', 'missing', 'window_changed'), the window that applied,
-- the first offset written (-1 when nothing was), the segment's created_at, and
-- for the items found in the window their 1-based indexes (dup_idx) with the
-- original message id (dup_ids; 16 zero bytes when the original segment is
-- gone).
--
-- Invariants: a duplicate allocates no offset and writes no row; the probe runs
-- under the partition row lock, after it, so no concurrent writer can commit a
-- colliding hash in between (each statement of a volatile function takes a
-- fresh snapshot in READ COMMITTED).
CREATE FUNCTION queen.push_segment(p_partition uuid, p_window_hint integer, p_watermark bigint,
    p_hashes bytea[], p_ids bytea, p_bodies bytea, p_ends integer[],
    OUT status text, OUT window_seconds integer, OUT first_offset bigint,
    OUT created_at timestamptz, OUT dup_idx integer[], OUT dup_ids bytea[])
LANGUAGE plpgsql AS $$
DECLARE
    n        integer := cardinality(p_hashes);
    v_next   bigint;
    v_keep   bytea[];
    v_ids    bytea;
    v_bodies bytea;
    v_start  integer;
    j        integer;
BEGIN
    created_at := now();
    first_offset := -1;
    dup_idx := '{}';
    dup_ids := '{}';

    IF p_window_hint = 0 THEN
        -- Deduplication off: one UPDATE ... RETURNING allocates, no probe.
        UPDATE queen.partitions p SET next_offset = p.next_offset + n
          FROM queen.queues q
         WHERE p.id = p_partition AND q.id = p.queue_id AND q.dedup_window_seconds = 0
        RETURNING p.next_offset - n INTO first_offset;
        IF FOUND THEN
            status := 'ok';
            window_seconds := 0;
            INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
                 VALUES (p_partition, first_offset, n, created_at, p_ids || p_bodies);
            INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
                 VALUES (p_partition, first_offset, created_at, p_hashes);
            RETURN;
        END IF;
        first_offset := -1; -- INTO set it to NULL when no row matched
    END IF;

    SELECT p.next_offset, q.dedup_window_seconds INTO v_next, window_seconds
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition
       FOR UPDATE OF p;
    IF NOT FOUND THEN
        status := 'missing';
        window_seconds := 0;
        RETURN;
    END IF;
    IF (window_seconds = 0) <> (p_window_hint = 0) THEN
        status := 'window_changed';
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN;
    END IF;

    IF window_seconds > 0 THEN
        IF p_watermark < 0 THEN
            -- Full-window probe, driven by the GIN index on hashes.
            SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'), coalesce(array_agg(d.mid ORDER BY d.i), '{}')
              INTO dup_idx, dup_ids
              FROM (SELECT DISTINCT ON (h.i) h.i::integer AS i,
                           coalesce(substring(s.frames FROM (m.o::integer - 1) * 16 + 1 FOR 16),
                                    '\x00000000000000000000000000000000'::bytea) AS mid
                      FROM queen.log_txns l
                     CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
                      JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = m.h
                      LEFT JOIN queen.segments s
                             ON s.partition_id = l.partition_id AND s.first_offset = l.first_offset
                     WHERE l.partition_id = p_partition
                       AND l.hashes && p_hashes
                       AND l.created_at > now() - make_interval(secs => window_seconds)
                     ORDER BY h.i, l.first_offset) d;
        ELSE
            -- Watermark probe: only segments above the offset the cache vouches
            -- for, through the primary key. No && here, so the GIN index is not
            -- a candidate.
            SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'), coalesce(array_agg(d.mid ORDER BY d.i), '{}')
              INTO dup_idx, dup_ids
              FROM (SELECT DISTINCT ON (h.i) h.i::integer AS i,
                           coalesce(substring(s.frames FROM (m.o::integer - 1) * 16 + 1 FOR 16),
                                    '\x00000000000000000000000000000000'::bytea) AS mid
                      FROM queen.log_txns l
                     CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
                      JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = m.h
                      LEFT JOIN queen.segments s
                             ON s.partition_id = l.partition_id AND s.first_offset = l.first_offset
                     WHERE l.partition_id = p_partition
                       AND l.first_offset > p_watermark
                       AND l.created_at > now() - make_interval(secs => window_seconds)
                     ORDER BY h.i, l.first_offset) d;
        END IF;
    END IF;

    status := 'ok';
    IF cardinality(dup_idx) = n THEN
        -- Every item is a duplicate: nothing is written. The row lock gave the
        -- transaction an xid, so make its commit skip the WAL flush wait.
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN;
    END IF;

    IF cardinality(dup_idx) = 0 THEN
        v_keep := p_hashes;
        v_ids := p_ids;
        v_bodies := p_bodies;
    ELSE
        v_keep := '{}';
        v_ids := '\x'::bytea;
        v_bodies := '\x'::bytea;
        FOR j IN 1..n LOOP
            IF NOT (j = ANY (dup_idx)) THEN
                v_keep := v_keep || p_hashes[j];
                v_ids := v_ids || substring(p_ids FROM (j - 1) * 16 + 1 FOR 16);
                v_start := CASE WHEN j = 1 THEN 0 ELSE p_ends[j - 1] END;
                v_bodies := v_bodies || substring(p_bodies FROM v_start + 1 FOR p_ends[j] - v_start);
            END IF;
        END LOOP;
    END IF;

    first_offset := v_next;
    UPDATE queen.partitions SET next_offset = v_next + cardinality(v_keep) WHERE id = p_partition;
    INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
         VALUES (p_partition, v_next, cardinality(v_keep), created_at, v_ids || v_bodies);
    INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
         VALUES (p_partition, v_next, created_at, v_keep);
END $$;

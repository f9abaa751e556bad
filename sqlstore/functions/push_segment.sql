-- queen.push_segment: the push transaction. Applied with CREATE OR REPLACE at
-- every broker start; "queen." is replaced by the configured schema.
--
-- push_segment is the push transaction of one batch of one partition, in one
-- round trip. The caller runs it outside an explicit transaction, so the
-- statement is the transaction.
--
--   p_window_hint  the caller's belief about the queue's window (the window
--                  the cache computed the watermark for). The batch was
--                  collapsed in-broker (distinct transaction ids) exactly when
--                  it is non-zero; if the stored window disagrees on zero or
--                  not, the function writes nothing and answers
--                  'window_changed'. If the stored window is larger, the
--                  watermark is ignored and the whole window is probed.
--   p_watermark    the cache's promise that no hash of the batch occurs at or
--                  below this offset; -1 (the sentinel) probes the whole window.
--   p_hashes       one hash per item, in item order.
--   p_ids          16 bytes of message id per item, concatenated.
--   p_bodies       the frame bodies, concatenated; p_ends[k] is where body k ends.
--   p_fps          one payload fingerprint per item (partition.Fingerprint), or
--                  NULL: the caller's belief about the queue's
--                  dedup_payload_check. With a non-zero window, when the stored
--                  check disagrees on off or not (NULL exactly when off), the
--                  function writes nothing and answers 'window_changed'.
--
-- Result: status ('ok', 'missing', 'window_changed'), the window that applied,
-- the first offset written (-1 when nothing was), the segment's created_at, and
-- for the items found in the window their 1-based indexes (dup_idx) with the
-- original message id (dup_ids; 16 zero bytes when the original segment is
-- gone), the original's stored time (dup_created, its log_txns created_at) and
-- its payload fingerprint (dup_fps; NULL when it was stored without one), and
-- the queue's dedup_payload_check (payload_check).
--
-- Invariants: a duplicate allocates no offset and writes no row; the probe runs
-- under the partition row lock, after it, so no concurrent writer can commit a
-- colliding hash in between (each statement of a volatile function takes a
-- fresh snapshot in READ COMMITTED).
CREATE OR REPLACE FUNCTION queen.push_segment(p_partition uuid, p_window_hint integer, p_watermark bigint,
    p_hashes bytea[], p_ids bytea, p_bodies bytea, p_ends integer[], p_fps bigint[],
    OUT status text, OUT window_seconds integer, OUT first_offset bigint,
    OUT created_at timestamptz, OUT dup_idx integer[], OUT dup_ids bytea[], OUT dup_created timestamptz[],
    OUT payload_check text, OUT dup_fps bigint[])
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    n        integer := cardinality(p_hashes);
    v_next   bigint;
    v_keep   bytea[];
    v_ids    bytea;
    v_bodies bytea;
    v_fps    bigint[];
BEGIN
    created_at := now();
    first_offset := -1;
    dup_idx := '{}';
    dup_ids := '{}';
    dup_created := '{}';
    dup_fps := '{}';

    IF p_window_hint = 0 THEN
        -- Deduplication off: one UPDATE ... RETURNING allocates, no probe.
        UPDATE queen.partitions p SET next_offset = p.next_offset + n,
               push_xid = pg_current_xact_id(), last_push_at = push_segment.created_at
          FROM queen.queues q
         WHERE p.id = p_partition AND q.id = p.queue_id AND q.dedup_window_seconds = 0
        RETURNING p.next_offset - n, q.dedup_payload_check INTO first_offset, payload_check;
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

    IF p_window_hint > 0 AND p_watermark >= 0 THEN
        -- Nothing to probe: every log_txns row of the partition starts at or
        -- below the watermark (next_offset - 1 <= p_watermark), and the
        -- watermark promises that no hash of the batch occurs at or below it.
        -- (Not tried with the sentinel: without the cache it would fail on
        -- every partition that has a segment, a wasted statement per push.) Then no
        -- item can be a duplicate, and one UPDATE ... RETURNING allocates,
        -- as with deduplication off: no FOR UPDATE (its Heap/LOCK record and
        -- executor start), no probe statement. The condition is checked on
        -- the row version the UPDATE locks (READ COMMITTED re-checks it on a
        -- row a concurrent writer changed), so a push that allocated in
        -- between sends this one down the probing path below. The watermark
        -- is only trusted for the window it was computed for (not a grown
        -- one), and the stored payload check must agree with the hint.
        UPDATE queen.partitions p SET next_offset = p.next_offset + n,
               push_xid = pg_current_xact_id(), last_push_at = push_segment.created_at
          FROM queen.queues q
         WHERE p.id = p_partition AND q.id = p.queue_id
           AND p.next_offset - 1 <= p_watermark
           AND q.dedup_window_seconds > 0 AND q.dedup_window_seconds <= p_window_hint
           AND (q.dedup_payload_check <> 'off') = (p_fps IS NOT NULL)
        RETURNING p.next_offset - n, q.dedup_window_seconds, q.dedup_payload_check
             INTO first_offset, window_seconds, payload_check;
        IF FOUND THEN
            status := 'ok';
            INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
                 VALUES (p_partition, first_offset, n, created_at, p_ids || p_bodies);
            INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes, fingerprints)
                 VALUES (p_partition, first_offset, created_at, p_hashes, p_fps);
            RETURN;
        END IF;
        first_offset := -1; -- INTO set it to NULL when no row matched
    END IF;

    SELECT p.next_offset, q.dedup_window_seconds, q.dedup_payload_check INTO v_next, window_seconds, payload_check
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition
       FOR UPDATE OF p;
    IF NOT FOUND THEN
        status := 'missing';
        window_seconds := 0;
        payload_check := 'off';
        RETURN;
    END IF;
    IF (window_seconds = 0) <> (p_window_hint = 0)
       OR (window_seconds > 0 AND (payload_check <> 'off') <> (p_fps IS NOT NULL)) THEN
        status := 'window_changed';
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN;
    END IF;

    IF window_seconds > 0 THEN
        -- The watermark was computed for the window the caller sent as the
        -- hint. When the queue's window has grown since (a reconfiguration
        -- the caller has not seen yet), the cache may have trimmed or never
        -- loaded hashes that are inside the larger window: probe it whole.
        SELECT d.dup_idx, d.dup_ids, d.dup_created, d.dup_fps INTO dup_idx, dup_ids, dup_created, dup_fps
          FROM queen.push_probe(p_partition, p_hashes, window_seconds,
                                CASE WHEN window_seconds > p_window_hint THEN -1 ELSE p_watermark END, v_next) d;
    END IF;

    status := 'ok';
    IF cardinality(dup_idx) = n THEN
        -- Every item is a duplicate: nothing is written. The row lock gave the
        -- transaction an xid, so make its commit skip the WAL flush wait,
        -- unless a synchronous standby is configured: then the commit waits
        -- for the standby, which proves the originals named in the answer
        -- are there too (a commit that ended its standby wait early, when its
        -- postmaster died, is visible on the old primary and yet lost; see
        -- docs/reliability.md).
        IF current_setting('synchronous_standby_names') = '' THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        RETURN;
    END IF;

    IF cardinality(dup_idx) = 0 THEN
        v_keep := p_hashes;
        v_ids := p_ids;
        v_bodies := p_bodies;
        v_fps := p_fps;
    ELSE
        -- The survivors, set-based (string_agg is linear; concatenating in
        -- a loop would copy the growing buffers once per item).
        SELECT array_agg(u.h ORDER BY u.i),
               string_agg(substring(p_ids FROM (u.i::integer - 1) * 16 + 1 FOR 16), ''::bytea ORDER BY u.i),
               string_agg(substring(p_bodies FROM coalesce(p_ends[u.i::integer - 1], 0) + 1
                                             FOR u.e - coalesce(p_ends[u.i::integer - 1], 0)), ''::bytea ORDER BY u.i),
               CASE WHEN p_fps IS NOT NULL THEN array_agg(p_fps[u.i::integer] ORDER BY u.i) END
          INTO v_keep, v_ids, v_bodies, v_fps
          FROM unnest(p_hashes, p_ends) WITH ORDINALITY AS u(h, e, i)
         WHERE NOT (u.i::integer = ANY (dup_idx));
    END IF;

    first_offset := v_next;
    -- push_xid and last_push_at tell pops of every group that this
    -- partition has new work (see pop_prepare.sql).
    UPDATE queen.partitions SET next_offset = v_next + cardinality(v_keep),
           push_xid = pg_current_xact_id(), last_push_at = push_segment.created_at
     WHERE id = p_partition;
    INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
         VALUES (p_partition, v_next, cardinality(v_keep), created_at, v_ids || v_bodies);
    INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes, fingerprints)
         VALUES (p_partition, v_next, created_at, v_keep, v_fps);
END $$;

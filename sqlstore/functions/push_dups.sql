-- queen.push_dups: the read-only fast path for a batch expected to be all
-- duplicates. Applied with CREATE OR REPLACE at every broker start; "queen."
-- is replaced by the configured schema.
--
-- A duplicate verdict writes nothing, so it needs no row lock: a committed
-- log_txns row holding the hash inside the window is proof. push_dups takes
-- the arguments push_segment does (minus the ids and bodies it never writes)
-- and runs push_segment's probe, with the same window rule (the original's
-- stored created_at against the database clock) and the same watermark rule,
-- but without FOR UPDATE: it is STABLE, so every statement reads the calling
-- statement's snapshot, assigns no transaction id and writes no WAL (except
-- with a synchronous standby, below).
--
-- status 'ok' when every item was found: the other columns are then exactly
-- what push_segment would answer for the same snapshot (first_offset -1,
-- dup_idx 1..n with the originals' ids, 16 zero bytes for a purged original,
-- their created_at and fingerprints, the queue's payload_check).
-- status 'locked' otherwise (an item not found, the partition missing, the
-- window or payload check disagreeing with the hint, dedup off): the caller
-- runs push_segment, which decides everything under the lock as before.
CREATE OR REPLACE FUNCTION queen.push_dups(p_partition uuid, p_window_hint integer, p_watermark bigint,
    p_hashes bytea[], p_fps bigint[],
    OUT status text, OUT window_seconds integer, OUT first_offset bigint,
    OUT created_at timestamptz, OUT dup_idx integer[], OUT dup_ids bytea[], OUT dup_created timestamptz[],
    OUT payload_check text, OUT dup_fps bigint[])
LANGUAGE plpgsql STABLE SET jit = off AS $$
DECLARE
    n       integer := cardinality(p_hashes);
    v_win   integer;
    v_check text;
BEGIN
    status := 'locked';
    window_seconds := 0;
    payload_check := 'off';
    created_at := now();
    first_offset := -1;
    dup_idx := '{}';
    dup_ids := '{}';
    dup_created := '{}';
    dup_fps := '{}';
    IF p_window_hint <= 0 OR n = 0 THEN
        RETURN;
    END IF;
    SELECT q.dedup_window_seconds, q.dedup_payload_check INTO v_win, v_check
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition;
    IF NOT FOUND OR v_win = 0 OR (v_check <> 'off') <> (p_fps IS NOT NULL) THEN
        RETURN;
    END IF;
    window_seconds := v_win;
    payload_check := v_check;

    IF p_watermark < 0 OR window_seconds > p_window_hint THEN
        -- push_segment's full-window probe (see there for the planner notes).
        PERFORM set_config('enable_seqscan', 'off', true);
        SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'), coalesce(array_agg(d.mid ORDER BY d.i), '{}'),
               coalesce(array_agg(d.created ORDER BY d.i), '{}'), coalesce(array_agg(d.fp ORDER BY d.i), '{}')
          INTO dup_idx, dup_ids, dup_created, dup_fps
          FROM (SELECT DISTINCT ON (h.i) h.i::integer AS i,
                       coalesce((SELECT substring(s.frames FROM (m.o::integer - 1) * 16 + 1 FOR 16)
                                   FROM queen.segments s
                                  WHERE s.partition_id = p_partition AND s.first_offset = l.first_offset),
                                '\x00000000000000000000000000000000'::bytea) AS mid,
                       l.created_at AS created, l.fingerprints[m.o] AS fp
                  FROM queen.log_txns l
                 CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
                  JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = m.h
                 WHERE l.hashes && p_hashes
                   AND (l.partition_id = p_partition) IS TRUE
                   AND l.created_at > now() - make_interval(secs => window_seconds)
                 ORDER BY h.i, l.first_offset, m.o) d;
    ELSE
        -- push_segment's watermark probe.
        SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'), coalesce(array_agg(d.mid ORDER BY d.i), '{}'),
               coalesce(array_agg(d.created ORDER BY d.i), '{}'), coalesce(array_agg(d.fp ORDER BY d.i), '{}')
          INTO dup_idx, dup_ids, dup_created, dup_fps
          FROM (SELECT DISTINCT ON (h.i) h.i::integer AS i,
                       coalesce((SELECT substring(s.frames FROM (m.o::integer - 1) * 16 + 1 FOR 16)
                                   FROM queen.segments s
                                  WHERE s.partition_id = p_partition AND s.first_offset = l.first_offset),
                                '\x00000000000000000000000000000000'::bytea) AS mid,
                       l.created_at AS created, l.fingerprints[m.o] AS fp
                  FROM queen.log_txns l
                 CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
                  JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = m.h
                 WHERE l.partition_id = p_partition
                   AND l.first_offset > p_watermark
                   AND l.created_at > now() - make_interval(secs => window_seconds)
                 ORDER BY h.i, l.first_offset, m.o) d;
    END IF;
    IF cardinality(dup_idx) = n THEN
        status := 'ok';
        -- With a synchronous standby, a verdict may name only originals the
        -- standby holds. A commit is visible only after its standby wait,
        -- except when the wait ends early because the postmaster died: the
        -- row is then visible on the dying primary and lost after failover.
        -- A transactional WAL record gives this statement's commit a standby
        -- wait of its own, for WAL that lies after every commit it read; if
        -- the primary dies meanwhile, no answer reaches the broker (outcome
        -- unknown, retried) instead of a verdict naming a lost original.
        IF current_setting('synchronous_standby_names') <> '' THEN
            PERFORM pg_logical_emit_message(true, 'regina.duplicate', ''::bytea);
        END IF;
    END IF;
END $$;

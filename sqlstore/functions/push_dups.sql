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
    v_next  bigint;
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
    SELECT q.dedup_window_seconds, q.dedup_payload_check, p.next_offset INTO v_win, v_check, v_next
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition;
    IF NOT FOUND OR v_win = 0 OR (v_check <> 'off') <> (p_fps IS NOT NULL) THEN
        RETURN;
    END IF;
    window_seconds := v_win;
    payload_check := v_check;

    SELECT d.dup_idx, d.dup_ids, d.dup_created, d.dup_fps INTO dup_idx, dup_ids, dup_created, dup_fps
      FROM queen.push_probe(p_partition, p_hashes, window_seconds,
                            CASE WHEN window_seconds > p_window_hint THEN -1 ELSE p_watermark END, v_next) d;
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

-- queen.push_dups_segments: what the read-only duplicate path needs to prove
-- the batches of several partitions at once, when the broker's dedup cache
-- names, for every item, the segment its original is in (see
-- sqlstore.Store.proveDuplicates, which decides): one round trip and one
-- small statement for them all, one key lookup per named segment, where
-- push_dups is one call and one window probe per batch.
--
-- For each (p_parts[i], p_offsets[i]), one row when the partition exists,
-- its queue's window is on and the log_txns row at that offset is committed
-- (this statement's snapshot) and inside the window (its stored created_at
-- against the database clock, as push_probe measures it): the window and
-- payload check the queue has now, now(), the row's created_at, hashes and
-- fingerprints, and the ids of the segment's frames (NULL when the segment
-- is gone: the originals' ids are then the zero UUID). No row otherwise.
-- An item is then proven a duplicate when its hash is in that row: its
-- original is the first position of the hash there, which is what
-- push_probe finds (the lowest offset, then the lowest position), because
-- the cache's offset carries the watermark's promise (no occurrence of the
-- hash inside the window lies below that segment; see queen.push_probe)
-- and is used only under the same rules (same epoch, a window not larger
-- than the hint the cache answered for).
--
-- It takes no row lock, assigns no transaction id and writes no WAL, except
-- with a synchronous standby (see push_dups; the message is emitted before
-- the query but after the statement's snapshot was taken, so its commit
-- waits for WAL that lies after every commit the verdicts read). The
-- lookups are LATERAL subqueries kept apart (OFFSET 0): flattened, the
-- planner took (partition_id) alone as the index condition and
-- first_offset as a join filter, reading the partition's whole slice per
-- lookup (~2,500 rows each in a compare storm, found with
-- pg_stat_user_tables' idx_tup_fetch and EXPLAIN of the generic plan). Its plan is
-- a handful of nodes on purpose: with the arrays this small, starting the
-- executor is most of a call's cost (a first, one-statement version that
-- matched the items in SQL cost ~0.5 ms per call whatever it carried).
-- replaces that version:
DROP FUNCTION IF EXISTS queen.push_dups_packed(uuid[], integer[], boolean[], integer[], integer[], bytea[], bigint[],
    integer[], bigint[]);
CREATE OR REPLACE FUNCTION queen.push_dups_segments(p_parts uuid[], p_offsets bigint[])
RETURNS TABLE (i integer, window_seconds integer, payload_check text, now timestamptz, created_at timestamptz,
    hashes bytea[], fingerprints bigint[], ids bytea)
LANGUAGE plpgsql STABLE
SET jit = off
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_until timestamptz := clock_timestamp() + interval '5 minutes';
BEGIN
    IF current_setting('synchronous_standby_names') <> '' THEN
        PERFORM pg_logical_emit_message(true, 'regina.duplicate', ''::bytea);
    END IF;
    RETURN QUERY
    SELECT s.i::integer, q.win, q.chk, now(), l.created_at, l.hashes, l.fingerprints,
           (SELECT substring(g.frames FROM 1 FOR 16 * cardinality(l.hashes))
              FROM queen.segments g
             WHERE g.partition_id = s.part AND g.first_offset = s.fo)
      FROM unnest(p_parts, p_offsets) WITH ORDINALITY AS s(part, fo, i)
     CROSS JOIN LATERAL (
           SELECT qq.dedup_window_seconds AS win, qq.dedup_payload_check AS chk
             FROM queen.partitions p JOIN queen.queues qq ON qq.id = p.queue_id
            WHERE p.id = s.part
           OFFSET 0) q
     CROSS JOIN LATERAL (
           SELECT t.created_at, t.hashes, t.fingerprints
             FROM queen.log_txns t
            WHERE t.partition_id = s.part AND t.first_offset = s.fo
              AND t.created_at > now() - make_interval(secs => q.win) AND t.created_at < v_until
           OFFSET 0) l
     WHERE q.win > 0;
END $$;

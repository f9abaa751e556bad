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

-- queen.push_segments: the push transaction of several partitions' batches,
-- in one round trip and one transaction. Applied with CREATE OR REPLACE at
-- every broker start; "queen." is replaced by the configured schema.
--
-- First, set-based, the batches that need no probe: those the dedup cache
-- vouches for (window hint > 0, a watermark at or above the partition's
-- last offset: push_segment's no-probe path) and those of queues without
-- deduplication (window hint 0). One UPDATE allocates the offsets of all of
-- them (under the same conditions as push_segment's UPDATE ... RETURNING,
-- evaluated per row on the version it locks), and one INSERT each writes
-- their segments and log_txns rows: three statements for the round trip
-- instead of three per batch (a one-message push is all per-push cost:
-- executor start-up, plpgsql and commit, measured with perf on the backend;
-- BenchmarkSingleItemPushCPU). Rows are locked in partition-id order: the
-- batches are sorted and joined to partitions by a nested loop on its
-- primary key (the plan for a few dozen keys; a plan in another order could
-- only cost a detected deadlock, whose error sends every batch alone).
--
-- Then every other batch (and any the first step did not write: its
-- watermark went stale, its window or payload check changed, its partition
-- is gone) goes through queen.push_segment unchanged (lock, probe, insert:
-- each partition's verdicts are decided under its own row lock), in
-- partition-id order, whatever the order of the arguments: every caller that
-- locks several partition rows (this function, transactions, stream cycles)
-- takes them in that order, so two brokers cannot deadlock each other.
--
-- The batches are flattened into arrays; batch k (1-based, argument order)
-- has p_counts[k] items:
--
--   p_partitions[k], p_window_hints[k], p_watermarks[k]
--                  as push_segment's p_partition, p_window_hint, p_watermark.
--   p_hashes       every batch's hashes, batch after batch.
--   p_ids          every batch's 16-byte message ids, concatenated.
--   p_bodies       every batch's bodies, concatenated.
--   p_ends         each batch's own body ends (relative to its first body),
--                  batch after batch.
--   p_fps          every batch's fingerprints, batch after batch (a batch
--                  without them contributes nothing); p_has_fps[k] says
--                  whether batch k has them (push_segment's p_fps NULL or not).
--
-- Result: one row per batch, k with push_segment's result for it. One
-- batch's 'missing' or 'window_changed' writes nothing for that batch and
-- leaves the others alone.
--
-- Durability: push_segment makes a commit that wrote nothing skip the WAL
-- flush wait (synchronous_commit off, transaction-local). Here the commit is
-- shared: when any batch wrote, the caller's synchronous_commit is put back
-- before the commit, so the flush wait covers every write.
CREATE OR REPLACE FUNCTION queen.push_segments(p_partitions uuid[], p_window_hints integer[], p_watermarks bigint[],
    p_counts integer[], p_hashes bytea[], p_ids bytea, p_bodies bytea, p_ends integer[], p_fps bigint[],
    p_has_fps boolean[])
RETURNS TABLE (k integer, status text, window_seconds integer, first_offset bigint, created_at timestamptz,
    dup_idx integer[], dup_ids bytea[], dup_created timestamptz[], payload_check text, dup_fps bigint[])
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    nb       integer := cardinality(p_partitions);
    v_sync   text := current_setting('synchronous_commit');
    v_wrote  boolean := false;
    -- Where batch j starts (0-based) in p_hashes/p_ends, p_ids (in items),
    -- p_bodies (in bytes) and p_fps.
    v_item   integer[] := '{}';
    v_byte   integer[] := '{}';
    v_fp     integer[] := '{}';
    v_i      integer := 0;
    v_b      integer := 0;
    v_f      integer := 0;
    j        integer;
    n        integer;
    r        record;
    v_done   boolean[];
BEGIN
    IF cardinality(p_window_hints) <> nb OR cardinality(p_watermarks) <> nb OR cardinality(p_counts) <> nb
       OR cardinality(p_has_fps) <> nb THEN
        RAISE EXCEPTION 'push_segments: per-batch arrays differ in length';
    END IF;
    FOR j IN 1 .. nb LOOP
        n := p_counts[j];
        v_item := v_item || v_i;
        v_byte := v_byte || v_b;
        v_fp := v_fp || v_f;
        IF n > 0 THEN
            v_b := v_b + p_ends[v_i + n];
        END IF;
        v_i := v_i + n;
        IF p_has_fps[j] THEN
            v_f := v_f + n;
        END IF;
    END LOOP;
    IF v_i <> cardinality(p_hashes) OR length(p_ids) <> 16 * v_i OR v_b <> length(p_bodies)
       OR v_f <> coalesce(cardinality(p_fps), 0) THEN
        RAISE EXCEPTION 'push_segments: the counts do not match the items';
    END IF;

    v_done := array_fill(false, ARRAY[nb]);
    FOR r IN
        WITH b AS MATERIALIZED (
            SELECT u.j, u.p, p_window_hints[u.j] AS hint, p_watermarks[u.j] AS wm, p_counts[u.j] AS n,
                   p_has_fps[u.j] AS has_fps
              FROM unnest(p_partitions) WITH ORDINALITY AS u(p, j)
             WHERE p_counts[u.j] > 0 AND (p_window_hints[u.j] = 0 OR p_watermarks[u.j] >= 0)
             ORDER BY u.p, u.j),
        a AS (
            UPDATE queen.partitions p SET next_offset = p.next_offset + b.n,
                   push_xid = pg_current_xact_id(), last_push_at = now()
              FROM b, queen.queues q
             WHERE p.id = b.p AND q.id = p.queue_id
               AND CASE WHEN b.hint = 0 THEN q.dedup_window_seconds = 0
                        ELSE p.next_offset - 1 <= b.wm
                             AND q.dedup_window_seconds > 0 AND q.dedup_window_seconds <= b.hint
                             AND (q.dedup_payload_check <> 'off') = b.has_fps END
            RETURNING b.j, b.p, b.n, b.hint, p.next_offset - b.n AS first, q.dedup_window_seconds AS w,
                      q.dedup_payload_check AS pc),
        s AS (
            INSERT INTO queen.segments (partition_id, first_offset, frame_count, created_at, frames)
            SELECT a.p, a.first, a.n, now(),
                   substring(p_ids FROM v_item[a.j] * 16 + 1 FOR a.n * 16)
                   || substring(p_bodies FROM v_byte[a.j] + 1 FOR p_ends[v_item[a.j] + a.n])
              FROM a),
        l AS (
            INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes, fingerprints)
            SELECT a.p, a.first, now(), p_hashes[v_item[a.j] + 1 : v_item[a.j] + a.n],
                   CASE WHEN a.hint > 0 AND p_has_fps[a.j] THEN coalesce(p_fps[v_fp[a.j] + 1 : v_fp[a.j] + a.n], '{}') END
              FROM a)
        SELECT a.j, a.first, a.w, a.pc FROM a
    LOOP
        v_done[r.j] := true;
        v_wrote := true;
        k := r.j;
        status := 'ok';
        window_seconds := r.w;
        first_offset := r.first;
        created_at := now();
        dup_idx := '{}';
        dup_ids := '{}';
        dup_created := '{}';
        payload_check := r.pc;
        dup_fps := '{}';
        RETURN NEXT;
    END LOOP;

    FOR j IN SELECT u.j FROM unnest(p_partitions) WITH ORDINALITY AS u(p, j) ORDER BY u.p, u.j LOOP
        CONTINUE WHEN v_done[j];
        n := p_counts[j];
        SELECT * INTO r FROM queen.push_segment(p_partitions[j], p_window_hints[j], p_watermarks[j],
            p_hashes[v_item[j] + 1 : v_item[j] + n],
            substring(p_ids FROM v_item[j] * 16 + 1 FOR n * 16),
            substring(p_bodies FROM v_byte[j] + 1 FOR CASE WHEN n > 0 THEN p_ends[v_item[j] + n] ELSE 0 END),
            p_ends[v_item[j] + 1 : v_item[j] + n],
            CASE WHEN p_has_fps[j] THEN coalesce(p_fps[v_fp[j] + 1 : v_fp[j] + n], '{}') END) s;
        k := j;
        status := r.status;
        window_seconds := r.window_seconds;
        first_offset := r.first_offset;
        created_at := r.created_at;
        dup_idx := r.dup_idx;
        dup_ids := r.dup_ids;
        dup_created := r.dup_created;
        payload_check := r.payload_check;
        dup_fps := r.dup_fps;
        v_wrote := v_wrote OR r.first_offset >= 0;
        RETURN NEXT;
    END LOOP;
    IF v_wrote THEN
        PERFORM set_config('synchronous_commit', v_sync, true);
    END IF;
END $$;

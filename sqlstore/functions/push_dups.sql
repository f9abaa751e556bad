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

-- queen.push_dups_packed: the read-only duplicate path for the batches of
-- several partitions at once, when the broker's dedup cache names, for every
-- item, the segment its original is in: one round trip and one statement
-- for them all, reading each named segment's row by its key, where push_dups
-- is one call and one window probe per batch.
--
-- Arguments, per batch k (1-based, in array order): p_parts, p_hints,
-- p_has_fps (push_segment's p_partition, p_window_hint, and whether its
-- p_fps would be non-NULL) and p_counts (its items). Per item, every
-- batch's items in order: p_batch (its k), p_hashes, p_originals (the first
-- offset of the lowest segment of the partition the cache holds the hash
-- in). Per (k, offset) the items name: p_seg_batch, p_seg_offsets.
--
-- The cache's offsets are the promise the watermark is (no occurrence of the
-- hash inside the window lies below that segment; see queen.push_probe), not
-- a proof: SQL proves. An item is found when the log_txns row at its offset
-- is committed (this statement's snapshot), inside the queue's window (its
-- stored created_at against the database clock, as push_probe measures it)
-- and holds the hash; its original is the first position of the hash in
-- that row, which is what push_probe finds (the lowest offset, then the
-- lowest position): the original's id (16 zero bytes when its segment is
-- gone), stored time and fingerprint.
--
-- One row per batch, proven when the partition exists, its window is on and
-- not larger than the hint (the watermark rule: the cache's promise was made
-- for the hint), the payload check agrees with p_has_fps and every item was
-- found. The other columns are then what push_segment would answer for this
-- snapshot, compactly (every item is a duplicate: first_offset -1 and
-- dup_idx 1..n go without saying): the window and payload check, now(), the
-- originals' ids concatenated in item order (16 bytes each), their stored
-- times and fingerprints. Otherwise the caller runs the locked push
-- transaction, which decides everything under the row lock as before.
--
-- It takes no row lock, assigns no transaction id and writes no WAL, except
-- with a synchronous standby (see push_dups; the message is emitted before
-- the query but after the statement's snapshot was taken, so its commit
-- waits for WAL that lies after every commit the verdicts read).
--
-- log_txns and segments are only read through LATERAL lookups on their keys
-- (one per named segment, not per item); everything else is the arrays'
-- few rows. A generic plan: the arrays' contents do not change it, and a
-- custom plan per call cost more than running it (measured).
CREATE OR REPLACE FUNCTION queen.push_dups_packed(p_parts uuid[], p_hints integer[], p_has_fps boolean[],
    p_counts integer[], p_batch integer[], p_hashes bytea[], p_originals bigint[],
    p_seg_batch integer[], p_seg_offsets bigint[])
RETURNS TABLE (k integer, proven boolean, window_seconds integer, payload_check text, created_at timestamptz,
    dup_ids bytea, dup_created timestamptz[], dup_fps bigint[])
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
    WITH pq AS MATERIALIZED (
        SELECT b.k::integer AS k, b.part, q.dedup_window_seconds AS win, q.dedup_payload_check AS chk,
               now() - make_interval(secs => q.dedup_window_seconds) AS since
          FROM unnest(p_parts, p_hints, p_has_fps) WITH ORDINALITY AS b(part, hint, hasfp, k)
          CROSS JOIN LATERAL (
              SELECT q.dedup_window_seconds, q.dedup_payload_check
                FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
               WHERE p.id = b.part) q
         WHERE q.dedup_window_seconds > 0 AND q.dedup_window_seconds <= b.hint
           AND (q.dedup_payload_check <> 'off') = b.hasfp),
    r AS MATERIALIZED (
        SELECT g.k, pq.part, g.fo, l.created_at AS created, l.hashes, l.fingerprints AS fps
          FROM (SELECT DISTINCT u.k, u.fo FROM unnest(p_seg_batch, p_seg_offsets) AS u(k, fo)) g
          JOIN pq ON pq.k = g.k
          CROSS JOIN LATERAL (
              SELECT t.created_at, t.hashes, t.fingerprints
                FROM queen.log_txns t
               WHERE t.partition_id = pq.part AND t.first_offset = g.fo
                 AND t.created_at > pq.since AND t.created_at < v_until) l),
    f AS MATERIALIZED (
        SELECT it.k, it.j::integer AS j, r.part, it.fo, r.created, array_position(r.hashes, it.h) AS o, r.fps
          FROM unnest(p_batch, p_hashes, p_originals) WITH ORDINALITY AS it(k, h, fo, j)
          JOIN r ON r.k = it.k AND r.fo = it.fo),
    s AS MATERIALIZED (
        SELECT x.k, x.fo, x.lo,
               (SELECT substring(g.frames FROM (x.lo - 1) * 16 + 1 FOR (x.hi - x.lo + 1) * 16)
                  FROM queen.segments g
                 WHERE g.partition_id = x.part AND g.first_offset = x.fo) AS ids
          FROM (SELECT f.k, f.part, f.fo, min(f.o) AS lo, max(f.o) AS hi
                  FROM f WHERE f.o IS NOT NULL GROUP BY f.k, f.part, f.fo) x),
    -- In item order (the aggregates below read their input in that
    -- order: no sort per aggregate).
    fo AS (
        SELECT f.k, f.created, coalesce(substring(s.ids FROM (f.o - s.lo) * 16 + 1 FOR 16),
                                        '\x00000000000000000000000000000000'::bytea) AS id,
               f.fps[f.o] AS fp
          FROM f JOIN s ON s.k = f.k AND s.fo = f.fo
         WHERE f.o IS NOT NULL
         ORDER BY f.k, f.j),
    a AS (
        SELECT fo.k, count(*) AS n, string_agg(fo.id, ''::bytea) AS ids,
               array_agg(fo.created) AS created, array_agg(fo.fp) AS fps
          FROM fo
         GROUP BY fo.k)
    SELECT c.k::integer,
           a.n IS NOT DISTINCT FROM c.n::bigint,
           pq.win,
           pq.chk,
           now(),
           a.ids,
           a.created,
           a.fps
      FROM unnest(p_counts) WITH ORDINALITY AS c(n, k)
      LEFT JOIN pq ON pq.k = c.k
      LEFT JOIN a ON a.k = c.k AND pq.k IS NOT NULL
     ORDER BY c.k;
END $$;

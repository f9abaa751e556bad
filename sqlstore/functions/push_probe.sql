-- queen.push_probe: the duplicate probe of push_segment and push_dups.
-- Applied with CREATE OR REPLACE at every broker start; "queen." is replaced
-- by the configured schema.
--
-- push_probe finds, for each hash of p_hashes, its first occurrence in the
-- partition's window (log_txns rows created within p_window seconds of the
-- database clock): dup_idx holds the 1-based indexes of the hashes found, in
-- order, and for each the original's message id (dup_ids; 16 zero bytes when
-- its segment is gone), its stored time (dup_created, the log_txns row's
-- created_at) and its payload fingerprint (dup_fps; NULL when stored without
-- one).
--
--   p_watermark  -1 probes the whole window through the GIN index on hashes;
--                otherwise only rows above that offset, through the primary
--                key (the cache's promise that no hash occurs at or below it).
--   p_next       the partition's next offset. When more than 16 offsets per
--                hash lie above the watermark (a retry storm: the originals
--                are old), the whole window is probed instead: reading n
--                hashes' GIN entries is cheaper than unnesting every row
--                above the watermark (about 10x per hash, measured). Both
--                probes find the same originals: the watermark only promises
--                that none lies at or below it.
--
-- It is STABLE: its statements read the caller's snapshot. push_segment calls
-- it after taking the partition row lock, so the probe sees every commit that
-- preceded the lock; push_dups calls it in its single read-only snapshot.
--
-- Cost: linear in (batch size + hashes of the log_txns rows read). The rows'
-- hashes are unnested once into c (MATERIALIZED, so that the join below
-- cannot become a per-row one) and joined with the batch's hashes by a hash
-- join. enable_nestloop = off is what guarantees that: the planner believes
-- unnest() returns 10 rows and otherwise picks a nested loop that compares
-- every hash of the batch with every hash of every matching row (a 1000-item
-- retry batch then took seconds; see docs/reliability.md, Overload). The
-- originals' message ids and fingerprints are read once per matching row
-- (a primary-key lookup and a slice), not once per item.
CREATE OR REPLACE FUNCTION queen.push_probe(p_partition uuid, p_hashes bytea[], p_window integer, p_watermark bigint,
    p_next bigint, OUT dup_idx integer[], OUT dup_ids bytea[], OUT dup_created timestamptz[], OUT dup_fps bigint[])
LANGUAGE plpgsql STABLE
SET jit = off
-- The planner misjudges the full-window probe when a partition's hash arrays
-- are stored out of line (the table looks small) and picks a sequential scan
-- for its first custom plans: hundreds of ms per push. The GIN index is
-- always right there, and the primary key always right for the watermark
-- probe.
SET enable_seqscan = off
SET enable_nestloop = off
AS $$
DECLARE
    v_since timestamptz;
    v_until timestamptz;
BEGIN
    -- The window, as plain values: the sidecar is partitioned by created_at
    -- (migration 0011), and with constants the planner reads only the
    -- children inside the window (plan-time pruning; a cached generic plan
    -- prunes at executor start). The window is measured from the original's
    -- stored time: rows created after now() - window. The upper bound only
    -- keeps the empty children created ahead of the clock out of the plan:
    -- every row this function can see was committed before its caller's
    -- snapshot (push_segment takes it after the partition row lock, push_dups
    -- at its start), so before clock_timestamp() here (five minutes of margin
    -- for a clock stepping back).
    v_since := now() - make_interval(secs => p_window);
    v_until := clock_timestamp() + interval '5 minutes';
    IF p_watermark < 0 OR p_next - p_watermark > 16 * cardinality(p_hashes) THEN
        -- Full-window probe, driven by the GIN index on hashes. The
        -- partition filter is written so that it cannot be an index
        -- condition: with a generic plan the planner would otherwise pick
        -- the primary key for it and scan the partition's whole window.
        WITH c AS MATERIALIZED (
            SELECT l.first_offset AS fo, l.created_at AS created, m.h, m.o::integer AS o
              FROM queen.log_txns l
             CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
             WHERE l.hashes && p_hashes
               AND (l.partition_id = p_partition) IS TRUE
               AND l.created_at > v_since AND l.created_at < v_until),
        d AS (
            SELECT DISTINCT ON (h.i) h.i::integer AS i, c.fo, c.o, c.created
              FROM c JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = c.h
             ORDER BY h.i, c.fo, c.o),
        s AS MATERIALIZED (
            SELECT r.fo, r.lo,
                   (SELECT substring(g.frames FROM (r.lo - 1) * 16 + 1 FOR (r.hi - r.lo + 1) * 16)
                      FROM queen.segments g
                     WHERE g.partition_id = p_partition AND g.first_offset = r.fo) AS ids,
                   (SELECT t.fingerprints[r.lo:r.hi]
                      FROM queen.log_txns t
                     WHERE t.partition_id = p_partition AND t.first_offset = r.fo
                       AND t.created_at = r.created) AS fps
              FROM (SELECT d.fo, d.created, min(d.o) AS lo, max(d.o) AS hi FROM d GROUP BY d.fo, d.created) r)
        SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'),
               coalesce(array_agg(coalesce(substring(s.ids FROM (d.o - s.lo) * 16 + 1 FOR 16),
                                           '\x00000000000000000000000000000000'::bytea) ORDER BY d.i), '{}'),
               coalesce(array_agg(d.created ORDER BY d.i), '{}'),
               coalesce(array_agg(s.fps[d.o - s.lo + 1] ORDER BY d.i), '{}')
          INTO dup_idx, dup_ids, dup_created, dup_fps
          FROM d JOIN s ON s.fo = d.fo;
    ELSE
        -- Watermark probe: only rows above the offset the cache vouches for,
        -- through the primary key. No && here, so the GIN index is not a
        -- candidate.
        WITH c AS MATERIALIZED (
            SELECT l.first_offset AS fo, l.created_at AS created, m.h, m.o::integer AS o
              FROM queen.log_txns l
             CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
             WHERE l.partition_id = p_partition
               AND l.first_offset > p_watermark
               AND l.created_at > v_since AND l.created_at < v_until),
        d AS (
            SELECT DISTINCT ON (h.i) h.i::integer AS i, c.fo, c.o, c.created
              FROM c JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = c.h
             ORDER BY h.i, c.fo, c.o),
        s AS MATERIALIZED (
            SELECT r.fo, r.lo,
                   (SELECT substring(g.frames FROM (r.lo - 1) * 16 + 1 FOR (r.hi - r.lo + 1) * 16)
                      FROM queen.segments g
                     WHERE g.partition_id = p_partition AND g.first_offset = r.fo) AS ids,
                   (SELECT t.fingerprints[r.lo:r.hi]
                      FROM queen.log_txns t
                     WHERE t.partition_id = p_partition AND t.first_offset = r.fo
                       AND t.created_at = r.created) AS fps
              FROM (SELECT d.fo, d.created, min(d.o) AS lo, max(d.o) AS hi FROM d GROUP BY d.fo, d.created) r)
        SELECT coalesce(array_agg(d.i ORDER BY d.i), '{}'),
               coalesce(array_agg(coalesce(substring(s.ids FROM (d.o - s.lo) * 16 + 1 FOR 16),
                                           '\x00000000000000000000000000000000'::bytea) ORDER BY d.i), '{}'),
               coalesce(array_agg(d.created ORDER BY d.i), '{}'),
               coalesce(array_agg(s.fps[d.o - s.lo + 1] ORDER BY d.i), '{}')
          INTO dup_idx, dup_ids, dup_created, dup_fps
          FROM d JOIN s ON s.fo = d.fo;
    END IF;
END $$;

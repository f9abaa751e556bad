-- queen.resolve_offsets: every stored offset of each hash of p_hashes in
-- partition p_partition, as (i, msg_offset) rows (i the hash's 1-based index
-- in p_hashes; a hash stored more than once, with dedup off, gives a row per
-- copy). Acks, lookups, deletes and stream acks resolve transaction ids with
-- it. Applied with CREATE OR REPLACE at every broker start; "queen." is
-- replaced by the configured schema.
--
-- No window bound: a message older than the dedup window may still be
-- unacked. The shape is queen.push_probe's full-window probe: the GIN index
-- on hashes finds the rows, the partition filter is kept out of the index
-- conditions, the rows' hashes are unnested once into c (MATERIALIZED) and
-- hash-joined with the asked hashes. enable_nestloop = off is what keeps
-- the join a hash join: the planner believes unnest() returns 10 rows and
-- otherwise may pick a nested loop that compares every asked hash with every
-- hash of every matching row (an ack of 1000 messages pushed together: a
-- million comparisons). enable_seqscan = off: the GIN index, never a scan of
-- the sidecar (the planner misjudges it when the hash arrays are stored out
-- of line).
-- plpgsql, not sql: a LANGUAGE sql function with SET clauses is never
-- inlined, and PostgreSQL parsed and planned its CTE at every call (perf of
-- a one-message pop+ack: fmgr_sql 24% of the backend's CPU, base_yyparse
-- and the planner under it); RETURN QUERY keeps its plan for the session.
CREATE OR REPLACE FUNCTION queen.resolve_offsets(p_partition uuid, p_hashes bytea[])
RETURNS TABLE (i integer, msg_offset bigint)
LANGUAGE plpgsql STABLE
SET jit = off
SET enable_seqscan = off
SET enable_nestloop = off
AS $$
BEGIN
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT l.first_offset AS fo, m.h, m.o
          FROM queen.log_txns l
         CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
         WHERE l.hashes && p_hashes
           AND (l.partition_id = p_partition) IS TRUE)
    SELECT h.i::integer, c.fo + c.o - 1
      FROM c JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = c.h;
END $$;

-- queen.resolve_offsets_range: the stored offsets in [p_from, p_to) of each
-- hash of p_hashes in partition p_partition, as queen.resolve_offsets gives
-- them (i, msg_offset), read by offset instead of by hash: the sidecar rows
-- of the partition from the one covering p_from (its segment's first
-- offset, the same push wrote both) up to p_to, through log_txns_offsets,
-- their hashes unnested and hash-joined with the asked ones. An ack of what
-- a lease handed out knows that range (cursor .. lease end); a probe of the
-- GIN index reads every child's index for every hash instead (one ack of
-- 100 messages over 6 children: ~1.2-1.7 ms against 0.2-0.5 ms this way; of
-- one message ~100 µs against ~40-60).
CREATE OR REPLACE FUNCTION queen.resolve_offsets_range(p_partition uuid, p_hashes bytea[], p_from bigint, p_to bigint)
RETURNS TABLE (i integer, msg_offset bigint)
LANGUAGE plpgsql STABLE
SET jit = off
SET enable_seqscan = off
SET enable_nestloop = off
AS $$
BEGIN
    RETURN QUERY
    WITH c AS MATERIALIZED (
        SELECT l.first_offset AS fo, m.h, m.o
          FROM queen.log_txns l
         CROSS JOIN LATERAL unnest(l.hashes) WITH ORDINALITY AS m(h, o)
         WHERE l.partition_id = p_partition
           AND l.first_offset >= coalesce((SELECT s.first_offset FROM queen.segments s
                                            WHERE s.partition_id = p_partition AND s.first_offset <= p_from
                                            ORDER BY s.first_offset DESC LIMIT 1), p_from)
           AND l.first_offset < p_to)
    SELECT h.i::integer, c.fo + c.o - 1
      FROM c JOIN unnest(p_hashes) WITH ORDINALITY AS h(h, i) ON h.h = c.h
     WHERE c.fo + c.o - 1 >= p_from AND c.fo + c.o - 1 < p_to;
END $$;

-- queen.sidecar_children and queen.sidecar_ensure: the children of the hash
-- sidecar (queen.log_txns, partitioned by RANGE (created_at) since migration
-- 0011). Applied with CREATE OR REPLACE at every broker start; "queen." is
-- replaced by the configured schema.
--
-- sidecar_children lists the children with their bounds [lo, hi) (lo is
-- -infinity for MINVALUE) and whether a DETACH ... CONCURRENTLY of it was
-- interrupted (detach_pending: retention finishes it), and its estimated
-- rows (pg_class.reltuples: -1 until the first VACUUM or ANALYZE).
CREATE OR REPLACE FUNCTION queen.sidecar_children(OUT child text, OUT lo timestamptz, OUT hi timestamptz,
    OUT detach_pending boolean, OUT est_rows bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT c.relname::text,
           CASE b.m[1] WHEN 'MINVALUE' THEN '-infinity'::timestamptz ELSE btrim(b.m[1], '''')::timestamptz END,
           CASE b.m[2] WHEN 'MAXVALUE' THEN 'infinity'::timestamptz ELSE btrim(b.m[2], '''')::timestamptz END,
           i.inhdetachpending,
           c.reltuples::bigint
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS b(m)
     WHERE i.inhparent = 'queen.log_txns'::regclass
     ORDER BY 2
$$;

-- sidecar_ensure creates the children that [p_from, p_until) lacks, each
-- covering one slice of p_width aligned to the epoch (five minutes:
-- 20:05-20:10 UTC; an hour: 20:00-21:00 UTC), clipped where an existing
-- child begins or, when it starts inside a slice (after a child of another
-- width), ending at that slice's end; it returns how many it created.
-- Existing children are never changed, so a call with another width than
-- the previous one leaves no gap and no overlap. A child is created empty
-- and attached (ATTACH takes SHARE UPDATE EXCLUSIVE on log_txns: pushes,
-- probes and acks go on). Concurrent callers serialise on a
-- transaction-scoped advisory lock.
--
-- The broker calls it at every start (sqlstore.Open) and every retention
-- pass, to stay at least 15 minutes and three slices ahead of the clock,
-- with the width it chooses from the longest window (sqlstore.Config's
-- SidecarChildSeconds), and when a push finds no child for its row.
-- A generator writing rows directly with INSERT ... SELECT calls it first
-- for the created_at range it writes, best with the broker's width (the
-- children it creates ahead of the clock keep theirs when pushes reach
-- them), e.g. for a one-hour window
--   SELECT queen.sidecar_ensure(now() - interval '1 hour', now(), interval '5 minutes');
CREATE OR REPLACE FUNCTION queen.sidecar_ensure(p_from timestamptz, p_until timestamptz, p_width interval)
RETURNS integer
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    w      double precision := extract(epoch FROM p_width);
    v_lo   timestamptz[];
    v_hi   timestamptz[];
    k      integer := 1;
    t      timestamptz;
    v_end  timestamptz;
    v_name text;
    n      integer := 0;
BEGIN
    IF w IS NULL OR w < 60 THEN
        RAISE EXCEPTION 'sidecar_ensure: a child must span at least a minute, not %', p_width;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('regina.sidecar.queen.log_txns'));
    -- The existing children, by start (they never overlap).
    SELECT coalesce(array_agg(c.lo ORDER BY c.lo), '{}'), coalesce(array_agg(c.hi ORDER BY c.lo), '{}')
      INTO v_lo, v_hi FROM queen.sidecar_children() c;
    t := to_timestamp(floor(extract(epoch FROM p_from) / w) * w);
    WHILE t < p_until LOOP
        -- Skip the children that end at or before t.
        WHILE k <= cardinality(v_lo) AND v_hi[k] <= t LOOP
            k := k + 1;
        END LOOP;
        IF k <= cardinality(v_lo) AND v_lo[k] <= t THEN
            t := v_hi[k]; -- covered up to there
            CONTINUE;
        END IF;
        -- Uncovered from t: up to the next slice boundary or the next child.
        v_end := to_timestamp((floor(extract(epoch FROM t) / w) + 1) * w);
        IF k <= cardinality(v_lo) AND v_lo[k] < v_end THEN
            v_end := v_lo[k];
        END IF;
        v_name := 'log_txns_' || to_char(t AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
        EXECUTE format('CREATE TABLE %s (LIKE queen.log_txns INCLUDING DEFAULTS INCLUDING STORAGE)',
                       'queen.' || quote_ident(v_name));
        EXECUTE format('ALTER TABLE queen.log_txns ATTACH PARTITION %s FOR VALUES FROM (%L) TO (%L)',
                       'queen.' || quote_ident(v_name), t, v_end);
        n := n + 1;
        t := v_end;
    END LOOP;
    RETURN n;
END $$;

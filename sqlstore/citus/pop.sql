-- Citus only (sqlstore/citus.go applies this file after distributing the
-- tables, at every start; "queen." is replaced by the configured schema).
--
-- The consumer-group catch-up on Citus. On one PostgreSQL a group's horizon
-- is one transaction id (queen.pop_prepare). On Citus every worker has its
-- own transaction ids: a push runs on the worker holding its partition and
-- stamps push_xid with that worker's id, so a horizon is only meaningful on
-- the worker that took it. A group therefore keeps one horizon per worker
-- (group_scan_nodes, on the coordinator), and its catch-up runs on each
-- worker as one delegated call (citus_catch_up_worker, distributed on p_key, a
-- key whose shard that worker holds) over the worker's own shards, with
-- that worker's horizon and that worker's snapshot.

CREATE TABLE IF NOT EXISTS queen.group_scan_nodes (
    queue_id       uuid    NOT NULL,
    consumer_group text    NOT NULL,
    node           integer NOT NULL, -- pg_dist_placement.groupid
    horizon        xid8    NOT NULL,
    PRIMARY KEY (queue_id, consumer_group, node)
);
-- The ids running on that worker at the snapshot whose xmax is horizon
-- (queen.pop_prepare's rule, per worker).
ALTER TABLE queen.group_scan_nodes ADD COLUMN IF NOT EXISTS running xid8[] NOT NULL DEFAULT '{}';

-- push_xid is always the transaction id of the worker that writes the row:
-- a statement the coordinator routes (a transaction's push, a DLQ replay)
-- has its pg_current_xact_id() evaluated on the coordinator, an id of
-- another counter. The trigger replaces it with the worker's own.
CREATE OR REPLACE FUNCTION queen.citus_local_push_xid() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    IF NEW.push_xid IS DISTINCT FROM OLD.push_xid THEN
        NEW.push_xid := pg_current_xact_id();
    END IF;
    RETURN NEW;
END $$;

-- citus_pop_prepare is queen.pop_prepare without the catch-up (the caller
-- runs citus_catch_up_worker on each worker), and it writes a new group's
-- start point only when it is missing (consumer_groups is a reference
-- table: every write is a two-phase commit on every node).
CREATE OR REPLACE FUNCTION queen.citus_pop_prepare(p_queue text, p_group text, p_new boolean, p_from timestamptz,
    OUT queue_id uuid, OUT lease_time integer, OUT delayed integer, OUT window_buffer integer,
    OUT retry_limit integer, OUT sub_from timestamptz)
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    SELECT q.id, q.lease_time, q.delayed_processing, q.window_buffer, q.retry_limit
      INTO queue_id, lease_time, delayed, window_buffer, retry_limit
      FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND OR p_group = '__QUEUE_MODE__' THEN
        RETURN;
    END IF;
    SELECT g.subscription_from INTO sub_from FROM queen.consumer_groups g
     WHERE g.queue_id = citus_pop_prepare.queue_id AND g.consumer_group = p_group;
    IF NOT FOUND THEN
        INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_from)
        VALUES (citus_pop_prepare.queue_id, p_group, CASE WHEN p_from IS NOT NULL THEN p_from WHEN p_new THEN now() END)
        ON CONFLICT DO NOTHING;
        SELECT g.subscription_from INTO sub_from FROM queen.consumer_groups g
         WHERE g.queue_id = citus_pop_prepare.queue_id AND g.consumer_group = p_group;
    END IF;
END $$;

-- citus_catch_up_worker runs on the worker holding p_key's shard (a
-- distributed function) and catches the group up on every shard that
-- worker holds, with the statements of queen.pop_prepare run on the shard
-- tables themselves, and pop_prepare's horizon rule with that worker's
-- snapshot: only partitions stamped at or above p_horizon (the last
-- snapshot's xmax) or with an id in p_running (its running ids) can have
-- changed, so a stranger's transaction left open on the worker widens
-- nothing. p_horizon NULL: the group never caught up there (every partition
-- is looked at once). It answers the new horizon and running ids (the
-- given ones when nothing was pushed since: no write at all) and the worker
-- (node).
CREATE OR REPLACE FUNCTION queen.citus_catch_up_worker(p_key uuid, p_queue uuid, p_group text, p_sub_from timestamptz,
    p_horizon xid8, p_running text, OUT caught integer, OUT horizon text, OUT running text, OUT node integer)
LANGUAGE plpgsql SET jit = off SET citus.enable_manual_changes_to_shards = on AS $$
DECLARE
    r     record;
    todo  bigint[] := '{}';
    n     integer;
    found_any boolean := false;
    snap  pg_snapshot;
    v_run xid8[] := coalesce(p_running, '{}')::xid8[]; -- text: Citus cannot forward an xid8[] argument
BEGIN
    -- horizon and running are answered as text (the caller keeps them as
    -- such): the given ones when nothing was pushed since.
    caught := 0;
    horizon := p_horizon::text;
    running := v_run::text;
    SELECT groupid INTO node FROM pg_dist_local_group;
    FOR r IN SELECT p.shardid AS ps, c.shardid AS cs, s.shardid AS ss
               FROM pg_dist_shard p
               JOIN pg_dist_placement pl ON pl.shardid = p.shardid AND pl.groupid = node
               JOIN pg_dist_shard c ON c.logicalrelid = 'queen.consumers'::regclass AND c.shardminvalue = p.shardminvalue
               JOIN pg_dist_shard s ON s.logicalrelid = 'queen.segments'::regclass AND s.shardminvalue = p.shardminvalue
              WHERE p.logicalrelid = 'queen.partitions'::regclass
    LOOP
        IF p_horizon IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM queen.%I p WHERE p.queue_id = $1
                              AND (p.push_xid >= $2 OR p.push_xid = ANY ($3)))',
                           'partitions_' || r.ps) INTO found_any USING p_queue, p_horizon, v_run;
            CONTINUE WHEN NOT found_any;
        END IF;
        todo := todo || ARRAY[r.ps, r.cs, r.ss];
    END LOOP;
    IF cardinality(todo) = 0 THEN
        RETURN; -- nothing pushed here since: no write at all
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('regina.pop_prepare/' || p_queue::text || '/' || p_group, 0));
    -- Every transaction of this worker below the snapshot's xmax and not
    -- among its running ids had finished before the statements below take
    -- their snapshots, so they see its effects (pop_prepare's argument).
    snap := pg_current_snapshot();
    FOR k IN 0 .. cardinality(todo) / 3 - 1 LOOP
        EXECUTE format($q$
            SELECT count(*) FROM (SELECT 1 FROM queen.%1$I c JOIN queen.%2$I p ON c.partition_id = p.id
             WHERE p.queue_id = $1 AND ($2::xid8 IS NULL OR p.push_xid >= $2 OR p.push_xid = ANY ($5::xid8[]))
               AND c.consumer_group = $3 AND c.known_end < p.next_offset
             ORDER BY c.partition_id
               FOR UPDATE OF c) l$q$, 'consumers_' || todo[3*k+2], 'partitions_' || todo[3*k+1])
            USING p_queue, p_horizon, p_group, NULL::timestamptz, v_run;
        EXECUTE format($q$
            UPDATE queen.%1$I c
               SET known_end = p.next_offset,
                   avail_at = CASE
                       WHEN c.known_end > c.cursor_offset THEN c.avail_at
                       WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at
                       ELSE coalesce((SELECT s.created_at FROM queen.%3$I s
                                       WHERE s.partition_id = c.partition_id AND s.first_offset >= c.cursor_offset
                                       ORDER BY s.first_offset LIMIT 1), now()) END
              FROM queen.%2$I p
             WHERE p.queue_id = $1 AND ($2::xid8 IS NULL OR p.push_xid >= $2 OR p.push_xid = ANY ($5::xid8[]))
               AND c.partition_id = p.id AND c.consumer_group = $3 AND c.known_end < p.next_offset$q$,
            'consumers_' || todo[3*k+2], 'partitions_' || todo[3*k+1], 'segments_' || todo[3*k+3])
            USING p_queue, p_horizon, p_group, NULL::timestamptz, v_run;
        GET DIAGNOSTICS n = ROW_COUNT;
        caught := caught + n;
        EXECUTE format($q$
            INSERT INTO queen.%1$I AS cc (partition_id, consumer_group, queue_id, cursor_offset, known_end, avail_at, started)
            SELECT p.id, $3, $1, st.cur, p.next_offset,
                   coalesce((SELECT s.created_at FROM queen.%3$I s
                              WHERE s.partition_id = p.id AND s.first_offset >= st.cur
                              ORDER BY s.first_offset LIMIT 1), now()),
                   false
              FROM queen.%2$I p
             CROSS JOIN LATERAL (SELECT CASE
                    WHEN $4::timestamptz IS NULL THEN 0::bigint
                    ELSE coalesce((SELECT s.first_offset FROM queen.%3$I s WHERE s.partition_id = p.id
                                     AND s.created_at > $4 ORDER BY s.first_offset LIMIT 1), p.next_offset)
                    END AS cur) st
             WHERE p.queue_id = $1 AND ($2::xid8 IS NULL OR p.push_xid >= $2 OR p.push_xid = ANY ($5::xid8[]))
               AND p.next_offset > 0 AND ($4::timestamptz IS NULL OR p.last_push_at > $4)
               AND NOT EXISTS (SELECT 1 FROM queen.%1$I c WHERE c.partition_id = p.id AND c.consumer_group = $3)
             ORDER BY p.id
            ON CONFLICT (partition_id, consumer_group) DO UPDATE
               SET known_end = greatest(cc.known_end, EXCLUDED.known_end)$q$,
            'consumers_' || todo[3*k+2], 'partitions_' || todo[3*k+1], 'segments_' || todo[3*k+3])
            USING p_queue, p_horizon, p_group, p_sub_from, v_run;
        GET DIAGNOSTICS n = ROW_COUNT;
        caught := caught + n;
    END LOOP;
    horizon := pg_snapshot_xmax(snap)::text;
    running := ARRAY(SELECT pg_snapshot_xip(snap))::text;
END $$;

-- citus_partition_by_name finds a partition of a queue by name: by its
-- derived id first (one shard), by name only when that finds nothing (a
-- partition created before migration 0023 has a random id; that lookup asks
-- every worker).
CREATE OR REPLACE FUNCTION queen.citus_partition_by_name(p_queue uuid, p_name text, OUT id uuid, OUT name text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SET jit = off AS $$
BEGIN
    RETURN QUERY SELECT p.id, p.name FROM queen.partitions p
     WHERE p.id = queen.partition_id_of(p_queue, p_name) AND p.queue_id = p_queue AND p.name = p_name;
    IF NOT FOUND THEN
        RETURN QUERY SELECT p.id, p.name FROM queen.partitions p WHERE p.queue_id = p_queue AND p.name = p_name;
    END IF;
END $$;

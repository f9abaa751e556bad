-- Citus only (sqlstore/citus.go applies this file after pop.sql, at every
-- start; "queen." is replaced by the configured schema).
--
-- citus_ready_worker is the any-partition pop's look at one worker: the
-- group's catch-up there (citus_catch_up_worker, run in the same call), then
-- the group's ready cursor rows on that worker's shards, read from each
-- shard's ready index (consumers_ready) as the plain candidate scan reads
-- them (ready, available, longest waiting first), up to p_limit. It runs on
-- the worker holding p_key's shard (a distributed function, like the
-- catch-up): the broker calls it once per worker, all at once, and keeps the
-- answer as its cache of candidates (sqlstore/citus_ready.go), so that a pop
-- asks no worker for its candidates. ready is a JSON array of [partition id,
-- partition name, avail_at], ordered by avail_at.
CREATE OR REPLACE FUNCTION queen.citus_ready_worker(p_key uuid, p_queue uuid, p_group text, p_sub_from timestamptz,
    p_horizon xid8, p_running text, p_limit integer,
    OUT caught integer, OUT horizon text, OUT running text, OUT node integer, OUT ready text)
LANGUAGE plpgsql SET jit = off SET citus.enable_manual_changes_to_shards = on AS $$
DECLARE
    scan text;
BEGIN
    SELECT u.caught, u.horizon, u.running, u.node INTO caught, horizon, running, node
      FROM queen.citus_catch_up_worker(p_key, p_queue, p_group, p_sub_from, p_horizon, p_running) u;
    SELECT string_agg(format($q$(SELECT c.partition_id AS id, p.name, c.avail_at FROM queen.%1$I c
                                  JOIN queen.%2$I p ON p.id = c.partition_id
                                 WHERE c.queue_id = $1 AND c.consumer_group = $2 AND c.known_end > c.cursor_offset
                                   AND c.avail_at <= now()
                                 ORDER BY c.avail_at LIMIT $3)$q$,
                             'consumers_' || c.shardid, 'partitions_' || p.shardid), ' UNION ALL ')
      INTO scan
      FROM pg_dist_shard p
      JOIN pg_dist_placement pl ON pl.shardid = p.shardid AND pl.groupid = node
      JOIN pg_dist_shard c ON c.logicalrelid = 'queen.consumers'::regclass AND c.shardminvalue = p.shardminvalue
     WHERE p.logicalrelid = 'queen.partitions'::regclass;
    IF scan IS NULL THEN
        ready := '[]';
        RETURN;
    END IF;
    EXECUTE 'SELECT coalesce(json_agg(json_build_array(r.id, r.name, r.avail_at) ORDER BY r.avail_at), ''[]'')::text
               FROM (SELECT * FROM (' || scan || ') u ORDER BY u.avail_at LIMIT $3) r'
       INTO ready USING p_queue, p_group, p_limit;
END $$;

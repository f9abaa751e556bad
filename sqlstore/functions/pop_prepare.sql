-- queen.pop_prepare: what a pop does before its own transaction. Applied with
-- CREATE OR REPLACE at every broker start; "queen." is replaced by the
-- configured schema.
--
-- pop_prepare finds the queue, makes sure a named group's start point exists
-- (queen.consumer_groups) and, with p_catch_up, brings the group's cursor
-- rows up to date with the pushes committed since the group last caught up,
-- so that the ready index (queen.consumers_ready: cursor rows with unread
-- work, by avail_at) answers "which partition has work for this group". The
-- caller runs it as its own statement (its own transaction, committed before
-- the pop's transaction starts), so the rows it touches are not held while
-- the pop works.
--
-- How it cannot miss a push (the horizon is a snapshot, S, taken at the
-- group's last catch-up and kept as its xmax, horizon, and the ids it saw
-- running, running): a push stamps its partition row with its transaction
-- id (push_xid), and pushes to one partition are serialised by that row's
-- lock, so the stamp a row holds is its last committed writer's, C. If C
-- had committed before S, so had every earlier writer of the row (each
-- committed before the next took the lock), and the catch-up's scan, whose
-- snapshot is later than S, saw all their work. Otherwise C was running at
-- S (its id is in running) or began after it (its id is at or above
-- horizon; ids below xmax not in xip were finished at S). So the partitions
-- stamped at or above horizon or with an id in running are all that can
-- have changed, whatever the order of the ids of the writers. Nothing here
-- depends on transactions that never stamp a partition: a session idle in
-- transaction (this database or another) sits in running and costs one
-- index probe of its id, not a reread of what was pushed since it began.
-- Cost: the partitions pushed since the last catch-up or by the
-- transactions running then (none: one index probe and no write), not the
-- whole queue.
--
-- Rows it creates are not "started" (the group has not popped there): their
-- cursor is the group's start point (0, or the first segment after
-- subscription_from), avail_at the time of their oldest unread message.
-- Cursor rows it raises from "nothing unread" to "work waiting" get avail_at
-- = the time of that work's first segment.
--
-- Locks: consumer rows only (in partition order for the inserts), never a
-- partition row; it waits for a pop or an ack holding a row it updates
-- (pops never wait for a consumer row while holding one, so no deadlock).
CREATE OR REPLACE FUNCTION queen.pop_prepare(p_queue text, p_group text, p_new boolean, p_from timestamptz,
    p_catch_up boolean,
    OUT queue_id uuid, OUT lease_time integer, OUT delayed integer, OUT window_buffer integer,
    OUT retry_limit integer, OUT sub_from timestamptz, OUT caught integer, OUT scanned integer)
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    v_h     xid8;
    v_run   xid8[];
    v_found boolean;
    v_snap  pg_snapshot;
    v_parts uuid[];
    n       integer;
BEGIN
    caught := 0;
    scanned := 0;
    SELECT q.id, q.lease_time, q.delayed_processing, q.window_buffer, q.retry_limit
      INTO queue_id, lease_time, delayed, window_buffer, retry_limit
      FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN; -- queue_id is NULL
    END IF;
    IF p_group <> '__QUEUE_MODE__' THEN
        INSERT INTO queen.consumer_groups (queue_id, consumer_group, subscription_from)
        VALUES (pop_prepare.queue_id, p_group, CASE WHEN p_from IS NOT NULL THEN p_from WHEN p_new THEN now() END)
        ON CONFLICT DO NOTHING;
        SELECT g.subscription_from INTO sub_from FROM queen.consumer_groups g
         WHERE g.queue_id = pop_prepare.queue_id AND g.consumer_group = p_group;
    END IF;
    IF NOT p_catch_up THEN
        RETURN;
    END IF;

    SELECT g.horizon, g.running INTO v_h, v_run FROM queen.group_scan g
     WHERE g.queue_id = pop_prepare.queue_id AND g.consumer_group = p_group;
    v_found := FOUND;
    -- Two probes of partitions_push_xid (queue_id, push_xid), not one
    -- condition with OR: with the OR the plan read every partition of the
    -- queue through partitions_queue_name to find none (a 5,000-partition
    -- drain: ~2,500 index entries read per pop, pg_stat_user_indexes).
    IF v_found AND NOT EXISTS (SELECT 1 FROM queen.partitions p
                                WHERE p.queue_id = pop_prepare.queue_id AND p.push_xid >= v_h)
               AND NOT EXISTS (SELECT 1 FROM queen.partitions p
                                WHERE p.queue_id = pop_prepare.queue_id AND p.push_xid = ANY (v_run)) THEN
        RETURN; -- nothing pushed since: no write at all
    END IF;
    -- One catch-up per (queue, group) at a time: every pop of the group
    -- would otherwise lock the same cursor rows at once, and they
    -- deadlocked (hundreds of PostgreSQL deadlock errors in a 10-minute
    -- soak, its consumers stalled). The one that waited reads the horizon
    -- its predecessor left, so it has little left to do.
    PERFORM pg_advisory_xact_lock(hashtextextended('regina.pop_prepare/' || pop_prepare.queue_id::text || '/' || p_group, 0));
    SELECT g.horizon, g.running INTO v_h, v_run FROM queen.group_scan g
     WHERE g.queue_id = pop_prepare.queue_id AND g.consumer_group = p_group;
    v_found := FOUND;
    -- The new horizon. Every transaction below its xmax and not among its
    -- running ids had finished before the statements below take their
    -- snapshots, so they see its effects.
    v_snap := pg_current_snapshot();
    -- The partitions that may have changed, looked at once.
    IF v_found THEN
        v_parts := ARRAY(SELECT x.id FROM (
                             SELECT p.id FROM queen.partitions p
                              WHERE p.queue_id = pop_prepare.queue_id AND p.push_xid >= v_h
                             UNION
                             SELECT p.id FROM queen.partitions p
                              WHERE p.queue_id = pop_prepare.queue_id AND p.push_xid = ANY (v_run)) x
                          ORDER BY x.id);
    ELSE
        v_parts := ARRAY(SELECT p.id FROM queen.partitions p
                          WHERE p.queue_id = pop_prepare.queue_id ORDER BY p.id);
    END IF;
    scanned := cardinality(v_parts);

    -- Cursor rows the group has: raise known_end to the partition's end.
    -- Their locks are taken first, in partition-id order: every pop of the
    -- group runs this catch-up, and an UPDATE locks its rows in the join's
    -- order, so two catch-ups over the same rows deadlocked (a soak's
    -- consumers stalled on PostgreSQL's deadlock errors).
    PERFORM 1 FROM queen.consumers c JOIN queen.partitions p ON c.partition_id = p.id
     WHERE p.id = ANY (v_parts)
       AND c.consumer_group = p_group AND c.known_end < p.next_offset
     ORDER BY c.partition_id
       FOR UPDATE OF c;
    UPDATE queen.consumers c
       SET known_end = p.next_offset,
           avail_at = CASE
               WHEN c.known_end > c.cursor_offset THEN c.avail_at
               WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at
               ELSE coalesce((SELECT s.created_at FROM queen.segments s
                               WHERE s.partition_id = c.partition_id AND s.first_offset >= c.cursor_offset
                               ORDER BY s.first_offset LIMIT 1), now()) END
      FROM queen.partitions p
     WHERE p.id = ANY (v_parts)
       AND c.partition_id = p.id AND c.consumer_group = p_group AND c.known_end < p.next_offset;
    GET DIAGNOSTICS n = ROW_COUNT;
    caught := caught + n;

    -- Partitions with work the group may take and no cursor row yet: one,
    -- at the group's start point (the same rule as a named-partition pop).
    INSERT INTO queen.consumers (partition_id, consumer_group, queue_id, cursor_offset, known_end, avail_at, started)
    SELECT p.id, p_group, pop_prepare.queue_id, st.cur, p.next_offset,
           coalesce((SELECT s.created_at FROM queen.segments s
                      WHERE s.partition_id = p.id AND s.first_offset >= st.cur
                      ORDER BY s.first_offset LIMIT 1), now()),
           false
      FROM queen.partitions p
     CROSS JOIN LATERAL (SELECT CASE
            WHEN sub_from IS NULL THEN 0::bigint
            ELSE coalesce((SELECT s.first_offset FROM queen.segments s WHERE s.partition_id = p.id
                             AND s.created_at > sub_from ORDER BY s.first_offset LIMIT 1), p.next_offset)
            END AS cur) st
     WHERE p.id = ANY (v_parts)
       AND p.next_offset > 0 AND (sub_from IS NULL OR p.last_push_at > sub_from)
       AND NOT EXISTS (SELECT 1 FROM queen.consumers c WHERE c.partition_id = p.id AND c.consumer_group = p_group)
     ORDER BY p.id
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET known_end = greatest(consumers.known_end, EXCLUDED.known_end);
    GET DIAGNOSTICS n = ROW_COUNT;
    caught := caught + n;

    INSERT INTO queen.group_scan (queue_id, consumer_group, horizon, running)
    VALUES (pop_prepare.queue_id, p_group, pg_snapshot_xmax(v_snap),
            ARRAY(SELECT pg_snapshot_xip(v_snap)))
    ON CONFLICT ON CONSTRAINT group_scan_pkey DO UPDATE
       SET horizon = EXCLUDED.horizon, running = EXCLUDED.running
     WHERE group_scan.horizon <= EXCLUDED.horizon;
END $$;

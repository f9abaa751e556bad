-- queen.ack_completions: an ack of completions of one partition for one
-- consumer group, in one statement (one round trip, its own transaction when
-- sent alone). The same reads and rules as sqlstore's ackPartition and
-- applyAcks restricted to completions (sqlstore/ack.go; a change to one is a
-- change to both, TestAckCompletionsMatchesGo holds them together):
--
--   - no partition: state 1; no cursor row of the group on it: state 2 (the
--     names are returned with state 2);
--   - each hash p_hashes[k] resolves through the sidecar
--     (queen.resolve_offsets) to its stored offsets; the first not yet
--     consumed is taken, else the last; none: code 1 (unresolvable). The
--     row's lease range is read first (queen.resolve_offsets_range from
--     the cursor to lease_to): a hash found there has its first offset not
--     yet consumed there, the same answer; only the others go to the
--     probe of every child's GIN index;
--   - in offset order (then k): an offset below the cursor is a success
--     (acks are idempotent); one whose item carries a lease (p_leases[k] not
--     NULL) that is not the row's live lease is refused, code 2, or code 3
--     when the row holds no lease at all (released); else the cursor moves
--     past it, a success;
--   - the lease is released (and the retry count cleared) when the cursor
--     reached its end; the row is updated when anything moved.
--
-- codes[k] is 0 for a success. released says that the lease was released
-- (every success of the call then reports leaseReleased). Applied with
-- CREATE OR REPLACE at every broker start; "queen." is replaced by the
-- configured schema.
CREATE OR REPLACE FUNCTION queen.ack_completions(p_partition uuid, p_group text, p_hashes bytea[], p_leases uuid[])
RETURNS TABLE (queue_name text, partition_name text, state integer, codes integer[], released boolean)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_n        integer := coalesce(array_length(p_hashes, 1), 0);
    v_codes    integer[];
    v_cursor   bigint;
    v_lease    uuid;
    v_live     boolean;
    v_to       bigint;
    v_retry    integer;
    v_dirty    boolean := false;
    v_released boolean := false;
    v_off      bigint[];
    v_rest     bytea[] := '{}';
    v_at       integer[] := '{}';
    t          record;
BEGIN
    v_codes := CASE WHEN v_n = 0 THEN '{}'::integer[] ELSE array_fill(0, ARRAY[v_n]) END;
    SELECT q.name, p.name INTO queue_name, partition_name
      FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_partition;
    IF NOT FOUND THEN
        state := 1; codes := v_codes; released := false;
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT c.cursor_offset, c.lease_id, (c.lease_id IS NOT NULL AND c.lease_expires_at > now()), c.lease_to, c.retry_count
      INTO v_cursor, v_lease, v_live, v_to, v_retry
      FROM queen.consumers c
     WHERE c.partition_id = p_partition AND c.consumer_group = p_group
       FOR UPDATE;
    IF NOT FOUND THEN
        state := 2; codes := v_codes; released := false;
        RETURN NEXT;
        RETURN;
    END IF;
    -- Unresolvable until an offset is found.
    FOR k IN 1 .. v_n LOOP
        v_codes[k] := 1;
    END LOOP;
    IF v_n > 0 THEN
        v_off := array_fill(NULL::bigint, ARRAY[v_n]);
    END IF;
    IF v_n > 0 AND v_to IS NOT NULL AND v_to > v_cursor THEN
        FOR t IN
            SELECT r.i AS k, min(r.msg_offset) AS off
              FROM queen.resolve_offsets_range(p_partition, p_hashes, v_cursor, v_to) r
             GROUP BY r.i
        LOOP
            v_off[t.k] := t.off;
        END LOOP;
    END IF;
    FOR k IN 1 .. v_n LOOP
        IF v_off[k] IS NULL THEN
            v_rest := v_rest || p_hashes[k];
            v_at := v_at || k;
        END IF;
    END LOOP;
    IF cardinality(v_rest) > 0 THEN
        FOR t IN
            SELECT r.i AS k, coalesce(min(r.msg_offset) FILTER (WHERE r.msg_offset >= v_cursor), max(r.msg_offset)) AS off
              FROM queen.resolve_offsets(p_partition, v_rest) r
             GROUP BY r.i
        LOOP
            v_off[v_at[t.k]] := t.off;
        END LOOP;
    END IF;
    FOR t IN
        SELECT u.k::integer AS k, u.off
          FROM unnest(v_off) WITH ORDINALITY AS u(off, k)
         WHERE u.off IS NOT NULL
         ORDER BY u.off, u.k
    LOOP
        IF t.off < v_cursor THEN
            v_codes[t.k] := 0;
        ELSIF p_leases[t.k] IS NOT NULL AND (NOT v_live OR v_lease IS NULL OR v_lease <> p_leases[t.k]) THEN
            v_codes[t.k] := CASE WHEN v_lease IS NULL THEN 3 ELSE 2 END;
        ELSE
            v_cursor := t.off + 1;
            v_codes[t.k] := 0;
            v_dirty := true;
        END IF;
    END LOOP;
    IF v_lease IS NOT NULL AND v_to IS NOT NULL AND v_cursor >= v_to THEN
        v_released := true;
        v_retry := 0;
    END IF;
    IF v_dirty OR v_released THEN
        UPDATE queen.consumers SET cursor_offset = v_cursor, retry_count = v_retry,
               lease_id = CASE WHEN v_released THEN NULL ELSE lease_id END,
               lease_expires_at = CASE WHEN v_released THEN NULL ELSE lease_expires_at END,
               lease_from = CASE WHEN v_released THEN NULL ELSE lease_from END,
               lease_to = CASE WHEN v_released THEN NULL ELSE lease_to END,
               avail_at = CASE WHEN v_released THEN now() ELSE avail_at END,
               updated_at = now()
         WHERE partition_id = p_partition AND consumer_group = p_group;
    END IF;
    state := 0; codes := v_codes; released := v_released;
    RETURN NEXT;
END $$;

-- queen.partition_id_of: the id of a new partition, derived from its queue's
-- id and its name (migration 0023: the primary key then keeps (queue_id,
-- name) unique, on Citus too). Applied with CREATE OR REPLACE at every
-- broker start; "queen." is replaced by the configured schema.
CREATE OR REPLACE FUNCTION queen.partition_id_of(p_queue_id uuid, p_name text) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET jit = off AS $$
    SELECT md5(p_queue_id::text || '/' || p_name)::uuid
$$;

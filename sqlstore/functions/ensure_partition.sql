-- queen.ensure_partition: partition resolution. Applied with CREATE OR REPLACE
-- at every broker start; "queen." is replaced by the configured schema.
--
-- ensure_partition returns the partition (creating the queue and the partition
-- when missing), the queue's deduplication window and its dedup_payload_check. A queue it creates gets
-- the options passed in p_*: the broker passes partition.DefaultQueueOptions,
-- the one place queue option defaults are written down (the table has no
-- DEFAULT for them, so a queue can only be created with every option named).
CREATE OR REPLACE FUNCTION queen.ensure_partition(p_queue text, p_partition text, p_namespace text, p_task text,
    p_lease_time integer, p_retry_limit integer, p_retry_delay integer, p_max_size integer, p_ttl integer,
    p_priority integer, p_delayed_processing integer, p_window_buffer integer,
    p_dead_letter_queue boolean, p_dlq_after_max_retries boolean, p_retention_enabled boolean,
    p_retention_seconds integer, p_completed_retention_seconds integer, p_max_wait_time_seconds integer,
    p_encryption_enabled boolean, p_dedup_window_seconds integer, p_dedup_payload_check text,
    OUT partition_id uuid, OUT queue_id uuid, OUT window_seconds integer, OUT payload_check text)
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    SELECT q.id, q.dedup_window_seconds, q.dedup_payload_check INTO queue_id, window_seconds, payload_check
      FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        INSERT INTO queen.queues (name, namespace, task, lease_time, retry_limit, retry_delay, max_size, ttl,
                                  priority, delayed_processing, window_buffer, dead_letter_queue,
                                  dlq_after_max_retries, retention_enabled, retention_seconds,
                                  completed_retention_seconds, max_wait_time_seconds, encryption_enabled,
                                  dedup_window_seconds, dedup_payload_check)
             VALUES (p_queue, p_namespace, p_task, p_lease_time, p_retry_limit, p_retry_delay, p_max_size, p_ttl,
                     p_priority, p_delayed_processing, p_window_buffer, p_dead_letter_queue,
                     p_dlq_after_max_retries, p_retention_enabled, p_retention_seconds,
                     p_completed_retention_seconds, p_max_wait_time_seconds, p_encryption_enabled,
                     p_dedup_window_seconds, p_dedup_payload_check)
            ON CONFLICT (name) DO NOTHING;
        SELECT q.id, q.dedup_window_seconds, q.dedup_payload_check INTO queue_id, window_seconds, payload_check
          FROM queen.queues q WHERE q.name = p_queue;
    END IF;
    -- By its derived id first (a key lookup; on Citus one shard), then by
    -- name (a partition created before migration 0023 has a random id).
    SELECT p.id INTO partition_id FROM queen.partitions p
     WHERE p.id = queen.partition_id_of(ensure_partition.queue_id, p_partition);
    IF NOT FOUND THEN
        SELECT p.id INTO partition_id FROM queen.partitions p
         WHERE p.queue_id = ensure_partition.queue_id AND p.name = p_partition;
    END IF;
    IF NOT FOUND THEN
        partition_id := queen.partition_id_of(ensure_partition.queue_id, p_partition);
        INSERT INTO queen.partitions (id, queue_id, name) VALUES (partition_id, ensure_partition.queue_id, p_partition)
            ON CONFLICT (id) DO NOTHING;
    END IF;
END $$;

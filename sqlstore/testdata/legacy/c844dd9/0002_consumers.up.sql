-- Regina schema, version 2: consumers.
--
-- A consumer group (Queen's queue mode is the group '__QUEUE_MODE__') reads a
-- partition from its cursor forward. A pop leases a contiguous range of
-- offsets [lease_from, lease_to) to one consumer; acks move the cursor; a
-- lease that expires hands the un-acked rest out again.

-- One row per (partition, consumer group): the cursor and the lease.
CREATE TABLE queen.consumers (
    partition_id     uuid        NOT NULL,
    consumer_group   text        NOT NULL,
    -- Every offset below the cursor is consumed; the next pop starts here.
    cursor_offset    bigint      NOT NULL DEFAULT 0,
    lease_id         uuid,
    lease_expires_at timestamptz,
    lease_from       bigint,
    lease_to         bigint,
    -- Failed deliveries of the batch at the cursor (reset when a batch
    -- completes); past the queue's retryLimit a failed message goes to the DLQ.
    retry_count      integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
CREATE INDEX consumers_lease_id ON queen.consumers (lease_id) WHERE lease_id IS NOT NULL;
CREATE INDEX consumers_group ON queen.consumers (consumer_group);

-- One row per (queue, consumer group): where a new group starts reading
-- (NULL = from the beginning), so partitions created later start at the
-- same point.
CREATE TABLE queen.consumer_groups (
    queue_id          uuid        NOT NULL,
    consumer_group    text        NOT NULL,
    subscription_from timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- Dead letters: a copy of each message that exhausted its retries (or was
-- acked with status 'dlq'), per consumer group.
CREATE TABLE queen.dlq (
    partition_id   uuid        NOT NULL,
    consumer_group text        NOT NULL,
    msg_offset     bigint      NOT NULL,
    message_id     uuid        NOT NULL,
    transaction_id text        NOT NULL,
    trace_id       uuid,
    payload        bytea       NOT NULL,
    created_at     timestamptz NOT NULL,
    error_message  text        NOT NULL,
    retry_count    integer     NOT NULL,
    failed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group, msg_offset)
);
CREATE INDEX dlq_failed_at ON queen.dlq (failed_at);

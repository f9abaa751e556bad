-- Regina schema, version 3: trace events (POST /api/v1/traces).
--
-- A trace event is attached to one stored message, identified by its
-- partition and offset (resolved from the transaction id through the hash
-- sidecar when the event is recorded). Events live as long as their message:
-- retention removes those below a partition's oldest stored offset, a queue
-- delete removes its partitions' events.

CREATE TABLE queen.traces (
    partition_id   uuid        NOT NULL,
    msg_offset     bigint      NOT NULL,
    -- UUIDv7 minted by the broker: the traceId the POST answers.
    id             uuid        NOT NULL,
    transaction_id text        NOT NULL,
    event_type     text        NOT NULL,
    consumer_group text        NOT NULL,
    -- The broker that recorded the event (host:port).
    worker_id      text        NOT NULL,
    -- The event's data, raw JSON as received.
    data           bytea       NOT NULL,
    -- Sorted, without duplicates.
    trace_names    text[]      NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, msg_offset, id)
);
-- GET /api/v1/traces/:partitionId/:transactionId.
CREATE INDEX traces_transaction ON queen.traces (partition_id, transaction_id);
-- GET /api/v1/traces/by-name/:name.
CREATE INDEX traces_names ON queen.traces USING gin (trace_names);

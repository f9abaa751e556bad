-- Regina schema, version 8: per-minute counters and process samples for the
-- status and analytics views (GET /api/v1/status, /api/v1/analytics/*).
--
-- Every broker counts in memory what it serves (pushes, pops, acks, delivery
-- lag, retention) and writes one row per (minute, broker, queue) about once
-- a minute; the views sum them over a time range. The primary keys start
-- with the minute, so a view reads only the rows of its range. Rows older
-- than METRICS_RETENTION_DAYS are deleted by the broker that writes.

CREATE TABLE queen.stats_minutes (
    minute                   timestamptz NOT NULL,
    -- The broker that counted (host:port).
    instance                 text        NOT NULL,
    -- The queue; '' is the broker-wide row (requests whatever their queue,
    -- database errors).
    queue                    text        NOT NULL,
    push_requests            bigint      NOT NULL DEFAULT 0,
    push_messages            bigint      NOT NULL DEFAULT 0,
    duplicates               bigint      NOT NULL DEFAULT 0,
    pop_requests             bigint      NOT NULL DEFAULT 0,
    pop_messages             bigint      NOT NULL DEFAULT 0,
    pop_empty                bigint      NOT NULL DEFAULT 0,
    ack_requests             bigint      NOT NULL DEFAULT 0,
    ack_success              bigint      NOT NULL DEFAULT 0,
    ack_failed               bigint      NOT NULL DEFAULT 0,
    dlq                      bigint      NOT NULL DEFAULT 0,
    transactions             bigint      NOT NULL DEFAULT 0,
    lag_count                bigint      NOT NULL DEFAULT 0,
    lag_sum_ms               bigint      NOT NULL DEFAULT 0,
    lag_max_ms               bigint      NOT NULL DEFAULT 0,
    db_errors                bigint      NOT NULL DEFAULT 0,
    -- Long-poll pops waiting, integrated over time (pop-milliseconds).
    parked_ms                bigint      NOT NULL DEFAULT 0,
    retention_msgs           bigint      NOT NULL DEFAULT 0,
    completed_retention_msgs bigint      NOT NULL DEFAULT 0,
    eviction_msgs            bigint      NOT NULL DEFAULT 0,
    retention_runs           bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, instance, queue)
);

-- One row per (minute, broker): CPU, memory, pool and pipeline samples, each
-- {avg,min,max,last,count} (reginatype.SystemSample as JSON).
CREATE TABLE queen.system_minutes (
    minute   timestamptz NOT NULL,
    instance text        NOT NULL,
    sample   jsonb       NOT NULL,
    PRIMARY KEY (minute, instance)
);

-- partitionsCreated per bucket (GET /api/v1/analytics/queue-ops).
CREATE INDEX partitions_created_at ON queen.partitions (created_at);

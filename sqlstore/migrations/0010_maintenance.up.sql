-- Regina schema, version 10: maintenance switches.
--
-- One row: whether push maintenance (POST /api/v1/push refused with a
-- retryable 503) and pop maintenance (pops answer empty) are on. Every broker
-- on the schema reads it at start and then every MAINTENANCE_REFRESH ms, so
-- the switches are shared by all brokers and survive restarts.
CREATE TABLE queen.maintenance (
    id                boolean     PRIMARY KEY DEFAULT true CHECK (id),
    push              boolean     NOT NULL DEFAULT false,
    pop               boolean     NOT NULL DEFAULT false,
    push_changed_at   timestamptz,
    pop_changed_at    timestamptz
);
INSERT INTO queen.maintenance DEFAULT VALUES;

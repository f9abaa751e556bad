-- Regina schema, version 5: streams (Queen's streams v1 API).
--
-- streams_queries maps a query name to the UUID every later call uses, and
-- keeps the fingerprint of its operator chain (config_hash): a runner whose
-- chain changed is refused unless it asks for a reset, which deletes the
-- query's state.
--
-- streams_state is the stored state of a query: one row per key of a shard,
-- a shard being (source partition, query). The key is compared in byte
-- order (COLLATE "C": SDK keys contain U+001F, rows come back sorted by key
-- and key_prefix is a literal prefix). partition_id is first in the primary
-- key, as in every growing table (Citus-ready); it is the source partition's
-- id but not tied to queen.partitions (no foreign keys): deleting a queue
-- leaves its streams' state behind, as upstream does.
CREATE TABLE queen.streams_queries (
    id           uuid        PRIMARY KEY,
    name         text        NOT NULL UNIQUE,
    source_queue text        NOT NULL,
    sink_queue   text,
    config_hash  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE queen.streams_state (
    partition_id uuid        NOT NULL,
    query_id     uuid        NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    value        jsonb       NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, query_id, key)
);

-- A reset deletes every row of one query, across its partitions.
CREATE INDEX streams_state_query ON queen.streams_state (query_id);

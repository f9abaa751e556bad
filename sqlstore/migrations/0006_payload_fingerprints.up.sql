-- Regina schema, version 6: payload fingerprints (dedupPayloadCheck).
--
-- A queue's dedup_payload_check ('off', 'report' or 'reject') says whether a
-- duplicate's payload is compared with its original's. With it on, each
-- log_txns row carries fingerprints[k], the 64-bit xxh3 of frame k's payload
-- bytes as received (computed in Go), next to hashes[k]; the column is NULL
-- on rows written while the check was off, so off stores and reads nothing.
--
-- Like every queue option, dedup_payload_check has no DEFAULT (the broker
-- passes partition.DefaultQueueOptions); the DEFAULT below only fills the
-- rows of existing queues and is dropped at once.
ALTER TABLE queen.queues ADD COLUMN dedup_payload_check text NOT NULL DEFAULT 'off'
    CHECK (dedup_payload_check IN ('off', 'report', 'reject'));
ALTER TABLE queen.queues ALTER COLUMN dedup_payload_check DROP DEFAULT;

ALTER TABLE queen.log_txns ADD COLUMN fingerprints bigint[];

-- Both functions change their argument or result lists (re-created from
-- sqlstore/functions right after the migrations).
DROP FUNCTION IF EXISTS queen.push_segment(uuid, integer, bigint, bytea[], bytea, bytea, integer[]);
DROP FUNCTION IF EXISTS queen.ensure_partition(text, text, text, text, integer, integer, integer, integer,
    integer, integer, integer, integer, boolean, boolean, boolean, integer, integer, integer, boolean, integer);

-- Regina schema, version 7: pops find work through an index.
--
-- Before this version an any-partition pop looked at every partition of the
-- queue to find one with unread messages for its group: its cost grew with
-- the partition count. Now each (partition, group) cursor row also says
-- whether it has work the group has not read (known_end > cursor_offset) and
-- since when it has been waiting to be served (avail_at), and a partial index
-- over exactly those rows, ordered by avail_at, hands a pop the partition
-- that waited longest.
--
-- Pushes do not touch cursor rows: a push stamps its partition row with its
-- transaction id (push_xid) and its time (last_push_at). Before it looks for
-- work, a pop brings its group's cursor rows up to date from the partitions
-- pushed since the group's horizon (queen.group_scan): every transaction
-- older than the horizon had finished when that group last caught up, so the
-- partitions stamped at or above it are all that can have changed. See
-- sqlstore/functions/pop_prepare.sql.

ALTER TABLE queen.partitions ADD COLUMN push_xid xid8, ADD COLUMN last_push_at timestamptz;
UPDATE queen.partitions p SET last_push_at = (SELECT s.created_at FROM queen.segments s
    WHERE s.partition_id = p.id ORDER BY s.first_offset DESC LIMIT 1);
CREATE INDEX partitions_push_xid ON queen.partitions (queue_id, push_xid);

-- queue_id: the queue of partition_id (the ready index is per queue and
-- group). known_end: the partition's next_offset as the group last saw it.
-- avail_at: since when the cursor has been waiting to be served (its oldest
-- unread message arrived, its lease was released or expires, its
-- delayedProcessing or windowBuffer ends). started: the group has popped
-- from this partition (a row a catch-up made is not started: the consumer
-- group views do not show it, seek leaves it, a new subscription start point
-- replaces it).
ALTER TABLE queen.consumers ADD COLUMN queue_id uuid, ADD COLUMN known_end bigint NOT NULL DEFAULT 0,
    ADD COLUMN avail_at timestamptz NOT NULL DEFAULT now(), ADD COLUMN started boolean NOT NULL DEFAULT true;
DELETE FROM queen.consumers c WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = c.partition_id);
UPDATE queen.consumers c SET queue_id = p.queue_id, known_end = p.next_offset,
       avail_at = CASE WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > now() THEN c.lease_expires_at
                       ELSE c.updated_at END
  FROM queen.partitions p WHERE p.id = c.partition_id;
ALTER TABLE queen.consumers ALTER COLUMN queue_id SET NOT NULL, ALTER COLUMN started SET DEFAULT false;
CREATE INDEX consumers_ready ON queen.consumers (queue_id, consumer_group, avail_at) WHERE known_end > cursor_offset;

-- One row per (queue, group) that has caught up at least once: horizon is
-- the oldest transaction still running when it last did. No row: the next
-- catch-up looks at every partition of the queue (once).
CREATE TABLE queen.group_scan (
    queue_id       uuid NOT NULL,
    consumer_group text NOT NULL,
    horizon        xid8 NOT NULL,
    PRIMARY KEY (queue_id, consumer_group)
);

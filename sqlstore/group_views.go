package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// oldestPendingAt is the stored time of the oldest message consumer row c
// has not consumed on partition p, NULL when it is caught up: the segment
// covering the cursor, or the first one after it when retention removed that
// one (two primary-key probes at most).
const oldestPendingAt = `CASE WHEN c.cursor_offset < p.next_offset THEN coalesce(
	    (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = c.partition_id
	        AND s.first_offset <= c.cursor_offset ORDER BY s.first_offset DESC LIMIT 1),
	    (SELECT s.created_at FROM queen.segments s WHERE s.partition_id = c.partition_id
	        AND s.first_offset > c.cursor_offset ORDER BY s.first_offset LIMIT 1)) END`

// groupCursorsSQL lists every cursor (of one group when $1 is not NULL),
// by group, queue and partition: index scans of consumers, partitions and
// queues, and the probes of oldestPendingAt per lagging cursor. Its cost
// grows with the number of cursors, never with the number of segments.
const groupCursorsSQL = `SELECT c.consumer_group, q.name, p.name, p.id, c.cursor_offset, p.next_offset,
	       CASE WHEN c.lease_expires_at > now() THEN c.lease_id END, c.created_at, c.updated_at,
	       ` + oldestPendingAt + `, g.subscription_from, g.created_at
	  FROM queen.consumers c
	  JOIN queen.partitions p ON p.id = c.partition_id
	  JOIN queen.queues q ON q.id = p.queue_id
	  LEFT JOIN queen.consumer_groups g ON g.queue_id = q.id AND g.consumer_group = c.consumer_group
	 WHERE ($1::text IS NULL OR c.consumer_group = $1) AND c.started
	 ORDER BY c.consumer_group, q.name, p.name`

// GroupCursors returns every consumer group's cursors (one group's when
// group is not empty), by group, queue and partition, read in one snapshot,
// and the database time of that snapshot.
func (s *Store) GroupCursors(ctx context.Context, group string) ([]reginatype.GroupCursor, time.Time, error) {
	var (
		out []reginatype.GroupCursor
		now time.Time
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, qualify(groupCursorsSQL, s.schema), nullText(group))
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (reginatype.GroupCursor, error) {
				var (
					c     reginatype.GroupCursor
					lease pgtype.UUID
				)
				err := r.Scan(&c.Group, &c.Queue, &c.Partition, (*uuidScanner)(&c.PartitionID), &c.Cursor, &c.NextOffset,
					&lease, &c.CreatedAt, &c.UpdatedAt, &c.OldestPendingAt, &c.SubscriptionFrom, &c.SubscriptionAt)
				if lease.Valid {
					id := partition.UUID(lease.Bytes)
					c.LeaseID = &id
				}
				return c, err
			})
			return err
		})
	if err != nil {
		return nil, now, fmt.Errorf("consumer group cursors: %w", classify(err))
	}
	return out, now, nil
}

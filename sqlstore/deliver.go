package sqlstore

import (
	"context"
	"fmt"

	"github.com/regina-mq/regina/partition"
)

// deliveryQueries settle a pop's lease once the broker knows whether its
// answer reached the client's connection (see SettleDelivery).
type deliveryQueries struct {
	consume, release string
}

func newDeliveryQueries(schema string) deliveryQueries {
	// Both commit without waiting for their WAL flush (synchronous_commit
	// off for their own transaction): one lost in a crash of PostgreSQL
	// leaves the pop's lease, which was committed durably, to expire, and
	// the messages are delivered again then. At-least-once either way, and
	// no flush wait on the consume path.
	q := deliveryQueries{
		// An autoAck pop's answer was written: the cursor moves past the
		// leased range, as the autoAck pop itself used to do.
		consume: `UPDATE queen.consumers SET cursor_offset = lease_to, lease_id = NULL, lease_expires_at = NULL,
			       lease_from = NULL, lease_to = NULL, retry_count = 0, avail_at = now(), updated_at = now()
			  FROM (SELECT set_config('synchronous_commit', 'off', true)) async
			 WHERE partition_id = ANY($1::uuid[]) AND consumer_group = $2 AND lease_id = $3`,
		// The answer never reached the client: the lease goes at once (the
		// cursor already sits at lease_from), so the messages are served
		// again now rather than after leaseTime. The retry count is kept:
		// nobody processed them.
		release: `UPDATE queen.consumers SET lease_id = NULL, lease_expires_at = NULL,
			       lease_from = NULL, lease_to = NULL, avail_at = now(), updated_at = now()
			  FROM (SELECT set_config('synchronous_commit', 'off', true)) async
			 WHERE partition_id = ANY($1::uuid[]) AND consumer_group = $2 AND lease_id = $3`,
	}
	for _, p := range []*string{&q.consume, &q.release} {
		*p = qualify(*p, schema)
	}
	return q
}

// SettleDelivery ends the lease leaseID that a pop took on partitions for
// group once the broker knows the fate of its answer: consumed moves each
// cursor past the leased messages (an autoAck pop whose answer was written),
// otherwise the lease is released and the messages are ready at once (the
// answer could not be written). A lease that is no longer leaseID's (it
// expired and another pop took the partition) is left alone, so settling
// never takes a message from a consumer that received it since.
func (s *Store) SettleDelivery(ctx context.Context, group string, partitions []partition.UUID, leaseID partition.UUID,
	consumed bool) error {
	ids := make([][16]byte, len(partitions))
	for i, p := range partitions {
		ids[i] = p
	}
	q := s.sql.delivery.release
	if consumed {
		q = s.sql.delivery.consume
	}
	if _, err := s.pool.Exec(ctx, q, ids, group, [16]byte(leaseID)); err != nil {
		return fmt.Errorf("settle lease %s (consumed %t): %w", leaseID, consumed, classify(err))
	}
	return nil
}

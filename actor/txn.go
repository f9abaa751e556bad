package actor

import (
	"context"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Transaction runs pushes and acks atomically (see
// sqlstore.Store.Transaction). It runs beside the partition actors, not
// through them: the partition row lock serialises it with their pushes. The
// segments it wrote lie above every offset the cache vouches for (the cache
// knows a partition up to K; a transaction writes past the allocator, so
// past K), so a watermark probe still covers them; the actor's next write
// then starts past a hole and the cache drops and re-hydrates that
// partition rather than extend K across offsets it never saw. Long-polling
// consumers of the queues written are woken.
func (r *Registry) Transaction(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck, leases []partition.UUID) (reginatype.TxnResult, error) {
	res, err := r.store.Transaction(ctx, pushes, acks, leases)
	if err != nil {
		return res, err
	}
	for _, w := range res.Written {
		r.signals.notify(w.Queue)
	}
	return res, nil
}

package actor

import (
	"context"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore"
)

// Transaction types, re-exported for package wire.
type (
	// TxnPush is one push item of a transaction.
	TxnPush = sqlstore.TxnPush
	// TxnAck is one ack of a transaction.
	TxnAck = sqlstore.TxnAck
	// TxnResult is what a committed transaction did.
	TxnResult = sqlstore.TxnResult
	// DuplicateError aborts a transaction that repeats a stored transaction id.
	DuplicateError = sqlstore.DuplicateError
	// TxnAckError aborts a transaction whose ack failed.
	TxnAckError = sqlstore.TxnAckError
)

// ErrLeaseNotLive aborts a transaction whose required lease is not live.
var ErrLeaseNotLive = sqlstore.ErrLeaseNotLive

// Transaction runs pushes and acks atomically (see
// sqlstore.Store.Transaction). It runs beside the partition actors, not
// through them: the partition row lock serialises it with their pushes. The
// segments it wrote lie above every offset the cache vouches for (the cache
// knows a partition up to K; a transaction writes past the allocator, so
// past K), so a watermark probe still covers them; the actor's next write
// then starts past a hole and the cache drops and re-hydrates that
// partition rather than extend K across offsets it never saw. Long-polling
// consumers of the queues written are woken.
func (r *Registry) Transaction(ctx context.Context, pushes []TxnPush, acks []TxnAck, leases []partition.UUID) (TxnResult, error) {
	res, err := r.store.Transaction(ctx, pushes, acks, leases)
	if err != nil {
		return res, err
	}
	for _, w := range res.Written {
		r.signals.notify(w.Queue)
	}
	return res, nil
}

package actor

import (
	"context"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Explain answers what a push of each key would get now, reading only (see
// sqlstore.Store.Explain).
func (r *Registry) Explain(ctx context.Context, keys []reginatype.ExplainKey) ([]reginatype.ExplainResult, error) {
	return r.store.Explain(ctx, keys)
}

// QueueDetails returns the selected queues with partitions and cursors, and
// the database time of the snapshot.
func (r *Registry) QueueDetails(ctx context.Context, f reginatype.QueueFilter) ([]reginatype.QueueDetail, time.Time, error) {
	return r.store.QueueDetails(ctx, f)
}

// ListMessages returns a page of stored messages, newest first, and the total.
func (r *Registry) ListMessages(ctx context.Context, f reginatype.MessageFilter) ([]reginatype.StoredMessage, int64, error) {
	return r.store.ListMessages(ctx, f)
}

// GetMessage returns a partition's message by transaction id.
func (r *Registry) GetMessage(ctx context.Context, partitionID partition.UUID, txID string) (reginatype.StoredMessage, bool, error) {
	return r.store.GetMessage(ctx, partitionID, txID)
}

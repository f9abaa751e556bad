package actor

import (
	"context"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore"
)

// Read-only views (dedup explain/lookup, admin and status), re-exported so
// that package wire needs only actor. None of them writes.
type (
	// ExplainKey names one transaction id of one partition.
	ExplainKey = sqlstore.ExplainKey
	// ExplainResult is what a push of a key would get now, and why.
	ExplainResult = sqlstore.ExplainResult
	// Occurrence is one stored copy of a transaction id.
	Occurrence = sqlstore.Occurrence
	// QueueFilter selects queues.
	QueueFilter = sqlstore.QueueFilter
	// QueueDetail is a queue with its partitions and cursors.
	QueueDetail = sqlstore.QueueDetail
	// PartitionDetail is one partition of a QueueDetail.
	PartitionDetail = sqlstore.PartitionDetail
	// ConsumerState is one group's cursor on a partition.
	ConsumerState = sqlstore.ConsumerState
	// MessageStats counts messages for a consumer group.
	MessageStats = sqlstore.MessageStats
	// MessageFilter selects stored messages.
	MessageFilter = sqlstore.MessageFilter
	// StoredMessage is one stored message.
	StoredMessage = sqlstore.StoredMessage
)

// Explain verdicts.
const (
	ExplainNew       = sqlstore.ExplainNew
	ExplainDuplicate = sqlstore.ExplainDuplicate
	ExplainExpired   = sqlstore.ExplainExpired
	ExplainDisabled  = sqlstore.ExplainDisabled
	// MaxExplainKeys bounds one Explain call.
	MaxExplainKeys = sqlstore.MaxExplainKeys
	// AckErrUnresolvable is the per-item ack error of a transaction id no
	// longer in the hash sidecar.
	AckErrUnresolvable = sqlstore.AckErrUnresolvable
)

// Explain answers what a push of each key would get now, reading only (see
// sqlstore.Store.Explain).
func (r *Registry) Explain(ctx context.Context, keys []ExplainKey) ([]ExplainResult, error) {
	return r.store.Explain(ctx, keys)
}

// QueueDetails returns the selected queues with partitions and cursors, and
// the database time of the snapshot.
func (r *Registry) QueueDetails(ctx context.Context, f QueueFilter) ([]QueueDetail, time.Time, error) {
	return r.store.QueueDetails(ctx, f)
}

// ListMessages returns a page of stored messages, newest first, and the total.
func (r *Registry) ListMessages(ctx context.Context, f MessageFilter) ([]StoredMessage, int64, error) {
	return r.store.ListMessages(ctx, f)
}

// GetMessage returns a partition's message by transaction id.
func (r *Registry) GetMessage(ctx context.Context, partitionID partition.UUID, txID string) (StoredMessage, bool, error) {
	return r.store.GetMessage(ctx, partitionID, txID)
}

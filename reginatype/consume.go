package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// Ack statuses.
const (
	AckCompleted = "completed"
	AckFailed    = "failed"
	AckDLQ       = "dlq"
	AckRetry     = "retry"
)

// Per-item ack errors.
const (
	// AckErrUnresolvable: the transaction id is not (or no longer) in the
	// partition's hash sidecar, so it cannot be resolved to a message.
	AckErrUnresolvable = "unresolvable"
	// AckErrLease: the ack named a lease that is not the partition's live one.
	AckErrLease = "Invalid or expired lease"
)

// AckItem is one acknowledgement.
type AckItem struct {
	TransactionID string
	PartitionID   partition.UUID
	// LeaseID, when set, must be the live lease of (partition, group).
	LeaseID  partition.UUID
	HasLease bool
	// Status is completed (also "success"), failed, dlq or retry.
	Status string
	// Error is stored as the DLQ error message.
	Error string
}

// AckResult is the outcome of one ack item.
type AckResult struct {
	Success bool
	Error   string
	// Refused is set with Error AckErrLease when the lease named had
	// already been released (by an earlier failed or retried ack of its
	// batch, or a seek), rather than expired or replaced by another pop:
	// the message is delivered again, and the status views count the ack
	// as refused, not failed.
	Refused       bool
	QueueName     string
	PartitionName string
	LeaseReleased bool
	DLQ           bool
}

// QueueModeGroup is the consumer group of Queen's queue mode (competing
// consumers sharing one cursor per partition).
const QueueModeGroup = "__QUEUE_MODE__"

// PopRequest asks for messages.
type PopRequest struct {
	Queue string
	// Partition names one partition; empty means any partition of the queue.
	Partition string
	Group     string
	// Batch is the most messages returned in total (>= 1).
	Batch int
	// Partitions is the most partitions claimed by an any-partition pop (>= 1).
	Partitions int
	// AutoAck moves the cursor past what is returned at once; no lease.
	AutoAck bool
	// SubscriptionNew starts a brand-new named group at the time of its first
	// pop; SubscriptionFrom (non-zero) starts it after that time.
	SubscriptionNew  bool
	SubscriptionFrom time.Time
}

// PoppedMessage is one delivered message.
type PoppedMessage struct {
	partition.Frame
	Offset        int64
	PartitionID   partition.UUID
	PartitionName string
}

// PopResult is what a pop delivered. Messages are in offset order within each
// partition, partitions in claim order.
type PopResult struct {
	Messages []PoppedMessage
	// LeaseID is shared by every claimed partition; zero with AutoAck.
	LeaseID partition.UUID
	// Claimed lists the partitions delivered from.
	Claimed []ClaimedPartition
	// Empty explains an empty result: "no_available_partition",
	// "partition_not_found", "lease_held", "window_buffer", "queue_not_found"
	// or "" (nothing new).
	Empty string
}

// ClaimedPartition is one partition a pop delivered from.
type ClaimedPartition struct {
	ID   partition.UUID
	Name string
}

// DLQFilter selects dead letters. Zero fields do not filter.
type DLQFilter struct {
	Queue, Group, Partition string
	From, To                time.Time
	Limit, Offset           int
}

// DeadLetter is one message in the dead-letter store.
type DeadLetter struct {
	MessageID     partition.UUID
	TransactionID string
	TraceID       *partition.UUID
	PartitionID   partition.UUID
	Queue         string
	Partition     string
	Group         string
	ErrorMessage  string
	RetryCount    int
	Payload       []byte
	// ProducerSub is the subject of the producer of the message, "" when
	// it was pushed without authentication.
	ProducerSub string
	CreatedAt   time.Time
	FailedAt    time.Time
}

// Replayed describes one message replayed out of the DLQ.
type Replayed struct {
	MessageID partition.UUID
	Offset    int64
}

// AckRequest is one acknowledgement request (its items, for one consumer
// group) among several applied together (see sqlstore.Store.AckMany).
type AckRequest struct {
	Group string
	Items []AckItem
}

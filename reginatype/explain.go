package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// Verdicts of Explain: what a push of the transaction id would get now.
const (
	// ExplainNew: not in the window; a push would be queued.
	ExplainNew = "new"
	// ExplainDuplicate: stored inside the window; a push would be answered
	// duplicate with Original's message id and write nothing.
	ExplainDuplicate = "duplicate"
	// ExplainExpired: stored, but only outside the window (still in the hash
	// sidecar); a push would be queued as a new message.
	ExplainExpired = "expired"
	// ExplainDisabled: the queue's window is 0; a push is never checked.
	ExplainDisabled = "disabled"
)

// MaxExplainKeys bounds one Explain call (POST /api/v1/dedup/lookup).
const MaxExplainKeys = 1000

// ExplainKey names one transaction id of one partition.
type ExplainKey struct {
	Queue, Partition, TransactionID string
}

// Occurrence is one stored copy of a transaction id in a partition's hash
// sidecar.
type Occurrence struct {
	Offset int64
	// MessageID is the stored message's id, partition.ZeroUUID when its
	// segment was removed by retention (SegmentGone).
	MessageID   partition.UUID
	SegmentGone bool
	// CreatedAt is the stored time of its segment (log_txns.created_at), the
	// start of its window.
	CreatedAt time.Time
	// InWindow: CreatedAt > now - window, exactly as the push probe decides.
	InWindow bool
}

// ExplainResult is the answer for one key.
type ExplainResult struct {
	QueueExists, PartitionExists bool
	PartitionID                  partition.UUID
	// WindowSeconds is the queue's window (the default for a queue a push
	// would create).
	WindowSeconds int
	Verdict       string
	// Original is the occurrence a push would name (the earliest inside the
	// window) for a duplicate; the newest stored one for expired or disabled;
	// nil when nothing is stored.
	Original *Occurrence
	// Occurrences is every copy in the sidecar, in offset order.
	Occurrences []Occurrence
	// Now is the database time the verdict was computed at.
	Now time.Time
}

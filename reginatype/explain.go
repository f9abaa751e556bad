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
	// ExplainConflict: stored inside the window with a payload other than
	// the one given, on a queue with dedupPayloadCheck reject; a push of
	// that payload would be answered conflict and write nothing.
	ExplainConflict = "conflict"
)

// MaxExplainKeys bounds one Explain call (POST /api/v1/dedup/lookup).
const MaxExplainKeys = 1000

// ExplainKey names one transaction id of one partition, and optionally the
// payload a push would carry (raw JSON bytes as a push would send them; nil
// when none is given).
type ExplainKey struct {
	Queue, Partition, TransactionID string
	Payload                         []byte
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
	// Fingerprint is its payload's fingerprint, nil when it was stored
	// while the queue's dedupPayloadCheck was off.
	Fingerprint *int64
}

// ExplainResult is the answer for one key.
type ExplainResult struct {
	QueueExists, PartitionExists bool
	PartitionID                  partition.UUID
	// WindowSeconds is the queue's window (the default for a queue a push
	// would create).
	WindowSeconds int
	// PayloadCheck is the queue's dedupPayloadCheck (the default for a
	// queue a push would create).
	PayloadCheck partition.PayloadCheck
	Verdict      string
	// Original is the occurrence a push would name (the earliest inside the
	// window) for a duplicate; the newest stored one for expired or disabled;
	// nil when nothing is stored.
	Original *Occurrence
	// Occurrences is every copy in the sidecar, in offset order.
	Occurrences []Occurrence
	// Now is the database time the verdict was computed at.
	Now time.Time
	// PayloadGiven: the key carried a payload; PayloadFingerprint is its
	// fingerprint and Payload how it compares with Original's.
	PayloadGiven       bool
	PayloadFingerprint int64
	Payload            partition.PayloadMatch
}

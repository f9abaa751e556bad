package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// StreamQuery is a registration of a stream query (POST /streams/v1/queries).
type StreamQuery struct {
	Name, SourceQueue string
	// SinkQueue is empty when the chain has no sink queue (stored as NULL).
	SinkQueue  string
	ConfigHash string
	// Reset deletes the query's state when its stored config hash differs.
	Reset bool
}

// StreamRegistration is the outcome of a registration.
type StreamRegistration struct {
	ID partition.UUID
	// Fresh is true when the name was new.
	Fresh bool
	// Reset is true when the hash differed, reset was asked, and the state
	// was deleted.
	Reset bool
	// Mismatch is true when the hash differed and no reset was asked:
	// nothing changed.
	Mismatch bool
}

// StateOp is one state operation of a cycle, applied in order inside the
// cycle's shard.
type StateOp struct {
	// Delete removes Key; otherwise Key is set to Value.
	Delete bool
	// HasKey is false for a delete without a key (it matches nothing).
	HasKey bool
	Key    string
	// Value is the raw JSON stored by an upsert.
	Value []byte
}

// CycleAck is the ack of a cycle: it names one message of the source
// partition and sets the group's cursor there.
type CycleAck struct {
	TransactionID string
	// LeaseID, when not empty, must be the live lease of (partition, group).
	LeaseID string
	// Status is "completed" or "dlq".
	Status string
	// Count is how many source messages the ack covers (bookkeeping).
	Count int
	// Error is the dead letter's error text for a dlq ack.
	Error string
}

// StreamCycle is one cycle of a stream query (POST /streams/v1/cycle): state
// operations, sink pushes and an optional ack, committed together.
type StreamCycle struct {
	QueryID, PartitionID partition.UUID
	Group                string
	Ops                  []StateOp
	// Pushes go through the partition's deduplication like any push; a
	// duplicate is reported, it does not fail the cycle.
	Pushes []TxnPush
	// Ack is nil for a cycle without an ack (a flush).
	Ack          *CycleAck
	ReleaseLease bool
}

// CycleAckResult is what a cycle's ack did.
type CycleAckResult struct {
	Count         int
	LeaseReleased bool
	DLQ           bool
}

// CycleResult is what a committed cycle did.
type CycleResult struct {
	// Queue is the source partition's queue, empty when the partition is
	// unknown.
	Queue      string
	OpsApplied int
	// Pushes holds one result per push, in push order; Duplicate marks an
	// item whose transaction id was already stored (or repeated earlier in
	// the cycle), and MessageID is then the original's.
	Pushes []TxnPushResult
	// Ack is nil when the cycle had no ack.
	Ack *CycleAckResult
	// Written lists the segments written, as for a transaction.
	Written []TxnWrite
}

// CycleError is a cycle that failed for a reason of its own (unknown query,
// message not found, lease not live, bad operation): nothing was applied,
// and retrying the same cycle fails the same way.
type CycleError struct{ Reason string }

// Error implements error.
func (e *CycleError) Error() string { return e.Reason }

// StateFilter selects state rows of one shard (POST /streams/v1/state/get).
// Every filter set must match.
type StateFilter struct {
	QueryID, PartitionID partition.UUID
	// Keys, when HasKeys, keeps only these keys.
	Keys    []string
	HasKeys bool
	// Prefix, when not empty, keeps keys that start with it (literally).
	Prefix string
	// Ripe, when not empty, keeps rows whose value has a numeric windowEnd
	// <= Ripe (a decimal number as text).
	Ripe string
}

// StateRow is one stored state row.
type StateRow struct {
	Key       string
	Value     []byte
	UpdatedAt time.Time
}

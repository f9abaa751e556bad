package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// GroupCursor is one consumer group's cursor on one partition, with what the
// consumer-group views report about it.
type GroupCursor struct {
	Group, Queue, Partition string
	PartitionID             partition.UUID
	// Cursor is the group's cursor (every offset below it is consumed);
	// NextOffset the partition's allocator.
	Cursor, NextOffset int64
	// LeaseID is the live lease, nil when none.
	LeaseID *partition.UUID
	// CreatedAt is when the cursor was created, UpdatedAt when a pop, an
	// ack or a seek last changed it.
	CreatedAt, UpdatedAt time.Time
	// OldestPendingAt is the stored time of the oldest message the group
	// has not consumed, nil when it has consumed everything.
	OldestPendingAt *time.Time
	// SubscriptionFrom is the group's recorded start point on the queue
	// (nil: from the beginning, and queue mode); SubscriptionAt when it was
	// recorded.
	SubscriptionFrom, SubscriptionAt *time.Time
}

// Lag is the number of messages after the cursor (leased ones included).
func (c *GroupCursor) Lag() int64 { return max(c.NextOffset-c.Cursor, 0) }

// LagSeconds is the age at now of the oldest message the group has not
// consumed, 0 when it is caught up.
func (c *GroupCursor) LagSeconds(now time.Time) float64 {
	if c.OldestPendingAt == nil {
		return 0
	}
	return max(now.Sub(*c.OldestPendingAt).Seconds(), 0)
}

// SeekResult is the outcome of a seek.
type SeekResult struct {
	// Found is false when the queue (or the named partition) does not exist.
	Found bool
	// Updated counts the cursors moved.
	Updated int64
	// MovedTo is the stored time of the newest message of the partition of a
	// one-partition seek to the end (nil when it has none).
	MovedTo *time.Time
}

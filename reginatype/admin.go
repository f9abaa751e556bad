package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// QueueFilter selects queues; empty fields match everything.
type QueueFilter struct {
	Name, Namespace, Task string
}

// QueueDetail is a queue with its partitions and their cursors.
type QueueDetail struct {
	ID              partition.UUID
	Name            string
	Namespace, Task string
	CreatedAt       time.Time
	Options         partition.QueueOptions
	Partitions      []PartitionDetail
}

// PartitionDetail is one partition: its offsets, its stored span and every
// consumer group's cursor on it.
type PartitionDetail struct {
	ID        partition.UUID
	Name      string
	CreatedAt time.Time
	// NextOffset is the allocator: messages ever written. OldestOffset is the
	// first offset still stored (NextOffset when no segment is left).
	NextOffset, OldestOffset int64
	// OldestAt and NewestAt are the stored times of the oldest and newest
	// segments, nil when none is stored.
	OldestAt, NewestAt *time.Time
	// DeadLetters counts the partition's dead letters of every group,
	// QueueModeDeadLetters those of queue mode.
	DeadLetters, QueueModeDeadLetters int64
	Consumers                         []ConsumerState
}

// ConsumerState is one consumer group's cursor on a partition
// (queen.consumers).
type ConsumerState struct {
	Group          string
	Cursor         int64
	LeaseID        *partition.UUID
	LeaseExpiresAt *time.Time
	LeaseLive      bool
	LeaseFrom      *int64
	LeaseTo        *int64
	RetryCount     int
	UpdatedAt      time.Time
	// OldestPendingAt is the stored time of the oldest message the group has
	// not consumed, nil when it has consumed everything.
	OldestPendingAt *time.Time
}

// MessageStats counts a partition's (or a sum of partitions') messages for
// one consumer group.
type MessageStats struct {
	// Total is the messages stored (NextOffset - OldestOffset).
	Total int64 `json:"total"`
	// Pending is what the group has not acknowledged: NextOffset - cursor,
	// leased messages included.
	Pending int64 `json:"pending"`
	// Processing is the leased part of Pending (live lease, not yet acked).
	Processing int64 `json:"processing"`
	// Completed is the stored messages below the cursor.
	Completed int64 `json:"completed"`
	// Failed is the group's dead letters (messages it gave up on; also
	// counted in Completed, since its cursor moved past them).
	Failed int64 `json:"failed"`
	// DeadLetter is the dead letters of every group.
	DeadLetter int64 `json:"deadLetter"`
}

// Add adds o to m.
func (m *MessageStats) Add(o MessageStats) {
	m.Total += o.Total
	m.Pending += o.Pending
	m.Processing += o.Processing
	m.Completed += o.Completed
	m.Failed += o.Failed
	m.DeadLetter += o.DeadLetter
}

// Consumer returns the group's cursor on the partition, nil when it has none.
func (p *PartitionDetail) Consumer(group string) *ConsumerState {
	for i := range p.Consumers {
		if p.Consumers[i].Group == group {
			return &p.Consumers[i]
		}
	}
	return nil
}

// GroupStats counts the partition's messages for the group whose cursor is c
// (nil: a group that has not read it yet, cursor 0). Failed is only known for
// queue mode (the DLQ count is read for it); other groups report 0.
func (p *PartitionDetail) GroupStats(c *ConsumerState) MessageStats {
	st := MessageStats{Total: p.NextOffset - p.OldestOffset, DeadLetter: p.DeadLetters}
	var cursor int64
	if c != nil {
		cursor = c.Cursor
		if c.LeaseLive && c.LeaseTo != nil {
			st.Processing = max(*c.LeaseTo-cursor, 0)
		}
		if c.Group == QueueModeGroup {
			st.Failed = p.QueueModeDeadLetters
		}
	}
	st.Pending = max(p.NextOffset-cursor, 0)
	st.Completed = max(min(cursor, p.NextOffset)-p.OldestOffset, 0)
	return st
}

// Stats counts the partition's messages for queue mode (Queen's default
// group), as the section-9 views report them.
func (p *PartitionDetail) Stats() MessageStats {
	c := p.Consumer(QueueModeGroup)
	st := p.GroupStats(c)
	st.Failed = p.QueueModeDeadLetters
	return st
}

// Message statuses, as the messages views report them (Queen's): a message
// a group dead-lettered is dead_letter; otherwise, on a partition queue
// mode reads, completed below its cursor, processing under its live lease,
// pending after; on a partition only named groups read, completed once
// every group's cursor is past it, pending before; pending when no group
// reads the partition.
const (
	MessagePending    = "pending"
	MessageProcessing = "processing"
	MessageCompleted  = "completed"
	MessageDeadLetter = "dead_letter"
)

// StoredMessage is one stored message with where it lives.
type StoredMessage struct {
	partition.Frame
	Offset      int64
	PartitionID partition.UUID
	Partition   string
	Queue       string
	Namespace   string
	Task        string
	// Status is the message's status (see MessagePending).
	Status string
}

// MessageFilter selects messages; empty fields match everything.
type MessageFilter struct {
	Queue, Partition, Namespace, Task string
	// From and To bound the stored time (inclusive); zero is unbounded.
	From, To time.Time
	// Status selects the messages with this status (see MessagePending);
	// empty selects every one.
	Status        string
	Limit, Offset int
}

// ConfiguredQueue is the result of Configure.
type ConfiguredQueue struct {
	QueueID            partition.UUID
	DefaultPartitionID partition.UUID
	Namespace, Task    string
	Options            partition.QueueOptions
}

// DefaultPartition is the name of the partition a push uses when it names none.
const DefaultPartition = "Default"

// QueueSummary is one queue in the resources listing.
type QueueSummary struct {
	ID              partition.UUID
	Name            string
	Namespace, Task string
	CreatedAt       time.Time
	Partitions      int
	// Messages is the number of messages currently stored (offsets not yet
	// removed by retention).
	Messages int64
	Options  partition.QueueOptions
}

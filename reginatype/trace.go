package reginatype

import (
	"time"

	"github.com/regina-mq/regina/partition"
)

// Trace event defaults, as Queen's.
const (
	// DefaultTraceEventType is the event type of a trace that names none.
	DefaultTraceEventType = "info"
	// MaxTraceEventType and MaxTraceConsumerGroup bound those fields (bytes).
	MaxTraceEventType     = 100
	MaxTraceConsumerGroup = 255
)

// TraceEvent is one event attached to a stored message (POST
// /api/v1/traces).
type TraceEvent struct {
	// ID is minted by the broker (UUIDv7) when the event is recorded.
	ID            partition.UUID
	PartitionID   partition.UUID
	TransactionID string
	// Offset is the offset of the message the event is attached to.
	Offset        int64
	EventType     string
	ConsumerGroup string
	// WorkerID names the broker that recorded the event.
	WorkerID string
	// Data is the event's data, raw JSON as received ("null" when null).
	Data []byte
	// Names are the event's trace names, sorted, without duplicates.
	Names     []string
	CreatedAt time.Time

	// Read by name only: where the message lives and its stored payload
	// (nil when the message is no longer stored).
	Queue, Partition string
	MessagePayload   []byte
}

// TraceName summarises the events carrying one trace name.
type TraceName struct {
	Name string
	// Events counts the events carrying the name, Messages the distinct
	// transaction ids among them.
	Events, Messages int64
	LastSeen         time.Time
}

package reginatype

import (
	"fmt"
	"time"

	"github.com/regina-mq/regina/partition"
)

// TxnPush is one push item of a transaction, validated by the caller.
type TxnPush struct {
	Queue, Partition string
	TransactionID    string
	TraceID          partition.UUID
	HasTrace         bool
	Payload          []byte
	// ProducerSub is the authenticated producer's subject, as for PushItem.
	ProducerSub string
	// Index is the item's position among the transaction's flattened operations.
	Index int
}

// TxnAck is one ack of a transaction.
type TxnAck struct {
	AckItem
	Group string
	Index int
}

// TxnPushResult is the outcome of one pushed item.
type TxnPushResult struct {
	Index       int
	MessageID   partition.UUID
	PartitionID partition.UUID
	Queue       string
	// Duplicate marks a repeat of an earlier item of the same transaction:
	// it echoes the leader's message id and wrote nothing.
	Duplicate bool
	// Payload is how a Duplicate's payload compared with its leader's
	// (PayloadUnchecked when the queue's dedupPayloadCheck is off).
	Payload partition.PayloadMatch
}

// TxnResult is what a committed transaction did.
type TxnResult struct {
	Pushes []TxnPushResult
	Acks   []AckResult // in the order of the request's acks
	// Written lists, per partition written, its queue, first offset and the
	// stored hashes in frame order (for the cache's bookkeeping).
	Written []TxnWrite
}

// TxnWrite is one segment a transaction wrote.
type TxnWrite struct {
	Queue         string
	PartitionID   partition.UUID
	WindowSeconds int
	FirstOffset   int64
	Hashes        []partition.Hash
	CreatedAt     time.Time
}

// DuplicateError aborts a transaction whose push repeats a transaction id
// already stored in the partition's window, or (Conflict, on a queue with
// dedupPayloadCheck reject) repeats one with a different payload, stored or
// earlier in the same transaction.
type DuplicateError struct {
	Queue, Partition, TransactionID string
	// Original is the stored message's id (zero when its segment is gone).
	Original partition.UUID
	// Payload is how the repeat's payload compared with the original's.
	Payload partition.PayloadMatch
	// Conflict: the payloads differ and the queue rejects that.
	Conflict bool
}

// Error implements error.
func (e *DuplicateError) Error() string {
	if e.Conflict {
		return fmt.Sprintf("conflict: transactionId %q in queue %q partition %q was already used for a different "+
			"payload (original message_id %s): the transaction was rolled back",
			e.TransactionID, e.Queue, e.Partition, e.Original)
	}
	return fmt.Sprintf("duplicate transactionId %q in queue %q partition %q (original message_id %s): "+
		"the transaction was rolled back", e.TransactionID, e.Queue, e.Partition, e.Original)
}

// TxnAckError aborts a transaction whose ack failed.
type TxnAckError struct {
	Index         int
	TransactionID string
	Reason        string
}

// Error implements error.
func (e *TxnAckError) Error() string {
	return fmt.Sprintf("ACK operation failed: %s (transactionId %q)", e.Reason, e.TransactionID)
}

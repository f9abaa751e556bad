package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
)

// NoWatermark is the probe-watermark sentinel: the cache cannot vouch for any
// span, so the probe covers the whole window.
const NoWatermark int64 = -1

// PartitionRef identifies a partition and carries what the push path needs to
// know about its queue.
type PartitionRef struct {
	ID      partition.UUID
	QueueID partition.UUID
	// WindowSeconds is the queue's deduplication window when last read.
	WindowSeconds int
}

// EnsurePartition returns the partition named partName of queue, creating the
// queue (with default options and a namespace/task derived from its dotted
// name) and the partition when they do not exist.
func (s *Store) EnsurePartition(ctx context.Context, queue, partName string) (PartitionRef, error) {
	ns, task := DeriveNamespaceTask(queue)
	var ref PartitionRef
	err := s.pool.QueryRow(ctx, s.sql.ensurePartition, queue, partName, ns, task).
		Scan((*uuidScanner)(&ref.ID), (*uuidScanner)(&ref.QueueID), &ref.WindowSeconds)
	if err != nil {
		return ref, fmt.Errorf("ensure partition %s/%s: %w", queue, partName, classify(err))
	}
	return ref, nil
}

// DeriveNamespaceTask returns the namespace (text before the first '.', or the
// whole name) and task (the second dot-separated segment, or "") Queen gives a
// queue created by a push.
func DeriveNamespaceTask(queue string) (namespace, task string) {
	for i := 0; i < len(queue); i++ {
		if queue[i] == '.' {
			rest := queue[i+1:]
			for j := 0; j < len(rest); j++ {
				if rest[j] == '.' {
					return queue[:i], rest[:j]
				}
			}
			return queue[:i], rest
		}
	}
	return queue, ""
}

// PushBatch is one batch of one partition, ready for the push transaction.
// Items are the batch's leaders: when WindowHint is non-zero their transaction
// ids are distinct.
type PushBatch struct {
	Partition partition.UUID
	// WindowHint is the caller's belief about the queue's window, the window
	// the cache computed Watermark for. Whether it is zero decides the
	// dedup-off path (see ErrWindowChanged); when the stored window is larger,
	// the watermark is ignored and the whole window is probed.
	WindowHint int
	// Watermark promises that no hash of the batch occurs at or below this
	// offset; NoWatermark probes the whole window.
	Watermark int64
	Hashes    [][]byte
	IDs       []byte
	Bodies    []byte
	Ends      []int32
}

// Reset empties the batch, keeping its buffers.
func (b *PushBatch) Reset() {
	b.Hashes = b.Hashes[:0]
	b.IDs = b.IDs[:0]
	b.Bodies = b.Bodies[:0]
	b.Ends = b.Ends[:0]
}

// Add appends one item (a leader) to the batch.
func (b *PushBatch) Add(h partition.Hash, id partition.UUID, body *partition.Body) {
	b.Hashes = append(b.Hashes, h[:])
	b.IDs = append(b.IDs, id[:]...)
	b.Bodies = partition.AppendBody(b.Bodies, body)
	b.Ends = append(b.Ends, int32(len(b.Bodies)))
}

// Len returns the number of items in the batch.
func (b *PushBatch) Len() int { return len(b.Hashes) }

// PushResult is the outcome of a committed push transaction.
type PushResult struct {
	// WindowSeconds is the queue's window the transaction applied.
	WindowSeconds int
	// FirstOffset is the offset of the first stored item, -1 when nothing was
	// written (every item was a duplicate).
	FirstOffset int64
	// CreatedAt is the segment's creation time (the transaction's start).
	CreatedAt time.Time
	// DupIndex lists the (0-based) batch indexes found in the window, in
	// increasing order; DupOriginal[k] is the original message id of item
	// DupIndex[k], partition.ZeroUUID when its segment is gone, and
	// DupCreated[k] the original's stored time (its log_txns created_at,
	// known even when the segment is gone).
	DupIndex    []int
	DupOriginal []partition.UUID
	DupCreated  []time.Time
}

// Push runs the push transaction for one batch: lock the partition row, probe
// the window for the batch's hashes (from the watermark up), and, unless every
// item is a duplicate, allocate offsets and insert one segment and one
// log_txns row. It is one round trip; the statement is the transaction.
//
// Errors: ErrPartitionMissing, ErrWindowChanged (with the result's
// WindowSeconds set), ErrOutcomeUnknown, ErrUnavailable, or a PostgreSQL
// error (nothing committed).
func (s *Store) Push(ctx context.Context, b *PushBatch) (PushResult, error) {
	var (
		res     PushResult
		status  string
		dupIdx  []int32
		dupIDs  [][]byte
		dupAt   []time.Time
		created time.Time
	)
	err := s.pool.QueryRow(ctx, s.sql.pushSegment, uuidArg(b.Partition), b.WindowHint, b.Watermark,
		b.Hashes, b.IDs, b.Bodies, b.Ends).
		Scan(&status, &res.WindowSeconds, &res.FirstOffset, &created, &dupIdx, &dupIDs, &dupAt)
	if err != nil {
		return res, classify(err)
	}
	res.CreatedAt = created
	switch status {
	case "ok":
	case "missing":
		return res, ErrPartitionMissing
	case "window_changed":
		return res, ErrWindowChanged
	default:
		return res, fmt.Errorf("push_segment: unexpected status %q", status)
	}
	if len(dupIdx) != len(dupIDs) || len(dupIdx) != len(dupAt) {
		return res, errors.New("push_segment: dup_idx, dup_ids and dup_created differ in length")
	}
	if len(dupIdx) > 0 {
		res.DupIndex = make([]int, len(dupIdx))
		res.DupOriginal = make([]partition.UUID, len(dupIdx))
		res.DupCreated = dupAt
		for k, i := range dupIdx {
			res.DupIndex[k] = int(i) - 1
			copy(res.DupOriginal[k][:], dupIDs[k])
		}
	}
	return res, nil
}

// uuidArg passes a partition.UUID as a PostgreSQL uuid.
func uuidArg(u partition.UUID) [16]byte { return u }

// uuidScanner scans a PostgreSQL uuid into a partition.UUID.
type uuidScanner partition.UUID

// ScanUUID implements pgtype.UUIDScanner.
func (u *uuidScanner) ScanUUID(v pgtypeUUID) error {
	if !v.Valid {
		return errors.New("unexpected NULL uuid")
	}
	*u = v.Bytes
	return nil
}

var _ = pgx.ErrNoRows

package reginatype

import (
	"time"

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
	// PayloadCheck is the queue's dedupPayloadCheck when last read.
	PayloadCheck partition.PayloadCheck
	// Encrypt is the queue's encryptionEnabled when last read: payloads
	// are sealed before they are stored (when the broker has a key).
	Encrypt bool
}

// ChecksPayloads reports whether a push to the partition must carry payload
// fingerprints: deduplication on and dedupPayloadCheck not off.
func (r *PartitionRef) ChecksPayloads() bool {
	return r.WindowSeconds != 0 && r.PayloadCheck != "" && r.PayloadCheck != partition.PayloadCheckOff
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
	// Epoch is the store epoch (sqlstore.Store.Epoch) the watermark was
	// computed under: when the store's epoch is another one by the time the
	// transaction runs (the database server changed), the watermark is
	// ignored and the whole window is probed.
	Epoch  uint64
	Hashes [][]byte
	IDs    []byte
	Bodies []byte
	Ends   []int32
	// Fingerprints are the items' payload fingerprints, nil when the caller
	// believes the queue's dedupPayloadCheck is off (whether it is nil
	// decides like WindowHint: see ErrWindowChanged).
	Fingerprints []int64
	// ExpectDuplicates says the caller expects every item to be a
	// duplicate (the dedup cache holds every hash, or the partition's last
	// batch was all duplicates). The store then first answers from a
	// read-only snapshot probe, with no row lock and no transaction id, and
	// falls back to the locked push transaction unless every item is found.
	// Only meaningful with a non-zero WindowHint.
	ExpectDuplicates bool
	// Originals, when as long as Hashes (only with ExpectDuplicates), are
	// the dedup cache's offsets of the segments holding each hash's
	// original, computed under Epoch (cache.WatermarkOriginals): the store
	// then proves the verdicts by reading those rows (queen.push_dups_segments,
	// with other partitions' batches) instead of probing the window. A
	// promise like Watermark, not a proof: what the rows do not confirm
	// takes the locked path. Empty otherwise.
	Originals []int64
}

// Reset empties the batch, keeping its buffers.
func (b *PushBatch) Reset() {
	b.Hashes = b.Hashes[:0]
	b.IDs = b.IDs[:0]
	b.Bodies = b.Bodies[:0]
	b.Ends = b.Ends[:0]
	b.Fingerprints = nil
	b.Originals = b.Originals[:0]
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
	// PayloadCheck is the queue's dedupPayloadCheck the transaction read.
	PayloadCheck partition.PayloadCheck
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
	// DupFingerprint[k] is the payload fingerprint of item DupIndex[k]'s
	// original, nil when it was stored without one (the check was off).
	DupFingerprint []*int64
	// Epoch is the store epoch the transaction ran under.
	Epoch uint64
	// Unlocked is true when the verdicts came from the read-only fast
	// path (see PushBatch.ExpectDuplicates): every item a duplicate, no
	// row lock taken, nothing written.
	Unlocked bool
}

// PushItem is one item of a push, validated by the caller.
type PushItem struct {
	// TransactionID is the producer's idempotency key (the caller mints one
	// when the producer gave none).
	TransactionID string
	TraceID       partition.UUID
	HasTrace      bool
	// Payload is the raw JSON value as received.
	Payload []byte
	// ProducerSub is the authenticated producer's subject (the token's
	// sub), "" when auth is off; never taken from the request body.
	ProducerSub string
}

// PushVerdict is the answer for one pushed item.
type PushVerdict struct {
	Status partition.Status
	// MessageID is the stored message's id, or for a duplicate the
	// original's (partition.ZeroUUID when the original's segment is gone).
	MessageID partition.UUID
	// Payload is how a duplicate's or conflict's payload compared with the
	// payload of the message it names (PayloadUnchecked when the queue's
	// dedupPayloadCheck is off or the original has no fingerprint).
	Payload partition.PayloadMatch
}

// PushGroup is the part of a push request that targets one partition. The
// caller fills Queue, Partition and Items; the push fills either Results
// (one per item, in order) and PartitionID, or Err for the whole group.
type PushGroup struct {
	Queue, Partition string
	Items            []PushItem
	// Results are the items' verdicts, in Items order.
	Results []PushVerdict
	// PartitionID is the partition the group was written to.
	PartitionID partition.UUID
	// Err is set when the group as a whole has no verdicts: nothing of it was
	// written, or (ErrOutcomeUnknown) it is not known whether it was.
	Err error
}

package main

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/segmentio/encoding/json"
)

// Body is one push request body, immutable once built: a resend in a
// duplicate storm sends the very same bytes again.
type Body struct {
	Data      []byte
	Partition int
	Items     int
	// Worker and Seq identify the fresh push that built it.
	Worker int
	Seq    int64
}

// BodyBuilder makes fresh push bodies for one worker. Not safe for
// concurrent use; each worker has its own.
type BodyBuilder struct {
	queue      []byte   // JSON string, quoted
	partitions [][]byte // JSON strings, quoted
	items      int
	dataLen    int
	txPrefix   string // "<runid>-<worker>-"
	worker     int
	seq        int64
	rnd        *rand.Rand
	pad        []byte
	sizeHint   int
	// cursor, when set, picks the partitions in turn (shared by every
	// worker) instead of uniformly at random.
	cursor *atomic.Uint64
}

const padAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// payloadOverhead is the size of the payload object without its data
// characters, for typical seq/worker widths: {"seq":123456,"w":12,"data":""}.
const payloadOverhead = len(`{"seq":123456,"w":12,"data":""}`)

// PartitionName is the name of partition i of the run.
func PartitionName(i int) string { return "p" + strconv.Itoa(i) }

// NewBodyBuilder prepares a builder for worker w of run runID.
func NewBodyBuilder(runID, queue string, worker, partitions, items, payload int, seed uint64) *BodyBuilder {
	b := &BodyBuilder{
		queue:    mustJSON(queue),
		items:    max(items, 1),
		dataLen:  max(payload-payloadOverhead, 0),
		txPrefix: runID + "-" + strconv.Itoa(worker) + "-",
		worker:   worker,
		rnd:      rand.New(rand.NewPCG(seed, uint64(worker)+1)),
	}
	for i := range max(partitions, 1) {
		b.partitions = append(b.partitions, mustJSON(PartitionName(i)))
	}
	b.pad = make([]byte, max(4096, 2*b.dataLen))
	for i := range b.pad {
		b.pad[i] = padAlphabet[b.rnd.IntN(len(padAlphabet))]
	}
	return b
}

func mustJSON(s string) []byte {
	out, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return out
}

// Rotate makes the builder pick partitions in turn from cursor (shared by
// the workers): push k of the run goes to partition k mod partitions, so
// each partition is written once per lap and idles in between.
func (b *BodyBuilder) Rotate(cursor *atomic.Uint64) { b.cursor = cursor }

// Next builds the worker's next fresh push: one partition chosen uniformly
// (or the next in turn, see Rotate), items with transaction ids
// <runid>-<worker>-<seq>-<i>.
func (b *BodyBuilder) Next() *Body {
	seq := b.seq
	b.seq++
	var part int
	if b.cursor != nil {
		part = int((b.cursor.Add(1) - 1) % uint64(len(b.partitions)))
	} else {
		part = b.rnd.IntN(len(b.partitions))
	}
	out := make([]byte, 0, b.sizeHint)
	out = append(out, `{"items":[`...)
	for i := range b.items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"queue":`...)
		out = append(out, b.queue...)
		out = append(out, `,"partition":`...)
		out = append(out, b.partitions[part]...)
		out = append(out, `,"transactionId":"`...)
		out = append(out, b.txPrefix...)
		out = strconv.AppendInt(out, seq, 10)
		out = append(out, '-')
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `","payload":{"seq":`...)
		out = strconv.AppendInt(out, seq, 10)
		out = append(out, `,"w":`...)
		out = strconv.AppendInt(out, int64(b.worker), 10)
		out = append(out, `,"data":"`...)
		if b.dataLen > 0 {
			off := b.rnd.IntN(len(b.pad) - b.dataLen + 1)
			out = append(out, b.pad[off:off+b.dataLen]...)
		}
		out = append(out, `"}}`...)
	}
	out = append(out, `]}`...)
	b.sizeHint = max(b.sizeHint, len(out)+64)
	return &Body{Data: out, Partition: part, Items: b.items, Worker: b.worker, Seq: seq}
}

// DupRing keeps the most recent pushes so that a retry storm can resend an
// earlier push's exact body. Safe for concurrent use.
type DupRing struct {
	mu    sync.Mutex
	buf   []*Body
	added int64
}

// NewDupRing makes a ring remembering the last size pushes.
func NewDupRing(size int) *DupRing { return &DupRing{buf: make([]*Body, max(size, 1))} }

// Add remembers b (called once its push has been answered, so a resend is
// always of an earlier, completed push).
func (r *DupRing) Add(b *Body) {
	r.mu.Lock()
	r.buf[r.added%int64(len(r.buf))] = b
	r.added++
	r.mu.Unlock()
}

// Len is the number of pushes the ring currently holds.
func (r *DupRing) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int(min(r.added, int64(len(r.buf))))
}

// Pick returns one remembered push chosen uniformly, or false when the ring
// is empty.
func (r *DupRing) Pick(rnd *rand.Rand) (*Body, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(r.added, int64(len(r.buf)))
	if n == 0 {
		return nil, false
	}
	return r.buf[rnd.Int64N(n)], true
}

// ChooseBody decides the next push: with probability dupRatio (and when
// the ring has something) a resend of an earlier body, otherwise a fresh
// body from the builder. resent tells which.
func ChooseBody(rnd *rand.Rand, dupRatio float64, ring *DupRing, b *BodyBuilder) (body *Body, resent bool) {
	if dupRatio > 0 && rnd.Float64() < dupRatio {
		if old, ok := ring.Pick(rnd); ok {
			return old, true
		}
	}
	return b.Next(), false
}

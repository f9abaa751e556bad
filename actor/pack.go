package actor

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/reginatype"
)

// The packer lets the ready batches of several partitions travel to
// PostgreSQL together (Store.PushMany). Each actor still builds its own
// batch (ordering, collapse, cache) and waits for its own result; the packer
// only carries it:
//
//   - An actor whose batch is ready appends it to the packer's queue. When
//     fewer than PackSenders packed transactions are in flight, a sender
//     starts at once, so a lone batch never waits to be packed (PackWait
//     aside).
//   - A sender takes up to PackMaxBatches queued batches (all that are
//     there: the batches that became ready while the previous transactions
//     ran), sends them in one round trip, and hands each actor its own
//     result; it goes on while batches are queued, then exits.
//
// So under low load every batch goes alone, as before, and under load the
// batches that queue up behind the in-flight transactions share the next
// one.
type packer struct {
	store      Store
	shape      reginatype.PushShape
	maxBatches int
	maxSenders int
	wait       time.Duration
	log        func(err error, batches int)

	mu      sync.Mutex
	queue   []*packed
	senders int

	// transactions counts the packed round trips, batches the batches they
	// carried.
	transactions, batches atomic.Uint64
}

// packed is one actor's batch in the packer, and its outcome.
type packed struct {
	b    *reginatype.PushBatch
	res  reginatype.PushResult
	err  error
	done chan struct{} // capacity 1: the sender sends once per push
}

// push sends b with the ready batches of other partitions and returns its
// own outcome. The actor owns p (reused from batch to batch).
func (k *packer) push(p *packed, b *reginatype.PushBatch) (reginatype.PushResult, error) {
	p.b = b
	k.mu.Lock()
	k.queue = append(k.queue, p)
	// A batch whose read-only proof is all it needs (the cache named its
	// originals) starts a sender only when none runs: a running one takes it
	// with the next round trip, so that a retry storm's proofs share round
	// trips (a proof costs PostgreSQL about as much for one batch as for
	// several; measured) instead of each taking one of its own.
	start := k.senders < k.maxSenders && (k.senders == 0 || !readOnlyProof(b))
	if start {
		k.senders++
	}
	k.mu.Unlock()
	if start {
		go k.send()
	}
	<-p.done
	res, err := p.res, p.err
	p.b, p.res, p.err = nil, reginatype.PushResult{}, nil
	return res, err
}

// readOnlyProof reports whether b goes to the read-only duplicate proof
// first (see sqlstore.Store.PushMany).
func readOnlyProof(b *reginatype.PushBatch) bool {
	return b.ExpectDuplicates && len(b.Originals) == len(b.Hashes)
}

// send runs packed transactions while batches are queued.
func (k *packer) send() {
	var (
		take []*packed
		bs   []*reginatype.PushBatch
		res  []reginatype.PushResult
		errs []error
	)
	for {
		if k.wait > 0 {
			k.mu.Lock()
			short := len(k.queue) < k.maxBatches
			k.mu.Unlock()
			if short {
				time.Sleep(k.wait)
			}
		}
		k.mu.Lock()
		n := min(len(k.queue), k.maxBatches)
		if n == 0 {
			k.senders--
			k.mu.Unlock()
			return
		}
		take = append(take[:0], k.queue[:n]...)
		clear(k.queue[:n])
		k.queue = k.queue[n:]
		if len(k.queue) == 0 {
			k.queue = k.queue[:0:0]
		}
		k.mu.Unlock()

		bs = bs[:0]
		for _, p := range take {
			bs = append(bs, p.b)
		}
		res = append(res[:0], make([]reginatype.PushResult, n)...)
		errs = append(errs[:0], make([]error, n)...)
		k.run(bs, res, errs)
		k.transactions.Add(1)
		k.batches.Add(uint64(n))
		for i, p := range take {
			p.res, p.err = res[i], errs[i]
			p.done <- struct{}{}
		}
		clear(take)
		clear(bs)
	}
}

// run calls the store, turning a panic (a bug) into every batch's error:
// the outcome is unknown, and each actor forgets its partition's cache.
func (k *packer) run(bs []*reginatype.PushBatch, res []reginatype.PushResult, errs []error) {
	defer func() {
		if v := recover(); v != nil {
			err := fmt.Errorf("%w (%v)", errPanicked, v)
			k.log(fmt.Errorf("%w\n%s", err, debug.Stack()), len(bs))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	if len(bs) == 1 && k.shape == reginatype.ShapeOneTransaction {
		// Alone: push_segment itself, one function call less.
		res[0], errs[0] = k.store.Push(context.Background(), bs[0])
		return
	}
	k.store.PushMany(context.Background(), k.shape, bs, res, errs)
}

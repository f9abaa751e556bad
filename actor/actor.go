package actor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

var errRetired = errors.New("actor retired")

// maxPushAttempts bounds the retries of one batch after ErrPartitionMissing
// or ErrWindowChanged (both mean nothing was written).
const maxPushAttempts = 4

// actor serialises the pushes of one partition.
type actor struct {
	reg         *Registry
	key         string
	queue, part string
	log         zerolog.Logger
	wake        chan struct{}

	// guarded by mu
	mu      sync.Mutex
	mailbox []*Group
	items   int
	bytes   int
	retired bool

	// owned by the actor goroutine
	ref      reginatype.PartitionRef
	resolved bool
	batch    reginatype.PushBatch
	scratch  scratch
}

type scratch struct {
	txIDs   []string
	leader  []int
	leaders []int
	results []Result
	pos     []int // leader item index -> position in the push batch
	// hashes are the batch's leader hashes in batch order (the dedup
	// cache's input); stored those of the leaders a push stored.
	hashes [][16]byte
	stored [][16]byte
}

func newActor(r *Registry, queue, part string) *actor {
	return &actor{
		reg:   r,
		key:   key(queue, part),
		queue: queue,
		part:  part,
		log:   r.log.With().Str("queue", queue).Str("partition", part).Logger(),
		wake:  make(chan struct{}, 1),
	}
}

// enqueue adds g to the mailbox, or refuses it.
func (a *actor) enqueue(g *Group) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.retired {
		return errRetired
	}
	cfg := &a.reg.cfg
	if a.items > 0 && (a.items+len(g.Items) > cfg.MailboxMaxItems || a.bytes+g.bytes > cfg.MailboxMaxBytes) {
		return reginatype.ErrMailboxFull
	}
	wasEmpty := len(a.mailbox) == 0
	a.mailbox = append(a.mailbox, g)
	a.items += len(g.Items)
	a.bytes += g.bytes
	if wasEmpty {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// take removes the next batch of whole groups from the mailbox.
func (a *actor) take(dst []*Group) []*Group {
	a.mu.Lock()
	defer a.mu.Unlock()
	cfg := &a.reg.cfg
	n, items, bytes := 0, 0, 0
	for n < len(a.mailbox) {
		g := a.mailbox[n]
		if n > 0 && (items+len(g.Items) > cfg.BatchMaxItems || bytes+g.bytes > cfg.BatchMaxBytes) {
			break
		}
		items += len(g.Items)
		bytes += g.bytes
		n++
	}
	dst = append(dst, a.mailbox[:n]...)
	clear(a.mailbox[:n])
	a.mailbox = a.mailbox[n:]
	if len(a.mailbox) == 0 {
		a.mailbox = a.mailbox[:0:0]
	}
	a.items -= items
	a.bytes -= bytes
	return dst
}

// tryRetire marks the actor retired when its mailbox is empty. It checks
// under the same lock enqueue takes, so no group can slip in after the check.
func (a *actor) tryRetire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.mailbox) > 0 {
		return false
	}
	a.retired = true
	return true
}

func (a *actor) run() {
	defer a.reg.remove(a)
	pprof.Do(context.Background(), pprof.Labels("queue", a.queue, "partition", a.part), func(ctx context.Context) {
		idle := time.NewTimer(a.reg.cfg.IdleTimeout)
		defer idle.Stop()
		var batch []*Group
		for {
			select {
			case <-a.wake:
			case <-idle.C:
				if a.tryRetire() {
					return
				}
			case <-a.reg.stop:
				// Drain: answer everything still waiting, then exit.
				for {
					batch = a.take(batch[:0])
					if len(batch) == 0 {
						if a.tryRetire() {
							return
						}
						continue
					}
					a.process(ctx, batch)
				}
			}
			for {
				batch = a.take(batch[:0])
				if len(batch) == 0 {
					break
				}
				a.process(ctx, batch)
			}
			idle.Reset(a.reg.cfg.IdleTimeout)
		}
	})
}

// process runs one push transaction for the groups and answers them.
func (a *actor) process(ctx context.Context, groups []*Group) {
	if h := a.reg.cfg.BeforeBatch; h != nil {
		n := 0
		for _, g := range groups {
			n += len(g.Items)
		}
		h(a.queue, a.part, n)
	}
	err := a.pushRecovering(ctx, groups)
	if err != nil {
		a.reg.pushFailures.Add(1)
		a.log.Warn().Err(err).Int("groups", len(groups)).Msg("push batch failed")
	}
	for _, g := range groups {
		if err != nil {
			g.Err = err
		} else {
			g.PartitionID = a.ref.ID
		}
		close(g.done)
	}
}

func (a *actor) push(ctx context.Context, groups []*Group) error {
	s := &a.scratch
	s.txIDs = s.txIDs[:0]
	for _, g := range groups {
		for i := range g.Items {
			s.txIDs = append(s.txIDs, g.Items[i].TransactionID)
		}
	}
	n := len(s.txIDs)
	s.results = append(s.results[:0], make([]Result, n)...)

	var lastErr error
	for attempt := 0; attempt < maxPushAttempts; attempt++ {
		if !a.resolved {
			ref, err := a.reg.store.EnsurePartition(ctx, a.queue, a.part)
			if err != nil {
				return err
			}
			a.ref, a.resolved = ref, true
		}
		dedup := a.ref.WindowSeconds != 0
		if dedup {
			s.leader, s.leaders = partition.Collapse(s.txIDs, s.leader, s.leaders)
		} else {
			s.leader = s.leader[:0]
			s.leaders = s.leaders[:0]
			for i := 0; i < n; i++ {
				s.leader = append(s.leader, i)
				s.leaders = append(s.leaders, i)
			}
		}
		a.buildBatch(groups)
		// The same window goes to the cache and, as WindowHint, to SQL,
		// which ignores the watermark if the queue's window has grown.
		a.batch.Watermark = a.watermark()
		res, err := a.storePush(ctx)
		switch {
		case err == nil:
			a.learn(&res)
			a.ref.WindowSeconds = res.WindowSeconds
			a.answer(groups, &res)
			return nil
		case errors.Is(err, reginatype.ErrPartitionMissing):
			// The queue was deleted (maybe through another broker): its
			// partition id is never used again.
			a.reg.cache.Forget(a.ref.ID)
			a.resolved = false
		case errors.Is(err, reginatype.ErrWindowChanged):
			a.ref.WindowSeconds = res.WindowSeconds
		default:
			// Nothing learned: the outcome may be unknown (a segment may
			// have been written), so drop what the cache holds.
			a.reg.cache.Forget(a.ref.ID)
			return fmt.Errorf("push %s/%s: %w", a.queue, a.part, err)
		}
		lastErr = err
	}
	return fmt.Errorf("push %s/%s: gave up after %d attempts: %w", a.queue, a.part, maxPushAttempts, lastErr)
}

// buildBatch fills a.batch with the leaders, minting their message ids.
func (a *actor) buildBatch(groups []*Group) {
	s := &a.scratch
	b := &a.batch
	b.Reset()
	b.Partition = a.ref.ID
	b.WindowHint = a.ref.WindowSeconds
	b.Watermark = reginatype.NoWatermark
	s.hashes = s.hashes[:0]
	now := time.Now().UnixMicro()
	li := 0
	idx := 0
	for _, g := range groups {
		for i := range g.Items {
			if li < len(s.leaders) && s.leaders[li] == idx {
				it := &g.Items[i]
				id := partition.NewV7()
				s.results[idx] = Result{Status: partition.StatusQueued, MessageID: id}
				body := partition.Body{CreatedAt: now, TransactionID: it.TransactionID, TraceID: it.TraceID,
					HasTrace: it.HasTrace, Payload: it.Payload}
				h := partition.HashTxID(it.TransactionID)
				s.hashes = append(s.hashes, h)
				b.Add(h, id, &body)
				li++
			}
			idx++
		}
	}
}

// answer turns the transaction's result into per-item results.
func (a *actor) answer(groups []*Group, res *reginatype.PushResult) {
	s := &a.scratch
	// Leaders found in the window: duplicate, with the original's id.
	for k, bi := range res.DupIndex {
		item := s.leaders[bi]
		s.results[item] = Result{Status: partition.StatusDuplicate, MessageID: res.DupOriginal[k]}
	}
	var queued, dups uint64
	idx := 0
	for _, g := range groups {
		for i := range g.Items {
			l := s.leader[idx]
			if l != idx {
				// Follower: echo the leader's final message id.
				s.results[idx] = Result{Status: partition.StatusDuplicate, MessageID: s.results[l].MessageID}
			}
			g.Results[i] = s.results[idx]
			if g.Results[i].Status == partition.StatusQueued {
				queued++
			} else {
				dups++
			}
			idx++
		}
	}
	a.reg.batches.Add(1)
	a.reg.queued.Add(queued)
	a.reg.duplicates.Add(dups)
	a.observeAnswer(groups, res)
	if queued > 0 {
		a.reg.signals.notify(a.queue)
	}
}

// errPanicked reports a batch whose processing panicked (a bug). The outcome
// of its push is unknown, so the groups get a retryable error and the cache
// forgets the partition.
var errPanicked = errors.New("internal error while pushing; the outcome is unknown, retrying with the same transactionId is safe")

// pushRecovering runs push and turns a panic into an error for this batch,
// so one bad batch cannot take the broker (and every other partition's
// waiting requests) down with it.
func (a *actor) pushRecovering(ctx context.Context, groups []*Group) (err error) {
	defer func() {
		if v := recover(); v != nil {
			a.log.Error().Interface("panic", v).Str("stack", string(debug.Stack())).Msg("push batch panicked")
			a.reg.cache.Forget(a.ref.ID)
			a.resolved = false
			err = fmt.Errorf("push %s/%s: %w", a.queue, a.part, errPanicked)
		}
	}()
	return a.push(ctx, groups)
}

package actor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// ConsumeStore is what a ConsumeBatcher needs of the store (package
// sqlstore implements it).
type ConsumeStore interface {
	// PopMany serves several pops with one transaction and one commit.
	PopMany(ctx context.Context, reqs []reginatype.PopRequest, res []reginatype.PopResult, errs []error)
	// AckMany applies several ack requests with one transaction and one
	// commit.
	AckMany(ctx context.Context, reqs []reginatype.AckRequest, res [][]reginatype.AckResult, errs []error)
	// SettleDelivery releases the lease of a pop nobody waits for any more.
	SettleDelivery(ctx context.Context, group string, partitions []partition.UUID, lease partition.UUID, consumed bool) error
}

// ConsumeConfig sizes a ConsumeBatcher.
type ConsumeConfig struct {
	// Senders is how many batches of each kind (pops, acks) may be in the
	// store at once, each on its own connection (< 1: 4).
	Senders int
	// MaxBatch is the most requests in one batch (< 1: 64; 1: every
	// request alone, as without a batcher).
	MaxBatch int
	// Timeout bounds one batch's store work (0: 30 s).
	Timeout time.Duration
}

// ErrConsumeClosed is returned to requests that arrive after Close; it
// wraps reginatype.ErrShuttingDown (a 503 the client retries elsewhere).
var ErrConsumeClosed = fmt.Errorf("consume batcher closed: %w", reginatype.ErrShuttingDown)

// ConsumeBatcher group-commits pops and acks, as the partition actors do
// pushes: a request goes to an idle sender at once (a lone pop is not
// delayed); requests that arrive while every sender is busy are taken
// together by the next sender that frees up, up to MaxBatch, and served
// with one transaction and one commit (Store.PopMany, Store.AckMany). Each
// request is answered only after the commit of the transaction that served
// it. A pop whose caller left before its answer came has its lease released
// at once, so its messages are not held until the lease expires.
type ConsumeBatcher struct {
	store ConsumeStore
	pops  *combiner[reginatype.PopRequest, reginatype.PopResult]
	acks  *combiner[reginatype.AckRequest, []reginatype.AckResult]
}

// ConsumeStats counts a ConsumeBatcher's batches and the requests they
// served, per kind (requests / batches is the mean batch size).
type ConsumeStats struct {
	PopBatches, PopRequests, AckBatches, AckRequests uint64
}

// Stats returns the counts since the batcher started.
func (b *ConsumeBatcher) Stats() ConsumeStats {
	return ConsumeStats{PopBatches: b.pops.batches.Load(), PopRequests: b.pops.requests.Load(),
		AckBatches: b.acks.batches.Load(), AckRequests: b.acks.requests.Load()}
}

// NewConsumeBatcher starts the senders; Close stops them.
func NewConsumeBatcher(store ConsumeStore, cfg ConsumeConfig) *ConsumeBatcher {
	if cfg.Senders < 1 {
		cfg.Senders = 4
	}
	if cfg.MaxBatch < 1 {
		cfg.MaxBatch = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	b := &ConsumeBatcher{store: store}
	b.pops = newCombiner(cfg, func(ctx context.Context, calls []*call[reginatype.PopRequest, reginatype.PopResult]) {
		reqs := make([]reginatype.PopRequest, len(calls))
		for i, c := range calls {
			reqs[i] = c.req
		}
		res, errs := make([]reginatype.PopResult, len(calls)), make([]error, len(calls))
		store.PopMany(ctx, reqs, res, errs)
		for i, c := range calls {
			c.ans, c.err = res[i], errs[i]
		}
	}, func(c *call[reginatype.PopRequest, reginatype.PopResult]) {
		if c.err != nil || c.ans.LeaseID.IsZero() || len(c.ans.Claimed) == 0 {
			return
		}
		parts := make([]partition.UUID, len(c.ans.Claimed))
		for i, p := range c.ans.Claimed {
			parts[i] = p.ID
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		defer cancel()
		_ = store.SettleDelivery(ctx, c.req.Group, parts, c.ans.LeaseID, false) // else the lease expires
	})
	b.acks = newCombiner(cfg, func(ctx context.Context, calls []*call[reginatype.AckRequest, []reginatype.AckResult]) {
		reqs := make([]reginatype.AckRequest, len(calls))
		for i, c := range calls {
			reqs[i] = c.req
		}
		res, errs := make([][]reginatype.AckResult, len(calls)), make([]error, len(calls))
		store.AckMany(ctx, reqs, res, errs)
		for i, c := range calls {
			c.ans, c.err = res[i], errs[i]
		}
	}, nil)
	return b
}

// Pop serves one pop (it never waits for work; see Linked.Pop).
func (b *ConsumeBatcher) Pop(ctx context.Context, req reginatype.PopRequest) (reginatype.PopResult, error) {
	return b.pops.do(ctx, req)
}

// Ack applies one ack request for group.
func (b *ConsumeBatcher) Ack(ctx context.Context, group string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	return b.acks.do(ctx, reginatype.AckRequest{Group: group, Items: items})
}

// Close stops the senders once the batches in the store are answered;
// requests still queued get ErrConsumeClosed.
func (b *ConsumeBatcher) Close() {
	b.pops.close()
	b.acks.close()
}

// call is one request waiting in a combiner.
type call[Q, A any] struct {
	req   Q
	ans   A
	err   error
	state atomic.Int32 // callWaiting, callAnswered or callAbandoned
	done  chan struct{}
}

const (
	callWaiting int32 = iota
	callAnswered
	callAbandoned
)

// combiner runs requests in batches with up to Senders batches at once.
// Requests wait in a queue of MaxBatch x Senders (beyond it, callers block).
type combiner[Q, A any] struct {
	in        chan *call[Q, A]
	max       int
	timeout   time.Duration
	run       func(context.Context, []*call[Q, A])
	abandoned func(*call[Q, A]) // for a call served after its caller left; may be nil
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	batches   atomic.Uint64
	requests  atomic.Uint64
}

func newCombiner[Q, A any](cfg ConsumeConfig, run func(context.Context, []*call[Q, A]),
	abandoned func(*call[Q, A])) *combiner[Q, A] {
	c := &combiner[Q, A]{in: make(chan *call[Q, A], cfg.MaxBatch*cfg.Senders), max: cfg.MaxBatch, timeout: cfg.Timeout, run: run,
		abandoned: abandoned, stop: make(chan struct{})}
	for range cfg.Senders {
		c.wg.Go(c.send)
	}
	return c
}

// send is one sender: it waits for a request, takes every other request
// already waiting (up to max), runs them as one batch and answers them.
func (c *combiner[Q, A]) send() {
	batch := make([]*call[Q, A], 0, c.max)
	for {
		select {
		case first := <-c.in:
			batch = append(batch[:0], first)
		case <-c.stop:
			return
		}
	more:
		for len(batch) < c.max {
			select {
			case x := <-c.in:
				batch = append(batch, x)
			default:
				break more
			}
		}
		c.batches.Add(1)
		c.requests.Add(uint64(len(batch)))
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		c.run(ctx, batch)
		cancel()
		for _, x := range batch {
			if x.state.CompareAndSwap(callWaiting, callAnswered) {
				close(x.done)
			} else if c.abandoned != nil {
				c.abandoned(x)
			}
		}
		clear(batch)
	}
}

// do hands req to a sender and waits for its answer. A caller whose ctx
// ends first leaves; what its request did stays done (an abandoned pop's
// lease is released).
func (c *combiner[Q, A]) do(ctx context.Context, req Q) (A, error) {
	var zero A
	x := &call[Q, A]{req: req, done: make(chan struct{})}
	select {
	case c.in <- x:
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-c.stop:
		return zero, ErrConsumeClosed
	}
	var gone error
	select {
	case <-x.done:
		return x.ans, x.err
	case <-ctx.Done():
		gone = ctx.Err()
	case <-c.stop:
		gone = ErrConsumeClosed // queued, and perhaps never taken
	}
	if x.state.CompareAndSwap(callWaiting, callAbandoned) {
		return zero, gone
	}
	<-x.done
	return x.ans, x.err
}

func (c *combiner[Q, A]) close() {
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
}

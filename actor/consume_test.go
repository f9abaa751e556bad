package actor

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// gateStore is a ConsumeStore whose PopMany reports each batch's queues on
// batches and then waits for release; it answers every pop with one claimed
// partition under a lease.
type gateStore struct {
	batches chan []string
	release chan struct{}
	mu      sync.Mutex
	settled []partition.UUID
}

func (g *gateStore) PopMany(_ context.Context, reqs []reginatype.PopRequest, res []reginatype.PopResult, _ []error) {
	qs := make([]string, len(reqs))
	for i, r := range reqs {
		qs[i] = r.Queue
		res[i] = reginatype.PopResult{LeaseID: partition.NewV7(),
			Claimed: []reginatype.ClaimedPartition{{ID: partition.NewV7(), Name: r.Queue}}}
	}
	g.batches <- qs
	<-g.release
}

func (g *gateStore) AckMany(_ context.Context, reqs []reginatype.AckRequest, res [][]reginatype.AckResult, _ []error) {
	for i := range reqs {
		res[i] = make([]reginatype.AckResult, len(reqs[i].Items))
	}
}

func (g *gateStore) SettleDelivery(_ context.Context, _ string, _ []partition.UUID, lease partition.UUID, consumed bool) error {
	if !consumed {
		g.mu.Lock()
		g.settled = append(g.settled, lease)
		g.mu.Unlock()
	}
	return nil
}

// TestConsumeBatcherSharesTransactionsOnlyWhenBusy: with one sender, a lone
// pop goes to the store at once, alone; the pops that arrive while it is
// in the store go together in the next batch; each caller gets its own
// answer. A caller that leaves before its answer has its lease released.
func TestConsumeBatcherSharesTransactionsOnlyWhenBusy(t *testing.T) {
	t.Parallel()
	g := &gateStore{batches: make(chan []string, 4), release: make(chan struct{})}
	b := NewConsumeBatcher(g, ConsumeConfig{Senders: 1, MaxBatch: 8})
	defer b.Close()
	ctx := context.Background()

	type answer struct {
		queue string
		res   reginatype.PopResult
		err   error
	}
	answers := make(chan answer, 8)
	pop := func(ctx context.Context, q string) {
		res, err := b.Pop(ctx, reginatype.PopRequest{Queue: q})
		answers <- answer{q, res, err}
	}
	go pop(ctx, "lone")
	require.Equal(t, []string{"lone"}, <-g.batches, "a lone pop goes at once, alone")

	// While "lone" is in the store: three more callers, one of which leaves.
	leaving, leave := context.WithCancel(ctx)
	for _, q := range []string{"a", "b"} {
		go pop(ctx, q)
	}
	go pop(leaving, "gone")
	// The sender takes them together once it is free.
	for len(b.pops.in) < 3 {
		runtime.Gosched()
	}
	g.release <- struct{}{}
	require.Equal(t, "lone", (<-answers).queue)
	second := <-g.batches
	require.ElementsMatch(t, []string{"a", "b", "gone"}, second, "the pops that waited share one batch")
	leave()
	got := <-answers
	require.Equal(t, "gone", got.queue, "the caller that left returns at once")
	require.ErrorIs(t, got.err, context.Canceled)
	g.release <- struct{}{}
	for range 2 {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, a.queue, a.res.Claimed[0].Name, "each caller gets its own answer")
	}
	b.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.settled, 1, "the lease of the pop nobody waited for is released")
	st := b.Stats()
	require.Equal(t, ConsumeStats{PopBatches: 2, PopRequests: 4}, st)
}

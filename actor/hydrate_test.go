package actor

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/reginatype"
)

// Two partitions whose windows each fit the cache's room alone but not
// together: the first load reserves its room while it reads, so the second
// does not read beside it and overshoot the budget; it waits for the first
// to be installed, then tries again (here it fits: the fake store's loads
// install nothing).
func TestConcurrentLoadsReserveTheBudget(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: budget}), CacheBudgetBytes: budget})
	b.store.depth.Store(depthTaking(b.reg.cache, budget*6/10)) // 60% of the budget each
	g := newGate()
	var calls atomic.Int32
	b.store.before = func(op string) {
		if op == "load" && calls.Add(1) == 1 {
			g.hold()
		}
	}

	first := group("q", "p1", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{first})
	require.NoError(t, first.Err)
	g.waitArrival(t) // p1's load is reading, its room reserved

	second := group("q", "p2", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{second})
	require.NoError(t, second.Err)
	require.Eventually(t, func() bool { return b.reg.Stats().Hydrations.Started == 2 },
		30*time.Second, time.Millisecond, "p2's load did not begin")
	require.Equal(t, int32(1), calls.Load(), "p2 must not read beside p1")
	require.LessOrEqual(t, b.reg.hyd.reserved.Load(), int64(budget))

	close(g.release)
	require.Eventually(t, func() bool {
		h := b.reg.Stats().Hydrations
		return h.Finished == 2 && h.Running == 0
	}, 30*time.Second, time.Millisecond, "p2 was not loaded after p1: %+v", b.reg.Stats().Hydrations)
	require.Zero(t, b.reg.Stats().Hydrations.TooDeep)
	require.Equal(t, int32(2), calls.Load())
}

// A partition asked for while every load slot is taken waits in the queue
// and is loaded as soon as a slot frees, without another push (a cold broker
// loads every active partition, not only those that push again).
func TestQueuedLoadStartsWhenASlotFrees(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: 1 << 20}), CacheBudgetBytes: 1 << 20})
	g, release := b.holdCalls("load")
	for i := range defaultMaxHydrations {
		p := group("q", "p"+strconv.Itoa(i), "a")
		b.reg.Push(context.Background(), []*reginatype.PushGroup{p})
		require.NoError(t, p.Err)
		g.waitArrival(t) // this load holds a slot
	}
	last := group("q", "last", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{last})
	require.NoError(t, last.Err)
	h := b.reg.Stats().Hydrations
	require.Equal(t, uint64(defaultMaxHydrations), h.Started)
	require.Equal(t, uint64(1), h.Busy)
	require.Equal(t, 1, h.Queued, "the third partition waits for a slot")

	release()
	require.Eventually(t, func() bool {
		h := b.reg.Stats().Hydrations
		return h.Finished == defaultMaxHydrations+1 && h.Running == 0 && h.Queued == 0
	}, 30*time.Second, time.Millisecond, "the queued partition was not loaded")
	require.Equal(t, uint64(defaultMaxHydrations+1), b.reg.Stats().Hydrations.Started)
}

// Two queued partitions that each fit the room left but not together are
// loaded one batch after the other: the second is not backed off as too
// deep for a minute.
func TestBatchDefersAPartitionThatFitsAlone(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: budget}), CacheBudgetBytes: budget})
	b.store.depth.Store(depthTaking(b.reg.cache, budget*4/10)) // 40% of the budget each
	// The first two loads wait at their own gates; later ones pass.
	gates := []*gate{newGate(), newGate()}
	var calls atomic.Int32
	b.store.before = func(op string) {
		if op != "load" {
			return
		}
		if n := int(calls.Add(1)); n <= len(gates) {
			gates[n-1].hold()
		}
	}
	push := func(part string) {
		g := group("q", part, "a")
		b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
		require.NoError(t, g.Err)
	}
	push("p0")
	gates[0].waitArrival(t) // p0's load holds a slot and 40%
	push("p1")
	gates[1].waitArrival(t) // p1's load holds the other slot and 40%
	push("p2")
	push("p3")
	require.Equal(t, 2, b.reg.Stats().Hydrations.Queued)

	// p1's slot takes p2 and p3 together: with p0's 40% still held only
	// one of them fits; the other waits for the next batch.
	close(gates[1].release)
	require.Eventually(t, func() bool {
		h := b.reg.Stats().Hydrations
		return h.Finished == 3 && h.Running == 1 && h.Queued == 0
	}, 30*time.Second, time.Millisecond, "p1, p2 and p3 were not all loaded: %+v", b.reg.Stats().Hydrations)
	h := b.reg.Stats().Hydrations
	require.Zero(t, h.TooDeep)
	require.Equal(t, int32(4), calls.Load(), "p2 and p3 in two loads")
	close(gates[0].release)
}

// depthTaking is the largest window whose load c estimates at most bytes.
func depthTaking(c *cache.Cache, bytes int64) int64 {
	lo, hi := int64(0), int64(1)
	for c.LoadBytes(hi) <= bytes {
		hi *= 2
	}
	for lo+1 < hi {
		if mid := (lo + hi) / 2; c.LoadBytes(mid) <= bytes {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Partitions asked for together (a broker that starts pushes to all its
// partitions at once) are loaded in one batch, one pass over the window,
// not one load per free slot.
func TestLoadsGatherPartitionsAskedForTogether(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: 1 << 20}), CacheBudgetBytes: 1 << 20})
	b.reg.hyd.gather = time.Second // wide enough for five pushes on a slow machine
	for i := range 5 {
		g := group("q", "p"+strconv.Itoa(i), "a")
		b.reg.Push(context.Background(), []*reginatype.PushGroup{g})
		require.NoError(t, g.Err)
	}
	require.Eventually(t, func() bool {
		h := b.reg.Stats().Hydrations
		return h.Finished == 5 && h.Running == 0
	}, 30*time.Second, time.Millisecond, "the five partitions were not loaded: %+v", b.reg.Stats().Hydrations)
	b.store.mu.Lock()
	loads := slices.Clone(b.store.loads)
	b.store.mu.Unlock()
	require.Len(t, loads, 1, "one load for all five")
	require.Len(t, loads[0], 5)
	require.Zero(t, b.reg.Stats().Hydrations.Busy, "no partition waited for a busy slot")
}

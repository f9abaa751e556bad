package actor

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/partition"
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

// While partitions' cache loads run, their pushes (full-window probes) go to
// the store one at a time; a push that does not probe for a load (here: a
// queue without deduplication) does not wait for them.
func TestProbesOfLoadingPartitionsRunOneAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: 1 << 20}), CacheBudgetBytes: 1 << 20})
	b.store.refs["nodedup/p"] = reginatype.PartitionRef{ID: partition.NewV7(), QueueID: partition.NewV7()}
	b.store.ids[b.store.refs["nodedup/p"].ID] = map[partition.Hash]partition.UUID{}

	loads, releaseLoads := newGate(), make(chan struct{})
	pushes := newGate()
	var inStore, most atomic.Int32
	b.store.before = func(op string) {
		switch op {
		case "load":
			loads.arrived <- struct{}{}
			<-releaseLoads
		case "push":
			n := inStore.Add(1)
			defer inStore.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case pushes.arrived <- struct{}{}:
			default:
			}
			<-pushes.release
		}
	}
	// The first pushes of two new partitions start their loads (held) and
	// probe the whole window meanwhile: one reaches the store, the other
	// waits for it.
	var done []<-chan struct{}
	for _, p := range []string{"p1", "p2"} {
		done = append(done, b.pushAsync(context.Background(), group("q", p, "a")))
	}
	pushes.waitArrival(t)
	loads.waitArrival(t)
	require.Never(t, func() bool { return inStore.Load() > 1 }, 200*time.Millisecond, time.Millisecond,
		"a second probe of a loading partition reached the store")
	// A push that probes for no load is not held back by them.
	done = append(done, b.pushAsync(context.Background(), group("nodedup", "p", "x")))
	require.Eventually(t, func() bool { return inStore.Load() == 2 }, 30*time.Second, time.Millisecond,
		"the dedup-off push waited for the probes")
	close(pushes.release)
	close(releaseLoads)
	for _, d := range done {
		waitDone(t, d)
	}
	require.Equal(t, int32(2), most.Load())
}

// With WarmStart, a new registry loads the partitions pushed to recently
// (the store lists them) before any push, together: one load for all of
// them, not one per partition as their first pushes would ask.
func TestWarmStartLoadsRecentPartitionsTogether(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	for range 5 {
		st.recent = append(st.recent, partition.NewV7())
	}
	reg := NewRegistry(st, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: 1 << 20}),
		CacheBudgetBytes: 1 << 20, WarmStart: true, Logger: zerolog.Nop()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, reg.Close(ctx))
	})
	require.Eventually(t, func() bool { return reg.Stats().Hydrations.Finished == 5 }, 30*time.Second, time.Millisecond,
		"the recent partitions were not loaded: %+v", reg.Stats().Hydrations)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Len(t, st.loads, 1, "one load for all of them")
	require.ElementsMatch(t, st.recent, st.loads[0])
}

package actor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/reginatype"
)

// Two partitions whose windows each fit the cache's room alone but not
// together: the first load reserves its room while it reads, so the second
// is skipped (too deep) instead of loading beside it and overshooting the
// budget.
func TestConcurrentLoadsReserveTheBudget(t *testing.T) {
	t.Parallel()
	const budget = 1 << 20
	b := setup(t, Config{Cache: cache.New(cache.Config{Enabled: true, BudgetBytes: budget}), CacheBudgetBytes: budget})
	b.store.depth.Store(budget * 6 / 10 / loadBytesPerHash) // 60% of the budget each
	g, release := b.holdCalls("load")
	defer release()

	first := group("q", "p1", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{first})
	require.NoError(t, first.Err)
	g.waitArrival(t) // p1's load is reading, its room reserved

	second := group("q", "p2", "a")
	b.reg.Push(context.Background(), []*reginatype.PushGroup{second})
	require.NoError(t, second.Err)
	require.Eventually(t, func() bool { return b.reg.Stats().Hydrations.TooDeep == 1 },
		30*time.Second, time.Millisecond, "p2's load was not skipped")
	h := b.reg.Stats().Hydrations
	require.Equal(t, uint64(2), h.Started)
	require.Equal(t, 1, h.Running, "only p1's load runs")
}

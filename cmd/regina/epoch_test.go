package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// failoverStore is a real store whose epoch, as the registry sees it, the
// test moves on (the identity change a failover causes). Its pushes run
// under the store's own epoch, so that only the registry's reaction to the
// epoch is tested here (sqlstore's own check has its test).
type failoverStore struct {
	*sqlstore.Store
	epoch atomic.Uint64
}

func (f *failoverStore) Epoch() uint64 { return f.epoch.Load() }

func (f *failoverStore) Push(ctx context.Context, b *reginatype.PushBatch) (reginatype.PushResult, error) {
	c := *b
	c.Epoch = f.Store.Epoch()
	res, err := f.Store.Push(ctx, &c)
	res.Epoch = f.epoch.Load()
	return res, err
}

// After an asynchronous failover the new primary lacks the last commits the
// cache learned, and another broker may have written other ids at those
// offsets. A cache that kept what it learned would send a watermark above
// them and store such an id twice when it is resent. When the database
// server changes, the registry drops the whole cache, and the resend is a
// duplicate.
func TestCacheStartsOverWhenTheDatabaseServerChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &failoverStore{Store: sqlstoretest.Open(t)}
	c := cache.New(cache.Config{Enabled: true, BudgetBytes: 64 << 20})
	reg := actor.NewRegistry(st, actor.Config{Cache: c, CacheBudgetBytes: 64 << 20, Logger: zerolog.Nop()})
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, reg.Close(cctx))
	})
	h := &regHarness{st: st.Store, reg: reg, cache: c}
	d := newDB(t, st.Schema())

	got, g := h.push(t, "q", "p", "a", "b") // offsets 0, 1; the cache loads them
	require.Equal(t, []string{"queued", "queued"}, got)
	p := g.PartitionID
	h.waitKnown(t, 1)
	got, _ = h.push(t, "q", "p", "c", "d") // offsets 2, 3, learned
	require.Equal(t, []string{"queued", "queued"}, got)
	w, r := c.Watermark(p, 3600, hashes("zzz"))
	require.Equal(t, cache.ReasonNone, r)
	require.Equal(t, int64(3), w, "the cache knows the partition up to offset 3")

	// The failover: the new primary never received offsets 2 and 3, and
	// another broker writes "x" at offset 2 there.
	d.exec(t, `DELETE FROM queen.segments WHERE partition_id = $1 AND first_offset >= 2`, p)
	d.exec(t, `DELETE FROM queen.log_txns WHERE partition_id = $1 AND first_offset >= 2`, p)
	d.exec(t, `UPDATE queen.partitions SET next_offset = 2 WHERE id = $1`, p)
	b := &reginatype.PushBatch{Partition: p, WindowHint: 3600, Watermark: reginatype.NoWatermark}
	xID := partition.NewV7()
	b.Add(partition.HashTxID("x"), xID, &partition.Body{TransactionID: "x", Payload: []byte(`1`)})
	res, err := st.Store.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.FirstOffset)
	st.epoch.Add(1) // the broker's connections found the new server

	// x is resent to this broker: a duplicate of the one stored after the
	// failover. c was lost with the old primary: stored again.
	_, g = h.push(t, "q", "p", "x")
	require.Equal(t, partition.StatusDuplicate, g.Results[0].Status, "x must not be stored twice")
	require.Equal(t, xID, g.Results[0].MessageID)
	got, _ = h.push(t, "q", "p", "c")
	require.Equal(t, []string{"queued"}, got)
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.log_txns l, unnest(l.hashes) h
		WHERE l.partition_id = $1 AND h = $2`, p, hashBytes("x")))
}

func hashBytes(tx string) []byte {
	h := partition.HashTxID(tx)
	return h[:]
}

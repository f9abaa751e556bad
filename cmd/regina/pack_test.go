package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestPackedBrokersDoNotDeadlock: two brokers (two registries, each its own
// pool) on one schema push, at once and again and again, bodies that span
// the same partitions in opposite orders. Every packed transaction locks
// its partition rows in partition-id order, so none deadlocks (PostgreSQL
// would cancel one with 40P01, and its groups would get an error).
func TestPackedBrokersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(t)
	var regs []*actor.Registry
	for range 2 {
		reg := actor.NewRegistry(sqlstoretest.OpenSchema(t, schema), actor.Config{
			PushShape: reginatype.ShapeOneTransaction, PackSenders: 1, Logger: zerolog.Nop()})
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, reg.Close(cctx))
		})
		regs = append(regs, reg)
	}
	const parts, rounds, workers = 8, 30, 4
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			reg := regs[w%2]
			for r := range rounds {
				groups := make([]*reginatype.PushGroup, parts)
				for k := range parts {
					p := k
					if w%2 == 1 {
						p = parts - 1 - k
					}
					groups[k] = &reginatype.PushGroup{Queue: "dl", Partition: fmt.Sprint("p", p),
						Items: []reginatype.PushItem{{TransactionID: fmt.Sprintf("w%d-r%d", w, r), Payload: []byte(`1`)}}}
				}
				reg.Push(ctx, groups)
				for _, g := range groups {
					if g.Err != nil {
						errc <- fmt.Errorf("worker %d round %d %s: %w", w, r, g.Partition, g.Err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	var packed, batches uint64
	for _, reg := range regs {
		st := reg.Stats()
		require.Zero(t, st.PushFailures)
		packed += st.PackedTransactions
		batches += st.PackedBatches
	}
	require.Less(t, packed, batches, "no transaction carried two partitions: nothing was tested")
}

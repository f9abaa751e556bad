package sqlstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// readsReadyAcrossShards reports whether a remote command reads the ready
// cursor rows of a queue (queen.consumers by queue_id, as the multi-shard
// candidate scan does on every shard) or runs the per-worker ready read.
func readsReadyAcrossShards(cmd string) bool {
	return strings.Contains(cmd, "citus_ready_worker") || strings.Contains(cmd, "citus_catch_up_worker") ||
		(strings.Contains(cmd, ".consumers_") && strings.Contains(cmd, "queue_id"))
}

// TestCitusAnyPartitionPopsServeFromTheCache: after one pop filled the
// group's cache of candidates (one delegated call per worker), the next
// any-partition pops take their candidates from it: each reaches only the
// worker holding the partition it serves (its lock, read and lease), with no
// read of the queue's cursor rows on every shard; and once the cache is
// empty, a pop within its TTL (nothing pushed or acked since) reaches no
// worker at all.
func TestCitusAnyPartitionPopsServeFromTheCache(t *testing.T) {
	st := openCitus(t)
	st.SetCitusReadyTTL(time.Hour) // the test counts commands, not time: no refresh by age
	ctx := context.Background()
	const parts = 6
	for i := range parts {
		ref, err := st.EnsurePartition(ctx, "cq", fmt.Sprintf("p%d", i))
		require.NoError(t, err)
		b, _ := batchOf(t, ref, fmt.Sprintf("m%d", i))
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
	}
	var log remoteLog
	obs := log.observe(t, st)
	pop := func() reginatype.PopResult {
		t.Helper()
		res, err := obs.Pop(ctx, reginatype.PopRequest{Queue: "cq", Group: "g", Batch: 1, Partitions: 1})
		require.NoError(t, err)
		return res
	}
	seen := map[string]bool{}
	res := pop() // fills the cache: the catch-up and ready read on every worker
	require.Len(t, res.Messages, 1)
	seen[res.Messages[0].TransactionID] = true
	first := log.take()
	ready, workers := 0, map[string]bool{}
	for _, c := range first {
		if strings.Contains(c, "citus_ready_worker") {
			ready++
			server, _, _ := strings.Cut(c, " connectionId")
			workers[server] = true
		}
	}
	require.GreaterOrEqual(t, len(workers), 2, "the first pop asks every worker: %q", first)
	require.Equal(t, len(workers), ready, "the first pop asks each worker once: %q", first)
	for i := 1; i < parts; i++ {
		res := pop()
		require.Len(t, res.Messages, 1, "pop %d", i)
		seen[res.Messages[0].TransactionID] = true
		cmds := log.take()
		t.Logf("pop %d: %d remote commands", i, len(cmds))
		require.NotEmpty(t, cmds, "pop %d locks and leases on its worker", i)
		servers := map[string]bool{}
		for _, c := range cmds {
			require.False(t, readsReadyAcrossShards(c), "pop %d read the ready rows on the workers: %q", i, c)
			server, _, _ := strings.Cut(c, " connectionId")
			servers[server] = true
		}
		require.Len(t, servers, 1, "pop %d reaches one worker: %q", i, cmds)
	}
	require.Len(t, seen, parts, "every partition served once")
	res = pop()
	require.Equal(t, "no_available_partition", res.Empty)
	require.Empty(t, log.take(), "an empty cache within its TTL asks no worker")
}

// TestCitusPopSeesAPushThroughAnotherStore: a message pushed through another
// store (another broker) on the same database reaches this store's pops once
// its cache of candidates is older than its TTL, though this store pushed
// and acked nothing since it found the queue empty.
func TestCitusPopSeesAPushThroughAnotherStore(t *testing.T) {
	st := openCitus(t)
	other := sqlstoretest.OpenSchema(t, st.Schema())
	ctx := context.Background()
	pop := func() reginatype.PopResult {
		t.Helper()
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "xq", Group: "g", Batch: 10, Partitions: 4, AutoAck: true})
		require.NoError(t, err)
		return res
	}
	ref, err := other.EnsurePartition(ctx, "xq", "p0")
	require.NoError(t, err)
	require.Empty(t, pop().Messages) // the cache is filled, empty
	for i := range 3 {
		id := fmt.Sprintf("m%d", i)
		b, _ := batchOf(t, ref, id)
		_, err = other.Push(ctx, b)
		require.NoError(t, err)
		var got []string
		require.Eventually(t, func() bool {
			for _, m := range pop().Messages {
				got = append(got, m.TransactionID)
			}
			return len(got) > 0
		}, 20*time.Second, 10*time.Millisecond, "push %d through the other store", i)
		require.Equal(t, []string{id}, got)
	}
}

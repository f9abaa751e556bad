package sqlstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestAckAndExplainHashJoinTheirIDs: resolving many transaction ids (an ack
// of a whole pushed batch, an explain of many keys) must join the ids with
// the hashes of the sidecar rows that hold them by hash (or merge), as
// push_probe does,
// never compare every id with every hash of every row (a nested loop with a
// join filter: 823 ms for an explain of 1000 keys of one 1000-message push,
// EXPLAIN (ANALYZE, BUFFERS), against 51 ms hash-joined). The plans are the
// ones PostgreSQL runs, through connections made as the broker makes them.
func TestAckAndExplainHashJoinTheirIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	var log planLog
	obs, closeObs, err := st.Observed(ctx, autoExplain, log.notice)
	require.NoError(t, err)
	t.Cleanup(closeObs)
	ref, err := st.EnsurePartition(ctx, "resolve", "p")
	require.NoError(t, err)
	const batches, per = 8, 500
	txid := func(b, i int) string { return fmt.Sprintf("b%d-%d", b, i) }
	for b := range batches {
		ids := make([]string, per)
		for i := range ids {
			ids[i] = txid(b, i)
		}
		batch, _ := batchOf(t, ref, ids...)
		_, err := st.Push(ctx, batch)
		require.NoError(t, err)
	}
	// A hash join, or a merge join of the sorted sides: either reads each
	// side once.
	hashJoin := regexp.MustCompile(`"(Hash|Merge) Cond": "\(\(?(h\.h = c\.h|c\.h = h\.h|c\.h = k\.h|k\.h = c\.h)`)
	requireHashJoined := func(what, marker string) {
		t.Helper()
		var seen int
		for _, p := range log.take(t) {
			if !strings.Contains(p.Query, marker) {
				continue
			}
			seen++
			require.Regexp(t, hashJoin, p.Raw, "%s: the ids must be hash- or merge-joined with the rows' hashes:\n%.4000s", what, p.Raw)
			require.NotContains(t, p.Raw, `"Join Filter"`, "%s: a join filter compares every id with every hash:\n%.4000s", what, p.Raw)
		}
		require.Positive(t, seen, "%s: its statement was not seen", what)
	}

	// An ack of the first batch, whole.
	pop, err := st.Pop(ctx, reginatype.PopRequest{Queue: "resolve", Group: reginatype.QueueModeGroup, Batch: per, Partitions: 1})
	require.NoError(t, err)
	require.Len(t, pop.Messages, per)
	log.take(t)
	items := make([]reginatype.AckItem, per)
	for i := range items {
		items[i] = reginatype.AckItem{TransactionID: txid(0, i), PartitionID: ref.ID, LeaseID: pop.LeaseID, HasLease: true,
			Status: reginatype.AckCompleted}
	}
	res, err := obs.Ack(ctx, reginatype.QueueModeGroup, items)
	require.NoError(t, err)
	for i, r := range res {
		require.True(t, r.Success, "ack %d: %s", i, r.Error)
	}
	requireHashJoined("ack", "ON h.h = c.h")

	// An explain of every key of the last batch: each has its one copy.
	keys := make([]reginatype.ExplainKey, per)
	for i := range keys {
		keys[i] = reginatype.ExplainKey{Queue: "resolve", Partition: "p", TransactionID: txid(batches-1, i)}
	}
	ex, err := obs.Explain(ctx, keys)
	require.NoError(t, err)
	for i, r := range ex {
		require.Len(t, r.Occurrences, 1, "key %d", i)
		require.Equal(t, int64((batches-1)*per+i), r.Occurrences[0].Offset, "key %d", i)
		require.False(t, r.Occurrences[0].SegmentGone, "key %d", i)
	}
	requireHashJoined("explain", "AS k(pid, h, w, i)")
}

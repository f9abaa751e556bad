package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// A pop takes the queue's id from the store's cache (the fused pop: the
// catch-up and the claim in one round trip). When the queue is deleted and
// created again under the same name, the cached id is stale: the pop must
// serve the new queue's messages, not answer empty, and after a delete
// answer queue_not_found.
func TestPopFollowsAQueueCreatedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	push := func(txid string) {
		t.Helper()
		ref, err := st.EnsurePartition(ctx, "again", "p")
		require.NoError(t, err)
		b, _ := batchOf(t, ref, txid)
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
	}
	pop := func() reginatype.PopResult {
		t.Helper()
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "again", Batch: 10, AutoAck: true})
		require.NoError(t, err)
		return res
	}
	txids := func(res reginatype.PopResult) []string {
		var out []string
		for _, m := range res.Messages {
			out = append(out, m.TransactionID)
		}
		return out
	}

	push("first")
	require.Equal(t, []string{"first"}, txids(pop()))
	push("second") // the id is cached now: this pop is fused
	require.Equal(t, []string{"second"}, txids(pop()))
	require.Equal(t, "no_available_partition", pop().Empty)

	existed, _, err := st.DeleteQueue(ctx, "again")
	require.NoError(t, err)
	require.True(t, existed)
	require.Equal(t, "queue_not_found", pop().Empty, "a deleted queue, its id still cached")

	push("third")
	require.Equal(t, []string{"third"}, txids(pop()), "a queue created again: its new id")
	push("fourth")
	_, _, err = st.DeleteQueue(ctx, "again")
	require.NoError(t, err)
	push("fifth") // created again behind a cached id: the pop reads the new queue only
	require.Equal(t, []string{"fifth"}, txids(pop()))
}

// Pops of two consumer groups and of queue mode keep their own cursors
// when every pop after the first of each runs fused.
func TestFusedPopsKeepEachGroupsCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "groups", "p")
	require.NoError(t, err)
	for _, tx := range []string{"a", "b", "c"} {
		b, _ := batchOf(t, ref, tx)
		_, err := st.Push(ctx, b)
		require.NoError(t, err)
	}
	for _, group := range []string{"", "g1", "g2"} {
		var got []string
		for range 4 {
			res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "groups", Group: group, Batch: 1, AutoAck: true})
			require.NoError(t, err)
			for _, m := range res.Messages {
				got = append(got, m.TransactionID)
			}
		}
		require.Equal(t, []string{"a", "b", "c"}, got, "group %q", group)
	}
}

package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// pushGrid pushes n segments of size messages each to queue/part,
// transaction ids "s<segment>-<index>", and returns the partition.
func pushGrid(t *testing.T, st *sqlstore.Store, queue, part string, n, size int) reginatype.PartitionRef {
	t.Helper()
	ctx := context.Background()
	ref, err := st.EnsurePartition(ctx, queue, part)
	require.NoError(t, err)
	for s := range n {
		var txids []string
		for i := range size {
			txids = append(txids, fmt.Sprintf("s%d-%d", s, i))
		}
		b, _ := batchOf(t, ref, txids...)
		_, err := st.Push(ctx, b)
		require.NoError(t, err)
	}
	return ref
}

// A pop reads the segments holding the offsets it may deliver, bounded by
// offset, not a count of segments (which at batch 100 over segments of 10
// messages read 101 of them, ten times the frames delivered). A batch that
// comes up short on tombstones, or on segments retention removed, reads on
// from the next segment there is.
func TestPopReadsTheSegmentsItDelivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref := pushGrid(t, st, "reads", "p", 10, 10) // offsets 0..99, segments at 0, 10, .., 90

	read := func(from int64, limit int) ([]int64, any) {
		t.Helper()
		firsts, next, ok, err := st.ReadSegmentsFrom(ctx, [16]byte(ref.ID), from, limit)
		require.NoError(t, err)
		if !ok {
			return firsts, "none"
		}
		return firsts, next
	}
	firsts, next := read(0, 1)
	require.Equal(t, []int64{0}, firsts)
	require.Equal(t, int64(10), next)
	firsts, next = read(15, 10) // offsets 15..24
	require.Equal(t, []int64{10, 20}, firsts)
	require.Equal(t, int64(30), next)
	firsts, next = read(20, 100)
	require.Equal(t, []int64{20, 30, 40, 50, 60, 70, 80, 90}, firsts)
	require.Equal(t, "none", next)
	firsts, next = read(100, 10)
	require.Equal(t, []int64{90}, firsts, "the covering segment, all read")
	require.Equal(t, "none", next)

	pop := func(queue, group string, batch int) []string {
		t.Helper()
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: queue, Group: group, Batch: batch, AutoAck: true})
		require.NoError(t, err)
		out := []string{}
		for _, m := range res.Messages {
			out = append(out, m.TransactionID)
		}
		return out
	}
	require.Equal(t, []string{"s0-0", "s0-1", "s0-2", "s0-3", "s0-4", "s0-5", "s0-6", "s0-7", "s0-8", "s0-9",
		"s1-0", "s1-1", "s1-2", "s1-3", "s1-4"}, pop("reads", "", 15))

	// Tombstones: every message of segments 20 and 30 deleted. A batch of
	// 10 from offset 15 finds 5 messages in its first read and reads on
	// past the tombstones.
	for s := 2; s <= 3; s++ {
		for i := range 10 {
			n, err := st.DeleteMessage(ctx, ref.ID, fmt.Sprintf("s%d-%d", s, i))
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
	}
	require.Equal(t, []string{"s1-5", "s1-6", "s1-7", "s1-8", "s1-9", "s4-0", "s4-1", "s4-2", "s4-3", "s4-4"}, pop("reads", "", 10))
	require.Equal(t, []string{"s4-5", "s4-6", "s4-7", "s4-8", "s4-9", "s5-0"}, pop("reads", "", 6))

	// Segments gone at the front (as retention removes them): a new
	// group's cursor at 0 starts at the oldest segment left.
	gap := pushGrid(t, st, "gaps", "p", 5, 10)
	pool := sqlstoretest.Pool(t)
	_, err := pool.Exec(ctx, schemaSQL(st, `DELETE FROM queen.segments WHERE partition_id = $1 AND first_offset < 20`), gap.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"s2-0", "s2-1", "s2-2", "s2-3", "s2-4"}, pop("gaps", "late", 5))
	require.Equal(t, []string{"s2-5", "s2-6", "s2-7", "s2-8", "s2-9", "s3-0", "s3-1"}, pop("gaps", "late", 7))
}

package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

func batchOf(t *testing.T, ref reginatype.PartitionRef, txids ...string) (*reginatype.PushBatch, []partition.UUID) {
	t.Helper()
	b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: reginatype.NoWatermark}
	var ids []partition.UUID
	for _, tx := range txids {
		id := partition.NewV7()
		ids = append(ids, id)
		b.Add(partition.HashTxID(tx), id, &partition.Body{CreatedAt: 1, TransactionID: tx, Payload: []byte(`{"a":1}`)})
	}
	return b, ids
}

func TestPushSegmentProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "orders", "p1")
	require.NoError(t, err)
	require.Equal(t, 3600, ref.WindowSeconds)

	b, ids := batchOf(t, ref, "a", "b")
	res, err := st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	require.Empty(t, res.DupIndex)

	b2, ids2 := batchOf(t, ref, "c", "b", "d")
	res, err = st.Push(ctx, b2)
	require.NoError(t, err)
	require.Equal(t, int64(2), res.FirstOffset)
	require.Equal(t, []int{1}, res.DupIndex)
	require.Equal(t, ids[1], res.DupOriginal[0])

	b3, _ := batchOf(t, ref, "a", "d")
	res, err = st.Push(ctx, b3)
	require.NoError(t, err)
	require.Equal(t, int64(-1), res.FirstOffset)
	require.Equal(t, []int{0, 1}, res.DupIndex)
	require.Equal(t, []partition.UUID{ids[0], ids2[2]}, res.DupOriginal)

	// Watermark above the originals: the probe does not look below it.
	b4, _ := batchOf(t, ref, "a")
	b4.Watermark = 3
	res, err = st.Push(ctx, b4)
	require.NoError(t, err)
	require.Empty(t, res.DupIndex)
	require.Equal(t, int64(4), res.FirstOffset)
}

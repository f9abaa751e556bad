package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// RecentPartitions lists the partitions pushed to inside their queue's
// window, most recent first, up to the limit: not a partition never pushed,
// nor one pushed before its window, nor one of a queue without a window.
func TestRecentPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	exec := schemaExec(t, st, sqlstoretest.Pool(t))
	configureWindow(t, st, "off", 0)
	push := func(queue, part string) reginatype.PartitionRef {
		ref, err := st.EnsurePartition(ctx, queue, part)
		require.NoError(t, err)
		b, _ := batchOf(t, ref, queue+part)
		_, err = st.Push(ctx, b)
		require.NoError(t, err)
		return ref
	}
	a := push("on", "a")
	old := push("on", "old")
	push("off", "x")
	_, err := st.EnsurePartition(ctx, "on", "never")
	require.NoError(t, err)
	b := push("on", "b")
	exec(`UPDATE queen.partitions SET last_push_at = now() - interval '2 hours' WHERE id = $1`, old.ID[:])
	exec(`UPDATE queen.partitions SET last_push_at = now() - interval '1 minute' WHERE id = $1`, a.ID[:])

	got, err := st.RecentPartitions(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []partition.UUID{b.ID, a.ID}, got)
	got, err = st.RecentPartitions(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []partition.UUID{b.ID}, got)
}

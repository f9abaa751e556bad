package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
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

// A cache load is bounded by its caller's context, not by the broker's
// statement timeout: a pass over a deep window outlasts DB_STATEMENT_TIMEOUT
// on a busy server, and a cancelled load was asked for again at every push.
// Here the load waits 2 s for a lock on log_txns under a 1 s timeout (the
// schema migrated first without the timeout).
func TestStreamHydrationsOutlastsTheStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.OpenConfig(t, sqlstore.Config{StatementTimeout: time.Second, Schema: sqlstoretest.Open(t).Schema()})
	ref, err := st.EnsurePartition(ctx, "deep", "p")
	require.NoError(t, err)
	b, _ := batchOf(t, ref, "a", "b")
	_, err = st.Push(ctx, b)
	require.NoError(t, err)

	tx, err := sqlstoretest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, schemaSQL(st, "LOCK TABLE queen.log_txns IN ACCESS EXCLUSIVE MODE"))
	require.NoError(t, err)
	released := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second) // the lock held past the statement timeout
		released <- tx.Commit(ctx)
	}()
	var hashes int
	err = st.StreamHydrations(ctx, []partition.UUID{ref.ID}, func([]reginatype.Hydration) error { return nil },
		func(_ int, _ int64, _ time.Time, hs [][16]byte) error {
			hashes += len(hs)
			return nil
		})
	require.NoError(t, <-released)
	require.NoError(t, err)
	require.Equal(t, 2, hashes)
}

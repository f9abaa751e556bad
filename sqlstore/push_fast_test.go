package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestNoProbeRechecksUnderLock: push_segment skips the probe (one UPDATE ...
// RETURNING allocates) only while every log_txns row of the partition lies
// at or below the watermark. A watermark computed before another writer
// committed a segment holding the batch's hash must not let the push write
// that hash again: the condition is checked on the row version the UPDATE
// locks, so the push waits for the writer, sees its segment above the
// watermark, probes, and answers the writer's message as the original.
// A push whose promise holds allocates and stamps push_xid (what pop_prepare
// relies on) like the locked path.
func TestNoProbeRechecksUnderLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "noprobe", "p")
	require.NoError(t, err)
	require.Positive(t, ref.WindowSeconds)

	xid := func() (x uint64) {
		require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT coalesce(push_xid::text::bigint, 0) FROM queen.partitions WHERE id = $1`),
			[16]byte(ref.ID)).Scan(&x))
		return x
	}
	// The first push probes (the sentinel); then the promise holds (W =
	// next_offset - 1 = 0): written without a probe, push_xid moves on.
	for k, tx := range []string{"a", "b"} {
		before := xid()
		b, _ := batchOf(t, ref, tx)
		b.Watermark = int64(k) - 1
		res, err := st.Push(ctx, b)
		require.NoError(t, err)
		require.Empty(t, res.DupIndex)
		require.Equal(t, int64(k), res.FirstOffset)
		require.Greater(t, xid(), before, "push_xid must be stamped")
	}

	// A writer holds the partition row, with a segment holding "dup" at
	// offset 2 not yet committed. The cache's W = 1 was right before it.
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	orig := partition.NewV7()
	var first int64
	require.NoError(t, holder.QueryRow(ctx, schemaSQL(st,
		`SELECT first_offset FROM queen.push_segment($1, $2, -1, $3, $4, '\x00'::bytea, '{1}', NULL)`),
		[16]byte(ref.ID), ref.WindowSeconds, [][]byte{hashOf("dup")}, orig[:]).Scan(&first))
	require.Equal(t, int64(2), first)

	pusher, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer pusher.Release()
	var pid int
	require.NoError(t, pusher.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	b, _ := batchOf(t, ref, "dup")
	b.Watermark = 1
	type out struct {
		status string
		first  int64
		dupIdx []int32
		dupIDs [][]byte
		err    error
	}
	done := make(chan out, 1)
	go func() {
		var o out
		o.err = pusher.QueryRow(ctx, schemaSQL(st,
			`SELECT status, first_offset, dup_idx, dup_ids FROM queen.push_segment($1, $2, $3, $4, $5, $6, $7, NULL)`),
			[16]byte(ref.ID), b.WindowHint, b.Watermark, b.Hashes, b.IDs, b.Bodies, b.Ends).
			Scan(&o.status, &o.first, &o.dupIdx, &o.dupIDs)
		done <- o
	}()
	awaitLockWait(t, pool, pid, done)
	require.NoError(t, holder.Commit(ctx))
	o := <-done
	require.NoError(t, o.err)
	require.Equal(t, "ok", o.status)
	require.Equal(t, int64(-1), o.first, "a duplicate allocates no offset")
	require.Equal(t, []int32{1}, o.dupIdx)
	require.Equal(t, [][]byte{orig[:]}, o.dupIDs)
	var segs int
	require.NoError(t, pool.QueryRow(ctx, schemaSQL(st, `SELECT count(*) FROM queen.segments WHERE partition_id = $1`),
		[16]byte(ref.ID)).Scan(&segs))
	require.Equal(t, 3, segs, "the duplicate wrote nothing")
}

func hashOf(tx string) []byte {
	h := partition.HashTxID(tx)
	return h[:]
}

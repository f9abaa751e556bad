package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestCatchUpHorizonBoundary: pop_prepare catches up the partitions stamped
// at or above the group's horizon. A partition stamped exactly at the
// horizon is caught up, one stamped just below it is not (the scan that took
// the horizon saw it), one stamped well above it is.
func TestCatchUpHorizonBoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	at, err := st.EnsurePartition(ctx, "epoch", "at")
	require.NoError(t, err)
	below, err := st.EnsurePartition(ctx, "epoch", "below")
	require.NoError(t, err)
	prepare := func() (caught int) {
		require.NoError(t, pool.QueryRow(ctx, schemaSQL(st,
			`SELECT caught FROM queen.pop_prepare('epoch', 'g', false, NULL, true)`)).Scan(&caught))
		return caught
	}
	stamp := func(id [16]byte, xid int64) {
		_, err := pool.Exec(ctx, schemaSQL(st, `UPDATE queen.partitions SET next_offset = next_offset + 1,
			push_xid = $2::bigint::text::xid8, last_push_at = now() WHERE id = $1`), id, xid)
		require.NoError(t, err)
	}
	knownEnd := func(id [16]byte) (n int64) {
		require.NoError(t, pool.QueryRow(ctx, schemaSQL(st,
			`SELECT known_end FROM queen.consumers WHERE partition_id = $1 AND consumer_group = 'g'`), id).Scan(&n))
		return n
	}

	var cur int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&cur))
	// A horizon well above every real transaction id.
	h := (cur/256+1000)*256 + 128
	stamp(at.ID, h-1000)
	stamp(below.ID, h-1000)
	require.Equal(t, 2, prepare(), "the first catch-up makes both cursor rows")
	_, err = pool.Exec(ctx, schemaSQL(st, `UPDATE queen.group_scan SET horizon = $1::bigint::text::xid8 WHERE consumer_group = 'g'`), h)
	require.NoError(t, err)

	stamp(at.ID, h)
	stamp(below.ID, h-1)
	require.Equal(t, 1, prepare())
	require.Equal(t, int64(2), knownEnd(at.ID), "stamped at the horizon: caught up")
	require.Equal(t, int64(1), knownEnd(below.ID), "stamped below the horizon: left alone")

	stamp(below.ID, h+256)
	require.Equal(t, 1, prepare())
	require.Equal(t, int64(3), knownEnd(below.ID), "stamped above the horizon: caught up")
}

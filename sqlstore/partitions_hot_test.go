package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestPartitionUpdatesAreHOT checks migration 0013: pushes to a partition
// whose push_xid stays within one epoch (256 transaction ids) update its row
// HOT, adding no index entry; with push_xid indexed none was. Each push is
// its own transaction; the test counts the pairs of consecutive pushes that
// share an epoch (other tests use transaction ids meanwhile) and expects
// exactly that many HOT updates.
func TestPartitionUpdatesAreHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	ref, err := st.EnsurePartition(ctx, "hot", "p")
	require.NoError(t, err)
	pusher, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer pusher.Release()
	counts := func() (upd, hot int64) {
		// The pusher's counters reach the shared statistics before it
		// answers (it flushes them when it goes idle, forced here); the
		// next transaction of another connection reads them afresh.
		_, err := pusher.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		require.NoError(t, err)
		require.NoError(t, pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'partitions'`, st.Schema()).Scan(&upd, &hot))
		return upd, hot
	}
	upd0, hot0 := counts()
	var (
		pushes, same int64
		prev         int64 = -1
	)
	for same < 3 {
		require.Less(t, pushes, int64(200), "transaction ids moved too fast to find pushes sharing an epoch")
		var epoch int64
		require.NoError(t, pusher.QueryRow(ctx, schemaSQL(st,
			`SELECT (SELECT first_offset FROM queen.push_segment($1, $2, -1, $3, $4, '\x00'::bytea, '{1}', NULL)),
			        pg_current_xact_id()::text::bigint >> 8`),
			[16]byte(ref.ID), ref.WindowSeconds, [][]byte{hashOf(fmt.Sprint("h", pushes))}, make([]byte, 16)).Scan(new(int64), &epoch))
		if epoch == prev {
			same++
		}
		prev = epoch
		pushes++
	}
	upd, hot := counts()
	require.Equal(t, pushes, upd-upd0)
	require.Equal(t, same, hot-hot0, "every push in the epoch of the one before must update the partition row HOT")
}

// TestCatchUpEpochBoundary: pop_prepare asks the index for push_epoch >=
// horizon >> 8 and keeps push_xid >= horizon. A partition stamped exactly at
// the horizon is caught up, one stamped just below it in the same epoch is
// not (it was seen by the scan that took the horizon), one stamped in a
// later epoch is.
func TestCatchUpEpochBoundary(t *testing.T) {
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
	// A horizon in the middle of an epoch, well above every real xid.
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
	require.Equal(t, int64(1), knownEnd(below.ID), "stamped below the horizon, same epoch: left alone")

	stamp(below.ID, h+256)
	require.Equal(t, 1, prepare())
	require.Equal(t, int64(3), knownEnd(below.ID), "stamped in a later epoch: caught up")
}

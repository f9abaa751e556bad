package sqlstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// A new connection that finds another server than the last one (a promoted
// standby, a restored backup) moves the epoch on before it is used; a
// reconnect to the same server does not.
func TestNewServerIdentityMovesTheEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	require.Equal(t, uint64(0), st.Epoch())

	st.PretendServerWas("") // reconnect to the same server
	require.NoError(t, st.Ping(ctx))
	require.Equal(t, uint64(0), st.Epoch(), "a reconnect to the same server keeps the epoch")

	st.PretendServerWas("7000000000000000000/00000001")
	require.NoError(t, st.Ping(ctx))
	require.Equal(t, uint64(1), st.Epoch(), "another server: the epoch moves on")
	require.NoError(t, st.Ping(ctx))
	require.Equal(t, uint64(1), st.Epoch())
}

// A watermark computed under another epoch (from what the cache learned of
// another server) is ignored: the whole window is probed.
func TestPushIgnoresAWatermarkOfAnotherEpoch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "e", "p")
	require.NoError(t, err)
	b, ids := batchOf(t, ref, "a")
	res, err := st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	require.Equal(t, uint64(0), res.Epoch)

	// Under the same epoch, W = 0 is obeyed: "a" at offset 0 is not looked at.
	b, _ = batchOf(t, ref, "a")
	b.Watermark = 0
	res, err = st.Push(ctx, b)
	require.NoError(t, err)
	require.Empty(t, res.DupIndex, "the watermark probe looks above W only")

	// The server changed: the same W, computed under epoch 0, is ignored.
	st.PretendServerWas("7000000000000000000/00000001")
	b, _ = batchOf(t, ref, "a")
	b.Watermark = 0
	res, err = st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.Epoch)
	require.Equal(t, []int{0}, res.DupIndex, "a watermark of another epoch must force the full-window probe")
	require.Equal(t, ids[0], res.DupOriginal[0])
}

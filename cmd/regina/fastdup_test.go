package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// pushCtx is regHarness.push with a caller's context: it returns the group
// (whose Err the caller checks).
func (h *regHarness) pushCtx(ctx context.Context, queue, part string, txids ...string) *reginatype.PushGroup {
	g := &reginatype.PushGroup{Queue: queue, Partition: part}
	for _, tx := range txids {
		g.Items = append(g.Items, reginatype.PushItem{TransactionID: tx, Payload: []byte(`{}`)})
	}
	h.reg.Push(ctx, []*reginatype.PushGroup{g})
	return g
}

// A batch of duplicates is answered by the read-only fast path: while
// another transaction holds the partition row FOR UPDATE (as a concurrent
// push would), an all-duplicate push (in-body repeats included) still gets
// its verdicts and the originals' ids, and it counts as unlocked. A batch
// with a new item goes through the locked transaction.
func TestDuplicatesTakeNoRowLock(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, 64<<20)
	d := newDB(t, h.st.Schema())
	st, g := h.push(t, "fast", "p", "a", "b", "c")
	require.Equal(t, []string{"queued", "queued", "queued"}, st)
	orig := map[string]partition.UUID{}
	for i, tx := range []string{"a", "b", "c"} {
		orig[tx] = g.Results[i].MessageID
	}
	// The first repeat may go either way (the cache may still be loading
	// the partition); it makes the next batch expect duplicates.
	st, _ = h.push(t, "fast", "p", "c", "a")
	require.Equal(t, []string{"duplicate", "duplicate"}, st)

	ctx := context.Background()
	tx, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, d.q(`SELECT 1 FROM queen.partitions WHERE id = $1 FOR UPDATE`), [16]byte(g.PartitionID))
	require.NoError(t, err)

	before := h.reg.Stats()
	// Bounded: a push that waited for the row lock would run into this
	// deadline and fail (outcome unknown) instead of hanging the test.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dup := h.pushCtx(wctx, "fast", "p", "b", "a", "b", "c")
	require.NoError(t, dup.Err)
	for i, tx := range []string{"b", "a", "b", "c"} {
		require.Equal(t, partition.StatusDuplicate, dup.Results[i].Status, "item %d", i)
		require.Equal(t, orig[tx], dup.Results[i].MessageID, "item %d names its original", i)
	}
	after := h.reg.Stats()
	require.Equal(t, before.UnlockedDups+1, after.UnlockedDups, "answered by the fast path")
	require.NoError(t, tx.Rollback(ctx))

	// A batch not all duplicates takes the locked path as before.
	st, _ = h.push(t, "fast", "p", "a", "new")
	require.Equal(t, []string{"duplicate", "queued"}, st)
	require.Equal(t, after.UnlockedDups, h.reg.Stats().UnlockedDups)
	_, frames, _, _, next := d.partitionStats(t, "fast", "p")
	require.Equal(t, int64(4), frames)
	require.Equal(t, int64(4), next)
}

// The store's fast path answers exactly what the locked transaction answers
// for the same batch (ids, stored times, fingerprints, window, check), also
// for an original whose segment is gone (the zero id), and assigns no
// transaction id; the locked transaction does (so the check can fail). A
// batch with a hash not in the window falls back to the locked path.
func TestFastDuplicatePathMatchesTheLockedOne(t *testing.T) {
	t.Parallel()
	h := newRegHarness(t, 64<<20)
	d := newDB(t, h.st.Schema())
	ctx := context.Background()
	_, g := h.push(t, "fastq", "p", "a", "b", "c")
	p := g.PartitionID
	d.exec(t, `DELETE FROM queen.segments WHERE partition_id = $1`, [16]byte(p)) // b's and c's ids are gone
	_, g2 := h.push(t, "fastq", "p", "d")

	batch := func(expect bool, txids ...string) *reginatype.PushBatch {
		b := &reginatype.PushBatch{Partition: p, WindowHint: 3600, Watermark: reginatype.NoWatermark,
			Epoch: h.st.Epoch(), ExpectDuplicates: expect}
		for _, tx := range txids {
			b.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{TransactionID: tx, Payload: []byte(`1`)})
		}
		return b
	}
	fast, err := h.st.Push(ctx, batch(true, "d", "b", "a"))
	require.NoError(t, err)
	require.True(t, fast.Unlocked)
	locked, err := h.st.Push(ctx, batch(false, "d", "b", "a"))
	require.NoError(t, err)
	require.False(t, locked.Unlocked)
	require.Equal(t, []int{0, 1, 2}, fast.DupIndex)
	require.Equal(t, []partition.UUID{g2.Results[0].MessageID, {}, {}}, fast.DupOriginal, "a purged original is the zero id")
	require.Equal(t, locked.DupIndex, fast.DupIndex)
	require.Equal(t, locked.DupOriginal, fast.DupOriginal)
	require.Equal(t, locked.DupCreated, fast.DupCreated)
	require.Equal(t, locked.DupFingerprint, fast.DupFingerprint)
	require.Equal(t, locked.WindowSeconds, fast.WindowSeconds)
	require.Equal(t, locked.PayloadCheck, fast.PayloadCheck)
	require.Equal(t, int64(-1), fast.FirstOffset)

	// Not all duplicates: the locked transaction stores the new one.
	mixed, err := h.st.Push(ctx, batch(true, "a", "brand-new"))
	require.NoError(t, err)
	require.False(t, mixed.Unlocked)
	require.Equal(t, []int{0}, mixed.DupIndex)
	require.Equal(t, int64(4), mixed.FirstOffset)

	// No transaction id: run both functions inside an explicit transaction
	// and ask whether one was assigned.
	xidAssigned := func(sql string, args ...any) bool {
		tx, err := d.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var status string
		require.NoError(t, tx.QueryRow(ctx, d.q(sql), args...).Scan(&status))
		require.Equal(t, "ok", status)
		var assigned bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&assigned))
		return assigned
	}
	hs := [][]byte{}
	for _, tx := range []string{"a", "d"} {
		x := partition.HashTxID(tx)
		hs = append(hs, x[:])
	}
	require.False(t, xidAssigned(`SELECT status FROM queen.push_dups($1, 3600, -1, $2, NULL)`, [16]byte(p), hs),
		"the fast path assigned a transaction id")
	require.True(t, xidAssigned(`SELECT status FROM queen.push_segment($1, 3600, -1, $2, $3, ''::bytea, '{0,0}', NULL)`,
		[16]byte(p), hs, make([]byte, 32)), "the locked path takes the row lock (an xid)")
}

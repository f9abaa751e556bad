package sqlstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestProbeAnswersAlikeOnEveryPath pushes three 20-item segments with
// payload fingerprints, then asks about a scrambled batch of their
// transaction ids (several per segment, out of order, at non-adjacent
// positions) through every probe push_probe has: the full-window probe, the
// watermark probe, a watermark so far below that the full-window probe is
// used instead, and the read-only fast path (push_dups). Each must name the same
// originals, with their message ids, stored times and fingerprints, and a
// mixed batch must store exactly the new items.
func TestProbeAnswersAlikeOnEveryPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "probe", "p")
	require.NoError(t, err)
	_, err = sqlstoretest.Pool(t).Exec(ctx, schemaSQL(st,
		`UPDATE queen.queues SET dedup_payload_check = 'report' WHERE id = $1`), [16]byte(ref.QueueID))
	require.NoError(t, err)

	type original struct {
		id partition.UUID
		fp int64
	}
	orig := map[string]original{}
	batch := func(watermark int64, txids ...string) *reginatype.PushBatch {
		b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: watermark,
			Fingerprints: []int64{}}
		for _, tx := range txids {
			id := partition.NewV7()
			b.Add(partition.HashTxID(tx), id, &partition.Body{CreatedAt: 1, TransactionID: tx, Payload: []byte(`{}`)})
			b.Fingerprints = append(b.Fingerprints, int64(len(tx))*7919+int64(tx[len(tx)-1]))
		}
		return b
	}
	for s := range 3 {
		var txids []string
		for j := range 20 {
			txids = append(txids, fmt.Sprintf("s%d-%d", s, j))
		}
		b := batch(reginatype.NoWatermark, txids...)
		res, err := st.Push(ctx, b)
		require.NoError(t, err)
		require.Equal(t, int64(20*s), res.FirstOffset)
		require.Empty(t, res.DupIndex)
		for k, tx := range txids {
			var id partition.UUID
			copy(id[:], b.IDs[16*k:16*k+16])
			orig[tx] = original{id: id, fp: b.Fingerprints[k]}
		}
	}

	// Rows s1 and s2 start at offsets 20 and 40: a watermark of 19 vouches
	// for row s0 only.
	dups := []string{"s2-19", "s1-3", "s1-0", "s1-17", "s2-5", "s1-10", "s2-0", "s2-18"}
	var want *reginatype.PushResult
	for _, c := range []struct {
		name      string
		watermark int64
		fast      bool
	}{
		{"full window", reginatype.NoWatermark, false},
		{"watermark", 19, false}, // 41 offsets above it, 16 per hash allowed: the primary key
		{"fast path", 19, true},  // push_dups, no lock
		{"fast path, full window", reginatype.NoWatermark, true},
	} {
		b := batch(c.watermark, dups...)
		b.ExpectDuplicates = c.fast
		res, err := st.Push(ctx, b)
		require.NoError(t, err, c.name)
		require.Equal(t, int64(-1), res.FirstOffset, c.name)
		require.Equal(t, c.fast, res.Unlocked, c.name)
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, res.DupIndex, c.name)
		for k, tx := range dups {
			require.Equal(t, orig[tx].id, res.DupOriginal[k], "%s: %s", c.name, tx)
			require.NotNil(t, res.DupFingerprint[k], "%s: %s", c.name, tx)
			require.Equal(t, orig[tx].fp, *res.DupFingerprint[k], "%s: %s", c.name, tx)
		}
		if want == nil {
			want = &res
			continue
		}
		require.Equal(t, want.DupCreated, res.DupCreated, c.name)
	}

	// One hash, watermark 19: 41 offsets above it, more than 16 per hash,
	// so the whole window is probed; the answer is the same.
	res, err := st.Push(ctx, batch(19, "s2-7"))
	require.NoError(t, err)
	require.Equal(t, []int{0}, res.DupIndex)
	require.Equal(t, orig["s2-7"].id, res.DupOriginal[0])

	// Mixed: new items between duplicates are stored, in order, after the
	// last segment; the duplicates name their originals.
	b := batch(reginatype.NoWatermark, "n1", "s0-0", "n2", "s2-19", "n1b")
	res, err = st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(60), res.FirstOffset)
	require.Equal(t, []int{1, 3}, res.DupIndex)
	require.Equal(t, []partition.UUID{orig["s0-0"].id, orig["s2-19"].id}, res.DupOriginal)
	res, err = st.Push(ctx, batch(reginatype.NoWatermark, "n2", "n1b", "n1"))
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, res.DupIndex)
	var ids [3]partition.UUID
	for k, i := range []int{2, 4, 0} {
		copy(ids[k][:], b.IDs[16*i:16*i+16])
	}
	require.Equal(t, ids[:], res.DupOriginal)
}

package sqlstore_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// TestPackedDuplicateProof sends, in one PushMany, batches of several
// partitions whose originals the caller names (PushBatch.Originals, as the
// dedup cache does), in every case the read-only proof
// (queen.push_dups_segments, then Go) must tell apart: all found (with payload
// fingerprints or without, originals spread over several segments, an
// original whose segment retention deleted), and not proven (an offset that
// names the wrong segment, a new item, an original aged out of the window,
// a window larger than the hint, a partition that does not exist, offsets
// from another epoch). The proven batches are answered without the lock;
// every batch's verdicts, original ids, stored times and fingerprints must
// equal what the locked path alone answers, and only the new item is stored.
func TestPackedDuplicateProof(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	exec := schemaExec(t, st, pool)

	// Queue "rep" fingerprints payloads (report), queue "off" does not.
	parts := map[string]reginatype.PartitionRef{}
	for _, name := range []string{"all", "spread", "purged", "lie", "new", "aged", "hint", "epoch"} {
		q := "off"
		if name == "all" || name == "spread" || name == "lie" {
			q = "rep"
		}
		ref, err := st.EnsurePartition(ctx, q, name)
		require.NoError(t, err)
		parts[name] = ref
	}
	exec(`UPDATE queen.queues SET dedup_payload_check = 'report' WHERE name = 'rep'`)
	for name, ref := range parts {
		if name == "all" || name == "spread" || name == "lie" {
			ref.PayloadCheck = partition.PayloadCheckReport
			parts[name] = ref
		}
	}

	// offset[partition/txid] is where the original was stored.
	offset := map[string]int64{}
	newBatch := func(name string, txids ...string) *reginatype.PushBatch {
		ref := parts[name]
		b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: reginatype.NoWatermark,
			Epoch: st.Epoch()}
		if ref.ChecksPayloads() {
			b.Fingerprints = []int64{}
		}
		for _, tx := range txids {
			b.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{CreatedAt: 1, TransactionID: tx, Payload: []byte(`{}`)})
			if b.Fingerprints != nil {
				b.Fingerprints = append(b.Fingerprints, int64(len(tx))*7919+int64(tx[len(tx)-1]))
			}
		}
		return b
	}
	for name := range parts {
		for s := range 3 {
			var txids []string
			for j := range 10 {
				txids = append(txids, fmt.Sprintf("s%d-%d", s, j))
			}
			res, err := st.Push(ctx, newBatch(name, txids...))
			require.NoError(t, err)
			require.Equal(t, int64(10*s), res.FirstOffset)
			for j, tx := range txids {
				offset[name+"/"+tx] = res.FirstOffset + int64(j)
			}
		}
	}

	// The retention deleted "purged"'s first segment (its hash row stays);
	// "aged"'s rows are older than the window.
	exec(`DELETE FROM queen.segments WHERE partition_id = $1 AND first_offset = 0`, [16]byte(parts["purged"].ID))
	exec(`SELECT queen.sidecar_ensure(now() - interval '3 hours', now(), interval '1 hour')`)
	for _, table := range []string{"queen.log_txns", "queen.segments"} {
		exec(`UPDATE `+table+` SET created_at = created_at - interval '2 hours' WHERE partition_id = $1`,
			[16]byte(parts["aged"].ID))
	}

	// The cases: the batch, and whether the read-only proof must answer it.
	type tc struct {
		name   string
		txids  []string
		proven bool
		edit   func(b *reginatype.PushBatch)
	}
	cases := []tc{
		{"all", []string{"s1-3", "s1-0", "s1-9"}, true, nil},
		{"spread", []string{"s2-9", "s0-3", "s1-0", "s2-0", "s0-4"}, true, nil},
		{"purged", []string{"s0-1", "s1-1", "s0-2"}, true, nil},
		{"lie", []string{"s1-1", "s1-2"}, false, func(b *reginatype.PushBatch) { b.Originals[1] = 0 }},
		{"new", []string{"s0-1", "brand-new"}, false, nil},
		{"aged", []string{"s0-1", "s2-2"}, false, nil},
		{"hint", []string{"s0-1"}, false, func(b *reginatype.PushBatch) { b.WindowHint = 600 }},
		{"epoch", []string{"s0-1"}, false, func(b *reginatype.PushBatch) { b.Epoch++ }},
	}
	build := func(c tc) *reginatype.PushBatch {
		b := newBatch(c.name, c.txids...)
		b.ExpectDuplicates = true
		for _, tx := range c.txids {
			o, ok := offset[c.name+"/"+tx]
			if !ok {
				o = 0 // the cache would not name it; a lie is not believed
			}
			b.Originals = append(b.Originals, o/10*10)
		}
		if c.edit != nil {
			c.edit(b)
		}
		return b
	}
	// A partition that does not exist rides along, with a lie of its own.
	ghost := &reginatype.PushBatch{Partition: partition.NewV7(), WindowHint: 3600, Epoch: st.Epoch(),
		ExpectDuplicates: true, Originals: []int64{0}}
	ghost.Add(partition.HashTxID("s0-1"), partition.NewV7(), &partition.Body{CreatedAt: 1, TransactionID: "s0-1", Payload: []byte(`{}`)})

	// The reference: the locked path alone, on copies (all-duplicate
	// batches write nothing there), before anything is stored.
	want := map[string]reginatype.PushResult{}
	for _, c := range cases {
		if c.name == "new" || c.name == "aged" {
			continue // they store; checked below
		}
		b := build(c)
		b.ExpectDuplicates, b.Originals = false, nil
		res, err := st.Push(ctx, b)
		require.NoError(t, err, c.name)
		require.False(t, res.Unlocked)
		want[c.name] = res
	}
	require.Equal(t, partition.UUID{}, want["purged"].DupOriginal[0], "the purged original's id is unknown")

	bs := []*reginatype.PushBatch{ghost}
	for _, c := range cases {
		bs = append(bs, build(c))
	}
	res := make([]reginatype.PushResult, len(bs))
	errs := make([]error, len(bs))
	st.PushMany(ctx, reginatype.ShapeOneTransaction, bs, res, errs)
	require.ErrorIs(t, errs[0], reginatype.ErrPartitionMissing)
	for i, c := range cases {
		r, err := res[i+1], errs[i+1]
		require.NoError(t, err, c.name)
		require.Equal(t, c.proven, r.Unlocked, c.name)
		if c.name == "new" {
			require.Equal(t, []int{0}, r.DupIndex)
			require.Equal(t, int64(30), r.FirstOffset, "only the new item is stored")
			continue
		}
		if c.name == "aged" {
			require.Equal(t, int64(30), r.FirstOffset, "out of the window: stored again")
			continue
		}
		w := want[c.name]
		require.Equal(t, int64(-1), r.FirstOffset, c.name)
		require.Equal(t, w.DupIndex, r.DupIndex, c.name)
		require.Equal(t, w.DupOriginal, r.DupOriginal, c.name)
		require.Equal(t, w.DupCreated, r.DupCreated, c.name)
		require.Equal(t, w.DupFingerprint, r.DupFingerprint, c.name)
		require.Equal(t, w.WindowSeconds, r.WindowSeconds, c.name)
		require.Equal(t, w.PayloadCheck, r.PayloadCheck, c.name)
		if c.name == "all" || c.name == "spread" {
			for k := range r.DupFingerprint {
				require.NotNil(t, r.DupFingerprint[k], "%s: fingerprint %d", c.name, k)
			}
		}
	}

	// Alone (Push), a proven batch is answered the same way; and the proof
	// assigns no transaction id.
	one := build(cases[1])
	r, err := st.Push(ctx, one)
	require.NoError(t, err)
	require.True(t, r.Unlocked)
	require.Equal(t, want["spread"].DupOriginal, r.DupOriginal)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, schemaSQL(st, `SELECT count(*) FROM queen.push_dups_segments(
		ARRAY[$1::uuid, $1, $1, $2], '{20, 5, 40, 0}')`), [16]byte(parts["all"].ID), [16]byte(parts["aged"].ID)).Scan(&n))
	require.Equal(t, 1, n, "offset 20 starts a segment; 5 and 40 do not; aged is out of the window")
	var assigned bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&assigned))
	require.False(t, assigned, "the proof assigned a transaction id")
}

// TestDupSegmentsPlanLooksUpByKey checks the plan PostgreSQL really runs
// inside queen.push_dups_segments (its cached generic plan, logged by
// auto_explain): every log_txns child is read through its (partition_id,
// first_offset) index with both columns as the index condition. Flattened,
// the LATERAL lookup took partition_id alone as the condition and read the
// partition's whole slice per lookup (a compare storm: ~2,500 rows each).
func TestDupSegmentsPlanLooksUpByKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "plan", "p")
	require.NoError(t, err)
	// Many rows per partition, with statistics: what the bad plan needs.
	_, err = sqlstoretest.Pool(t).Exec(ctx, schemaSQL(st, `
		INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		SELECT $1, 5 * g, now(), ARRAY[decode(md5(g::text), 'hex')]
		  FROM generate_series(0, 1999) g`), [16]byte(ref.ID))
	require.NoError(t, err)
	_, err = sqlstoretest.Pool(t).Exec(ctx, schemaSQL(st, `ANALYZE queen.log_txns`))
	require.NoError(t, err)
	conn, notices := explainConn(t, st.Schema())
	for k := range 8 {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM push_dups_segments(ARRAY[$1::uuid, $1], $2)`,
			[16]byte(ref.ID), []int64{int64(5 * k), int64(5*k + 5)}).Scan(&n))
		require.Equal(t, 2, n)
	}
	var plans []string
	for _, n := range *notices {
		if strings.Contains(n, "t.first_offset = s.fo") {
			plans = append(plans, n)
		}
	}
	require.NotEmpty(t, plans, "no plan of push_dups_segments' query was logged")
	cond := regexp.MustCompile(`^\s*Index Cond: \(\(partition_id = s\.part\) AND \(first_offset = s\.fo\)\)$`)
	for _, p := range plans {
		lines := strings.Split(p, "\n")
		scans := 0
		for i, l := range lines {
			if !strings.Contains(l, "Scan using log_txns_") {
				continue
			}
			scans++
			require.Less(t, i+1, len(lines), "plan:\n%s", p)
			require.Regexp(t, cond, lines[i+1], "every log_txns index scan uses both key columns:\n%s", p)
		}
		require.Positive(t, scans, "log_txns read through an index:\n%s", p)
	}
}

package sqlstore_test

import (
	"cmp"
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// schemaSQL qualifies "queen." with the store's schema.
func schemaSQL(st *sqlstore.Store, s string) string {
	return strings.ReplaceAll(s, "queen.", pgx.Identifier{st.Schema()}.Sanitize()+".")
}

// schemaExec returns a function that runs a statement (schemaSQL-qualified)
// on pool and fails t if it errs.
func schemaExec(t *testing.T, st *sqlstore.Store, pool *pgxpool.Pool) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(context.Background(), schemaSQL(st, sql), args...)
		require.NoError(t, err)
	}
}

func configureWindow(t *testing.T, st *sqlstore.Store, queue string, window int) {
	t.Helper()
	o := partition.DefaultQueueOptions()
	o.DedupWindowSeconds = window
	_, err := st.Configure(context.Background(), queue, queue, "", o)
	require.NoError(t, err)
}

// The dedup cache computes its watermark for the window the broker believes
// in and sends that window as the hint. When the queue's window has grown
// since, hashes older than the old window may be missing from the cache, so
// push_segment must ignore the watermark and probe the whole (new) window.
func TestWatermarkIgnoredWhenWindowGrew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	configureWindow(t, st, "grow", 60)
	ref, err := st.EnsurePartition(ctx, "grow", "p")
	require.NoError(t, err)
	require.Equal(t, 60, ref.WindowSeconds)

	b, ids := batchOf(t, ref, "old")
	res, err := st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, int64(0), res.FirstOffset)
	b, _ = batchOf(t, ref, "filler")
	_, err = st.Push(ctx, b)
	require.NoError(t, err)
	// "old" leaves the 60 s window (a cache loaded now would not hold it).
	_, err = pool.Exec(ctx, schemaSQL(st, `UPDATE queen.log_txns SET created_at = created_at - interval '10 minutes' WHERE first_offset = 0`))
	require.NoError(t, err)

	// With the window unchanged, W = 1 (what a cache that trimmed "old"
	// would send) is obeyed: the probe does not look at offset 0, and "old"
	// is outside the window anyway: it is written again, at offset 2.
	b, _ = batchOf(t, ref, "old")
	b.Watermark = 1
	res, err = st.Push(ctx, b)
	require.NoError(t, err)
	require.Empty(t, res.DupIndex, "outside a 60 s window")
	require.Equal(t, int64(2), res.FirstOffset)

	// The window grows to an hour; the broker still believes 60 s and its
	// cache (which trimmed "old") sends W = 2. SQL must not trust it.
	configureWindow(t, st, "grow", 3600)
	b, _ = batchOf(t, ref, "old")
	b.WindowHint = 60
	b.Watermark = 2
	res, err = st.Push(ctx, b)
	require.NoError(t, err)
	require.Equal(t, 3600, res.WindowSeconds)
	require.Equal(t, []int{0}, res.DupIndex, "a stale hint must force the full-window probe")
	require.Equal(t, []partition.UUID{ids[0]}, res.DupOriginal)
	require.Equal(t, int64(-1), res.FirstOffset)

	// A hint equal to (or above: the window shrank) the queue's window keeps
	// the watermark probe: W = next_offset - 1 skips every earlier "old",
	// which is then written again (at offsets 3 and 4).
	for k, hint := range []int{3600, 7200} {
		b, _ = batchOf(t, ref, "old")
		b.WindowHint = hint
		b.Watermark = int64(2 + k)
		res, err = st.Push(ctx, b)
		require.NoError(t, err)
		require.Empty(t, res.DupIndex, "hint %d: the watermark probe looks above W only", hint)
		require.Equal(t, int64(3+k), res.FirstOffset)
	}

	// The zero/non-zero semantics of the hint are unchanged: a non-zero hint
	// on a queue whose window became 0 answers window_changed.
	configureWindow(t, st, "grow", 0)
	b, _ = batchOf(t, ref, "x")
	b.WindowHint = 60
	b.Watermark = 2
	res, err = st.Push(ctx, b)
	require.ErrorIs(t, err, reginatype.ErrWindowChanged)
	require.Equal(t, 0, res.WindowSeconds)
}

func TestLoadHydration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	configureWindow(t, st, "hyd", 600)
	ref, err := st.EnsurePartition(ctx, "hyd", "p")
	require.NoError(t, err)

	// An empty partition: one row from the LEFT JOIN, no log rows.
	h, err := st.LoadHydration(ctx, ref.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), h.NextOffset)
	require.Equal(t, 600, h.WindowSeconds)
	require.Empty(t, h.Rows)
	require.False(t, h.Truncated)
	require.WithinDuration(t, time.Now(), h.Now, time.Minute)

	// Segments of 1, 3 and 2 items; the first is aged past the window plus
	// the 60 s margin, the second only past the window (still loaded: the
	// cache trims with its own margin).
	pushSegments(t, st, ref, []string{"a"}, []string{"b", "c", "d"}, []string{"e", "f"})
	_, err = pool.Exec(ctx, schemaSQL(st, `UPDATE queen.log_txns SET created_at = created_at -
		CASE first_offset WHEN 0 THEN interval '661 seconds' WHEN 1 THEN interval '620 seconds' ELSE interval '0' END`))
	require.NoError(t, err)
	h, err = st.LoadHydration(ctx, ref.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(6), h.NextOffset)
	require.False(t, h.Truncated)
	require.Len(t, h.Rows, 2)
	require.Equal(t, int64(1), h.Rows[0].FirstOffset)
	require.Equal(t, int64(4), h.Rows[1].FirstOffset)
	want := [][16]byte{partition.HashTxID("b"), partition.HashTxID("c"), partition.HashTxID("d")}
	require.Equal(t, want, h.Rows[0].Hashes, "hashes in frame order")
	require.True(t, h.Rows[0].CreatedAt.Before(h.Rows[1].CreatedAt))

	// A bound of 3 hashes: the first row fits, the second crosses it and is
	// the last one read; NextOffset is lowered to its end.
	h, err = st.LoadHydration(ctx, ref.ID, 3)
	require.NoError(t, err)
	require.True(t, h.Truncated)
	require.Len(t, h.Rows, 2)
	require.Equal(t, int64(6), h.NextOffset)
	h, err = st.LoadHydration(ctx, ref.ID, 2)
	require.NoError(t, err)
	require.True(t, h.Truncated)
	require.Len(t, h.Rows, 1)
	require.Equal(t, int64(4), h.NextOffset, "every in-window row below NextOffset is loaded")
	h, err = st.LoadHydration(ctx, ref.ID, 5)
	require.NoError(t, err)
	require.False(t, h.Truncated)
	require.Len(t, h.Rows, 2)

	_, err = st.LoadHydration(ctx, partition.NewV7(), 0)
	require.ErrorIs(t, err, reginatype.ErrPartitionMissing)
	_, parts, err := st.DeleteQueue(ctx, "hyd")
	require.NoError(t, err)
	require.Contains(t, parts, ref.ID)
	_, err = st.LoadHydration(ctx, ref.ID, 0)
	require.ErrorIs(t, err, reginatype.ErrPartitionMissing, "%v", err)
}

const probeBatch = 20

var buffersRE = regexp.MustCompile(`Buffers: shared((?: [a-z]+=\d+)+)`)

// sharedBuffers returns the shared buffers (hit + read) of a plan's top
// node, which include its children's.
func sharedBuffers(t *testing.T, plan string) int {
	t.Helper()
	m := buffersRE.FindStringSubmatch(plan)
	require.NotNil(t, m, "no Buffers line in plan:\n%s", plan)
	n := 0
	for kv := range strings.FieldsSeq(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		if k == "hit" || k == "read" {
			x, err := strconv.Atoi(v)
			require.NoError(t, err)
			n += x
		}
	}
	return n
}

// probeBuffers preloads a partition with rows log_txns rows (one hash each,
// all inside the window) and returns the shared buffers of the watermark
// probe (W a little below the last pushed row, so that it reads a few rows)
// and of the full-window probe, one value per push_segment call (8 each,
// custom and generic plans included), each push a batch of probeBatch new
// hashes.
func probeBuffers(t *testing.T, rows int) (watermark, full []int) {
	t.Helper()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	ref, err := st.EnsurePartition(ctx, "cost", "hot")
	require.NoError(t, err)
	pool := sqlstoretest.Pool(t)
	// The GIN index is built after the load (much faster than row by row).
	for _, s := range []string{
		`DROP INDEX queen.log_txns_hashes`,
		`INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
		 SELECT $1::uuid, i, now() - interval '10 minutes', ARRAY[decode(md5('cost-' || i), 'hex')]
		   FROM generate_series(0, $2::integer - 1) i`,
		`CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off)`,
		`UPDATE queen.partitions SET next_offset = $2::integer WHERE id = $1::uuid`,
		`VACUUM ANALYZE queen.log_txns`,
	} {
		var args []any
		if strings.Contains(s, "$1") {
			args = []any{[16]byte(ref.ID), rows}
		}
		_, err := pool.Exec(ctx, schemaSQL(st, s), args...)
		require.NoError(t, err, s)
	}
	fullPlans, wmPlans := probePlans(t, st.Schema(), func(ctx context.Context, conn *pgx.Conn) {
		next := int64(rows)
		for i := range 8 {
			for _, wm := range []bool{true, false} {
				w := reginatype.NoWatermark
				if wm {
					w = next - probeBatch - 5
				}
				b := &reginatype.PushBatch{Partition: ref.ID, WindowHint: 3600, Watermark: w}
				for k := range probeBatch {
					tx := "new-" + strconv.Itoa(i) + "-" + strconv.FormatBool(wm) + "-" + strconv.Itoa(k)
					b.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{TransactionID: tx, Payload: []byte("1")})
				}
				var status string
				var first int64
				err := conn.QueryRow(ctx, `SELECT status, first_offset FROM push_segment($1, $2, $3, $4, $5, $6, $7, $8)`,
					[16]byte(b.Partition), b.WindowHint, b.Watermark, b.Hashes, b.IDs, b.Bodies, b.Ends, b.Fingerprints).Scan(&status, &first)
				require.NoError(t, err)
				require.Equal(t, "ok", status)
				require.Equal(t, next, first)
				next += probeBatch
			}
		}
	})
	require.Len(t, wmPlans, 8)
	require.Len(t, fullPlans, 8)
	for _, p := range wmPlans {
		require.Regexp(t, sidecarOffsets, p, p)
		watermark = append(watermark, sharedBuffers(t, p))
	}
	for _, p := range fullPlans {
		full = append(full, sharedBuffers(t, p))
	}
	t.Logf("%d rows: last watermark plan:\n%s", rows, wmPlans[len(wmPlans)-1])
	return watermark, full
}

// The point of the watermark: with W near the end of the partition, the
// probe reads the same handful of pages whether log_txns holds 10k or 200k
// rows of the partition. The full-window probe goes through the GIN index;
// it is logged, not required to be flat.
func TestLong_WatermarkProbeCostIsFlat(t *testing.T) {
	t.Parallel()
	small, large := 10_000, 200_000
	if testing.Short() {
		large = 50_000
	}
	wmSmall, fullSmall := probeBuffers(t, small)
	wmLarge, fullLarge := probeBuffers(t, large)
	t.Logf("watermark probe shared buffers: %d rows %v, %d rows %v", small, wmSmall, large, wmLarge)
	t.Logf("full-window probe shared buffers: %d rows %v, %d rows %v", small, fullSmall, large, fullLarge)
	require.LessOrEqual(t, slices.Max(wmLarge), slices.Max(wmSmall)+5,
		"the watermark probe's cost must not grow with the partition's log_txns")
	require.LessOrEqual(t, slices.Max(wmLarge), 40, "the watermark probe reads a handful of pages")
}

// LoadHydrations reads several partitions in one snapshot: the same rows
// as LoadHydration gives for each (in any order), a missing partition
// flagged, and a partition over the hash bound truncated without rows.
func TestLoadHydrations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	pool := sqlstoretest.Pool(t)
	configureWindow(t, st, "hyd", 600)
	configureWindow(t, st, "hyd2", 60)
	ref := func(queue, part string) reginatype.PartitionRef {
		r, err := st.EnsurePartition(ctx, queue, part)
		require.NoError(t, err)
		return r
	}
	a, b, empty := ref("hyd", "a"), ref("hyd2", "b"), ref("hyd", "empty")
	pushSegments(t, st, a, []string{"a1"}, []string{"a2", "a3", "a4"}, []string{"a5", "a6"})
	pushSegments(t, st, b, []string{"b1", "b2"}, []string{"b3"})
	// a's first row leaves its window plus the margin; b's first row is
	// past b's window plus margin but inside a's: not b's.
	_, err := pool.Exec(ctx, schemaSQL(st, `UPDATE queen.log_txns SET created_at = created_at - interval '661 seconds'
		WHERE first_offset = 0`))
	require.NoError(t, err)

	missing := partition.NewV7()
	ps := []partition.UUID{b.ID, missing, a.ID, empty.ID}
	got, err := st.LoadHydrations(ctx, ps, 0)
	require.NoError(t, err)
	require.Len(t, got, len(ps))
	require.True(t, got[1].Missing)
	for _, i := range []int{0, 2, 3} {
		one, err := st.LoadHydration(ctx, ps[i], 0)
		require.NoError(t, err)
		g := got[i]
		require.False(t, g.Missing)
		require.False(t, g.Truncated)
		require.Equal(t, one.NextOffset, g.NextOffset)
		require.Equal(t, one.WindowSeconds, g.WindowSeconds)
		slices.SortFunc(g.Rows, func(x, y reginatype.HydrateRow) int { return cmp.Compare(x.FirstOffset, y.FirstOffset) })
		if len(one.Rows) == 0 {
			require.Empty(t, g.Rows, "partition %d", i)
			continue
		}
		require.Equal(t, one.Rows, g.Rows, "partition %d", i)
	}
	require.Len(t, got[2].Rows, 2, "a: the row past window + margin is not read")
	require.Equal(t, [][16]byte{partition.HashTxID("a2"), partition.HashTxID("a3"), partition.HashTxID("a4")},
		got[2].Rows[0].Hashes, "hashes in frame order")
	require.Len(t, got[0].Rows, 1, "b: only its own window counts")

	// A bound of 4 hashes: a (5 in its window) is truncated, without rows;
	// b (1) is not.
	got, err = st.LoadHydrations(ctx, ps, 4)
	require.NoError(t, err)
	require.True(t, got[2].Truncated)
	require.Empty(t, got[2].Rows)
	require.False(t, got[0].Truncated)
	require.Len(t, got[0].Rows, 1)

	// The depth a load is sized by counts the partition's own window only.
	for _, c := range []struct {
		p    partition.UUID
		want int64
	}{{a.ID, 5}, {b.ID, 1}, {empty.ID, 0}} {
		d, err := st.SidecarDepth(ctx, c.p)
		require.NoError(t, err)
		require.Equal(t, c.want, d)
	}
	_, err = st.SidecarDepth(ctx, missing)
	require.ErrorIs(t, err, reginatype.ErrPartitionMissing)

	// Streamed: the heads first, then the rows; an error from the caller
	// stops the read and comes back as it is.
	stop := errors.New("enough")
	var heads []reginatype.Hydration
	n := 0
	err = st.StreamHydrations(ctx, ps, func(h []reginatype.Hydration) error {
		heads = h
		return nil
	}, func(i int, _ int64, _ time.Time, hs [][16]byte) error {
		require.NotNil(t, heads, "a row before the heads")
		require.False(t, heads[i].Missing)
		n++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)
	require.True(t, heads[1].Missing)
}

func TestDecodeHashArrayRejectsOtherShapes(t *testing.T) {
	t.Parallel()
	_, err := sqlstore.DecodeHashArray([]byte{0, 0})
	require.Error(t, err)
	// One dimension of one 8-byte element.
	bad := []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}
	_, err = sqlstore.DecodeHashArray(bad)
	require.Error(t, err)
	empty, err := sqlstore.DecodeHashArray([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 17})
	require.NoError(t, err)
	require.Empty(t, empty)
}

// pushSegments pushes one batch per list of transaction ids to ref.
func pushSegments(t *testing.T, st *sqlstore.Store, ref reginatype.PartitionRef, batches ...[]string) {
	t.Helper()
	for _, txs := range batches {
		b, _ := batchOf(t, ref, txs...)
		_, err := st.Push(context.Background(), b)
		require.NoError(t, err)
	}
}

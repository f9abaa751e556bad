package sqlstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

var shapes = []reginatype.PushShape{reginatype.ShapeOneTransaction, reginatype.ShapePipelined}

// verdict is what a push answered for one batch, without the ids minted per
// store (message ids differ between the stores; their positions do not).
type verdict struct {
	Err         string
	First       int64
	Window      int
	DupIndex    []int
	DupOriginal []int // index of the original among the ids minted for the run
}

// TestPushManyMatchesPush runs the same rounds of batches (repeats within
// and across rounds, fingerprints on one queue, dedup off on another) through
// Push one batch at a time and through PushMany in both shapes, each on a
// schema of its own: every verdict is the same. Half the rounds carry the
// watermarks a cache would send (the highest offset below every occurrence
// of the batch's hashes, so new batches take the no-probe path, set-based in
// push_segments; every third one a lower, still true, watermark, so it
// probes above it), the others none (a full-window probe).
func TestPushManyMatchesPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 2))
	const parts, rounds = 6, 12
	type spec struct {
		part int
		txs  []string
	}
	var plan [][]spec
	for r := range rounds {
		var round []spec
		for _, p := range rng.Perm(parts)[:1+rng.IntN(parts)] {
			n := 1 + rng.IntN(5)
			var txs []string
			for range n {
				// A small id space: repeats of earlier rounds are common.
				txs = append(txs, fmt.Sprintf("tx-%d", rng.IntN(12+r)))
			}
			round = append(round, spec{p, distinct(txs)})
		}
		plan = append(plan, round)
	}
	run := func(many bool, shape reginatype.PushShape) []verdict {
		st := sqlstoretest.Open(t)
		configureWindow(t, st, "off", 0)
		_, err := st.Configure(ctx, "fp", "fp", "", func() partition.QueueOptions {
			o := partition.DefaultQueueOptions()
			o.DedupPayloadCheck = partition.PayloadCheckReport
			return o
		}())
		require.NoError(t, err)
		refs := make([]reginatype.PartitionRef, parts)
		for p := range refs {
			q := []string{"on", "off", "fp"}[p%3]
			refs[p], err = st.EnsurePartition(ctx, q, fmt.Sprint("p", p))
			require.NoError(t, err)
		}
		var out []verdict
		// ids numbers every minted message id in push order, so that an
		// original can be named by position across stores.
		ids := map[partition.UUID]int{}
		// What a cache would know: each partition's next offset and the
		// first offset of each hash stored there.
		next := make([]int64, parts)
		stored := make([]map[string]int64, parts)
		for p := range stored {
			stored[p] = map[string]int64{}
		}
		for r, round := range plan {
			var bs []*reginatype.PushBatch
			for i, s := range round {
				b, minted := batchOf(t, refs[s.part], s.txs...)
				if r%2 == 1 && refs[s.part].WindowSeconds > 0 {
					w := next[s.part] - 1
					for _, tx := range s.txs {
						if o, ok := stored[s.part][tx]; ok {
							w = min(w, o-1)
						}
					}
					if i%3 == 2 {
						w = min(w, next[s.part]-2)
					}
					b.Watermark, b.Epoch = max(w, -1), st.Epoch()
				}
				if refs[s.part].ChecksPayloads() {
					for range s.txs {
						b.Fingerprints = append(b.Fingerprints, partition.Fingerprint([]byte(`{"a":1}`)))
					}
				}
				for _, id := range minted {
					ids[id] = len(ids)
				}
				bs = append(bs, b)
			}
			res := make([]reginatype.PushResult, len(bs))
			errs := make([]error, len(bs))
			if many {
				st.PushMany(ctx, shape, bs, res, errs)
			} else {
				for i, b := range bs {
					res[i], errs[i] = st.Push(ctx, b)
				}
			}
			for i, s := range round {
				if errs[i] != nil || res[i].FirstOffset < 0 {
					continue
				}
				d, o := 0, res[i].FirstOffset
				for k, tx := range s.txs {
					if d < len(res[i].DupIndex) && res[i].DupIndex[d] == k {
						d++
						continue
					}
					if _, ok := stored[s.part][tx]; !ok {
						stored[s.part][tx] = o
					}
					o++
				}
				next[s.part] = o
			}
			for i := range bs {
				v := verdict{First: res[i].FirstOffset, Window: res[i].WindowSeconds, DupIndex: res[i].DupIndex}
				if errs[i] != nil {
					v.Err = errs[i].Error()
				}
				for _, o := range res[i].DupOriginal {
					v.DupOriginal = append(v.DupOriginal, ids[o])
				}
				out = append(out, v)
			}
		}
		return out
	}
	want := run(false, 0)
	dups := 0
	for _, v := range want {
		require.Empty(t, v.Err)
		dups += len(v.DupIndex)
	}
	require.NotZero(t, dups, "the plan has no duplicate: it tests nothing")
	for _, shape := range shapes {
		require.Equal(t, want, run(true, shape), "shape %s", shape)
	}
}

func distinct(txs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, tx := range txs {
		if !seen[tx] {
			seen[tx] = true
			out = append(out, tx)
		}
	}
	return out
}

// TestPushManyIsolatesTrouble: in one PushMany, a deleted queue's batch and
// a batch whose window hint is stale get their own errors and write nothing,
// while the other batches commit.
func TestPushManyIsolatesTrouble(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, shape := range shapes {
		t.Run(shape.String(), func(t *testing.T) {
			t.Parallel()
			st := sqlstoretest.Open(t)
			a, err := st.EnsurePartition(ctx, "a", "p")
			require.NoError(t, err)
			gone, err := st.EnsurePartition(ctx, "gone", "p")
			require.NoError(t, err)
			changed, err := st.EnsurePartition(ctx, "changed", "p")
			require.NoError(t, err)
			z, err := st.EnsurePartition(ctx, "z", "p")
			require.NoError(t, err)
			_, _, err = st.DeleteQueue(ctx, "gone")
			require.NoError(t, err)
			configureWindow(t, st, "changed", 0) // the batch below still says 3600

			bs := []*reginatype.PushBatch{}
			for _, ref := range []reginatype.PartitionRef{a, gone, changed, z} {
				b, _ := batchOf(t, ref, "x", "y")
				bs = append(bs, b)
			}
			res := make([]reginatype.PushResult, len(bs))
			errs := make([]error, len(bs))
			st.PushMany(ctx, shape, bs, res, errs)
			require.NoError(t, errs[0])
			require.ErrorIs(t, errs[1], reginatype.ErrPartitionMissing)
			require.ErrorIs(t, errs[2], reginatype.ErrWindowChanged)
			require.Equal(t, 0, res[2].WindowSeconds)
			require.NoError(t, errs[3])
			require.Equal(t, int64(0), res[0].FirstOffset)
			require.Equal(t, int64(0), res[3].FirstOffset)

			var n int
			require.NoError(t, sqlstoretest.Pool(t).QueryRow(ctx, schemaSQL(st,
				`SELECT count(*) FROM queen.segments WHERE partition_id = $1`), [16]byte(changed.ID)).Scan(&n))
			require.Zero(t, n, "the batch with the stale window wrote")
			require.NoError(t, sqlstoretest.Pool(t).QueryRow(ctx, schemaSQL(st,
				`SELECT count(*) FROM queen.segments WHERE partition_id = ANY($1)`),
				[][16]byte{a.ID, z.ID}).Scan(&n))
			require.Equal(t, 2, n)
		})
	}
}

// pushSegmentsArgs flattens batches into queen.push_segments' arguments.
func pushSegmentsArgs(bs ...*reginatype.PushBatch) []any {
	var (
		parts  [][16]byte
		hints  []int32
		marks  []int64
		counts []int32
		hashes [][]byte
		ids    []byte
		bodies []byte
		ends   []int32
		fps    = []int64{}
		hasFps []bool
	)
	for _, b := range bs {
		parts = append(parts, b.Partition)
		hints = append(hints, int32(b.WindowHint))
		marks = append(marks, b.Watermark)
		counts = append(counts, int32(b.Len()))
		hashes = append(hashes, b.Hashes...)
		ids = append(ids, b.IDs...)
		bodies = append(bodies, b.Bodies...)
		ends = append(ends, b.Ends...)
		fps = append(fps, b.Fingerprints...)
		hasFps = append(hasFps, b.Fingerprints != nil)
	}
	return []any{parts, hints, marks, counts, hashes, ids, bodies, ends, fps, hasFps}
}

const pushSegmentsCall = `SELECT count(*) FROM queen.push_segments($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// TestPushSegmentsKeepsDurability: push_segment lets a commit that wrote
// nothing skip the WAL flush wait; in a shared transaction that must not
// reach another batch's writes. The setting is read inside the transaction,
// before its commit.
func TestPushSegmentsKeepsDurability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	dup, err := st.EnsurePartition(ctx, "dup", "p")
	require.NoError(t, err)
	fresh, err := st.EnsurePartition(ctx, "fresh", "p")
	require.NoError(t, err)
	b, _ := batchOf(t, dup, "x")
	_, err = st.Push(ctx, b)
	require.NoError(t, err)

	var standby string
	require.NoError(t, sqlstoretest.Pool(t).QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&standby))
	if standby != "" {
		t.Skip("a synchronous standby is configured: all-duplicate commits keep the flush wait anyway")
	}
	commitSetting := func(bs ...*reginatype.PushBatch) string {
		tx, err := sqlstoretest.Pool(t).Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var n int
		require.NoError(t, tx.QueryRow(ctx, schemaSQL(st, pushSegmentsCall), pushSegmentsArgs(bs...)...).Scan(&n))
		require.Equal(t, len(bs), n)
		var v string
		require.NoError(t, tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v))
		return v
	}
	again, _ := batchOf(t, dup, "x")
	require.Equal(t, "off", commitSetting(again), "all duplicates: no flush wait needed")
	// In both orders: the writing batch before and after the duplicate one
	// (the function runs them in partition-id order).
	for range 2 {
		newer, _ := batchOf(t, fresh, fmt.Sprint("n-", rand.Int64()))
		require.Equal(t, "on", commitSetting(again, newer), "a write shares the commit: it must wait for the flush")
		require.Equal(t, "on", commitSetting(newer, again))
	}
}

// TestPushSegmentsLocksInPartitionOrder: whatever the argument order,
// push_segments locks the partition rows in partition-id order, so two
// brokers packing overlapping partitions in different orders cannot
// deadlock. Held: the smaller id's row. The call, given the larger id
// first, must wait on the smaller one without having locked the larger.
func TestPushSegmentsLocksInPartitionOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := sqlstoretest.Open(t)
	p1, err := st.EnsurePartition(ctx, "order", "p1")
	require.NoError(t, err)
	p2, err := st.EnsurePartition(ctx, "order", "p2")
	require.NoError(t, err)
	lo, hi := p1, p2
	if string(hi.ID[:]) < string(lo.ID[:]) {
		lo, hi = hi, lo
	}
	pool := sqlstoretest.Pool(t)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, schemaSQL(st, `SELECT 1 FROM queen.partitions WHERE id = $1 FOR UPDATE`), [16]byte(lo.ID))
	require.NoError(t, err)

	pusher, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer pusher.Release()
	var pid int
	require.NoError(t, pusher.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	bHi, _ := batchOf(t, hi, "a")
	bLo, _ := batchOf(t, lo, "a")
	done := make(chan error, 1)
	go func() {
		var n int
		done <- pusher.QueryRow(ctx, schemaSQL(st, pushSegmentsCall), pushSegmentsArgs(bHi, bLo)...).Scan(&n)
	}()
	// Wait until the call waits on a row lock (the held one, or the larger
	// id's if the order were wrong: then the probe below fails).
	awaitLockWait(t, pool, pid, done)
	var free []partition.UUID
	rows, err := pool.Query(ctx, schemaSQL(st, `SELECT id FROM queen.partitions WHERE id = $1 FOR UPDATE SKIP LOCKED`), [16]byte(hi.ID))
	require.NoError(t, err)
	for rows.Next() {
		var id [16]byte
		require.NoError(t, rows.Scan(&id))
		free = append(free, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []partition.UUID{hi.ID}, free, "the larger id was locked before the smaller one")
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-done)
}

// TestPushManyNoDeadlock: two stores (two brokers) push overlapping
// partitions in opposite orders at once, again and again; every batch
// commits (a deadlock would be a 40P01 error on one of them).
func TestPushManyNoDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(t)
	stores := []*sqlstore.Store{sqlstoretest.OpenSchema(t, schema), sqlstoretest.OpenSchema(t, schema)}
	var refs []reginatype.PartitionRef
	for p := range 6 {
		ref, err := stores[0].EnsurePartition(ctx, "dl", fmt.Sprint("p", p))
		require.NoError(t, err)
		refs = append(refs, ref)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() {
			st := stores[w%2]
			for i := range 40 {
				var bs []*reginatype.PushBatch
				for k := range refs {
					ref := refs[k]
					if w%2 == 1 {
						ref = refs[len(refs)-1-k]
					}
					b, _ := batchOf(t, ref, fmt.Sprintf("w%d-%d-%d", w, i, k))
					bs = append(bs, b)
				}
				res := make([]reginatype.PushResult, len(bs))
				errs := make([]error, len(bs))
				st.PushMany(ctx, reginatype.ShapeOneTransaction, bs, res, errs)
				for _, err := range errs {
					if err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, sqlstoretest.Pool(t).QueryRow(ctx,
		`SELECT count(*) FROM `+pgx.Identifier{schema}.Sanitize()+`.segments`).Scan(&n))
	require.Equal(t, 4*40*len(refs), n)
}

// awaitLockWait returns once backend pid waits on a lock. The statement it
// runs reports on done: finishing before it waited fails the test.
func awaitLockWait[T any](t *testing.T, pool *pgxpool.Pool, pid int, done <-chan T) {
	t.Helper()
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case v := <-done:
			t.Fatalf("the statement finished while a partition row was locked: %+v", v)
		default:
		}
	}
}

package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// cacheBenchSizes reads REGINA_BENCH_CACHE_HASHES: a comma-separated list of
// window sizes (hashes preloaded in the partition), default 100000. The 1M
// case takes about a minute of preloading:
//
//	REGINA_BENCH_CACHE_HASHES=100000,1000000 make bench GOTESTFLAGS='-run=^$ -bench=PushCache' ITERATIONS=200x
func cacheBenchSizes(b *testing.B) []int {
	s := os.Getenv("REGINA_BENCH_CACHE_HASHES")
	if s == "" {
		return []int{100_000}
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 100 {
			b.Fatalf("REGINA_BENCH_CACHE_HASHES: %q is not a size >= 100", f)
		}
		out = append(out, n)
	}
	return out
}

const (
	cacheBenchBatch    = 100 // items per push transaction
	cacheBenchSegment  = 100 // preloaded hashes per log_txns row
	cacheBenchBudgetMB = 512 // "on": the default QUEEN_DEDUP_CACHE_MB
	cacheBenchTinyKB   = 256 // "evicted": far too small for the partition
)

// preloadWindow fills partition ref with n hashes (of "pre-0" ... "pre-<n-1>")
// in rows of cacheBenchSegment, created 30 minutes ago (inside the default
// one-hour window), without segments. The GIN index is rebuilt after the
// load, which is much faster than maintaining it row by row.
func preloadWindow(b *testing.B, st *sqlstore.Store, ref reginatype.PartitionRef, n int) {
	b.Helper()
	ctx := context.Background()
	pool := sqlstoretest.Pool(b)
	q := func(s string) string {
		return strings.ReplaceAll(s, "queen.", pgx.Identifier{st.Schema()}.Sanitize()+".")
	}
	exec := func(s string, args ...any) {
		if _, err := pool.Exec(ctx, q(s), args...); err != nil {
			b.Fatalf("%s: %v", s, err)
		}
	}
	exec(`DROP INDEX queen.log_txns_hashes`)
	const chunk = 100_000
	for start := 0; start < n; start += chunk {
		m := min(chunk, n-start)
		hs := make([][]byte, m)
		for i := range hs {
			h := partition.HashTxID("pre-" + strconv.Itoa(start+i))
			hs[i] = h[:]
		}
		exec(`INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
			SELECT $1::uuid, $2::bigint + i * $3::integer, now() - interval '30 minutes',
			       ($4::bytea[])[i * $3::integer + 1 : least((i + 1) * $3::integer, $5::integer)]
			  FROM generate_series(0, ($5::integer - 1) / $3::integer) i`,
			[16]byte(ref.ID), start, cacheBenchSegment, hs, m)
	}
	exec(`CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off)`)
	exec(`UPDATE queen.partitions SET next_offset = $2 WHERE id = $1`, [16]byte(ref.ID), n)
	exec(`VACUUM ANALYZE queen.log_txns`)
}

// ensureRefs creates (or finds) partitions prefix0 .. prefix(n-1) of queue.
func ensureRefs(b *testing.B, st *sqlstore.Store, queue, prefix string, n int) []reginatype.PartitionRef {
	b.Helper()
	refs := make([]reginatype.PartitionRef, n)
	for i := range refs {
		ref, err := st.EnsurePartition(context.Background(), queue, prefix+strconv.Itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = ref
	}
	return refs
}

// warmConnections makes every pool connection run both probes of
// push_segment more than five times, so that PL/pgSQL has settled on its
// cached plans before anything is measured (the first five executions on a
// connection are planned for their parameters; see docs/performance.md).
// It pushes to partitions of their own.
func warmConnections(b *testing.B, st *sqlstore.Store, conns int) {
	b.Helper()
	ctx := context.Background()
	refs := ensureRefs(b, st, "cachebench", "warm-", conns)
	errs := make(chan error, conns)
	for round := range 16 {
		for i := range refs {
			go func() {
				batch := &reginatype.PushBatch{Partition: refs[i].ID, WindowHint: refs[i].WindowSeconds,
					Watermark: reginatype.NoWatermark}
				if round%2 == 1 {
					batch.Watermark = 0
				}
				tx := "warm-" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
				batch.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{TransactionID: tx, Payload: []byte(`1`)})
				_, err := st.Push(ctx, batch)
				errs <- err
			}()
		}
		for range refs {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPushCache measures push throughput through the actor registry
// (sqlstore + actor, no HTTP) on one partition whose one-hour window already
// holds N hashes, with the dedup cache
//
//   - off: QUEEN_DEDUP_CACHE=false, every push probes the whole window
//     (GIN index);
//   - evicted: a budget far too small for the partition (the load is cut
//     short, the cache answers "pressure"), so every push probes the whole
//     window after paying for the cache's bookkeeping;
//   - on: the default budget, the partition loaded before timing starts;
//     pushes probe only above the watermark (primary key).
//
// Each iteration is one push transaction of 100 items. Workloads: "new" (all
// new ids), "retry" (10% repeat ids pushed in the previous 10 transactions, a
// retry storm), "old" (1% repeat preloaded ids, ~30 min old: the watermark
// drops below their segment, so the "on" probe scans from there). The "on"
// run also reports on/off, its msgs/s over the "off" run's.
func BenchmarkPushCache(b *testing.B) {
	for _, n := range cacheBenchSizes(b) {
		st := sqlstoretest.Open(b)
		ctx := context.Background()
		ref, err := st.EnsurePartition(ctx, "cachebench", "hot")
		if err != nil {
			b.Fatal(err)
		}
		preloadWindow(b, st, ref, n)
		warmConnections(b, st, 8) // sqlstoretest.Open's pool size
		for _, load := range []string{"new", "retry", "old"} {
			var offRate float64
			for _, mode := range []string{"off", "evicted", "on"} {
				b.Run(fmt.Sprintf("hashes=%d/load=%s/cache=%s", n, load, mode), func(b *testing.B) {
					rate := benchCachePush(b, st, n, load, mode)
					b.ReportMetric(rate, "msgs/s")
					switch mode {
					case "off":
						offRate = rate
					case "on":
						if offRate > 0 {
							b.ReportMetric(rate/offRate, "on/off")
						}
					}
				})
			}
		}
	}
}

var cacheBenchRun int

func benchCachePush(b *testing.B, st *sqlstore.Store, n int, load, mode string) float64 {
	ctx := context.Background()
	cfg := cache.Config{Enabled: mode != "off", BudgetBytes: cacheBenchBudgetMB << 20}
	if mode == "evicted" {
		cfg.BudgetBytes = cacheBenchTinyKB << 10
	}
	c := cache.New(cfg)
	reg := actor.NewRegistry(st, actor.Config{Cache: c, CacheBudgetBytes: cfg.BudgetBytes, Logger: zerolog.Nop()})
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := reg.Close(cctx); err != nil {
			b.Error(err)
		}
	}()
	cacheBenchRun++
	run := strconv.Itoa(cacheBenchRun)
	seq := 0
	var recent []string
	payload := []byte(`{"data":"` + strings.Repeat("x", 189) + `"}`)
	push := func() {
		g := &reginatype.PushGroup{Queue: "cachebench", Partition: "hot", Items: make([]reginatype.PushItem, cacheBenchBatch)}
		for i := range g.Items {
			seq++
			tx := "r" + run + "-" + strconv.Itoa(seq)
			switch {
			case load == "retry" && i%10 == 0 && len(recent) > 0:
				tx = recent[(seq*7919)%len(recent)]
			case load == "old" && i%100 == 0:
				tx = "pre-" + strconv.Itoa((seq*7919)%n)
			}
			g.Items[i] = reginatype.PushItem{TransactionID: tx, Payload: payload}
			if len(recent) < 10*cacheBenchBatch {
				recent = append(recent, tx)
			} else {
				recent[seq%len(recent)] = tx
			}
		}
		reg.Push(ctx, []*reginatype.PushGroup{g})
		if g.Err != nil {
			b.Fatal(g.Err)
		}
	}
	// Warm up: resolve the partition and, with the cache, load it (or, when
	// evicted, find out that it does not fit) before timing.
	push()
	if mode != "off" {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			s := reg.Stats()
			if s.Hydrations.Running == 0 && s.Hydrations.Finished+s.Hydrations.Failed+s.Hydrations.Aborted > 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the partition was not loaded: %+v", s.Hydrations)
			}
			time.Sleep(5 * time.Millisecond)
		}
		push()
		s := reg.Stats().DedupCache
		if mode == "on" && s.Partitions != 1 {
			b.Fatalf("cache on: the partition is not held: %+v", s)
		}
		if mode == "evicted" && s.TooBig != 1 {
			b.Fatalf("cache evicted: the partition should not fit: %+v", s)
		}
	}
	before := reg.Stats().DedupCache
	for b.Loop() {
		push()
	}
	rate := float64(cacheBenchBatch) * float64(b.N) / b.Elapsed().Seconds()
	after := reg.Stats().DedupCache
	if mode == "on" && after.Hits-before.Hits != uint64(b.N) {
		b.Fatalf("cache on: %d of %d pushes got a watermark", after.Hits-before.Hits, b.N)
	}
	return rate
}

package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// singleSidecarSQL turns a schema's hash sidecar back into the layout before
// migration 0011: one table, one GIN index, a primary key (what the
// functions probe is the same SQL either way).
const singleSidecarSQL = `DROP TABLE queen.log_txns;
CREATE TABLE queen.log_txns (
    partition_id uuid NOT NULL, first_offset bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
    hashes bytea[] NOT NULL, fingerprints bigint[], PRIMARY KEY (partition_id, first_offset));
CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off)`

// oldPurgeSQL is the retention DELETE of the single-table layout (one
// bounded, autocommitting step of a partition's expired prefix).
const oldPurgeSQL = `DELETE FROM queen.log_txns l USING (
		SELECT first_offset FROM (
			SELECT first_offset,
			       bool_and(coalesce(created_at < now() - make_interval(secs => $2), false))
			         OVER (ORDER BY first_offset) AS expired
			  FROM (SELECT first_offset, created_at FROM queen.log_txns
			         WHERE partition_id = $1 ORDER BY first_offset LIMIT $3) o) e
		 WHERE e.expired) d
	WHERE l.partition_id = $1 AND l.first_offset = d.first_offset`

// sidecarBenchHashes reads REGINA_BENCH_SIDECAR_HASHES: hashes in the
// window, and as many again in an expired hour (default 1000000).
func sidecarBenchHashes(b *testing.B) int {
	n := 1_000_000
	if s := os.Getenv("REGINA_BENCH_SIDECAR_HASHES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1000 {
			b.Fatalf("REGINA_BENCH_SIDECAR_HASHES: %q is not a count >= 1000", s)
		}
		n = v
	}
	return n
}

type sidecarLayout struct {
	name string
	st   *sqlstore.Store
	refs []reginatype.PartitionRef
	q    func(string) string
}

// BenchmarkSidecarLayout compares, in one run, the hash sidecar's two
// layouts on 16 partitions holding N hashes inside the one-hour window
// (created 5 to 40 minutes before the pushes start) and N more created 2
// to 3 hours ago (an
// expired hour, not yet trimmed):
//
//   - single: one table and one GIN index (before migration 0011),
//     trimmed by batched DELETEs (1000 rows per statement, as
//     RETENTION_BATCH_SIZE) followed by the VACUUM they owe;
//   - partitioned: children of an hour, trimmed by RetainOnce (DETACH
//     PARTITION CONCURRENTLY and DROP TABLE of the expired children).
//
// Push throughput: 16 goroutines push 10 new ids per transaction, every push
// probing the whole window (no dedup cache), for REGINA_BENCH_SIDECAR_PUSH
// (default 10s) per layout per round, two rounds, alternating layouts.
// Reported: pushes/s per layout and round, the retention time of each.
//
//	REGINA_BENCH_SIDECAR_HASHES=10000000 make bench GOTESTFLAGS='-run=^$ -bench=SidecarLayout' ITERATIONS=1x
func BenchmarkSidecarLayout(b *testing.B) {
	ctx := context.Background()
	n := sidecarBenchHashes(b)
	dur := 10 * time.Second
	if s := os.Getenv("REGINA_BENCH_SIDECAR_PUSH"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatal(err)
		}
		dur = d
	}
	pool := sqlstoretest.Pool(b)
	var layouts []*sidecarLayout
	for _, name := range []string{"single", "partitioned"} {
		st := sqlstoretest.Open(b)
		l := &sidecarLayout{name: name, st: st, q: func(s string) string {
			return strings.ReplaceAll(s, "queen.", pgx.Identifier{st.Schema()}.Sanitize()+".")
		}}
		exec := func(s string, args ...any) {
			if _, err := pool.Exec(ctx, l.q(s), args...); err != nil {
				b.Fatalf("%s: %s: %v", name, s, err)
			}
		}
		if name == "single" {
			exec(singleSidecarSQL)
		} else {
			exec(`SELECT queen.sidecar_ensure(now() - interval '4 hours', now(), interval '1 hour')`)
		}
		for i := range 16 {
			ref, err := st.EnsurePartition(ctx, "sidecar", "p"+strconv.Itoa(i))
			if err != nil {
				b.Fatal(err)
			}
			l.refs = append(l.refs, ref)
		}
		start := time.Now()
		exec(`DROP INDEX queen.log_txns_hashes`)
		// Rows of 100 hashes, spread over the partitions; the expired hour
		// first (lower offsets), then the window.
		rows := n / 100
		for _, age := range []struct{ from, span string }{{"3 hours", "1 hour"}, {"40 minutes", "35 minutes"}} {
			exec(`INSERT INTO queen.log_txns (partition_id, first_offset, created_at, hashes)
				SELECT p.id, p.next_offset + (i / 16) * 100,
				       now() - $2::interval + $3::interval * (i::float8 / $1::integer),
				       ARRAY(SELECT decode(md5(p.id::text || '.' || (p.next_offset + (i / 16) * 100) || '.' || j), 'hex')
				               FROM generate_series(1, 100) j)
				  FROM generate_series(0, $1::integer - 1) i
				  JOIN (SELECT id, next_offset, row_number() OVER (ORDER BY name) - 1 AS k
				          FROM queen.partitions) p ON p.k = i % 16`, rows, age.from, age.span)
			exec(`UPDATE queen.partitions SET next_offset = next_offset + ($1::integer / 16 + 1) * 100`, rows)
		}
		exec(`CREATE INDEX log_txns_hashes ON queen.log_txns USING gin (hashes) WITH (fastupdate = off)`)
		exec(`VACUUM ANALYZE queen.log_txns`)
		b.Logf("%s: preloaded 2 x %d hashes in %s", name, n, time.Since(start).Round(time.Millisecond))
		layouts = append(layouts, l)
	}
	b.ResetTimer()
	for round := range 2 {
		for _, l := range layouts {
			pushes := pushFor(b, l, dur, round)
			b.ReportMetric(pushes/dur.Seconds(), "push/s_"+l.name+"_r"+strconv.Itoa(round+1))
			b.Logf("round %d %s: %.0f pushes/s (10 items each, full-window probe)", round+1, l.name, pushes/dur.Seconds())
		}
	}
	// Retention of the expired hour (the single layout's DELETE also takes
	// the rows that have left the window since the preload).
	for _, l := range layouts {
		start := time.Now()
		var detail string
		if l.name == "single" {
			var deleted int64
			for _, ref := range l.refs {
				for {
					tag, err := pool.Exec(ctx, l.q(oldPurgeSQL), [16]byte(ref.ID), 3600, 1000)
					if err != nil {
						b.Fatal(err)
					}
					deleted += tag.RowsAffected()
					if tag.RowsAffected() < 1000 {
						break
					}
				}
			}
			del := time.Since(start)
			vstart := time.Now()
			if _, err := pool.Exec(ctx, l.q(`VACUUM queen.log_txns`)); err != nil {
				b.Fatal(err)
			}
			detail = "DELETE " + strconv.FormatInt(deleted, 10) + " rows in " + del.Round(time.Millisecond).String() +
				", then VACUUM " + time.Since(vstart).Round(time.Millisecond).String()
		} else {
			st, err := l.st.RetainOnce(ctx, 1000)
			if err != nil {
				b.Fatal(err)
			}
			detail = strconv.Itoa(st.SidecarChildren) + " children dropped (~" + strconv.FormatInt(st.LogTxns, 10) + " rows)"
		}
		took := time.Since(start)
		var left int64
		if err := pool.QueryRow(ctx, l.q(`SELECT count(*) FROM queen.log_txns WHERE created_at < now() - interval '2 hours'`)).
			Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left != 0 {
			b.Fatalf("%s: %d expired rows left", l.name, left)
		}
		b.ReportMetric(float64(took.Milliseconds()), "retention_ms_"+l.name)
		b.Logf("%s retention of the expired hour: %s (%s)", l.name, took.Round(time.Millisecond), detail)
	}
}

// pushFor pushes from 16 goroutines (one per partition) for d and returns
// the pushes made.
func pushFor(b *testing.B, l *sidecarLayout, d time.Duration, round int) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for i, ref := range l.refs {
		wg.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				batch := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds,
					Watermark: reginatype.NoWatermark}
				for j := range 10 {
					tx := "new-" + strconv.Itoa(round) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(k) + "-" + strconv.Itoa(j)
					batch.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{TransactionID: tx, Payload: []byte(`1`)})
				}
				if _, err := l.st.Push(ctx, batch); err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("%s: push: %v", l.name, err)
	}
	return float64(done.Load())
}

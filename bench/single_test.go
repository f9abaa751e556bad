package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/regina-mq/regina/internal/procstat"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// BenchmarkSingleItemPushCPU is PostgreSQL's CPU per one-message push, the
// commonest HTTP producer's shape, by how the store sends it: each batch
// alone (queen.push_segment, its own transaction), or k partitions'
// batches in one packed round trip (Store.PushMany, one transaction). Every
// batch goes to another of 1000 partitions with the cache's watermark (no
// probe), as the broker sends them. One connection, so the backend's CPU
// (/proc/PID/stat) is the statement's; "pg-µs/msg" is reported:
//
//	make bench GOTESTFLAGS='-run=^$ -bench=SingleItemPushCPU' ITERATIONS=4000x
//
// With BENCH_PID_FILE set, the backend's pid is written there first (for
// perf record -g -p).
func BenchmarkSingleItemPushCPU(b *testing.B) {
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(b)
	st := sqlstoretest.OpenConfig(b, sqlstore.Config{URL: sqlstoretest.URL(b), Schema: schema, MaxConns: 1})
	const parts = 1000
	refs := ensureRefs(b, st, "single", "p", parts)
	// The store's one connection: the backend whose last statement named
	// the schema.
	var pid int
	if err := sqlstoretest.Pool(b).QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'regina' AND position($1 in query) > 0",
		schema).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if f := os.Getenv("BENCH_PID_FILE"); f != "" {
		_ = os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644)
	}
	for _, k := range []int{1, 4, 16} {
		b.Run("batches="+strconv.Itoa(k), func(b *testing.B) {
			bs := make([]*reginatype.PushBatch, k)
			for j := range bs {
				bs[j] = &reginatype.PushBatch{}
			}
			res := make([]reginatype.PushResult, k)
			errs := make([]error, k)
			payload := []byte(`{"data":"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz"}`)
			n := 0
			cpu0 := backendTicks(b, pid)
			for b.Loop() {
				for j, batch := range bs {
					ref := refs[(n+j*(parts/k))%parts]
					batch.Reset()
					batch.Partition, batch.WindowHint, batch.Watermark, batch.Epoch = ref.ID, ref.WindowSeconds, 1<<40, st.Epoch()
					tx := "s-" + strconv.Itoa(k) + "-" + strconv.Itoa(n) + "-" + strconv.Itoa(j)
					batch.Add(partition.HashTxID(tx), partition.NewV7(), &partition.Body{TransactionID: tx, Payload: payload})
				}
				n++
				if k == 1 {
					_, errs[0] = st.Push(ctx, bs[0])
				} else {
					st.PushMany(ctx, reginatype.ShapeOneTransaction, bs, res, errs)
				}
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			ticks := backendTicks(b, pid) - cpu0
			b.ReportMetric(float64(ticks)/procstat.ClockTicks()*1e6/float64(b.N*k), "pg-µs/msg")
		})
	}
}

// backendTicks is the CPU ticks (user + system) of process pid.
func backendTicks(b *testing.B, pid int) uint64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	st, err := procstat.ParseStat(string(raw))
	if err != nil {
		b.Fatal(err)
	}
	return st.UTime + st.STime
}

package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/regina-mq/regina/internal/procstat"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// pushBacklog pushes n messages (200-byte payloads, real transaction-id
// hashes, so acks resolve) to queue/part, 10 per push transaction (a pop
// reads and decodes the whole segment covering its cursor, so one huge
// segment would measure decoding, not finding work).
func pushBacklog(b *testing.B, st *sqlstore.Store, queue, part string, n int) {
	b.Helper()
	ctx := context.Background()
	ref, err := st.EnsurePartition(ctx, queue, part)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"data":"` + strings.Repeat("x", 180) + `"}`)
	run := runID.Add(1)
	for from := 0; from < n; from += 10 {
		batch := &reginatype.PushBatch{Partition: ref.ID, WindowHint: ref.WindowSeconds, Watermark: reginatype.NoWatermark}
		for i := from; i < min(from+10, n); i++ {
			tx := strconv.FormatInt(run, 10) + ":" + part + ":" + strconv.Itoa(i)
			batch.Add(partition.HashTxID(tx), partition.NewV7(),
				&partition.Body{CreatedAt: time.Now().UnixMicro(), TransactionID: tx, Payload: payload})
		}
		if _, err := st.Push(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
}

// popScalePartitions is the partition counts BenchmarkPopScale runs
// (POP_SCALE_PARTITIONS, comma-separated; default 100 and 10,000).
func popScalePartitions() []int {
	v := os.Getenv("POP_SCALE_PARTITIONS")
	if v == "" {
		v = "100,10000"
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkPopScale measures the any-partition pop (sqlstore.Store.Pop, no
// HTTP) on a queue of N partitions of which 1% (at least one) hold work:
// every partition got one message, a queue-mode consumer read them all,
// then the 1% got a backlog. One consumer pops (lease, batch 1) and acks,
// as a client's consume loop does; it reports pops/s and the p99 of one
// pop. The cost should not grow with N.
func BenchmarkPopScale(b *testing.B) {
	ctx := context.Background()
	for _, n := range popScalePartitions() {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			st := sqlstoretest.Open(b)
			if _, err := st.EnsurePartition(ctx, "scale", "seed"); err != nil {
				b.Fatal(err)
			}
			sqlstoretest.FillPartitions(b, st.Schema(), "scale", "p", n)
			for {
				res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "scale", Batch: 10000, Partitions: 1000, AutoAck: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Messages) == 0 {
					break
				}
			}
			hot := max(n/100, 1)
			const pops = 2000
			for i := range hot {
				pushBacklog(b, st, "scale", fmt.Sprintf("p%05d", i*100+37%n), pops/hot+10)
			}
			lat := make([]time.Duration, 0, pops)
			b.ResetTimer()
			start := time.Now()
			for range pops {
				t0 := time.Now()
				res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "scale", Batch: 1})
				lat = append(lat, time.Since(t0))
				ackTheOne(ctx, b, st, res, err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(pops)/elapsed.Seconds(), "pops/s")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		})
	}
}

// BenchmarkPopDrain drains a queue of 5,000 partitions holding 4 messages
// each (20,000) with one consumer that pops (lease, batch 10, one partition)
// and acks, and logs the drain rate in each tenth of the messages: the rate
// should stay flat to the last message.
//
// POP_DRAIN_FOREIGN_TX=same (or other) holds a transaction with an id open
// in another session of the same database (or of database postgres) from
// before the backlog to the end: the stranger that used to widen every
// catch-up to the partitions pushed since it began. POP_DRAIN_VACUUM=ms
// vacuums the cursor table that often meanwhile, as the broker does
// (CURSOR_VACUUM_INTERVAL).
func BenchmarkPopDrain(b *testing.B) {
	ctx := context.Background()
	const parts, per = 5000, 4
	st := sqlstoretest.Open(b)
	if ms, err := strconv.Atoi(os.Getenv("POP_DRAIN_VACUUM")); err == nil && ms > 0 {
		vctx, stop := context.WithCancel(ctx)
		defer stop()
		go st.RunCursorVacuum(vctx, time.Duration(ms)*time.Millisecond)
	}
	if where := os.Getenv("POP_DRAIN_FOREIGN_TX"); where != "" {
		dsn := sqlstoretest.URL(b)
		if where == "other" {
			u, err := url.Parse(dsn)
			if err != nil {
				b.Fatal(err)
			}
			u.Path = "/postgres"
			dsn = u.String()
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()"); err != nil {
			b.Fatal(err)
		}
		b.Logf("a transaction with an id stays open in database %s", where)
	}
	for i := range parts {
		pushBacklog(b, st, "drain", fmt.Sprintf("d%05d", i), per)
	}
	total := parts * per
	tenth := total / 10
	var rates []string
	got, mark := 0, time.Now()
	start := mark
	b.ResetTimer()
	for got < total {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "drain", Batch: 10})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Messages) == 0 {
			b.Fatalf("pop answered empty with %d of %d messages left", total-got, total)
		}
		acks := make([]reginatype.AckItem, len(res.Messages))
		for i, m := range res.Messages {
			acks[i] = reginatype.AckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID,
				LeaseID: res.LeaseID, HasLease: true, Status: reginatype.AckCompleted}
		}
		if _, err := st.Ack(ctx, reginatype.QueueModeGroup, acks); err != nil {
			b.Fatal(err)
		}
		prev := got / tenth
		got += len(res.Messages)
		if got/tenth > prev && len(rates) < 10 {
			rates = append(rates, fmt.Sprintf("%.0f", float64(tenth)/time.Since(mark).Seconds()))
			mark = time.Now()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "msgs/s")
	b.Logf("drain of %d messages in %d partitions, msgs/s by tenth: %s", total, parts, strings.Join(rates, " "))
	// The cursor rows' versions the drain left (a transaction held open in
	// this database keeps every one of them, and their ready-index entries).
	var upd, hot, dead int64
	if err := sqlstoretest.Pool(b).QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables
		 WHERE schemaname = $1 AND relname = 'consumers'`, st.Schema()).Scan(&upd, &hot, &dead); err == nil {
		b.Logf("consumers: %d updates (%d HOT), %d dead row versions", upd, hot, dead)
	}
}

// BenchmarkPopAckOneCPU is the CPU of a one-message pop and its ack, the
// consume side's commonest small shape: one consumer, queue mode, lease,
// batch 1, over 16 partitions holding a backlog (no pushes meanwhile). One
// connection, so the backend's CPU (/proc/PID/stat) is the statements';
// "pg-µs/msg" and the test process's "go-µs/msg" are reported:
//
//	make bench GOTESTFLAGS='-run=^$ -bench=PopAckOneCPU' ITERATIONS=2000x
//
// With BENCH_PID_FILE set, the backend's pid is written there first (for
// perf record -g -p).
func BenchmarkPopAckOneCPU(b *testing.B) {
	ctx := context.Background()
	schema := sqlstoretest.NewSchema(b)
	st := sqlstoretest.OpenConfig(b, sqlstore.Config{URL: sqlstoretest.URL(b), Schema: schema, MaxConns: 1})
	const parts = 16
	per := max(b.N/parts+2, 2)
	for i := range parts {
		pushBacklog(b, st, "one", fmt.Sprintf("o%02d", i), per)
	}
	var pid int
	if err := sqlstoretest.Pool(b).QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'regina' AND position($1 in query) > 0",
		schema).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if f := os.Getenv("BENCH_PID_FILE"); f != "" && b.N > 1 {
		_ = os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644)
	}
	cpu0, self0 := backendTicks(b, pid), selfCPU()
	b.ResetTimer()
	for range b.N {
		res, err := st.Pop(ctx, reginatype.PopRequest{Queue: "one", Batch: 1})
		ackTheOne(ctx, b, st, res, err)
	}
	b.StopTimer()
	b.ReportMetric(float64(backendTicks(b, pid)-cpu0)/procstat.ClockTicks()*1e6/float64(b.N), "pg-µs/msg")
	b.ReportMetric(float64(selfCPU()-self0)/1e3/float64(b.N), "go-µs/msg")
}

// selfCPU is this process's CPU time (user + system) in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ackTheOne checks that a one-message pop (its result and error) answered
// exactly one message while work waited, and acks it completed.
func ackTheOne(ctx context.Context, b *testing.B, st *sqlstore.Store, res reginatype.PopResult, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Messages) != 1 {
		b.Fatalf("pop answered %d messages while work waited (%s)", len(res.Messages), res.Empty)
	}
	m := res.Messages[0]
	if _, err := st.Ack(ctx, reginatype.QueueModeGroup, []reginatype.AckItem{{TransactionID: m.TransactionID,
		PartitionID: m.PartitionID, LeaseID: res.LeaseID, HasLease: true, Status: reginatype.AckCompleted}}); err != nil {
		b.Fatal(err)
	}
}

package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

var runID atomic.Int64

// BenchmarkPushTransaction measures queen.push_segment through pgx, one
// partition, no broker in between: the floor under every push. Each
// iteration is one transaction of n new messages (200-byte payloads, a
// full-window probe); "dup" runs push an already-stored batch, which writes
// nothing, through the locked transaction; "dupfast" the same batch with
// ExpectDuplicates (the read-only fast path: no row lock, no xid); "mixed"
// runs repeat every other item of the stored batch.
func BenchmarkPushTransaction(b *testing.B) {
	ctx := context.Background()
	st := sqlstoretest.Open(b)
	for _, n := range []int{1, 10, 100, 1000} {
		for _, mode := range []string{"new", "dup", "dupfast", "mixed"} {
			b.Run(fmt.Sprintf("batch=%d/%s", n, mode), func(b *testing.B) {
				ref, err := st.EnsurePartition(ctx, "bench", fmt.Sprintf("p-%d-%s", n, mode))
				if err != nil {
					b.Fatal(err)
				}
				run := runID.Add(1)
				payload := []byte(`{"data":"` + string(make([]byte, 0)) + `xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)
				batch := &reginatype.PushBatch{}
				fill := func(seq int) {
					batch.Reset()
					batch.Partition, batch.WindowHint, batch.Watermark = ref.ID, ref.WindowSeconds, reginatype.NoWatermark
					for i := range n {
						tx := strconv.FormatInt(run, 10) + ":" + strconv.Itoa(seq) + ":" + strconv.Itoa(i)
						batch.Add(partition.HashTxID(tx), partition.NewV7(),
							&partition.Body{CreatedAt: 1, TransactionID: tx, Payload: payload})
					}
				}
				if mode != "new" {
					fill(-1)
					if _, err := st.Push(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch.ExpectDuplicates = mode == "dupfast"
				}
				seq := 0
				for b.Loop() {
					switch mode {
					case "new":
						b.StopTimer()
						fill(seq)
						seq++
						b.StartTimer()
					case "mixed":
						// Every other item repeats one of the stored batch.
						b.StopTimer()
						fill(seq)
						seq++
						for i := 0; i < n; i += 2 {
							tx := strconv.FormatInt(run, 10) + ":-1:" + strconv.Itoa(i)
							h := partition.HashTxID(tx)
							batch.Hashes[i] = h[:]
						}
						b.StartTimer()
					}
					res, err := st.Push(ctx, batch)
					if err != nil {
						b.Fatal(err)
					}
					if (mode == "dup" || mode == "dupfast") && len(res.DupIndex) != n {
						b.Fatalf("want %d duplicates, got %d", n, len(res.DupIndex))
					}
					if res.Unlocked != (mode == "dupfast") {
						b.Fatalf("mode %s: unlocked %v", mode, res.Unlocked)
					}
				}
				reportMsgs(b, n)
			})
		}
	}
}

package bench

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/wire"
)

func frames(n, payload int) []partition.Frame {
	p := []byte(`{"data":"` + strings.Repeat("x", max(payload-11, 0)) + `"}`)
	out := make([]partition.Frame, n)
	for i := range out {
		out[i] = partition.Frame{MessageID: partition.NewV7(), Body: partition.Body{
			CreatedAt: 1764547200000000, TransactionID: "order:" + strconv.Itoa(i) + ":v1", Payload: p}}
	}
	return out
}

func reportMsgs(b *testing.B, perOp int) {
	b.ReportMetric(float64(perOp)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkSegmentEncode(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("frames=%d", n), func(b *testing.B) {
			fs := frames(n, 200)
			b.SetBytes(int64(len(partition.EncodeSegment(fs))))
			b.ReportAllocs()
			for b.Loop() {
				_ = partition.EncodeSegment(fs)
			}
			reportMsgs(b, n)
		})
	}
}

func BenchmarkSegmentDecode(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("frames=%d", n), func(b *testing.B) {
			seg := partition.EncodeSegment(frames(n, 200))
			b.SetBytes(int64(len(seg)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := partition.DecodeSegment(seg, n); err != nil {
					b.Fatal(err)
				}
			}
			reportMsgs(b, n)
		})
	}
}

func BenchmarkHashTxID(b *testing.B) {
	id := "order:8812:v3:0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	b.ReportAllocs()
	for b.Loop() {
		_ = partition.HashTxID(id)
	}
	reportMsgs(b, 1)
}

func BenchmarkNewV7(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = partition.NewV7()
	}
	reportMsgs(b, 1)
}

func BenchmarkCollapse(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		for _, dup := range []int{0, 50} {
			b.Run(fmt.Sprintf("items=%d/dup=%d%%", n, dup), func(b *testing.B) {
				ids := make([]string, n)
				for i := range ids {
					ids[i] = "t" + strconv.Itoa(i)
					if dup > 0 && i%(100/dup) == 1 {
						ids[i] = ids[i-1]
					}
				}
				var leader, leaders []int
				b.ReportAllocs()
				for b.Loop() {
					leader, leaders = partition.Collapse(ids, leader, leaders)
				}
				reportMsgs(b, n)
			})
		}
	}
}

func pushBody(n, payload int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	p := strings.Repeat("x", max(payload-11, 0))
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"queue":"orders","partition":"p%d","transactionId":"order:%d:v1","payload":{"data":"%s"}}`, i%16, i, p)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// BenchmarkDecodePush measures the HTTP push body decode and validation
// (test-only import of wire; production code never imports it).
func BenchmarkDecodePush(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			body := pushBody(n, 200)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := wire.DecodePush(body); err != nil {
					b.Fatal(err)
				}
			}
			reportMsgs(b, n)
		})
	}
}

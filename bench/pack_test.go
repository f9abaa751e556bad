package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// BenchmarkLonePush is the low-load latency of the push shapes: one
// producer, one push of 10 new messages at a time (so the packer always
// carries a lone batch), through the registry to PostgreSQL. ns/op is the
// latency of one push; the shapes alternate, ROUNDS times, on one store:
//
//	make bench GOTESTFLAGS='-run=^$ -bench=LonePush' ITERATIONS=2000x
func BenchmarkLonePush(b *testing.B) {
	st := sqlstoretest.Open(b)
	warmConnections(b, st, 8)
	for round := range 3 {
		for _, shape := range []reginatype.PushShape{reginatype.ShapeSingle, reginatype.ShapeOneTransaction} {
			b.Run(shape.String()+"/round="+strconv.Itoa(round), func(b *testing.B) {
				reg := actor.NewRegistry(st, actor.Config{PushShape: shape, Logger: zerolog.Nop()})
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := reg.Close(ctx); err != nil {
						b.Error(err)
					}
				}()
				tag := shape.String() + strconv.Itoa(round) + "-"
				g := &reginatype.PushGroup{Queue: "lone", Partition: "p", Items: make([]reginatype.PushItem, 10)}
				for i := 0; b.Loop(); i++ {
					for k := range g.Items {
						g.Items[k] = reginatype.PushItem{TransactionID: tag + strconv.Itoa(i*10+k), Payload: []byte(`{"a":1}`)}
					}
					g.Results, g.Err = nil, nil
					reg.Push(context.Background(), []*reginatype.PushGroup{g})
					if g.Err != nil {
						b.Fatal(g.Err)
					}
				}
			})
		}
	}
}

package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/regina-mq/regina/actor"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

// batchedAcker is the store's ack calls with acks group-committed through
// the consume batcher (lease extensions and delivery settlements go to the
// store directly).
type batchedAcker struct {
	*sqlstore.Store
	consume *actor.ConsumeBatcher
}

// Ack applies the request through the batcher: it shares a transaction and
// its commit with the acks that arrive while the senders are busy.
func (a batchedAcker) Ack(ctx context.Context, group string, items []reginatype.AckItem) ([]reginatype.AckResult, error) {
	return a.consume.Ack(ctx, group, items)
}

// registerConsumeCounters exports the consume batcher's counts: requests /
// batches is the mean number of pops (acks) sharing a transaction.
func registerConsumeCounters(reg *prometheus.Registry, b *actor.ConsumeBatcher) {
	counter := func(name, help, kind string, v func(actor.ConsumeStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help,
			ConstLabels: prometheus.Labels{"kind": kind}}, func() float64 { return float64(v(b.Stats())) })
	}
	const batches = "transactions the consume batcher ran (group commit of pops and acks)"
	const requests = "requests the consume batcher served (requests / batches: the mean sharing one transaction)"
	reg.MustRegister(
		counter("regina_consume_batches_total", batches, "pop", func(s actor.ConsumeStats) uint64 { return s.PopBatches }),
		counter("regina_consume_batches_total", batches, "ack", func(s actor.ConsumeStats) uint64 { return s.AckBatches }),
		counter("regina_consume_requests_total", requests, "pop", func(s actor.ConsumeStats) uint64 { return s.PopRequests }),
		counter("regina_consume_requests_total", requests, "ack", func(s actor.ConsumeStats) uint64 { return s.AckRequests }),
	)
}

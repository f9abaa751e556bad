package main

import (
	"context"
	"strconv"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

// The packed ceilings: the push statements of the broker's packed shapes
// (sqlstore.Store.PushMany), through pgx, no broker. Each call carries the
// batches of packPartitions distinct partitions, and packSenders workers
// call at once, so as many batches are in flight as in the single-partition
// ceiling (connections workers, one batch each) when packSenders x
// packPartitions = connections, which is what the broker's packer does under
// that load. Ops are batches (pushes), so msgs/s compares with the ceiling's.
const (
	phCeilingPacked    = "ceiling_packed"    // queen.push_segments: one transaction per call
	phCeilingPipelined = "ceiling_pipelined" // queen.push_segment per batch, pipelined, a transaction each
)

// packedPhases drives the packed ceilings (block B, after the
// single-partition ceiling).
func (h *harness) packedPhases(r int, g procGroups, refs []reginatype.PartitionRef, tag string) {
	c := h.cfg
	for _, p := range []struct {
		name  string
		shape reginatype.PushShape
	}{{phCeilingPacked, reginatype.ShapeOneTransaction}, {phCeilingPipelined, reginatype.ShapePipelined}} {
		if h.stop.Err() != nil {
			return
		}
		spec := phaseSpec{name: p.name, round: r, workers: c.packSenders, procs: g}
		h.drive(spec, h.ceilingPackedWork(h.main.store, refs, tag+"-"+p.shape.String(), p.shape, c.packPartitions))
	}
}

// ceilingPackedWork is ceilingWork with k batches per call, for k distinct
// partitions of the worker's own (worker w's pushes k*call ... k*call+k-1;
// a partition drawn twice moves on to the next free one).
func (h *harness) ceilingPackedWork(store *sqlstore.Store, refs []reginatype.PartitionRef, tag string,
	shape reginatype.PushShape, k int) workFunc {
	return func(ctx context.Context, w int, pc *phaseClock, rec *workerRec) {
		n := h.wl.items
		// The partitions this worker owns: like the broker's packer, where
		// a partition has at most one batch in flight, no two connections
		// wait for each other's partition rows.
		var owned []int
		for p := range refs {
			if p%h.cfg.packSenders == w%h.cfg.packSenders || len(refs) < h.cfg.packSenders {
				owned = append(owned, p)
			}
		}
		k := min(k, len(owned))
		batches := make([]*reginatype.PushBatch, k)
		for j := range batches {
			batches[j] = &reginatype.PushBatch{}
		}
		res := make([]reginatype.PushResult, k)
		errs := make([]error, k)
		used := make(map[int]bool, k)
		tx := make([]byte, 0, 64)
		bodies := make([]partition.Body, n)
		for call := 0; running(ctx, pc); call++ {
			clear(used)
			created := time.Now().UnixMicro()
			for j, batch := range batches {
				seq := call*k + j
				o := h.wl.part(w, seq) % len(owned)
				for used[o] {
					o = (o + 1) % len(owned)
				}
				used[o] = true
				tx = h.fillBatch(batch, refs[owned[o]], bodies, tx, tag, w, seq, created)
			}
			cctx, cancel := context.WithTimeout(h.hard, 30*time.Second)
			t0 := time.Now()
			store.PushMany(cctx, shape, batches, res, errs)
			t1 := time.Now()
			cancel()
			failed := false
			for j := range batches {
				if errs[j] != nil {
					rec.fail(errs[j])
					failed = true
					continue
				}
				d := len(res[j].DupIndex)
				rec.record(pc, t0, t1, n-d, d)
			}
			if failed {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// brokerExtraEnv are the -broker-env settings, given to every broker
// started (after the inherited environment, before the run's own).
var brokerExtraEnv []string

// packedWhat says what one call of a packed ceiling carries.
func (h *harness) packedWhat(txn string) string {
	return strconv.Itoa(h.cfg.packPartitions) + " partitions' batches per round trip (" + txn + "), " +
		strconv.Itoa(h.cfg.packSenders) + " connections: new messages"
}

package actor

import (
	"context"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// LinkedStore is the part of the store whose calls the push pipeline has to
// know about (package sqlstore implements it).
type LinkedStore interface {
	// Pop delivers messages (it never waits).
	Pop(ctx context.Context, req reginatype.PopRequest) (reginatype.PopResult, error)
	// HasWork reports whether a pop like req could get messages now (it
	// takes nothing).
	HasWork(ctx context.Context, req reginatype.PopRequest) (bool, error)
	// Transaction runs pushes and acks atomically.
	Transaction(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck,
		leases []partition.UUID) (reginatype.TxnResult, error)
	// ReplayDLQ puts dead letters back into their partition and returns
	// their queue.
	ReplayDLQ(ctx context.Context, partitionID partition.UUID, txID, group string) (string, []reginatype.Replayed, error)
	// DeleteQueue deletes a queue and returns its partitions.
	DeleteQueue(ctx context.Context, queue string) (bool, []partition.UUID, error)
	// StreamCycle commits a stream cycle (state, sink pushes, ack) atomically.
	StreamCycle(ctx context.Context, c reginatype.StreamCycle) (reginatype.CycleResult, error)
}

// Linked runs the store calls that the push pipeline has to know about,
// adding what the pipeline knows: a pop waits for the pipeline's push
// signals; a transaction or a DLQ replay that wrote wakes the queue's waiting
// pops; a deleted queue's partitions leave the dedup cache. Every other store
// call goes to the store directly.
type Linked struct {
	reg   *Registry
	store LinkedStore
	polls pollers
	// pop serves one look of a pop: store.Pop, or a ConsumeBatcher's
	// (BatchPops).
	pop func(context.Context, reginatype.PopRequest) (reginatype.PopResult, error)
}

// Link returns the store's linked calls for this registry.
func (r *Registry) Link(store LinkedStore) *Linked {
	return &Linked{reg: r, store: store, pop: store.Pop}
}

// BatchPops makes every look of a pop go through b (group commit). Call it
// before the first Pop.
func (l *Linked) BatchPops(b *ConsumeBatcher) { l.pop = b.Pop }

// Pop delivers messages. With wait > 0 an empty pop waits up to wait for
// work and tries again, returning empty when the time is up, ctx ends or the
// registry closes. It is woken at once by a push through this broker, and
// otherwise by the poller of its (queue, group, partition): one store check
// every pollInterval shared by every pop waiting on that key (pushes through
// other brokers, leases that expired, delays that ended), so PostgreSQL is
// not polled once per waiting request.
func (l *Linked) Pop(ctx context.Context, req reginatype.PopRequest, wait time.Duration) (reginatype.PopResult, error) {
	deadline := time.Now().Add(wait)
	for {
		// Subscribe before looking, so a push that lands in between wakes us.
		woken := l.reg.signals.wait(req.Queue)
		select {
		case <-ctx.Done():
			return reginatype.PopResult{}, nil // the caller left: take nothing
		default:
		}
		// The look itself is not cut short when ctx ends: a pop whose
		// transaction committed must return its lease to the caller, who
		// settles it (releases it when its client is gone). Cancelled
		// mid-commit, the lease would be taken with nobody to release it.
		res, err := l.pop(context.WithoutCancel(ctx), req)
		if err != nil || len(res.Messages) > 0 || wait <= 0 {
			return res, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return res, nil
		}
		if res.Empty == "queue_not_found" {
			// Nothing to poll yet: the queue's first push through this
			// broker wakes us; one through another broker is seen at the
			// next look, a poll interval on.
			left = min(left, pollInterval)
		}
		ready := l.polls.join(l, req)
		t := time.NewTimer(left)
		var done bool
		select {
		case <-woken:
		case <-ready:
		case <-t.C:
			done = res.Empty != "queue_not_found" || time.Until(deadline) <= 0
		case <-ctx.Done():
			done = true
		case <-l.reg.stop:
			done = true
		}
		t.Stop()
		l.polls.leave(req)
		if done {
			return res, nil
		}
	}
}

// Transaction runs pushes and acks atomically (see LinkedStore) and wakes
// long-polling consumers of the queues written. It runs beside the partition
// actors, not through them: the partition row lock serialises it with their
// pushes. The segments it wrote lie above every offset the cache vouches for
// (the cache knows a partition up to K; a transaction writes past the
// allocator, so past K), so a watermark probe still covers them; the actor's
// next write then starts past a hole and the cache drops and re-hydrates
// that partition rather than extend K across offsets it never saw.
func (l *Linked) Transaction(ctx context.Context, pushes []reginatype.TxnPush, acks []reginatype.TxnAck,
	leases []partition.UUID) (reginatype.TxnResult, error) {
	res, err := l.store.Transaction(ctx, pushes, acks, leases)
	if err != nil {
		return res, err
	}
	for _, w := range res.Written {
		l.reg.signals.notify(w.Queue)
	}
	return res, nil
}

// StreamCycle commits a stream cycle (see LinkedStore) and wakes
// long-polling consumers of the sink queues written. Its sink pushes are
// written like a transaction's, beside the partition actors and under the
// same partition row lock, with the same consequence for the dedup cache
// (see Transaction): the segments lie above what the cache vouches for, so
// a watermark probe still covers them, and the actor's next write finds the
// moved allocator and re-hydrates the partition.
func (l *Linked) StreamCycle(ctx context.Context, c reginatype.StreamCycle) (reginatype.CycleResult, error) {
	res, err := l.store.StreamCycle(ctx, c)
	if err != nil {
		return res, err
	}
	for _, w := range res.Written {
		l.reg.signals.notify(w.Queue)
	}
	return res, nil
}

// ReplayDLQ puts dead letters back into their partition as new messages,
// bypassing deduplication (see sqlstore.Store.ReplayDLQ), and wakes
// long-polling consumers of the queue.
func (l *Linked) ReplayDLQ(ctx context.Context, partitionID partition.UUID, txID, group string) ([]reginatype.Replayed, error) {
	queue, out, err := l.store.ReplayDLQ(ctx, partitionID, txID, group)
	if err == nil {
		l.reg.signals.notify(queue)
	}
	return out, err
}

// DeleteQueue deletes a queue and everything in it, and drops its partitions
// from the dedup cache. Live actors of its partitions notice at their next
// batch and recreate the partition.
func (l *Linked) DeleteQueue(ctx context.Context, queue string) (bool, error) {
	existed, parts, err := l.store.DeleteQueue(ctx, queue)
	for _, p := range parts {
		l.reg.cache.Forget(p)
	}
	return existed, err
}
